"""WriteShards: one TFRecord file per (split, shard), its records in seeded random order.

Image bytes are read here, a second time, so that the shuffle before this step carries only
metadata. Each shard is written under the build's temporary folder and stays there, complete,
until Finalize moves every shard into place at once: a build killed while writing leaves no
file that looks like a finished shard.
"""

import collections
import concurrent.futures
import hashlib
import itertools
import uuid

import apache_beam as beam
import google_crc32c
from apache_beam.io.filesystems import FileSystems
from PIL import Image

from imageshards import features
from imageshards import tfrecord
from pipelines import blocks
from pipelines import finalize
from pipelines import images
from pipelines import progress
from pipelines.assign import order_key
from pipelines.inputs import source_path
from pipelines.validate import NAMESPACE
from pipelines.validate import read_file
from pipelines.validate import reencoded_path


def shard_name(split, index, num_shards):
    return f'{split}-{index:05d}-of-{num_shards:05d}.tfrecord'


def shard_path(split, index, num_shards):
    """A shard's path relative to the output directory (as listed in dataset.json)."""
    return f'{split}/{shard_name(split, index, num_shards)}'


class InputChangedError(RuntimeError):
    """An input's bytes differ from those validated earlier in the same build."""


def bounded_map(pool, fn, items, window):
    """Like `pool.map`, in order, with at most `window` results in memory at once."""
    items = iter(items)
    pending = collections.deque(pool.submit(fn, item) for item in itertools.islice(items, window))
    while pending:
        result = pending.popleft().result()
        for item in itertools.islice(items, 1):
            pending.append(pool.submit(fn, item))
        yield result


class _WriteShard(beam.DoFn):
    """((split, shard), [block]) -> the shard's entry for dataset.json (see WriteShards)."""

    def __init__(
        self,
        input_base,
        output_dir,
        temp_dir,
        fmt,
        seed,
        label_names,
        io_threads,
        store=None,
        label_levels=None,
    ):
        self._input_base = input_base
        self._output_dir = output_dir
        self._temp_dir = temp_dir
        self._format = fmt
        self._seed = seed
        self._label_names = label_names
        self._io_threads = io_threads
        self._store = store or blocks.BlockStore()
        self._label_levels = list((label_levels or {}).items())  # [(level, [names])]
        self._encoder = RecordEncoder(input_base, output_dir, fmt, label_names, label_levels)
        self._pool = None
        self._records = beam.metrics.Metrics.counter(NAMESPACE, 'written')
        self._bytes = beam.metrics.Metrics.counter(NAMESPACE, 'bytes_written')
        self._shards = beam.metrics.Metrics.counter(NAMESPACE, 'shards_written')

    def setup(self):
        if self._io_threads > 1:  # remote inputs: concurrent reads hide latency
            self._pool = concurrent.futures.ThreadPoolExecutor(self._io_threads)
        # Only validated images reach the writer (their size already checked against
        # --max-pixels, their bytes against a CRC before re-encoding): Pillow's own bomb
        # limit, which --max-pixels may exceed, must not refuse them here.
        Image.MAX_IMAGE_PIXELS = None

    def teardown(self):
        if self._pool:
            self._pool.shutdown()

    def process(self, keyed, plan, after=()):
        del after  # only waited for
        (split, index), pieces = keyed
        metas = sorted(self._store.metas(pieces), key=lambda meta: order_key(self._seed, meta))
        relative = shard_path(split, index, plan.num_shards[split])
        temporary = FileSystems.join(self._temp_dir, f'{uuid.uuid4().hex}.tfrecord')
        digest, num_bytes = hashlib.sha256(), 0
        class_counts = collections.Counter()
        level_counts = collections.Counter()  # (level index, id) -> records
        with FileSystems.create(temporary) as f:
            for meta, framed in zip(metas, self._framed_records(metas)):
                f.write(framed)
                digest.update(framed)
                num_bytes += len(framed)
                class_counts[meta.label] += 1
                level_counts.update(enumerate(meta.levels))
        staged = finalize.staged_path(self._output_dir, relative)
        finalize.make_parent(staged)
        FileSystems.rename([temporary], [staged])
        self._records.inc(len(metas))
        self._bytes.inc(num_bytes)
        self._shards.inc()
        progress.advance(progress.WRITE, len(metas), total=sum(plan.num_records.values()))
        entry = {
            'split': split,
            'index': index,
            'path': relative,
            'num_records': len(metas),
            'num_bytes': num_bytes,
            'sha256': digest.hexdigest(),
            'class_counts': {
                self._label_names[label]: class_counts[label] for label in sorted(class_counts)
            },
            'reencoded': sum(meta.reencoded for meta in metas),
        }
        if self._label_levels:
            entry.update(self._level_counts(level_counts))
        yield entry

    def _level_counts(self, counts):
        """A shard entry's `level_counts` ({level: {name: records}}) and `level_missing`."""
        level_counts, missing = {}, {}
        for index, (level, names) in enumerate(self._label_levels):
            level_counts[level] = {
                names[i]: counts[(index, i)] for i in range(len(names)) if counts[(index, i)]
            }
            missing[level] = counts[(index, features.MISSING_LEVEL)]
        return {'level_counts': level_counts, 'level_missing': missing}

    def _framed_records(self, metas):
        """The framed records of `metas`, in order: their stored bytes from the payload files
        validation kept (local runner), else read from the inputs again."""
        if self._format == features.EXAMPLES and any(meta.payload for meta in metas):
            for meta, stored in zip(metas, self._store.read_payloads(metas, self._stored_bytes)):
                yield tfrecord.frame(self._encoder.encode(meta, stored))
        elif self._pool:
            yield from bounded_map(self._pool, self._framed_record, metas, 4 * self._io_threads)
        else:
            yield from map(self._framed_record, metas)

    def _stored_bytes(self, meta):
        source = source_path(self._input_base, meta.key)
        return stored_bytes(read_checked(source, meta), meta, source)

    def _framed_record(self, meta):
        source = source_path(self._input_base, meta.key)
        stored = None
        if self._format == features.EXAMPLES:
            stored = stored_bytes(read_checked(source, meta), meta, source)
        return tfrecord.frame(self._encoder.encode(meta, stored, source))


class RecordEncoder:
    """ImageMeta (and the stored bytes) -> the serialized tf.train.Example of a record.

    Configuration only, so that it pickles into the DoFns that write records.
    """

    def __init__(self, input_base, output_dir, fmt, label_names, label_levels=None):
        self._input_base = input_base
        self._output_dir = output_dir
        self._format = fmt
        self._label_names = label_names
        self._label_levels = list((label_levels or {}).items())  # [(level, [names])]
        self._level_names = tuple(level for level, _ in self._label_levels)

    def encode(self, meta, stored=None, source=None):
        """The record of `meta`; `stored` is the image bytes of an `examples` build, `source`
        the input's path (default: from its key)."""
        source = source or source_path(self._input_base, meta.key)
        values = {
            features.FORMAT: meta.format,
            features.HEIGHT: meta.height,
            features.WIDTH: meta.width,
            features.CHANNELS: meta.channels,
            features.LABEL: meta.label,
            features.LABEL_TEXT: self._label_names[meta.label],
            features.FILENAME: source,
            features.SHA256: meta.sha256.hex(),
            features.ID: meta.id,
        }
        for (level, names), level_id in zip(self._label_levels, meta.levels):
            values[features.level_label(level)] = level_id
            values[features.level_text(level)] = names[level_id] if level_id >= 0 else ''
        if self._format == features.EXAMPLES:
            values[features.ENCODED] = stored
        else:
            values[features.PATH] = (
                reencoded_path(self._output_dir, meta.sha256.hex()) if meta.reencoded else source
            )
        return features.encode_example(self._format, values, self._level_names)


def read_checked(source, meta):
    """The source file's bytes, checked against the CRC validation took of them."""
    data = read_file(source)
    if google_crc32c.value(data) != meta.source_crc32c:
        raise InputChangedError(
            f'{source} changed while the build was running (its bytes differ from those '
            f'validated); rerun the build on inputs that are not being modified'
        )
    return data


def stored_bytes(data, meta, source):
    """The bytes a record stores of source bytes `data`: as they are, or re-encoded."""
    if meta.reencoded:
        data = images.reencode(data)
        if hashlib.sha256(data).digest() != meta.sha256:
            raise InputChangedError(
                f're-encoding {source} gave other bytes than during '
                f'validation: workers must share one Pillow version'
            )
    return data


class WriteShards(beam.PTransform):
    """((split, shard), block) pieces -> one dataset.json shard entry per shard.

    Every shard of the plan is written, also one that received no records. The arguments after
    `plan` are those of `_WriteShard`: `store` is the BlockStore of the pieces (default: inline),
    and `label_levels` ({level: [names]}) adds each level's features to the records and its
    counts to the entries. With `after` (a PCollection), writing starts once it is complete.
    """

    def __init__(self, plan, *args, after=None, **kwargs):
        super().__init__()
        self._plan = plan
        self._after = after
        self._fn = _WriteShard(*args, **kwargs)

    def expand(self, placed):
        # An empty inline block per shard: a shard nobody placed an image in is written too.
        every_shard = self._plan | 'ListShards' >> beam.FlatMap(
            lambda plan: [(key, b'') for key in plan.shard_keys()]
        )
        after = {} if self._after is None else {'after': beam.pvalue.AsList(self._after)}
        return (
            (placed, every_shard)
            | 'WithEveryShard' >> beam.Flatten()
            | 'GroupByShard' >> beam.GroupByKey()
            # ((split, shard), [block])
            | 'Write' >> beam.ParDo(self._fn, plan=beam.pvalue.AsSingleton(self._plan), **after)
        )
