"""`imageshards verify`: read a build completely and check it against its dataset.json.

For every shard that dataset.json lists: the TFRecord framing and CRCs, the record count, size
and sha256, and that its index file gives every record's offset and length. For every record:
the contract's keys and kinds, `image/key/sha256` against the image bytes (for a `paths` build,
the bytes of the file at `image/path`), that the image decodes with
`tf.io.decode_image(channels=3, expand_animations=False)` to the stored height and width, the
label id against its text and dataset.json's `labels` (and each label level's id against its
text and `label_levels`; -1 with empty text where a value is missing), and that no id occurs
twice in the build. Then each shard's class and level counts and the accounting of dataset.json,
that the TensorFlow Datasets metadata (dataset_info.json, features.json) describes the same
splits, shards, bytes, features and label names, and that the build holds no files but its own
and those of the imageshards tools (report/, preview.png). A build with groups, near-duplicates
or an earlier build's splits has its groups and clusters per split, their leaks and its label
distribution recounted from the records and near_duplicates.jsonl (verify_grouping.py).

Every problem is printed on its own line as it is found, naming the file (and the record's byte
offset); a damaged shard does not stop the others from being read. Exit status 1 if there was
any problem. Records are streamed, one shard at a time; TensorFlow decodes the images in
batches on a thread pool while the next records are read and parsed.

Example:
    imageshards verify out/
"""

import argparse
import collections
import concurrent.futures
import json
import time

from imageshards import console
from imageshards import dataset_facts
from imageshards import dataset_json
from imageshards import file_names
from imageshards import layout
from imageshards import object_facts
from imageshards import output_lock
from imageshards import progress
from imageshards import records
from imageshards import storage
from imageshards import tfds_metadata
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards.lock_holder import being_written_message
from imageshards.pool import bounded_map
from imageshards.shard_formats import registry as shard_formats
from imageshards_cli.verify_grouping import GroupingCheck
from imageshards_cli.verify_records import ImageChecker
from imageshards_cli.verify_records import RecordChecker

_BATCH_BYTES = 32 << 20  # a batch of images to decode also ends at this many encoded bytes
_DECODERS = 2  # batches decoded at once; each decodes its images on TensorFlow's thread pool


class _Problems:
    """Prints each problem on its own line as it is found, at most `limit` per file."""

    def __init__(self, limit):
        self._limit = limit
        self.per_file = collections.Counter()

    def add(self, where, message, offset=None):
        self.per_file[where] += 1
        count = self.per_file[where]
        if self._limit and count > self._limit:
            if count == self._limit + 1:
                print(f'{where}: further problems not shown (--max-problems {self._limit})')
            return
        at = f'record at {offset}: ' if offset is not None else ''
        print(f'{where}: {at}{message}', flush=True)

    @property
    def total(self):
        return sum(self.per_file.values())


class _ShardTally:
    def __init__(self, multi_label):
        self._multi_label = multi_label  # labels and level values are tuples of names
        self.records = 0
        self.classes = collections.Counter()
        self.levels = collections.defaultdict(collections.Counter)  # level -> name -> records
        self.unlabeled = 0  # multi-label records with no label
        self.formats = collections.Counter()  # image/format -> records
        self.lengths = []  # of each record, for the index file
        self.intact = True
        self.objects = 0  # a build of objects: its objects, and by class name
        self.object_counts = collections.Counter()

    def count(self, label, levels, stored_format):
        """Counts a record's label and level names (tuples of names in a multi-label build; ''
        or () where a level has no value) and its image/format (None: missing, not counted)."""
        if stored_format is not None:
            self.formats[stored_format] += 1
        if label is not None and self._multi_label:
            self.classes.update(label)
            self.unlabeled += not label
        elif label is not None:
            self.classes[label] += 1
        for level, name in levels.items():
            if name is not None and self._multi_label:
                self.levels[level].update(name or ('',))
            elif name is not None:
                self.levels[level][name] += 1


class _ShardReader:
    """Streams every listed shard, checking framing, records and totals; yields image batches."""

    def __init__(self, output_dir, dataset, checker, problems, batch_size, grouping):
        self._output_dir = output_dir
        self._dataset = dataset
        self._checker = checker
        self._problems = problems
        self._batch_size = batch_size
        self._grouping = grouping  # a verify_grouping.GroupingCheck
        self._format = shard_formats.of_build(dataset)
        self._multi_label = kinds.of_build(dataset).multi_label
        self.totals = {split: collections.Counter() for split in dataset['splits']}

    def batches(self):
        """Yields (shard path, [_ImageJob]) for every shard of every split, in listed order."""
        for split, info in self._dataset['splits'].items():
            for entry in info['shards']:
                path = storage.join(self._output_dir, entry['path'])
                yield from self._shard(split, path, entry)

    def _shard(self, split, path, entry):
        tally = _ShardTally(self._multi_label)
        try:
            with storage.open_read(path) as f:
                reader = records.HashingReader(f)
                yield from self._records(split, path, reader, tally)
        except OSError as e:
            self._problems.add(path, f'cannot read the shard: {e}')
            return
        self.totals[split].update(shards=1, records=tally.records, bytes=reader.num_bytes)
        self._check_totals(path, entry, reader, tally)
        if dataset_json.INDEX_KEY in entry and tally.intact:
            self._check_index(storage.join(self._output_dir, entry[dataset_json.INDEX_KEY]), tally)

    def _check_index(self, path, tally):
        """The index file against the offsets and lengths of the records as read."""
        try:
            found = self._format.parse_index(storage.read(path))
        except (OSError, ValueError) as e:
            self._problems.add(path, f'cannot read the index file: {e}')
            return
        expected = self._format.index_entries(tally.lengths)
        if len(found) != len(expected):
            self._problems.add(
                path, f'{len(found)} lines, but the shard has {tally.records} records'
            )
        for number, (line, record) in enumerate(zip(found, expected), 1):
            if line != record:
                self._problems.add(
                    path,
                    f'line {number} says offset {line[0]} length {line[1]}, but record {number} '
                    f'is at {record[0]}, {record[1]} bytes',
                )

    def _records(self, split, path, reader, tally):
        batch, batch_bytes = [], 0
        try:
            for position, record in self._format.read(reader, path):
                offset = f'{self._format.position_word} {position}'  # where, in words
                tally.records += 1
                tally.lengths.append(len(record))
                checked = self._checker.check(path, offset, record)
                tally.count(checked.label, checked.levels, checked.format)
                if checked.objects:
                    tally.objects += checked.objects[0]
                    tally.object_counts.update(checked.objects[1])
                if self._grouping.active:
                    self._grouping.note(split, checked)
                if checked.job is None:
                    continue
                batch.append(checked.job)
                batch_bytes += len(checked.job.payload)
                if len(batch) >= self._batch_size or batch_bytes >= _BATCH_BYTES:
                    yield path, batch
                    batch, batch_bytes = [], 0
        except shard_formats.CorruptRecordError as e:
            self._problems.add(path, str(e).removeprefix(f'{path}: '))
            tally.intact = False
            reader.drain()  # so that size and sha256 are still compared
        if batch:
            yield path, batch

    def _check_totals(self, path, entry, reader, tally):
        found = {'num_bytes': reader.num_bytes, 'sha256': reader.sha256.hexdigest()}
        # Past a framing error the records are unread: their counts would only repeat it.
        if tally.intact:
            found.update(num_records=tally.records, class_counts=dict(tally.classes))
            if 'level_counts' in entry:
                found['level_counts'] = {
                    level: {name: n for name, n in tally.levels[level].items() if name}
                    for level in entry['level_counts']
                }
                found['level_missing'] = {
                    level: tally.levels[level][''] for level in entry['level_missing']
                }
            if 'unlabeled' in entry:
                found['unlabeled'] = tally.unlabeled
            if dataset_json.FORMATS_KEY in entry:
                found[dataset_json.FORMATS_KEY] = dataset_json.format_counts(tally.formats)
            if 'objects' in entry:
                found.update(objects=tally.objects, object_counts=dict(tally.object_counts))
        for key, value in found.items():
            if entry[key] != value:
                self._problems.add(path, f'{key} is {value}, but dataset.json says {entry[key]}')


def accounting_problems(output_dir, dataset):
    """[(file, message)] where dataset.json's numbers disagree with each other or the jsonl files.

    Checks `inputs == written + rejected + duplicates`, that `written` and each split's totals
    are the sums of their parts, that rejected.jsonl and duplicates.jsonl have as many lines as
    counted, each a JSON object whose paths read back (`path_b64` beside a path that is not
    UTF-8: imageshards/file_names.py), and that the build is complete (_SUCCESS exists).
    """
    where = storage.join(output_dir, layout.DATASET_JSON)
    counts = dataset['counts']
    found = [(where, message) for message in dataset_facts.count_problems(dataset)]
    for name, key in _COUNTED_FILES + ((_ANNOTATIONS,) if 'annotations' in counts else ()):
        path = storage.join(output_dir, name)
        lines, unreadable = _jsonl_lines(path)
        found += [(path, problem) for problem in unreadable]
        # duplicates.jsonl exists only in --dedup builds.
        expected = _listed(counts, key)
        if lines is None and (key != 'duplicates' or expected):
            found.append((path, f'missing, but counts.{key} is {expected}'))
        elif lines is not None and lines != expected:
            found.append((path, f'has {lines} lines, but counts.{key} is {expected}'))
    if not dataset_json.is_complete(output_dir):
        found.append((output_dir, f'{layout.SUCCESS} is missing: the build did not finish'))
    return found


_COUNTED_FILES = ((layout.REJECTED_JSONL, 'rejected'), (layout.DUPLICATES_JSONL, 'duplicates'))
_ANNOTATIONS = (layout.REJECTED_ANNOTATIONS_JSONL, 'annotations.rejected')


def _listed(counts, key):
    """How many lines the file of counts' `key` holds: of annotations, those rejected but not
    with their image (which rejected.jsonl and duplicates.jsonl list)."""
    if key != _ANNOTATIONS[1]:
        return counts[key]
    annotations = counts['annotations']
    by_reason = annotations['rejected_by_reason']
    lost = by_reason.get(object_facts.IMAGE_REJECTED, 0) + by_reason.get(
        object_facts.DUPLICATE_IMAGE, 0
    )
    return annotations['rejected'] - lost


def unknown_files(output_dir, dataset):
    """Files of a build (paths relative to it) that it does not consist of: neither listed in
    its dataset.json, nor its own top-level files, TFDS metadata, re-encoded copies (paths
    builds) or tf.Transform output (analysed builds), nor what `imageshards preview` and
    `report` write. An earlier or unfinished build left them, or someone else did."""
    shards = [shard for info in dataset['splits'].values() for shard in info['shards']]
    listed = {
        shard[key] for shard in shards for key in ('path', dataset_json.INDEX_KEY) if key in shard
    }
    listed.update(layout.OWN_FILES, tfds_metadata.files(dataset))
    folders = list(layout.TRANSFORM_DIRS) if 'analysis' in dataset else []
    if dataset['format'] == features.PATHS:
        folders.append(layout.REENCODED_DIR)
    return [
        path
        for path in storage.relative_files(output_dir)
        if path not in listed
        and path.partition('/')[0] not in folders
        and not layout.is_tool_output(path)
        and not layout.is_lock_file(path)  # of a build killed holding it; the next takes it
    ]


def _jsonl_lines(path):
    """(non-empty lines of a build's JSONL file, or None if it does not exist; [the problems of
    lines that are not an object whose paths read back])."""
    if not storage.exists(path):
        return None, []
    lines = [line for line in storage.read(path).splitlines() if line.strip()]
    problems = []
    for number, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
            for key in ('path', 'duplicate_of_path'):
                if key in row or key + file_names.B64_SUFFIX in row:
                    file_names.from_json(row, key)
        except (ValueError, TypeError, KeyError) as e:
            problems.append(f'line {number} is not an object whose paths read back: {e}')
    return len(lines), problems


def verify(output_dir, max_problems=20, io_threads=8, batch_size=128):
    """Checks a build; prints each problem and a summary. Returns the number of problems."""
    output_dir = output_dir.rstrip('/')
    problems = _Problems(max_problems)
    writing = output_lock.holder(output_dir)
    if writing is not None:
        problems.add(output_dir, being_written_message(output_dir, writing, 'imageshards verify'))
        return problems.total
    try:
        dataset = dataset_json.load(output_dir, complete=False)  # a missing _SUCCESS: a problem
    except (FileNotFoundError, ValueError) as e:
        problems.add(storage.join(output_dir, layout.DATASET_JSON), str(e))
        return problems.total
    for problem in dataset_facts.structure_problems(dataset):
        problems.add(storage.join(output_dir, layout.DATASET_JSON), problem)
    if problems.total:
        return problems.total
    print(
        f'verifying {output_dir}: {dataset["format"]} build, '
        f'{console.plural(len(dataset["labels"]), "label")}, '
        f'{console.plural(dataset["counts"]["written"], "record")} in '
        f'{console.plural(len(dataset["splits"]), "split")}',
        flush=True,
    )
    for where, problem in accounting_problems(output_dir, dataset):
        problems.add(where, problem)
    for where, problem in tfds_metadata.problems(output_dir, dataset):
        problems.add(where, problem)
    for path in unknown_files(output_dir, dataset):
        problems.add(
            storage.join(output_dir, path),
            'unknown file: not part of this build (an earlier build left it, or not ours)',
        )
    grouping = GroupingCheck(output_dir, dataset, problems)
    images = ImageChecker(io_threads)  # imports TensorFlow: seconds, not counted below
    started = time.perf_counter()
    checker = RecordChecker(dataset, problems)
    reader = _ShardReader(output_dir, dataset, checker, problems, batch_size, grouping)
    try:
        with progress.Display() as display:
            total = dataset['counts']['written']
            decoded = _check_images(reader.batches(), images, problems, display, total)
    finally:
        images.close()
    grouping.finish()
    _print_summary(reader.totals, decoded, time.perf_counter() - started, problems)
    return problems.total


def _check_images(batches, images, problems, display, total):
    """Runs the image checks on the batches, in order; returns how many images were decoded."""
    decoded = 0
    display.update('checking', 0, total, unit='images')
    with concurrent.futures.ThreadPoolExecutor(_DECODERS) as pool:
        for found, count in bounded_map(pool, images.check, batches, 2 * _DECODERS):
            for where, offset, message in found:
                problems.add(where, message, offset)
            decoded += count
            display.update('checking', decoded, total, unit='images')
    return decoded


def _print_summary(totals, decoded, seconds, problems):
    lines = [
        f'  {split}: {console.plural(t["shards"], "shard")}, '
        f'{console.plural(t["records"], "record")}, {t["bytes"]:,} bytes read'
        for split, t in totals.items()
    ]
    lines.append(
        f'  decoded {decoded:,} images in {seconds:.1f} s ({decoded / max(seconds, 1e-9):,.0f} '
        'images/s)'
    )
    if problems.total:
        lines.append(f'FAILED: {problems.total} problems in {len(problems.per_file)} files')
    else:
        lines.append('OK: every check holds')
    print('\n'.join(lines))


def build_arg_parser():
    parser = argparse.ArgumentParser(
        prog='imageshards verify',
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument('output', help='the output directory of a build (holding dataset.json)')
    parser.add_argument(
        '--max-problems', type=int, default=20, help='problems printed per file; 0 prints all'
    )
    parser.add_argument(
        '--io-threads', type=int, default=8, help='threads reading the images of a paths build'
    )
    return parser


def main(argv=None):
    args = build_arg_parser().parse_args(argv)
    console.configure_logging()
    return 1 if verify(args.output, args.max_problems, args.io_threads) else 0
