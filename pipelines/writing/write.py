"""WriteShards: one TFRecord file per (split, shard), its records in seeded random order, and
the analysis's measure of each shard of the analysed split (pipelines/writing/sample.py).

Image bytes are read here, a second time, so that the shuffle before this step carries only
metadata. Each shard is written under the build's temporary folder and stays there, complete,
until Finalize moves every shard into place at once: a build killed while writing leaves no
file that looks like a finished shard. Beside each shard goes its index file, the offset and
length of every record as DALI's tfrecord2idx writes them (imageshards/tfrecord.py), so that
DALI and the PyTorch `tfrecord` package read a build as it is; it is staged and moved with its
shard. The records themselves are made by pipelines/writing/encode.py.
"""

import collections
import concurrent.futures
import hashlib
import typing

import apache_beam as beam
from PIL import Image

from imageshards import features
from imageshards import layout as layout_lib
from imageshards import storage
from imageshards import tfrecord
from imageshards.dataset_json import FORMATS_KEY
from imageshards.dataset_json import format_counts
from imageshards.pool import bounded_map
from pipelines.assignment.assign import order_key
from pipelines.core import blocks
from pipelines.core import counters
from pipelines.core import sources
from pipelines.core.settings import BuildConfig
from pipelines.core.sources import source_path
from pipelines.validation import images
from pipelines.writing.encode import read_checked
from pipelines.writing.encode import read_streamed
from pipelines.writing.encode import stored_bytes
from pipelines.writing.sample import sample_count
from pipelines.writing.sample import shard_summary

SUMMARIES = 'summaries'


def count_labels(meta, class_counts, level_counts) -> None:
    """Counts a record's label(s) by id, and its level values by (level index, id), a level
    without a value as features.MISSING_LEVEL; a multi-label record counts each of its ids."""
    if not isinstance(meta.label, tuple):
        class_counts[meta.label] += 1
        if meta.levels:  # Counter.update costs as much as the rest, even given nothing
            level_counts.update(enumerate(meta.levels))
        return
    class_counts.update(meta.label)
    for index, ids in enumerate(meta.levels):
        level_counts.update((index, i) for i in ids or (features.MISSING_LEVEL,))


class _WriteShard(beam.DoFn):
    """((split, shard), [block ref]) -> the shard's entry for dataset.json, and to SUMMARIES,
    for a shard of the analysed split, its shard_summary (see WriteShards)."""

    def __init__(self, encoder, seed, temp_dir, store, io_threads, sample, max_image_bytes):
        self._encoder = encoder
        self._max_image_bytes = max_image_bytes  # what read_checked reads at most of a source
        self._input_base = encoder.input_base
        self._output_dir = encoder.output_dir
        self._format = encoder.format
        self._label_names = encoder.label_names
        self._label_levels = encoder.label_levels  # [(level, [names])]
        self._seed = seed
        self._temp_dir = temp_dir
        self._store = store
        self._io_threads = io_threads
        self._sample = sample
        self._pool = None
        self._streamed = {}  # {id: bytes} of the shard's inputs of sequential sources
        self._records = counters.counter('written')
        self._bytes = counters.counter('bytes_written')
        self._shards = counters.counter('shards_written')

    def setup(self):
        if self._io_threads > 1:  # remote inputs: concurrent reads hide latency
            self._pool = concurrent.futures.ThreadPoolExecutor(self._io_threads)
        # Only validated images reach the writer (their size already checked against
        # --max-pixels, their bytes against a CRC before re-encoding): Pillow's own bomb
        # limit, which --max-pixels may exceed, must not refuse them here.
        Image.MAX_IMAGE_PIXELS = None

    def finish_bundle(self):
        counters.flush()  # the bundle's last counts shown before the runner stops this worker

    def teardown(self):
        if self._pool:
            self._pool.shutdown()

    def process(self, keyed, layout):
        (split, index), refs = keyed
        metas = sorted(self._store.metas(refs), key=lambda meta: order_key(self._seed, meta))
        relative = layout_lib.shard_path(split, index, layout.num_shards[split])
        staged = storage.join(self._output_dir, layout_lib.staged_shard(relative))
        digest, num_bytes, lengths = hashlib.sha256(), 0, []
        class_counts = collections.Counter()
        level_counts = collections.Counter()  # (level index, id) -> records
        measured = self._measured(split, index, layout)
        pixel_sums = []  # of the first `measured` records' images (sample.py)
        with storage.created_whole(staged, self._temp_dir) as f:
            for meta, (framed, stored) in zip(metas, self._framed_records(metas)):
                f.write(framed)
                digest.update(framed)
                num_bytes += len(framed)
                lengths.append(len(framed))
                count_labels(meta, class_counts, level_counts)
                if len(pixel_sums) < measured:
                    pixel_sums.append(self._pixel_sums(meta, stored))
        with storage.created_whole(staged + layout_lib.INDEX_SUFFIX, self._temp_dir) as f:
            f.write(tfrecord.index_text(lengths))
        self._records.inc(len(metas))
        self._bytes.inc(num_bytes)
        self._shards.inc()
        counters.advance(counters.WRITE, len(metas), total=sum(layout.num_records.values()))
        entry = {
            'split': split,
            'index': index,
            'path': relative,
            'index_file': layout_lib.index_path(relative),
            'num_records': len(metas),
            'num_bytes': num_bytes,
            'sha256': digest.hexdigest(),
            'class_counts': {
                self._label_names[label]: class_counts[label] for label in sorted(class_counts)
            },
            FORMATS_KEY: format_counts(meta.format for meta in metas),
            'reencoded': sum(meta.reencoded for meta in metas),
            'resized': sum(meta.resized for meta in metas),
        }
        if self._encoder.multi_label:
            entry['unlabeled'] = sum(not meta.label for meta in metas)
        if self._label_levels:
            entry.update(self._level_counts(level_counts))
        yield entry
        if self._sample and split == self._sample.split:
            summary = shard_summary(metas, class_counts, pixel_sums)
            yield beam.pvalue.TaggedOutput(SUMMARIES, summary)

    def _measured(self, split, index, layout):
        """How many of the shard's first records the analysis measures (0: none)."""
        if not self._sample or split != self._sample.split:
            return 0
        return sample_count(
            layout.num_records[split], layout.num_shards[split], index, self._sample.size
        )

    def _pixel_sums(self, meta, stored):
        """images.pixel_sums of an image, from the bytes its record stores (as written, not read
        again; a resize is measured as training sees it), but from its file where the record
        holds a lossless re-encode of it (the same pixels, faster to decode from the source)."""
        if stored is None or meta.reencoded:
            stored = read_checked(self._source(meta), meta, self._max_image_bytes)
        return images.pixel_sums(stored, self._sample.image_size)

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
        """(framed record, the bytes it stores, or None in a `paths` build) of each of `metas`,
        in order: their stored bytes from the payload files validation kept (local runner),
        else read from the inputs again."""
        if self._format == features.EXAMPLES:  # those that cannot be read one by one, first
            unkept = [meta for meta in metas if not meta.payload]
            self._streamed = read_streamed(unkept, self._input_base, self._max_image_bytes)
        if self._format == features.EXAMPLES and any(meta.payload for meta in metas):
            payloads = self._store.read_payloads(metas, self._stored_bytes, path_of=self._file)
            for meta, stored in zip(metas, payloads):
                yield tfrecord.frame(self._encoder.encode(meta, stored)), stored
        elif self._pool:
            yield from bounded_map(self._pool, self._framed_record, metas, 4 * self._io_threads)
        elif self._format == features.EXAMPLES:
            yield from map(self._framed_record, storage.prefetching(metas, self._file))
        else:  # a `paths` build reads no image
            yield from map(self._framed_record, metas)

    def _source(self, meta):
        """The input's path, or `container!member` (pipelines/core/sources.py)."""
        return sources.display_path(self._input_base, meta.key, meta.source)

    def _file(self, meta):
        """The file of an input that has one of its own (to ask of the kernel ahead), or None."""
        return None if meta.source else source_path(self._input_base, meta.key)

    def _read(self, meta, source):
        data = self._streamed.pop(meta.id, None)
        return data if data is not None else read_checked(source, meta, self._max_image_bytes)

    def _stored_bytes(self, meta):
        source = self._source(meta)
        return stored_bytes(self._read(meta, source), meta, source, self._encoder.resize)

    def _framed_record(self, meta):
        source = self._source(meta)
        stored = None
        if self._format == features.EXAMPLES:
            stored = stored_bytes(self._read(meta, source), meta, source, self._encoder.resize)
        return tfrecord.frame(self._encoder.encode(meta, stored, source)), stored


class Written(typing.NamedTuple):
    """WriteShards' outputs."""

    shards: beam.PCollection  # one dataset.json shard entry per shard
    summaries: beam.PCollection  # shard_summary per shard of the analysed split


class WriteShards(beam.PTransform):
    """((split, shard), block ref) -> Written.

    Every shard of the layout is written, also one that received no records.

    Args:
        layout: AssignShards' ShardLayout (a one-element PCollection).
        encoder: the RecordEncoder of the build's records (its format, labels and levels).
        seed: the build's seed (the order of records within a shard).
        temp_dir: where shards are written before they are staged for Finalize.
        store: the BlockStore of the blocks (default: inline).
        io_threads: inputs read at once (> 1 for remote inputs).
        sample: the Sample to measure for the analysis, or None (no summaries).
        max_image_bytes: the most read of an input whose record stores a resize or re-encoding
            of it (--max-image-bytes; the others are read up to their validated size).
    """

    def __init__(
        self,
        layout,
        encoder,
        *,
        seed,
        temp_dir,
        store=None,
        io_threads=1,
        sample=None,
        max_image_bytes=BuildConfig.max_image_bytes,
    ):
        super().__init__()
        self._layout = layout
        store = store or blocks.BlockStore()
        self._fn = _WriteShard(encoder, seed, temp_dir, store, io_threads, sample, max_image_bytes)

    def expand(self, placed):
        # An empty inline block per shard: a shard nobody placed an image in is written too.
        every_shard = self._layout | 'ListShards' >> beam.FlatMap(
            lambda layout: [(key, b'') for key in layout.shard_keys()]
        )
        written = (
            (placed, every_shard)
            | 'WithEveryShard' >> beam.Flatten()
            | 'GroupByShard' >> beam.GroupByKey()
            # ((split, shard), [block ref])
            | 'Write'
            >> beam.ParDo(self._fn, layout=beam.pvalue.AsSingleton(self._layout)).with_outputs(
                SUMMARIES, main='shards'
            )
        )
        return Written(written.shards, written[SUMMARIES])
