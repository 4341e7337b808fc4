"""ValidateImages: read and check every input once, keep metadata, reject with reasons.

Work items are chunks of listed inputs: the byte range of one line of the listing file, read
here, so that the runner moves two numbers per chunk rather than the line. A chunk's local files
are read and checked one after the other: the check is mostly Python holding the GIL, and the
local runner has a worker process per core. On `gs://`, a thread pool reads concurrently to
hide per-object latency, a few work items at once: an image whose read is retried after a
fault of the network holds up no other item. A read that Cloud Storage does not answer within
its retries stops the build (StoreUnavailable): a fault of the network is never an image's.
Inputs inside containers (archive members, array rows, TFRecord records) are read in their
containers' order through one reader (pipelines/core/reading.py), a sequential source's several
lines in one work item. The metadata of a chunk's valid images leaves as one block
(pipelines/core/blocks.py).
With --resize-shorter-side, a valid image larger than that is resized here, from the bytes just
checked (pipelines/validation/resize.py); with --near-duplicates, every valid image's
perceptual hash is taken here too (pipelines/validation/perceptual.py).
"""

import concurrent.futures
import functools
import hashlib
import itertools
import typing

import apache_beam as beam
import google_crc32c
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue
from PIL import Image

from imageshards import gcs
from imageshards import layout
from imageshards import storage
from pipelines.core import blocks
from pipelines.core import counters
from pipelines.core import reading
from pipelines.core import sources
from pipelines.core.sources import SMALL_INPUT_BYTES
from pipelines.inputs import coco_join
from pipelines.inputs.listing import read_work_item_lines
from pipelines.validation import images
from pipelines.validation import labeling
from pipelines.validation import perceptual
from pipelines.validation import resize
from pipelines.validation.image_errors import pillow_call
from pipelines.validation.labeling import rejection

REJECTED = 'rejected'
ITEMS_IN_FLIGHT = 4  # work items a worker with a thread pool reads at once, at most
TOO_LARGE_REASON = 'too_large'


class _ValidateWorkItem(beam.DoFn):
    """Work item -> a block of its valid images' ImageMeta; rejections to the REJECTED output.

    Its arguments are those of ValidateImages.
    """

    def __init__(
        self, listing_path, settings, store, rank_groups, join=None, annotation_store=None
    ):
        self._listing_path = listing_path
        self._settings = settings
        self._store = store
        self._annotation_store = annotation_store or store
        self._rank_groups = rank_groups
        self._join = join
        self._pool = None
        self._in_flight = []  # (entries, [future of each's _validate]) of the items in flight
        self._payloads = self._puts = None  # the bundle's payload file and blocks' appender
        self._listed = counters.counter('listed')
        self._valid = counters.counter('validated')
        self._reencoded = counters.counter('reencoded')
        self._resized = counters.counter('resized')

    def setup(self):
        # Pillow refuses at open beyond twice this; our own check rejects beyond it.
        Image.MAX_IMAGE_PIXELS = self._settings.max_pixels
        if self._settings.io_threads > 1:
            self._pool = concurrent.futures.ThreadPoolExecutor(self._settings.io_threads)

    def finish_bundle(self):
        for output in self._finished(every=True):  # outside `process`: in a window of its own
            if isinstance(output, beam.pvalue.TaggedOutput):
                yield beam.pvalue.TaggedOutput(output.tag, _windowed(output.value))
            else:
                yield _windowed(output)
        self._close_bundle_files()
        counters.flush()  # the bundle's last counts shown before the runner stops this worker

    def teardown(self):
        self._close_bundle_files()
        if self._pool:
            self._pool.shutdown(cancel_futures=True)

    def process(self, item):
        """A work item's outputs. A work item of files is one line of the listing: with a thread
        pool, its inputs are read and checked there while the next items' start, and its outputs
        leave once all its inputs are done, from a later call or at the bundle's end, so that an
        input whose read is retried after a fault of the network holds up no other item. One of
        inputs inside containers (one line, or a sequential source's several) is read in the
        containers' order, through one Reader, a line at a time. With a `join`, a work item
        comes with the blocks of its images' annotations, joined to its entries here."""
        if self._join:
            item, refs = item
        lines = read_work_item_lines(self._listing_path, item)
        if self._join:
            lines = coco_join.joined_lines(lines, refs, self._join, self._annotation_store)
        first = next(lines, [])
        if not any(entry.source for entry in first):
            for entries in itertools.chain([first], lines):
                yield from self._files(entries)
            return
        reader = reading.Reader(contiguous=True)
        try:
            for entries in itertools.chain([first], lines):
                self._listed.inc(len(entries))
                validate = functools.partial(self._validate, reader=reader)
                yield from self._outputs(entries, map(validate, entries))
        finally:
            reader.close()

    def _files(self, entries):
        """The outputs of a line of files of their own (see `process`)."""
        self._listed.inc(len(entries))
        if not self._pool:
            to_read = functools.partial(_path_to_read, max_bytes=self._settings.max_image_bytes)
            yield from self._outputs(
                entries, map(self._validate, storage.prefetching(entries, to_read))
            )
            return
        self._in_flight.append((entries, [self._pool.submit(self._validate, e) for e in entries]))
        yield from self._finished(one=len(self._in_flight) > ITEMS_IN_FLIGHT)

    def _finished(self, one=False, every=False):
        """The outputs of the items in flight whose inputs are all done; with `one`, waits for
        one at least, with `every` for all. The first error of any input is raised at once."""
        while self._in_flight:
            for _, futures in self._in_flight:
                failed = next((f for f in futures if f.done() and f.exception()), None)
                if failed:
                    raise failed.exception()
            ready = next((i for i in self._in_flight if all(f.done() for f in i[1])), None)
            if ready is None and not (one or every):
                return
            if ready is None:
                pending = [f for _, futures in self._in_flight for f in futures if not f.done()]
                concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
                continue
            self._in_flight.remove(ready)
            one = False
            entries, futures = ready
            yield from self._outputs(entries, (future.result() for future in futures))

    def _outputs(self, entries, outcomes):
        """The outputs of a work item from the `_validate` outcomes of its entries: its
        rejections, and the block of its valid images' ImageMeta."""
        # The bytes each record will store, kept for the writer (local runner, examples).
        payloads = None if self._settings.reencode_dir else self._bundle_payloads()
        valid, done = [], False
        try:
            for outcome in outcomes:
                if isinstance(outcome, dict):
                    counters.counter(f'rejected_{outcome["reason"]}').inc()
                    yield beam.pvalue.TaggedOutput(REJECTED, outcome)
                    continue
                meta, stored, dropped = outcome
                for row in dropped:  # an annotation's parts the kind could not use
                    yield beam.pvalue.TaggedOutput(REJECTED, row)
                # A resize is kept whatever its size: making it again would decode the input
                # again; so is an input of a sequential source, which cannot be read alone.
                kept = None
                if payloads and stored is not None:
                    always = meta.resized or sources.is_sequential(meta.source)
                    kept = payloads.add(stored, always=always)
                if kept:
                    meta = meta.with_payload(*kept)
                valid.append(meta)
            if payloads:  # on disk before the item's block leaves
                payloads.flush()
            done = True
        finally:
            if not done:  # also where its disk is full: no file of the build left open
                self._close_bundle_files()
        self._valid.inc(len(valid))
        counters.advance(counters.VALIDATE, len(entries))
        if self._puts is None:
            self._puts = self._store.appender()
        if valid and self._rank_groups:
            yield from self._rank_groups.keyed_blocks(valid, self._puts)
        elif valid:
            yield from self._puts.put('validated', [blocks.pack(valid)])

    def _bundle_payloads(self):
        """The bundle's payload file, where the store keeps one (else None): one file for all of
        a bundle's work items, as creating a file costs more than writing a work item's small
        images (bench/RESULTS.md, "Build cost per image"); so do its blocks (`_puts`)."""
        if self._payloads is None:
            self._payloads = self._store.payloads()
        return self._payloads

    def _close_bundle_files(self):
        payloads, puts, self._payloads, self._puts = self._payloads, self._puts, None, None
        try:
            if puts is not None:
                puts.close()
        finally:
            if payloads is not None:
                payloads.close()

    def _validate(self, entry, reader=None):
        """(ImageMeta, the bytes its record stores where small, else None) of a valid input read
        by `reader` (default: this thread's), else its rejection. Holds one input's bytes at
        most: no larger than --max-image-bytes, known by its size before it is read."""
        if entry.reject:
            return rejection(entry, entry.reject, entry.detail)
        settings = self._settings
        facts = labeling.labeling(entry, settings)  # before reading: a rejected row costs no read
        if isinstance(facts, dict):
            return facts
        levels, group = facts
        data = self._read(entry, reader or reading.thread_reader())
        if isinstance(data, dict):
            return data
        try:
            info, stored = images.inspect_image(data, settings.max_pixels, not settings.resize)
            original, resized = info, False
            if settings.resize:
                info, stored, resized = pillow_call(
                    data, resize.stored_image, data, info, stored, settings.resize
                )
            phash = perceptual.perceptual_hash(data) if settings.near_duplicates else -1
        except images.Rejected as e:
            return rejection(entry, e.reason, e.detail)
        annotated = labeling.annotated(entry, settings, original, reader or reading.thread_reader())
        if isinstance(annotated, dict):
            return annotated
        source_sha256 = self._source_digest(data, info, stored, resized)
        # Every field in ImageMeta's order: a namedtuple made by keyword costs seven times this.
        meta = blocks.new_meta(
            (
                entry.id,
                entry.key,
                labeling.label_of(entry, settings, annotated),  # label
                entry.split,
                info.format,
                info.height,
                info.width,
                info.channels,
                bytes.fromhex(info.sha256),  # sha256
                info.num_bytes,
                source_sha256,
                google_crc32c.value(data),  # source_crc32c
                info.reencoded,
                levels,
                original.height if resized else 0,  # original_height
                original.width if resized else 0,  # original_width
                group,
                phash,
                entry.source,
                annotated.data,  # annotation
                0,  # payload: where the writer finds its bytes, once kept (`_outputs`)
                0,  # payload_offset
            )
        )
        stored = data if stored is None else stored
        # Only a small image's bytes, a resize or a sequential source's input are kept (spill.py):
        # a larger one's go now, not when the thread pool's results are taken in order.
        keep = len(stored) <= SMALL_INPUT_BYTES or resized or sources.is_sequential(entry.source)
        return meta, stored if keep else None, labeling.dropped_rows(entry, annotated)

    def _source_digest(self, data, info, stored, resized):
        """The input's sha256 where the record stores other bytes (a resize, a re-encode, which
        a paths build writes now), else b''."""
        source_sha256 = b''
        if resized:  # the record stores the resize instead
            self._resized.inc()
            source_sha256 = hashlib.sha256(data).digest()
        if info.reencoded:
            self._reencoded.inc()
            source_sha256 = hashlib.sha256(data).digest()
            if self._settings.reencode_dir:
                storage.write_once(
                    storage.join(self._settings.reencode_dir, layout.reencoded_file(info.sha256)),
                    stored,
                )
        return source_sha256

    def _read(self, entry, reader):
        """The input's bytes, or its rejection: too large by its size as listed or as read,
        missing or unreadable; inside a container, in a paths build (which names files)."""
        if entry.source and self._settings.reencode_dir:
            detail = 'a paths build names files training reads; build examples to store it'
            return rejection(entry, 'inside_container', detail)
        if entry.size > self._settings.max_image_bytes:  # its size as listed
            too_large = storage.TooLarge(entry.path, entry.size, self._settings.max_image_bytes)
            return rejection(entry, TOO_LARGE_REASON, str(too_large))
        try:
            return reader.read(entry.path, entry.source, self._settings.max_image_bytes)
        except storage.TooLarge as e:  # its size as read: unknown to listing, or it grew
            return rejection(entry, TOO_LARGE_REASON, str(e))
        except reading.Unreadable as e:  # a container that does not hold it as listed
            return rejection(entry, e.reason, e.detail)
        except storage.StoreUnavailable:  # the network's fault, not the image's: the build stops
            raise
        except Exception as e:  # an answer about the input itself: a rejection with its cause
            where = sources.Source.decode(entry.source).container if entry.source else entry.path
            if gcs.is_transient(e):  # a container's stream that outlasted its reader's retries
                raise gcs.unavailable('reading', where, e) from e
            reason = 'missing_file' if storage.input_missing(where, e) else 'read_error'
            return rejection(entry, reason, f'{type(e).__name__}: {e}')


def _windowed(output):
    """An output of `finish_bundle`, which has no element's window to inherit: the global one."""
    return WindowedValue(output, MIN_TIMESTAMP, [GlobalWindow()])


def _path_to_read(entry, max_bytes):
    return None if entry.reject or entry.size > max_bytes or entry.source else entry.path


class Validated(typing.NamedTuple):
    """ValidateImages' outputs."""

    blocks: beam.PCollection  # block refs of the valid images' ImageMeta (or keyed: see below)
    rejected: beam.PCollection  # rejected.jsonl lines


class ValidateImages(beam.PTransform):
    """Work items -> Validated: blocks of the valid images' ImageMeta, and rejections.

    Args:
        listing_path: the listing file whose byte ranges the work items are.
        settings: the ValidationSettings (pipelines/core/settings.py).
        store: the BlockStore that keeps the blocks.
        rank_groups: an assign.RankGroups: the blocks keyed as AssignShards(keyed=True)
            takes them, with no step between (no --dedup); None: block refs.
        join: the listing's `annotation_join` where the work items come with the blocks of
            their images' annotations (pipelines/inputs/coco_join.py); None: they do not.
        annotation_store: the BlockStore of those blocks (default: `store`).
    """

    def __init__(
        self, listing_path, settings, store, rank_groups=None, join=None, annotation_store=None
    ):
        super().__init__()
        self._fn = _ValidateWorkItem(
            listing_path, settings, store, rank_groups, join, annotation_store
        )

    def expand(self, items):
        outputs = items | 'Decode' >> beam.ParDo(self._fn).with_outputs(REJECTED, main='valid')
        return Validated(outputs.valid, outputs[REJECTED])
