"""FindNearDuplicates: the pairs of images whose perceptual hashes differ in at most `distance`
bits (pipelines/validation/perceptual.py), found without comparing every image with every other.

An image with a signature (every image of a build today) is indexed by the hashes of its ten
windows (the whole image and nine 90% windows), so that a crop or a panned frame meets its
original where one window of each agrees; such a pair is joined only where the images'
thumbnails, aligned from the windows that met, say they are copies (pipelines/assignment/
alignment.py), before it can take the place of another pair in the forest below. An image with
a bare 64-bit hash is indexed by it alone and joined on the hash alone.

The 64 bits are cut into `distance + 1` bands. Two hashes that differ in at most `distance` bits
differ in at most that many bands, so at least one band is equal in both (the pigeonhole
principle): images are grouped by (band, the band's value), and only images of one such bucket
are compared, with numpy, a block of rows against the rest at a time. No pair within the
distance is missed, and every pair found is checked on all 64 bits.

What moves is blocks, as everywhere between validation and writing: each block of metadata
becomes, per band, a few packed arrays of (hash, image id), keyed by the band and the top
`key_bits` of its value, so that the shuffle carries a few elements per block instead of one
per image and band. A bucket's images with the same hash (byte copies, blank images) are joined
to the first of them and compared once; of the pairs within the distance a bucket finds, only
those that join images not yet joined in it leave it (a spanning forest of its pairs), so that
a bucket of many mutually close images (a hot bucket) costs time, never memory or output.
docs/scaling.md works out the buckets, hot buckets and memory at 100 million images.
"""

import math
import typing

import apache_beam as beam
import numpy as np

from pipelines.assignment import alignment
from pipelines.core import blocks
from pipelines.validation import perceptual
from pipelines.validation.perceptual import HASH_BITS

# Pairs of a bucket compared at once: a block of rows against the rest, at most this many cells.
_CELLS = 1 << 22
_EDGE = np.dtype([('a', '<i8'), ('b', '<i8'), ('distance', '<i8')])


def band_layout(distance) -> tuple:
    """((shift, width), ...) of the `distance + 1` bands of a hash, widths as equal as they can
    be, the first band the highest bits."""
    count = distance + 1
    widths = [HASH_BITS // count + (band < HASH_BITS % count) for band in range(count)]
    layout, shift = [], HASH_BITS
    for width in widths:
        shift -= width
        layout.append((shift, width))
    return tuple(layout)


def key_bits_for(num_images, target=20_000) -> int:
    """Bits of a band's value that key the shuffle: about `target` images a key, at least 16
    keys a band (a band of fewer bits keys by all of them)."""
    return max(4, math.ceil(math.log2(max(num_images, 1) / target)))


def band_values(hashes, shift, width):
    """The band of each hash (a uint64 array), as uint64."""
    return (hashes >> np.uint64(shift)) & np.uint64((1 << width) - 1)


class _KeyByBand(beam.DoFn):
    """Block ref -> ((band, key), (hashes, ids, windows, signed ids, signatures) as packed
    bytes) per band and key in the block: an entry per window hash, and once per image of the
    key its signature (the thumbnail that verifies its pairs)."""

    def __init__(self, store, layout, key_bits):
        self._store, self._layout, self._key_bits = store, layout, key_bits

    def process(self, ref):
        hashes, ids, windows, signatures = _entries(blocks.unpack(self._store.get(ref)))
        for band, (shift, width) in enumerate(self._layout):
            keys = band_values(hashes, shift, width) >> np.uint64(max(0, width - self._key_bits))
            order = np.argsort(keys, kind='stable')
            for picked in np.split(order, np.flatnonzero(np.diff(keys[order])) + 1):
                signed = np.array([i for i in np.unique(ids[picked]) if i in signatures], np.int64)
                value = (
                    hashes[picked].tobytes(),
                    ids[picked].tobytes(),
                    windows[picked].tobytes(),
                    signed.tobytes(),
                    b''.join(signatures[i] for i in signed.tolist()),
                )
                yield (band, int(keys[picked[0]])), value


def _entries(metas):
    """(hashes, ids, windows) of every window hash of `metas`, and {id: signature bytes} of
    those with a signature."""
    hashes, ids, windows, signatures = [], [], [], {}
    for meta in metas:
        found, _ = perceptual.parts(meta.phash)
        hashes.append(found)
        ids.append(np.full(len(found), meta.id, np.int64))
        windows.append(np.arange(len(found), dtype=np.uint8))
        if len(found) > 1:
            signatures[meta.id] = meta.phash.to_bytes(perceptual.SIGNATURE_BYTES, 'big')
    if not metas:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.uint8), {}
    return np.concatenate(hashes), np.concatenate(ids), np.concatenate(windows), signatures


class _PairsInBuckets(beam.DoFn):
    """((band, key), [(hashes, ids, windows, signed ids, signatures)]) -> the packed edges
    (a, b, distance) its buckets join."""

    def __init__(self, layout, distance):
        self._layout, self._distance = layout, distance

    def process(self, grouped):
        (band, _), parts = grouped
        hashes = np.concatenate([np.frombuffer(part[0], np.uint64) for part in parts])
        ids = np.concatenate([np.frombuffer(part[1], np.int64) for part in parts])
        windows = np.concatenate([np.frombuffer(part[2], np.uint8) for part in parts])
        thumbnails = _thumbnails(parts)
        values = band_values(hashes, *self._layout[band])
        order = np.lexsort((windows, ids, values))
        hashes, ids, windows, values = hashes[order], ids[order], windows[order], values[order]
        edges = []
        bounds = np.flatnonzero(np.diff(values)) + 1
        for start, end in zip(np.append(0, bounds), np.append(bounds, len(values))):
            if end - start > 1:
                picked = slice(start, end)
                edges += close_pairs(
                    hashes[picked],
                    ids[picked],
                    self._distance,
                    Evidence(windows[picked], thumbnails, self._layout[:band]),
                )
        if edges:
            yield np.array(edges, dtype=_EDGE).tobytes()


def _thumbnails(parts) -> dict:
    """{id: thumbnail} of the signed images of a bucket's parts."""
    found = {}
    for part in parts:
        signed = np.frombuffer(part[3], np.int64)
        for index, image_id in enumerate(signed.tolist()):
            if image_id not in found:
                size = perceptual.SIGNATURE_BYTES
                signature = int.from_bytes(part[4][index * size : (index + 1) * size], 'big')
                found[image_id] = perceptual.parts(signature)[1]
    return found


class Evidence(typing.NamedTuple):
    """What verifies a bucket's pairs of window hashes: each entry's window (an index into
    perceptual.WINDOWS), {image id: thumbnail} of the images with a signature, and the bands
    before the bucket's (a pair equal in one of them is that band's bucket's to join)."""

    windows: np.ndarray
    thumbnails: dict
    earlier: tuple = ()


def close_pairs(hashes, ids, distance, evidence=None) -> list:
    """[(a, b, bits apart)] of images (`ids`, ascending) whose `hashes` are within `distance`:
    each image with the hash of an earlier one joined to the first of them (0 apart), and a
    spanning forest of the distinct hashes within the distance, closest pairs first. With
    `evidence` (the hashes are of windows, several per image), a pair joins only where its
    thumbnails say it is of copies."""
    distinct, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    firsts = ids[first]
    joins = _Joins(evidence)
    if evidence is None or not evidence.earlier:  # equal hashes are equal in the first band
        for i in np.flatnonzero(ids != firsts[inverse]).tolist():
            joins.join(first[inverse[i]], i, 0, ids)
    rows = max(1, _CELLS // len(distinct))
    for top in range(0, len(distinct) - 1, rows):
        block = distinct[top : top + rows, None] ^ distinct[None, top:]
        apart = np.bitwise_count(block)
        apart[np.tril_indices(len(block), 0, apart.shape[1])] = HASH_BITS + 1  # j <= i
        i, j = np.nonzero(apart <= distance)
        i, j = _first_met(distinct, top + i, j, evidence)
        found = apart[i - top, j]
        for k in np.argsort(found, kind='stable').tolist():
            joins.join(first[i[k]], first[j[k]], int(found[k]), ids)
    return joins.edges


def _first_met(distinct, i, j, evidence):
    """The pairs (i, j) of distinct hashes that are not equal in a band before this one."""
    if evidence is None:
        return i, j
    keep = np.ones(len(i), bool)
    for shift, width in evidence.earlier:
        keep &= band_values(distinct[i], shift, width) != band_values(distinct[j], shift, width)
    return i[keep], j[keep]


class _Joins:
    """The forest of one bucket's pairs of images; with `evidence`, each pair verified before
    it joins (once: a pair rejected is not tried again through other windows)."""

    def __init__(self, evidence):
        self.edges, self._evidence, self._rejected, self._parent = [], evidence, set(), {}

    def join(self, p, q, apart, ids):
        """Joins the images of entries p and q (indices into the bucket) where they are not
        joined yet."""
        a, b = int(ids[p]), int(ids[q])
        a_root, b_root = _root_of(self._parent, a), _root_of(self._parent, b)
        if a_root == b_root or (min(a, b), max(a, b)) in self._rejected:
            return
        if self._evidence is not None and not self._copies(p, q, a, b):
            self._rejected.add((min(a, b), max(a, b)))
            return
        self._parent[max(a_root, b_root)] = min(a_root, b_root)
        self.edges.append((a, b, apart))

    def _copies(self, p, q, a, b):
        thumbnails, windows = self._evidence.thumbnails, self._evidence.windows
        if a not in thumbnails or b not in thumbnails:  # a bare hash: the hash decides
            return True
        window_a = perceptual.WINDOWS[windows[p]]
        return alignment.copies(
            thumbnails[a], thumbnails[b], window_a, perceptual.WINDOWS[windows[q]]
        )


def _root_of(parent, node):
    parent.setdefault(node, node)
    return _root(parent, node)


def _root(parent, node):
    while parent[node] != node:
        parent[node] = parent[parent[node]]
        node = parent[node]
    return node


def edges_of(packed) -> np.ndarray:
    """The (a, b, distance) records of one packed element of FindNearDuplicates."""
    return np.frombuffer(packed, dtype=_EDGE)


class FindNearDuplicates(beam.PTransform):
    """Block refs of ImageMeta with perceptual hashes -> packed edges (a, b, distance): image ids
    whose hashes are within `distance`, every such pair joined by a chain of them (`edges_of`
    reads one).

    Args:
        store: the BlockStore that keeps the blocks.
        distance: the most bits apart two near-duplicates' hashes are.
        num_images: about how many images there are (it sets how finely buckets are keyed).
    """

    def __init__(self, store, distance, num_images):
        super().__init__()
        self._store = store
        self._layout = band_layout(distance)
        self._distance = distance
        self._key_bits = key_bits_for(num_images)

    def expand(self, refs):
        return (
            refs
            | 'KeyByBand' >> beam.ParDo(_KeyByBand(self._store, self._layout, self._key_bits))
            # ((band, top bits of its value), (hashes, ids))
            | 'GroupByBand' >> beam.GroupByKey()
            | 'PairsInBuckets' >> beam.ParDo(_PairsInBuckets(self._layout, self._distance))
        )
