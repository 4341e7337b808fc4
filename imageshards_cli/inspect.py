"""`imageshards inspect`: what a build's shards, or any TFRecord files, hold.

Prints the schema of the records read (every feature key, its kind and how many values a record
has) and the first records in readable form: text as text, numbers as numbers, binary values
(image bytes) as their length and a short sha256, never dumped. Works on any `tf.train.Example`
records, not only those of a build. Reads no more records than it needs, and no TensorFlow.

Example:
    imageshards inspect out/ --split val -n 3
    imageshards inspect 'gs://bucket/data/train-*.tfrecord' --scan 0
"""

import argparse
import collections
import hashlib
import itertools

from imageshards import console
from imageshards import dataset_json
from imageshards import records
from imageshards import storage
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards.shard_formats import registry as shard_formats

_TEXT_LIMIT = 256  # bytes values up to this long that are printable UTF-8 are shown as text
_FILE_NAMES = (features.FILENAME, features.PATH)
_VALUES_SHOWN = 8  # of a multi-value feature
_SHA_CHARS = 12
# What a TFRecord file of any tf.train.Examples is shown as: a classification's, whose keys are
# the TFDS and Model Garden image keys most such files have.
_ANY_RECORDS = kinds.Classification()


class _Schema:
    """Kinds and value counts of every feature key over the records added."""

    def __init__(self):
        self.num_records = 0
        self._kinds = collections.defaultdict(set)
        self._present = collections.Counter()
        self._min = {}
        self._max = {}

    def add(self, values):
        self.num_records += 1
        for key, (kind, items) in values.items():
            if kind:
                self._kinds[key].add(kind)
            self._present[key] += 1
            self._min[key] = min(self._min.get(key, len(items)), len(items))
            self._max[key] = max(self._max.get(key, 0), len(items))

    def lines(self):
        keys = sorted(self._present)
        width = max([len(key) for key in keys] + [3])
        lines = [f'  {"key":<{width}}  {"kind":<6}  values per record']
        for key in keys:
            # A key missing from some records has no values there.
            low = self._min[key] if self._present[key] == self.num_records else 0
            count = str(low) if low == self._max[key] else f'{low}..{self._max[key]}'
            kind = '/'.join(sorted(self._kinds[key])) or '-'
            absent = self.num_records - self._present[key]
            note = f'  (missing from {absent} of {self.num_records} records)' if absent else ''
            lines.append(f'  {key:<{width}}  {kind:<6}  {count}{note}')
        return lines


def format_bytes(value):
    """Short printable UTF-8 as quoted text; anything else as its length and a short sha256."""
    if len(value) <= _TEXT_LIMIT:
        try:
            text = value.decode('utf-8')
        except UnicodeDecodeError:
            text = None
        if text is not None and text.isprintable():
            return repr(text)
    return f'<{len(value):,} bytes, sha256 {hashlib.sha256(value).hexdigest()[:_SHA_CHARS]}>'


def _file_name(value):
    """'cats/été.jpg' for a UTF-8 name; b'cats/latin1_\\xe9t\\xe9.jpg' for another."""
    try:
        return repr(value.decode('utf-8'))
    except UnicodeDecodeError:
        return repr(value)


def format_values(kind, values, key=None):
    """One feature's values for a person: a scalar alone, a list in brackets, long lists cut.
    A file name (`key` image/filename or image/path) is shown whole, as bytes where it is not
    UTF-8 (imageshards/file_names.py)."""
    if kind == 'bytes' and key in _FILE_NAMES:
        shown = [_file_name(value) for value in values[:_VALUES_SHOWN]]
    elif kind == 'bytes':
        shown = [format_bytes(value) for value in values[:_VALUES_SHOWN]]
    elif kind == 'float':
        shown = [f'{value:.7g}' for value in values[:_VALUES_SHOWN]]
    else:
        shown = [str(value) for value in values[:_VALUES_SHOWN]]
    if len(values) == 1:
        return shown[0]
    more = f', ... ({len(values):,} values)' if len(values) > _VALUES_SHOWN else ''
    return f'[{", ".join(shown)}{more}]'


def _headline(values, kind):
    """'cat, 32x24 jpeg, id 17' for a record of a build (what its `kind` says of it first); ''
    for records without those keys."""

    def scalar(key, listed=False):
        type_, items = values.get(key, (None, []))
        if type_ == 'bytes':
            items = [item.decode('utf-8', 'replace') for item in items]
        if listed:
            return items if key in values else None
        return items[0] if len(items) == 1 else None

    return ', '.join(str(part) for part in kind.headline(scalar))


def record_lines(index, where, offset, values, kind=_ANY_RECORDS):
    """The lines that show one record: a header (what the build's `kind` says of it first), then
    every feature."""
    headline = _headline(values, kind)
    lines = [f'record {index} ({where}, {offset})' + (f': {headline}' if headline else '')]
    width = max([len(key) for key in values] + [3])
    for key, (kind, items) in values.items():
        lines.append(f'  {key:<{width}}  {format_values(kind, items, key) if kind else "(empty)"}')
    return lines


def _read(paths, display, limit, shard_format):
    """Yields (path shown, offset, record) from the files in order, at most `limit` in all."""

    def every_record():
        for path in paths:
            with storage.open_read(path, guess_compression=True) as f:
                for offset, record in shard_format.read(f, path):
                    yield display(path), f'{shard_format.position_word} {offset}', record

    return itertools.islice(every_record(), limit)


def inspect(paths, display, num_shown, num_scanned, build=None):
    """Prints the schema and the first `num_shown` records; returns 1 on a corrupt file, else 0.

    Args:
        paths: shard files, read in this order: a build's, or TFRecord files of any records.
        display: how a file's path is printed.
        num_scanned: records read for the schema (at least `num_shown`); None for all.
        build: the dataset_json.Build the files are shards of, or None.
    """
    shard_format = build.shard_format if build else shard_formats.of_path(paths[0])
    kind = build.kind if build else _ANY_RECORDS
    limit = None if num_scanned is None else max(num_scanned, num_shown)
    schema, shown, status = _Schema(), [], 0
    try:
        for index, (where, offset, record) in enumerate(_read(paths, display, limit, shard_format)):
            try:
                values = records.example_values(records.parse_example(record))
            except records.NotAnExampleError as e:
                shown.append(f'record {index} ({where}, {offset}): {e}')
                continue
            schema.add(values)
            if index < num_shown:
                shown += record_lines(index, where, offset, values, kind)
    except shard_formats.CorruptRecordError as e:
        shown.append(f'error: {e} (no records read after it)')
        status = 1
    print(f'schema over {schema.num_records:,} records:')
    print('\n'.join(schema.lines() if schema.num_records else ['  (no records)']))
    print('\n'.join(shown))
    return status


def _build_files(output_dir, split):
    """(the shard paths of a build's split, how a path is shown, the dataset_json.Build), and a
    description printed before them."""
    output_dir = output_dir.rstrip('/')
    build = dataset_json.Build.load(output_dir, complete=False)
    dataset = build.raw
    split = split or next(iter(dataset['splits']), None)
    if split is None:
        raise ValueError(f'{output_dir}/dataset.json lists no splits')
    shards = dataset_json.shard_paths(output_dir, dataset['splits'], split)
    info = dataset['splits'][split]
    shown_labels = _shown(dataset['labels'])
    levels = [
        f'  label level {level}: {_shown(names)}'
        + (
            f' ({info["level_missing"][level]:,} records in {split} without one)'
            if info.get('level_missing', {}).get(level)
            else ''
        )
        for level, names in dataset.get('label_levels', {}).items()
    ]
    print(
        f'build {output_dir}: {dataset["format"]} format, seed {dataset["seed"]}, '
        f'splits {", ".join(dataset["splits"])}\n  labels: {shown_labels}\n'
        + ''.join(f'{line}\n' for line in levels)
        + f'  split {split}: {info["num_records"]:,} records in {len(shards)} shards'
    )
    return shards, lambda path: path[len(output_dir) + 1 :], build


def _shown(names):
    """The first names of a vocabulary, and how many there are if more."""
    return ', '.join(names[:10]) + (f', ... ({len(names)} labels)' if names[10:] else '')


def build_arg_parser():
    parser = argparse.ArgumentParser(
        prog='imageshards inspect',
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument('path', help='a build output directory, a TFRecord file or a glob')
    parser.add_argument('--split', help="a build's split to read (default: its first)")
    parser.add_argument('-n', type=int, default=5, help='records to show (default 5)')
    parser.add_argument(
        '--scan', type=int, default=1000, help='records to read for the schema; 0 reads all'
    )
    return parser


def main(argv=None):
    args = build_arg_parser().parse_args(argv)
    console.configure_logging()
    try:
        build = None
        if dataset_json.is_build(args.path):
            paths, display, build = _build_files(args.path, args.split)
        elif args.split:
            raise ValueError(f'--split needs a build directory; {args.path} has no dataset.json')
        else:
            paths, display = records.match_files(args.path), str
            more = f' (+{len(paths) - 1} more files)' if len(paths) > 1 else ''
            print(f'{paths[0]}{more}')
    except (ValueError, FileNotFoundError) as e:
        return console.refuse('imageshards inspect', e)
    return inspect(paths, display, max(args.n, 0), args.scan or None, build)
