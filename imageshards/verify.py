"""`imageshards verify`: read a build completely and check it against its dataset.json.

For every shard that dataset.json lists: the TFRecord framing and CRCs, the record count, size
and sha256. For every record: the contract's keys and kinds, `image/key/sha256` against the
image bytes (for a `paths` build, the bytes of the file at `image/path`), that the image decodes
with `tf.io.decode_image(channels=3, expand_animations=False)` to the stored height and width,
the label id against its text and dataset.json's `labels` (and each label level's id against its
text and `label_levels`; -1 with empty text where a value is missing), and that no id occurs
twice in the build. Then each shard's class and level counts and the accounting of dataset.json,
that the TensorFlow Datasets metadata (dataset_info.json, features.json) describes the same
splits, shards, bytes, features and label names, and that the build holds no files but its own
and those of the imageshards tools (report/, preview.png).

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
import hashlib
import logging
import time
import typing

from imageshards import console
from imageshards import features
from imageshards import progress
from imageshards import records
from imageshards import tfds_metadata
from imageshards import tfrecord
from pipelines import finalize
from pipelines.write import bounded_map

_LOG = logging.getLogger(__name__)

_BATCH_BYTES = 32 << 20  # a batch of images to decode also ends at this many encoded bytes
_DECODERS = 2  # batches decoded at once; each decodes its images on TensorFlow's thread pool


class _ImageJob(typing.NamedTuple):
    """What the image check needs of one record."""

    offset: int
    payload: object  # the encoded bytes, or for a `paths` build the path (str) to read them from
    height: int
    width: int
    sha256: str


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
        at = f'record at byte {offset}: ' if offset is not None else ''
        print(f'{where}: {at}{message}', flush=True)

    @property
    def total(self):
        return sum(self.per_file.values())


class _RecordChecker:
    """Checks each record's keys, label and id; keeps what the image and count checks need."""

    def __init__(self, dataset, problems):
        self._levels = dataset.get('label_levels') or {}
        self._schema = features.record_schema(dataset['format'], self._levels)
        self._payload_key = features.ENCODED if features.ENCODED in self._schema else features.PATH
        self._labels = dataset['labels']
        self._problems = problems
        # One bit per input: ids are positions in the listing, below counts.inputs.
        self._num_ids = max(dataset['counts']['inputs'], 0)
        self._seen = bytearray((self._num_ids + 7) // 8)

    def check(self, where, offset, record):
        """Returns (label name or None, _ImageJob or None, {level: name, '' if missing}) for one
        record."""
        try:
            example = records.parse_example(record)
        except records.NotAnExampleError as e:
            self._problems.add(where, str(e), offset)
            return None, None, {}
        values = self._scalars(where, offset, records.example_values(example))
        if features.ID in values:
            self._check_id(where, offset, values[features.ID])
        needed = (features.HEIGHT, features.WIDTH, features.SHA256, self._payload_key)
        job = None
        if all(key in values for key in needed):
            payload = values[self._payload_key]
            job = _ImageJob(
                offset,
                payload if self._payload_key == features.ENCODED else payload.decode('utf-8'),
                values[features.HEIGHT],
                values[features.WIDTH],
                values[features.SHA256].decode('ascii', 'replace'),
            )
        levels = {
            level: self._level_name(where, offset, values, level, names)
            for level, names in self._levels.items()
        }
        return self._label_name(where, offset, values), job, levels

    def _level_name(self, where, offset, values, level, names):
        """The record's name in `level` ('' where missing), or None if it cannot be told."""
        level_id = values.get(features.level_label(level))
        text = values.get(features.level_text(level))
        if level_id is None or text is None:
            return None
        text = text.decode('utf-8', 'replace')
        if level_id == features.MISSING_LEVEL and not text:
            return ''
        if not 0 <= level_id < len(names) or names[level_id] != text:
            self._problems.add(
                where,
                f'{features.level_label(level)} {level_id} with text {text!r} does not match '
                f'dataset.json label_levels.{level}',
                offset,
            )
            return None
        return text

    def _scalars(self, where, offset, values):
        """{key: value} of the schema's keys that hold exactly one value of the right kind."""
        for key in sorted(set(values) - set(self._schema)):
            self._problems.add(where, f'unexpected feature {key}', offset)
        scalars = {}
        for key, kind in self._schema.items():
            found, items = values.get(key, (None, []))
            if key not in values:
                self._problems.add(where, f'missing feature {key}', offset)
            elif found != kind or len(items) != 1:
                self._problems.add(
                    where, f'{key} holds {len(items)} {found} values, not one {kind}', offset
                )
            else:
                scalars[key] = items[0]
        return scalars

    def _label_name(self, where, offset, values):
        label, text = values.get(features.LABEL), values.get(features.LABEL_TEXT)
        if label is None or text is None:
            return None
        text = text.decode('utf-8', 'replace')
        if not 0 <= label < len(self._labels):
            self._problems.add(
                where, f'image/class/label {label} is not an index of dataset.json labels', offset
            )
            return text
        if self._labels[label] != text:
            self._problems.add(
                where,
                f'image/class/label {label} is {self._labels[label]!r} in dataset.json but '
                f'image/class/text is {text!r}',
                offset,
            )
        return self._labels[label]

    def _check_id(self, where, offset, record_id):
        if not 0 <= record_id < self._num_ids:
            self._problems.add(
                where, f'image/id {record_id} is outside [0, counts.inputs={self._num_ids})', offset
            )
            return
        byte, bit = divmod(record_id, 8)
        if self._seen[byte] >> bit & 1:
            self._problems.add(
                where, f'image/id {record_id} occurs again (an earlier record has it)', offset
            )
        self._seen[byte] |= 1 << bit


class _ImageChecker:
    """Checks a batch of images: sha256 of their bytes, and decoded size with TensorFlow."""

    def __init__(self, io_threads):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        self._tf = tf
        self._io = concurrent.futures.ThreadPoolExecutor(io_threads)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def decoded_shapes(encoded):
            def shape(data):
                image = tf.io.decode_image(data, channels=3, expand_animations=False)
                return tf.shape(image)[:2]

            # In a graph, map_fn decodes in parallel on TensorFlow's threads, without the GIL.
            return tf.map_fn(shape, encoded, fn_output_signature=tf.int32, parallel_iterations=16)

        self._decoded_shapes = decoded_shapes

    def close(self):
        self._io.shutdown()

    def check(self, shard_batch):
        """Checks one (where, [_ImageJob]) batch: returns ([(where, offset, message)], decoded)."""
        where, jobs = shard_batch
        # Only a `paths` build has files to read; their latency (on gs://) is hidden by threads.
        in_records = isinstance(jobs[0].payload, bytes)
        reads = map(_image_bytes, jobs) if in_records else self._io.map(_image_bytes, jobs)
        found, readable = [], []
        for job, data in zip(jobs, reads):
            if isinstance(data, Exception):
                found.append((where, job.offset, f'cannot read image/path {job.payload}: {data}'))
                continue
            if hashlib.sha256(data).hexdigest() != job.sha256:
                found.append((where, job.offset, 'image/key/sha256 does not match the image bytes'))
            readable.append((job, data))
        shapes = self._shapes([data for _, data in readable])
        for (job, _), shape in zip(readable, shapes):
            if isinstance(shape, str):
                found.append((where, job.offset, f'image does not decode: {shape}'))
            elif shape != (job.height, job.width):
                found.append(
                    (
                        where,
                        job.offset,
                        f'image decodes to {shape[0]}x{shape[1]} (height x width), '
                        f'but the record says {job.height}x{job.width}',
                    )
                )
        return found, len(shapes)

    def _shapes(self, encoded):
        """[(height, width) or error text] of each encoded image."""
        if not encoded:
            return []
        try:
            shapes = self._decoded_shapes(self._tf.constant(encoded)).numpy().tolist()
            return [tuple(shape) for shape in shapes]
        except self._tf.errors.OpError:
            # One undecodable image fails the whole batch; decode one at a time to say which.
            return [self._shape(data) for data in encoded]

    def _shape(self, data):
        try:
            return tuple(self._decoded_shapes(self._tf.constant([data])).numpy()[0].tolist())
        except self._tf.errors.OpError as e:
            return e.message.strip().split('\n')[0]


def _image_bytes(job):
    """The bytes of a record's image, or the exception that reading them raised."""
    if isinstance(job.payload, bytes):
        return job.payload
    try:
        with records.open_file(job.payload) as f:
            return f.read()
    except OSError as e:
        return e


class _ShardTally:
    def __init__(self):
        self.records = 0
        self.classes = collections.Counter()
        self.levels = collections.defaultdict(collections.Counter)  # level -> name -> records
        self.intact = True


class _ShardReader:
    """Streams every listed shard, checking framing, records and totals; yields image batches."""

    def __init__(self, output_dir, dataset, checker, problems, batch_size):
        self._output_dir = output_dir
        self._dataset = dataset
        self._checker = checker
        self._problems = problems
        self._batch_size = batch_size
        self.totals = {split: collections.Counter() for split in dataset['splits']}

    def batches(self):
        """Yields (shard path, [_ImageJob]) for every shard of every split, in listed order."""
        for split, info in self._dataset['splits'].items():
            for entry in info['shards']:
                path = finalize.join(self._output_dir, entry['path'])
                yield from self._shard(split, path, entry)

    def _shard(self, split, path, entry):
        tally = _ShardTally()
        try:
            with records.open_file(path) as f:
                reader = records.HashingReader(f)
                yield from self._records(path, reader, tally)
        except OSError as e:
            self._problems.add(path, f'cannot read the shard: {e}')
            return
        self.totals[split].update(shards=1, records=tally.records, bytes=reader.num_bytes)
        self._check_totals(path, entry, reader, tally)

    def _records(self, path, reader, tally):
        batch, batch_bytes = [], 0
        try:
            for offset, record in records.framed_records(reader, path):
                tally.records += 1
                label, job, levels = self._checker.check(path, offset, record)
                if label is not None:
                    tally.classes[label] += 1
                for level, name in levels.items():
                    if name is not None:
                        tally.levels[level][name] += 1
                if job is None:
                    continue
                batch.append(job)
                batch_bytes += len(job.payload)
                if len(batch) >= self._batch_size or batch_bytes >= _BATCH_BYTES:
                    yield path, batch
                    batch, batch_bytes = [], 0
        except tfrecord.CorruptRecordError as e:
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
        for key, value in found.items():
            if entry[key] != value:
                self._problems.add(path, f'{key} is {value}, but dataset.json says {entry[key]}')


def verify(output_dir, max_problems=20, io_threads=8, batch_size=128):
    """Checks a build; prints each problem and a summary. Returns the number of problems."""
    output_dir = output_dir.rstrip('/')
    problems = _Problems(max_problems)
    try:
        dataset = finalize.load_dataset_json(output_dir)
    except (FileNotFoundError, ValueError) as e:
        problems.add(finalize.join(output_dir, finalize.DATASET_JSON), str(e))
        return problems.total
    for problem in records.structure_problems(dataset):
        problems.add(finalize.join(output_dir, finalize.DATASET_JSON), problem)
    if problems.total:
        return problems.total
    print(
        f'verifying {output_dir}: {dataset["format"]} build, '
        f'{console.plural(len(dataset["labels"]), "label")}, '
        f'{console.plural(dataset["counts"]["written"], "record")} in '
        f'{console.plural(len(dataset["splits"]), "split")}',
        flush=True,
    )
    for where, problem in records.accounting_problems(output_dir, dataset):
        problems.add(where, problem)
    for where, problem in tfds_metadata.problems(output_dir, dataset):
        problems.add(where, problem)
    for path in records.unknown_files(output_dir, dataset):
        problems.add(
            finalize.join(output_dir, path),
            'unknown file: not part of this build (an earlier build left it, or not ours)',
        )
    images = _ImageChecker(io_threads)  # imports TensorFlow: seconds, not counted below
    started = time.perf_counter()
    reader = _ShardReader(
        output_dir, dataset, _RecordChecker(dataset, problems), problems, batch_size
    )
    try:
        with progress.Display() as display:
            total = dataset['counts']['written']
            decoded = _check_images(reader.batches(), images, problems, display, total)
    finally:
        images.close()
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


def main(argv=None):
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
    args = parser.parse_args(argv)
    console.configure_logging()
    return 1 if verify(args.output, args.max_problems, args.io_threads) else 0
