"""Reading a build, or any TFRecord file, for the inspect and verify tools.

Files are read through Beam's `FileSystems` (local and `gs://` alike) and streamed: one record
in memory at a time, every length and CRC checked by `imageshards.tfrecord`. Records are parsed
with the `tensorflow.Example` class of `imageshards.features`, so nothing here imports
TensorFlow. The checks of a dataset.json's own numbers are here too.
"""

import collections
import hashlib

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from google.protobuf.message import DecodeError

from imageshards import features
from imageshards import tfds_metadata
from imageshards import tfrecord
from pipelines import finalize

# The framing around each record: length (8 bytes) and its CRC (4) before, the data's CRC after.
FRAMING_BYTES = 16
KINDS = {'bytes_list': 'bytes', 'int64_list': 'int64', 'float_list': 'float'}


class NotAnExampleError(ValueError):
    """A record whose bytes do not parse as a `tensorflow.Example`."""


def is_build(path):
    """Whether `path` is a build's output directory (it holds a dataset.json)."""
    return FileSystems.exists(finalize.join(path.rstrip('/'), finalize.DATASET_JSON))


def split_shards(output_dir, dataset, split):
    """[(full path, dataset.json entry)] of the shards of `split`, in their listed order."""
    if split not in dataset['splits']:
        raise ValueError(
            f'{output_dir} has no split {split!r}; its splits are {sorted(dataset["splits"])}'
        )
    return [
        (finalize.join(output_dir, shard['path']), shard)
        for shard in dataset['splits'][split]['shards']
    ]


def match_files(pattern):
    """The files a path or glob names, sorted; raises ValueError if there are none."""
    results = FileSystems.match([pattern])
    paths = sorted(metadata.path for result in results for metadata in result.metadata_list)
    if not paths:
        raise ValueError(f'{pattern} matched no files; give a TFRecord file, a glob or a build')
    return paths


class HashingReader:
    """A binary file whose bytes, as they are read, go into a sha256 and a byte count."""

    def __init__(self, f):
        self._f = f
        self.sha256 = hashlib.sha256()
        self.num_bytes = 0

    def read(self, size=-1):
        data = self._f.read(size)
        self.sha256.update(data)
        self.num_bytes += len(data)
        return data

    def drain(self, chunk=1 << 22):
        """Reads the rest of the file, so that the digest and count cover all of it."""
        while self.read(chunk):
            pass


def open_file(path, compression=CompressionTypes.UNCOMPRESSED):
    return FileSystems.open(path, compression_type=compression)


def framed_records(f, name):
    """Yields (byte offset, record) for each record of an open TFRecord file, in order.

    Raises:
        tfrecord.CorruptRecordError: naming `name` and the offset of the first bad record.
    """
    offset = 0
    for record in tfrecord.read_records(f, name):
        yield offset, record
        offset += FRAMING_BYTES + len(record)


def parse_example(record):
    """The `tensorflow.Example` in a record; raises NotAnExampleError if it is none."""
    try:
        return features.example_class().FromString(record)
    except DecodeError as e:
        raise NotAnExampleError(f'not a tf.train.Example ({len(record):,} bytes): {e}') from e


def feature_values(feature):
    """(kind, values) of one feature: kind is 'bytes', 'int64', 'float', or None if unset."""
    which = feature.WhichOneof('kind')
    if which is None:
        return None, []
    return KINDS[which], list(getattr(feature, which).value)


def example_values(example):
    """{key: (kind, values)} for every feature of an Example, keys sorted."""
    feature_map = example.features.feature
    return {key: feature_values(feature_map[key]) for key in sorted(feature_map)}


_REQUIRED_KEYS = (
    ('dataset.json', ('format', 'labels', 'counts', 'splits')),
    ('counts', ('inputs', 'written', 'rejected', 'duplicates')),
    ('split', ('num_records', 'num_shards', 'class_counts', 'shards')),
    ('shard', ('path', 'num_records', 'num_bytes', 'sha256', 'class_counts')),
)


def structure_problems(dataset):
    """What a loaded dataset.json lacks for a reader to rely on it, as messages."""
    if not isinstance(dataset, dict) or not isinstance(dataset.get('splits', {}), dict):
        return ['dataset.json is not a build summary (an object with a splits object)']
    splits = list(dataset.get('splits', {}).values())
    objects = {
        'dataset.json': [dataset],
        'counts': [dataset.get('counts', {})],
        'split': splits,
        'shard': [shard for split in splits for shard in split.get('shards', [])],
    }
    found = [
        f'a {name} entry has no {key!r}'
        for name, keys in _REQUIRED_KEYS
        for key in keys
        if any(key not in entry for entry in objects[name])
    ]
    if found:
        return found
    if dataset['format'] not in features.FORMATS:
        return [f'unknown format {dataset["format"]!r}; expected one of {features.FORMATS}']
    levels = dataset.get('label_levels') or {}
    if not isinstance(levels, dict):
        return ['label_levels is not an object of level -> names']
    level_keys = ('level_counts', 'level_missing')
    found += [
        f'a {name} entry has no {key!r} (the build has label levels)'
        for name in ('split', 'shard')
        for key in level_keys
        if levels and any(key not in entry for entry in objects[name])
    ]
    schema = features.record_schema(dataset['format'], levels)
    if dataset.get('features', schema) != schema:
        found.append(f'features {dataset["features"]} are not the {dataset["format"]} schema')
    return found


def accounting_problems(output_dir, dataset):
    """[(file, message)] where dataset.json's numbers disagree with each other or the jsonl files.

    Checks `inputs == written + rejected + duplicates`, that `written` and each split's totals
    are the sums of their parts, that rejected.jsonl and duplicates.jsonl have as many lines as
    counted, and that _SUCCESS exists.
    """
    where = finalize.join(output_dir, finalize.DATASET_JSON)
    counts = dataset['counts']
    found = []
    if counts['inputs'] != counts['written'] + counts['rejected'] + counts['duplicates']:
        found.append(
            'counts do not add up: inputs {inputs} != written {written} + rejected {rejected} + '
            'duplicates {duplicates}'.format(**counts)
        )
    written = sum(info['num_records'] for info in dataset['splits'].values())
    if counts['written'] != written:
        found.append(f'counts.written is {counts["written"]}, but the splits hold {written}')
    for split, info in dataset['splits'].items():
        found += _split_problems(split, info, set(dataset['labels']))
        for level, names in (dataset.get('label_levels') or {}).items():
            found += _level_problems(split, info, level, set(names))
    found = [(where, message) for message in found]
    for name, key in (
        (finalize.REJECTED_JSONL, 'rejected'),
        (finalize.DUPLICATES_JSONL, 'duplicates'),
    ):
        path = finalize.join(output_dir, name)
        lines = _line_count(path)
        # duplicates.jsonl exists only in --dedup builds.
        if lines is None and (key == 'rejected' or counts[key]):
            found.append((path, f'missing, but counts.{key} is {counts[key]}'))
        elif lines is not None and lines != counts[key]:
            found.append((path, f'has {lines} lines, but counts.{key} is {counts[key]}'))
    if not FileSystems.exists(finalize.join(output_dir, finalize.SUCCESS)):
        found.append((output_dir, f'{finalize.SUCCESS} is missing: the build did not finish'))
    return found


def unknown_files(output_dir, dataset):
    """Files of a build (paths relative to it) that it does not consist of: neither listed in
    its dataset.json, nor its own top-level files, TFDS metadata, re-encoded copies (paths
    builds) or tf.Transform output (analysed builds), nor what `imageshards preview` and
    `report` write. An earlier or unfinished build left them, or someone else did."""
    listed = {shard['path'] for info in dataset['splits'].values() for shard in info['shards']}
    listed.update(finalize.OWN_FILES, tfds_metadata.files(dataset))
    folders = list(finalize.TRANSFORM_DIRS) if 'analysis' in dataset else []
    if dataset['format'] == features.PATHS:
        folders.append(finalize.REENCODED_DIR)
    return [
        path
        for path in finalize.relative_files(output_dir)
        if path not in listed
        and path.partition('/')[0] not in folders
        and not finalize.is_tool_output(path)
    ]


def _split_problems(split, info, labels):
    shards = info['shards']
    summed = collections.Counter()
    for shard in shards:
        summed.update(shard['class_counts'])
    found = []
    for key, value in (
        ('num_records', sum(shard['num_records'] for shard in shards)),
        ('num_shards', len(shards)),
        ('class_counts', dict(summed)),
    ):
        if info[key] != value:
            found.append(f'splits.{split}.{key} is {info[key]}, but its shards add up to {value}')
    unknown = sorted(set(summed) - labels)
    if unknown:
        found.append(f'splits.{split} counts labels that are not in labels: {unknown}')
    return found


def _level_problems(split, info, level, names):
    """Where a split's counts of one label level disagree with its shards or its records."""
    shards = info['shards']
    summed, found = collections.Counter(), []
    for shard in shards:
        counts = shard['level_counts'].get(level, {})
        summed.update(counts)
        counted = sum(counts.values()) + shard['level_missing'].get(level, 0)
        if counted != shard['num_records']:
            found.append(
                f'shard {shard["path"]}: level {level} counts {counted} records, '
                f'not its {shard["num_records"]}'
            )
    missing = sum(shard['level_missing'].get(level, 0) for shard in shards)
    for key, found_value, value in (
        ('level_counts', info['level_counts'].get(level), dict(summed)),
        ('level_missing', info['level_missing'].get(level), missing),
    ):
        if found_value != value:
            found.append(
                f'splits.{split}.{key}.{level} is {found_value}, but its shards add up to {value}'
            )
    unknown = sorted(set(summed) - names)
    if unknown:
        found.append(f'splits.{split} counts names not in label_levels.{level}: {unknown}')
    return found


def _line_count(path):
    """Non-empty lines in a text file, or None if it does not exist."""
    if not FileSystems.exists(path):
        return None
    with open_file(path) as f:
        return sum(1 for line in f.read().splitlines() if line.strip())
