"""A COCO file's annotations joined to its images in the pipeline, not in the launcher: the
launcher lists the images alone (pipelines/inputs/coco.py), and

    work items (ReadListing) -> KeyWorkItems: (first entry id, work item) ------------\\
        first ids (a side input) -> ReadAnnotations: (first entry id, (range, block ref))
        -> GroupByWorkItem -> (work item, [(range, block ref)]) -> ValidateImages, which joins
        each entry's objects to it (`joined_lines`)
    ReadAnnotations' facts (annotations read, those of no image, masks not kept) -> Finalize

One worker streams the file's annotations (a local file, an object store's, an archive's member:
coco.AnnotationFile), finds each one's image by its id (16 bytes an image: coco.image_index),
and puts it, in the readers' form, into a block of the work item that holds its image; blocks
leave whenever SPILL_BYTES of them are held, through a store that spills them to files and
passes byte ranges (pipelines/local/spill.py): the build's on the local runner, whose shuffle
would otherwise hold them in the launching process; on a distributed runner, whose store is
inline, one of files under OUT/.imageshards-tmp/annotations/ (runner.Launch.annotation_store),
so that a work item travels through the shuffles with refs of a few bytes, not with its
images' annotations. A work item's entries are ids contiguous in listing order, so its first
id names it. The objects of an image come out in the file's order, whatever blocks they arrived
in, so records are those of a file joined whole.

A block holds the annotations of one range of RANGE image positions of its work item, and
`joined_lines` reads a range's blocks when the work item's lines reach its images and lets them
go when they pass them: a worker holds one range's annotations, not its work item's. A work item
is usually a line of --chunk-size images, but one of a sequential archive (the images of a
.tar.gz --image-root) is all of them: COCO train's annotations, hundreds of MB of parsed JSON,
would be held whole. The listing gives a work item's entries in position order (coco.py lists
the file's images in order, listing.py writes them as they come); were one out of order, its
range is read again.

A build without masks (--no-masks, or a file whose first annotations have none) keeps the box of
an annotation that has a segmentation; the mask is counted (counts.annotations.masks_not_kept)
and the log says once to build again with --masks.
"""

import json
import logging
import struct
import typing

import apache_beam as beam
import numpy as np

from imageshards import storage
from pipelines.inputs import coco

_LOG = logging.getLogger(__name__)
FACTS = 'annotation_facts'
SPILL_BYTES = 32 << 20  # of blocks a reader holds before they leave
RANGE = 4096  # image positions whose annotations share blocks: what a join holds at once
BATCH = 65_536  # annotations whose images are looked up at once
# A block's records: the position of the annotation's image, the annotation's in the file, and
# the length of its compact JSON, then the JSON (parsed as data: tests/test_untrusted.py).
_RECORD = struct.Struct('<qqI')


class Joined(typing.NamedTuple):
    """JoinAnnotations' outputs."""

    items: beam.PCollection  # (work item, [block refs of its images' annotations])
    facts: beam.PCollection  # one {read, rejected, masks_not_kept}: Finalize's


class JoinAnnotations(beam.PTransform):
    """Work items -> Joined (see the module's docstring).

    Args:
        listing_path: the listing file whose byte ranges the work items are.
        join: the listing's `annotation_join` (coco.py): the file, its categories, masks.
        store: the BlockStore that keeps the annotations' blocks.
    """

    def __init__(self, listing_path, join, store):
        super().__init__()
        self._listing_path, self._join, self._store = listing_path, join, store

    def expand(self, items):
        keyed = items | 'KeyWorkItems' >> beam.Map(_keyed, self._listing_path)
        firsts = beam.pvalue.AsList(keyed | 'FirstIds' >> beam.Keys())
        read = (
            items.pipeline
            | 'AnnotationFile' >> beam.Create([self._join['file']])
            | 'ReadAnnotations'
            >> beam.ParDo(_ReadAnnotations(self._join, self._store), firsts).with_outputs(
                FACTS, main='blocks'
            )
        )
        joined = (
            {'item': keyed, 'blocks': read.blocks}
            | 'GroupByWorkItem' >> beam.CoGroupByKey()
            | 'JoinedWorkItems' >> beam.FlatMap(_joined_items)
        )
        return Joined(joined, read[FACTS])


def _keyed(item, listing_path):
    """(the id of a work item's first entry, the work item): read from the head of its line,
    `[[id, ...` (pipelines/inputs/listing.py writes it so)."""
    start, end = item
    head = storage.read_range(listing_path, start, min(end, start + 64))
    return int(head[2:].split(b',', 1)[0]), tuple(item)


def _joined_items(grouped):
    _, found = grouped
    for item in found['item']:
        yield item, list(found['blocks'])


class _ReadAnnotations(beam.DoFn):
    """The annotation file -> (first id of a work item, (range, block ref of the annotations
    of its images in that range)); to FACTS, what it read."""

    def __init__(self, join, store):
        self._join, self._store = join, store

    def process(self, unused_file, firsts):
        annotations = coco.AnnotationFile.of(self._join)
        firsts = np.array(sorted(firsts), np.int64)
        reading = _Reading(self._join, coco.image_index(annotations), firsts)
        puts = self._store.appender()
        try:
            batch = []
            for item in coco.annotation_items(annotations):
                batch.append(item)
                if len(batch) == BATCH:
                    reading.add(batch)
                    batch = []
                    if reading.held >= SPILL_BYTES:
                        yield from _put(reading.take(), puts)
            reading.add(batch)
            yield from _put(reading.take(), puts)
        finally:
            puts.close()
        yield beam.pvalue.TaggedOutput(FACTS, reading.facts())


def _put(blocks, puts):
    """(first id, (range, ref)) of each block: a small pair of plain data, as refs are."""
    keys = list(blocks)
    refs = puts.put('annotations', [bytes(blocks[key]) for key in keys])
    for (first, number), ref in zip(keys, refs):
        yield first, (number, ref)


class _Reading:
    """What ReadAnnotations holds as it reads: blocks by (work item, range), and its counts."""

    def __init__(self, join, index, firsts):
        self._categories = {category: name for category, name in join['categories']}
        self._masks, self._index, self._firsts = join['masks'], index, firsts
        self._where = join['file']
        self._blocks, self.held = {}, 0
        self._read, self._orphans, self._not_kept = 0, [], 0

    def add(self, batch):
        positions, known = coco.positions(batch, self._index)
        # The first id of the work item holding each image, which keys its work item: not
        # the work item's index, which would give the second work item's objects to none.
        items = np.searchsorted(self._firsts, positions, side='right') - 1
        firsts = self._firsts[items] if len(self._firsts) else items
        for item, position, is_known, first in zip(batch, positions, known, firsts):
            obj = coco.annotation_object(item, self._categories)
            number = self._read
            self._read += 1
            if not is_known:
                self._orphans.append(coco.unknown_image(item, obj))
                continue
            if not self._masks and obj['label'] is not None and ('polygons' in obj or 'rle' in obj):
                self._mask_not_kept(obj)
            data = _compact(obj)
            data = data if len(data) <= coco.MAX_ITEM_BYTES else _compact(coco.too_large(obj))
            key = (int(first), int(position) // RANGE)
            block = self._blocks.get(key)
            if block is None:
                block = self._blocks[key] = bytearray()
            block += _RECORD.pack(int(position), number, len(data))
            block += data
            self.held += _RECORD.size + len(data)

    def _mask_not_kept(self, obj):
        obj.pop('polygons', None)
        obj.pop('rle', None)
        if not self._not_kept:
            _LOG.warning(
                '%s: %s has a mask, and this build keeps boxes only (--no-masks, or none in '
                "the file's first %d annotations): its box is kept, its mask counted in "
                'counts.annotations.masks_not_kept; build again with --masks to keep them',
                self._where,
                obj['ref'],
                coco.PEEK,
            )
        self._not_kept += 1

    def take(self) -> dict:
        blocks, self._blocks, self.held = self._blocks, {}, 0
        return blocks

    def facts(self) -> dict:
        return {'read': self._read, 'rejected': self._orphans, 'masks_not_kept': self._not_kept}


def _compact(value):
    return json.dumps(value, separators=(',', ':')).encode('utf-8')


def joined_lines(lines, refs, join, store):
    """The entries of each line of a work item (`lines`), with the objects of their images
    joined (coco.joined), from the blocks of that work item (`refs`: (range, ref) pairs), read
    a range at a time (see the module's docstring)."""
    by_range = {}
    for number, ref in refs:
        by_range.setdefault(number, []).append(ref)
    held = _RangeHeld(by_range, store)
    classes = {name for _, name in join['categories']}
    for entries in lines:
        yield [coco.joined(entry, held.objects(entry.id), classes) for entry in entries]


class _RangeHeld:
    """The annotations of one range of image positions, read from its blocks when an image of
    it is asked for; those of the range before are let go first."""

    def __init__(self, by_range, store):
        self._by_range, self._store = by_range, store
        self._range, self._by_position = None, {}

    def objects(self, position):
        """The objects of the image at `position`, in the file's order."""
        number = position // RANGE
        if number != self._range:
            self._by_position = {}  # let go before the next range is read
            self._by_position = _by_position(self._by_range.get(number, ()), self._store)
            self._range = number
        found = self._by_position.pop(position, ())
        return [json.loads(data) for _, data in sorted(found, key=lambda pair: pair[0])]


def _by_position(refs, store):
    """{image position: [(annotation's number in the file, its JSON)]} of blocks `refs`."""
    by_position = {}
    for ref in refs:
        block, at = store.get(ref), 0
        while at < len(block):
            position, number, length = _RECORD.unpack_from(block, at)
            at += _RECORD.size
            by_position.setdefault(position, []).append((number, block[at : at + length]))
            at += length
    return by_position
