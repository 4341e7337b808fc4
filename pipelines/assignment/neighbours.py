"""FindNearDuplicates: the pairs of images whose perceptual hashes differ in at most `distance`
bits (pipelines/validation/perceptual.py), found without comparing every image with every other.

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

import apache_beam as beam
import numpy as np

from pipelines.core import blocks
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
    """Block ref -> ((band, key), (hashes, ids) as packed bytes) per band and key in the block."""

    def __init__(self, store, layout, key_bits):
        self._store, self._layout, self._key_bits = store, layout, key_bits

    def process(self, ref):
        metas = blocks.unpack(self._store.get(ref))
        hashes = np.fromiter((meta.phash for meta in metas), np.uint64, len(metas))
        ids = np.fromiter((meta.id for meta in metas), np.int64, len(metas))
        for band, (shift, width) in enumerate(self._layout):
            keys = band_values(hashes, shift, width) >> np.uint64(max(0, width - self._key_bits))
            order = np.argsort(keys, kind='stable')
            for picked in np.split(order, np.flatnonzero(np.diff(keys[order])) + 1):
                value = (hashes[picked].tobytes(), ids[picked].tobytes())
                yield (band, int(keys[picked[0]])), value


class _PairsInBuckets(beam.DoFn):
    """((band, key), [(hashes, ids)]) -> the packed edges (a, b, distance) its buckets join."""

    def __init__(self, layout, distance):
        self._layout, self._distance = layout, distance

    def process(self, grouped):
        (band, _), parts = grouped
        hashes = np.concatenate([np.frombuffer(h, np.uint64) for h, _ in parts])
        ids = np.concatenate([np.frombuffer(i, np.int64) for _, i in parts])
        values = band_values(hashes, *self._layout[band])
        order = np.lexsort((ids, values))
        hashes, ids, values = hashes[order], ids[order], values[order]
        edges = []
        bounds = np.flatnonzero(np.diff(values)) + 1
        for start, end in zip(np.append(0, bounds), np.append(bounds, len(values))):
            if end - start > 1:
                edges += close_pairs(hashes[start:end], ids[start:end], self._distance)
        if edges:
            yield np.array(edges, dtype=_EDGE).tobytes()


def close_pairs(hashes, ids, distance) -> list:
    """[(a, b, bits apart)] of images (`ids`, ascending) whose `hashes` are within `distance`:
    each image with the hash of an earlier one joined to the first of them (0 apart), and a
    spanning forest of the distinct hashes within the distance, closest pairs first."""
    distinct, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    firsts = ids[first]
    edges = [
        (int(firsts[inverse[i]]), int(ids[i]), 0) for i in np.flatnonzero(ids != firsts[inverse])
    ]
    parent = list(range(len(distinct)))
    rows = max(1, _CELLS // len(distinct))
    for top in range(0, len(distinct) - 1, rows):
        block = distinct[top : top + rows, None] ^ distinct[None, top:]
        apart = np.bitwise_count(block)
        apart[np.tril_indices(len(block), 0, apart.shape[1])] = HASH_BITS + 1  # j <= i
        i, j = np.nonzero(apart <= distance)
        found = apart[i, j]
        for k in np.argsort(found, kind='stable'):
            a, b = _root(parent, top + int(i[k])), _root(parent, top + int(j[k]))
            if a != b:
                parent[max(a, b)] = min(a, b)
                edges.append((int(firsts[top + i[k]]), int(firsts[top + j[k]]), int(found[k])))
    return edges


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
