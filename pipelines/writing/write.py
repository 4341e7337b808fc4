"""WriteShards: one shard file per (split, shard), its records in seeded random order, and the
analysis's measure of each shard of the analysed split (pipelines/writing/sample.py).

Image bytes are read here, a second time, so that the shuffle before this step carries only
metadata. Each shard is written under the build's temporary folder and stays there, complete,
until Finalize moves every shard into place at once: a build killed while writing leaves no
file that looks like a finished shard. The records are made by pipelines/writing/encode.py,
written by the build's shard format (imageshards/shard_formats/: for TFRecord, with the index
file DALI and the PyTorch `tfrecord` package read beside each shard, staged and moved with it)
and counted by pipelines/writing/tally.py.
"""

import concurrent.futures
import typing

import apache_beam as beam
from PIL import Image

from imageshards import layout as layout_lib
from imageshards import storage
from imageshards.kinds import features
from imageshards.pool import bounded_map
from pipelines.assignment.assign import order_key
from pipelines.core import blocks
from pipelines.core import counters
from pipelines.core import sources
from pipelines.core.sources import source_path
from pipelines.validation import images
from pipelines.writing.encode import RecordEncoder
from pipelines.writing.encode import read_checked
from pipelines.writing.encode import read_streamed
from pipelines.writing.encode import stored_bytes
from pipelines.writing.sample import sample_count
from pipelines.writing.sample import shard_summary
from pipelines.writing.tally import ShardTally

SUMMARIES = 'summaries'


class _WriteShard(beam.DoFn):
    """((split, shard), [block ref]) -> the shard's entry for dataset.json, and to SUMMARIES,
    for a shard of the analysed split, its shard_summary (see WriteShards)."""

    def __init__(self, settings, store):
        self._settings = settings
        self._encoder = RecordEncoder(settings)
        self._store = store
        self._pool = None
        self._streamed = {}  # {id: bytes} of the shard's inputs of sequential sources
        self._records = counters.counter('written')
        self._bytes = counters.counter('bytes_written')
        self._shards = counters.counter('shards_written')

    def setup(self):
        if self._settings.io_threads > 1:  # remote inputs: concurrent reads hide latency
            self._pool = concurrent.futures.ThreadPoolExecutor(self._settings.io_threads)
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
        settings = self._settings
        metas = sorted(self._store.metas(refs), key=lambda meta: order_key(settings.seed, meta))
        shard_format = settings.shard_format
        relative = shard_format.shard_path(split, index, layout.num_shards[split])
        staged = storage.join(settings.output_dir, layout_lib.staged_shard(relative))
        tally = ShardTally(settings.kind, settings.names)
        pixel_sums = []  # of the first `measured` records' images (sample.py)
        measured = self._measured(split, index, layout)
        records = self._counted(metas, tally, pixel_sums, measured)
        written = shard_format.write(staged, records, storage, settings.temp_dir)
        self._records.inc(written.num_records)
        self._bytes.inc(written.num_bytes)
        self._shards.inc()
        counters.advance(counters.WRITE, len(metas), total=sum(layout.num_records.values()))
        entry = {'split': split, 'index': index, 'path': relative}
        if written.indexed:
            entry['index_file'] = shard_format.index_path(relative)
        entry.update(
            num_records=written.num_records, num_bytes=written.num_bytes, sha256=written.sha256
        )
        yield {**entry, **tally.entry(metas)}
        if settings.sample and split == settings.sample.split:
            summary = shard_summary(metas, tally.classes, pixel_sums)
            yield beam.pvalue.TaggedOutput(SUMMARIES, summary)

    def _counted(self, metas, tally, pixel_sums, measured):
        """The records of `metas`, in order, each counted (`tally`), and the pixel sums of the
        first `measured` of them's images appended to `pixel_sums`, as they are written."""
        for meta, (record, stored) in zip(metas, self._encoded_records(metas)):
            tally.add(meta)
            if len(pixel_sums) < measured:
                pixel_sums.append(self._pixel_sums(meta, stored))
            yield record

    def _measured(self, split, index, layout):
        """How many of the shard's first records the analysis measures (0: none)."""
        sample = self._settings.sample
        if not sample or split != sample.split:
            return 0
        return sample_count(layout.num_records[split], layout.num_shards[split], index, sample.size)

    def _pixel_sums(self, meta, stored):
        """images.pixel_sums of an image, from the bytes its record stores (as written, not read
        again; a resize is measured as training sees it), but from its file where the record
        holds a lossless re-encode of it (the same pixels, faster to decode from the source)."""
        if stored is None or meta.reencoded:
            stored = read_checked(self._source(meta), meta, self._settings.max_image_bytes)
        return images.pixel_sums(stored, self._settings.sample.image_size)

    def _encoded_records(self, metas):
        """(record, the bytes it stores, or None in a `paths` build) of each of `metas`, in
        order: their stored bytes from the payload files validation kept (local runner), else
        read from the inputs again."""
        settings = self._settings
        examples = settings.kind.format == features.EXAMPLES
        if examples:  # those that cannot be read one by one, first
            unkept = [meta for meta in metas if not meta.payload]
            self._streamed = read_streamed(unkept, settings.input_base, settings.max_image_bytes)
        if examples and any(meta.payload for meta in metas):
            payloads = self._store.read_payloads(metas, self._stored_bytes, path_of=self._file)
            for meta, stored in zip(metas, payloads):
                yield self._encoder.encode(meta, stored), stored
        elif self._pool:
            threads = settings.io_threads
            yield from bounded_map(self._pool, self._encoded_record, metas, 4 * threads)
        elif examples:
            yield from map(self._encoded_record, storage.prefetching(metas, self._file))
        else:  # a `paths` build reads no image
            yield from map(self._encoded_record, metas)

    def _source(self, meta):
        """The input's path, or `container!member` (pipelines/core/sources.py)."""
        return sources.display_path(self._settings.input_base, meta.key, meta.source)

    def _file(self, meta):
        """The file of an input that has one of its own (to ask of the kernel ahead), or None."""
        return None if meta.source else source_path(self._settings.input_base, meta.key)

    def _read(self, meta, source):
        data = self._streamed.pop(meta.id, None)
        if data is not None:
            return data
        return read_checked(source, meta, self._settings.max_image_bytes)

    def _stored_bytes(self, meta):
        source = self._source(meta)
        return stored_bytes(self._read(meta, source), meta, source, self._settings.resize)

    def _encoded_record(self, meta):
        source = self._source(meta)
        stored = None
        if self._settings.kind.format == features.EXAMPLES:
            stored = stored_bytes(self._read(meta, source), meta, source, self._settings.resize)
        return self._encoder.encode(meta, stored, source), stored


class Written(typing.NamedTuple):
    """WriteShards' outputs."""

    shards: beam.PCollection  # one dataset.json shard entry per shard
    summaries: beam.PCollection  # shard_summary per shard of the analysed split


class WriteShards(beam.PTransform):
    """((split, shard), block ref) -> Written.

    Every shard of the layout is written, also one that received no records.

    Args:
        layout: AssignShards' ShardLayout (a one-element PCollection).
        settings: the build's WriteSettings.
        store: the BlockStore of the blocks (default: inline).
    """

    def __init__(self, layout, settings, store=None):
        super().__init__()
        self._layout = layout
        self._fn = _WriteShard(settings, store or blocks.BlockStore())

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
