"""FindNearDuplicates: the pairs of images whose perceptual hashes differ in at most `distance`
bits (pipelines/validation/perceptual.py), found without comparing every image with every other.

An image with a signature (every image of a build today) is indexed by the hashes of its ten
windows (the whole image and nine 90% windows), so that a crop or a panned frame meets its
original where one window of each agrees. Such a pair is a link to check: it joins only where
the images' thumbnails, aligned from the windows that met, say they are copies (pipelines/
assignment/alignment.py). The check happens after the buckets, in CheckLinks, where each
image's thumbnail is joined by its id once, so that the buckets carry 17 bytes per window hash
and never a thumbnail. An image with a bare 64-bit hash is indexed by it alone and joined on the
hash alone.

The 64 bits are cut into `distance + 1` bands. Two hashes that differ in at most `distance` bits
differ in at most that many bands, so at least one band is equal in both (the pigeonhole
principle): images are grouped by (band, the band's value), and only images of one such bucket
are compared, with numpy, a block of rows against the rest at a time. No pair within the
distance is missed, and every pair found is checked on all 64 bits.

What moves is blocks, as everywhere between validation and writing: each block of metadata
becomes, per band, a few packed arrays of (hash, image id, window), keyed by the band and the
top `key_bits` of its value, so that the shuffle carries a few elements per block instead of one
per image and band. A bucket's images with the same hash (byte copies, blank images) are linked
to the first of them and compared once; of the pairs within the distance a bucket finds, only
those that join images not yet joined in it leave it (a spanning forest of its pairs, closest
first), so that a bucket of many mutually close images (a hot bucket) costs time, never memory
or output. Where the links are still to be checked, a bucket emits two edge-disjoint forests
(a link joins the first forest where its images are apart): where a link fails its check,
another path through the bucket usually remains, and a bucket of n images still emits fewer
than 2n links.
docs/scaling.md works out the buckets, hot buckets and memory at 100 million images.
"""

import math

import apache_beam as beam
import numpy as np

from pipelines.assignment import alignment
from pipelines.core import blocks
from pipelines.validation import perceptual
from pipelines.validation.perceptual import HASH_BITS

# Pairs of a bucket compared at once: a block of rows against the rest, at most this many cells.
_CELLS = 1 << 22
_EDGE = np.dtype([('a', '<i8'), ('b', '<i8'), ('distance', '<i8')])
# A link a bucket found, still to be checked: two images, their window hashes' distance and the
# windows (indices into perceptual.WINDOWS; BARE for a bare hash). 19 bytes.
LINK = np.dtype(
    [('a', '<i8'), ('b', '<i8'), ('distance', 'u1'), ('window_a', 'u1'), ('window_b', 'u1')]
)
BARE = 255
_LAYERS = 2  # edge-disjoint forests of links a bucket of window hashes emits


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
    """Block ref -> ((band, key), (hashes, ids, windows) as packed bytes) per band and key in the
    block: an entry per window hash (17 bytes), never a thumbnail."""

    def __init__(self, store, layout, key_bits):
        self._store, self._layout, self._key_bits = store, layout, key_bits

    def process(self, ref):
        hashes, ids, windows = _entries(blocks.unpack(self._store.get(ref)))
        for band, (shift, width) in enumerate(self._layout):
            keys = band_values(hashes, shift, width) >> np.uint64(max(0, width - self._key_bits))
            order = np.argsort(keys, kind='stable')
            for picked in np.split(order, np.flatnonzero(np.diff(keys[order])) + 1):
                value = (hashes[picked].tobytes(), ids[picked].tobytes(), windows[picked].tobytes())
                yield (band, int(keys[picked[0]])), value


def _entries(metas):
    """(hashes, ids, windows) of every window hash of `metas`; a bare hash's window is BARE."""
    hashes, ids, windows = [], [], []
    for meta in metas:
        found, _ = perceptual.parts(meta.phash)
        hashes.append(found)
        ids.append(np.full(len(found), meta.id, np.int64))
        windows.append(np.arange(len(found), dtype=np.uint8) if len(found) > 1 else [BARE])
    if not metas:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.uint8)
    return np.concatenate(hashes), np.concatenate(ids), np.concatenate(windows).astype(np.uint8)


class _LinksInBuckets(beam.DoFn):
    """((band, key), [(hashes, ids, windows)]) -> the packed links (LINK) its buckets find."""

    def __init__(self, layout, distance):
        self._layout, self._distance = layout, distance

    def process(self, grouped):
        (band, _), parts = grouped
        hashes = np.concatenate([np.frombuffer(part[0], np.uint64) for part in parts])
        ids = np.concatenate([np.frombuffer(part[1], np.int64) for part in parts])
        windows = np.concatenate([np.frombuffer(part[2], np.uint8) for part in parts])
        values = band_values(hashes, *self._layout[band])
        order = np.lexsort((windows, ids, values))
        hashes, ids, windows, values = hashes[order], ids[order], windows[order], values[order]
        links = []
        bounds = np.flatnonzero(np.diff(values)) + 1
        for start, end in zip(np.append(0, bounds), np.append(bounds, len(values))):
            if end - start > 1:
                picked = slice(start, end)
                links += close_pairs(
                    hashes[picked],
                    ids[picked],
                    self._distance,
                    windows[picked],
                    self._layout[:band],
                )
        if links:
            yield np.array(links, dtype=LINK).tobytes()


def keyed_links(packed):
    """(a, (b, distance, window of a, window of b)) of each link of a packed element of
    _LinksInBuckets, a < b: what alignment.CheckLinks takes."""
    for a, b, apart, window_a, window_b in np.frombuffer(packed, dtype=LINK).tolist():
        yield a, (b, apart, window_a, window_b)


def close_pairs(hashes, ids, distance, windows=None, earlier=()) -> list:
    """[(a, b, bits apart)] of images (`ids`, ascending) whose `hashes` are within `distance`:
    each image with the hash of an earlier one joined to the first of them (0 apart), and a
    spanning forest of the distinct hashes within the distance, closest pairs first.

    With `windows` (the hashes are of windows, several per image, each still to be checked by
    alignment.CheckLinks): [(a, b, bits apart, window of a, window of b)], a < b, of _LAYERS
    edge-disjoint forests (one where every entry is BARE), each image pair with up to
    alignment.TRIES of its window pairs; pairs equal in a band of `earlier` are left to it.
    """
    distinct, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    firsts = ids[first]
    links = _Links(ids, windows)
    if not earlier:  # equal hashes are equal in the first band
        for i in np.flatnonzero(ids != firsts[inverse]).tolist():
            links.add(first[inverse[i]], i, 0)
    rows = max(1, _CELLS // len(distinct))
    for top in range(0, len(distinct) - 1, rows):
        block = distinct[top : top + rows, None] ^ distinct[None, top:]
        apart = np.bitwise_count(block)
        apart[np.tril_indices(len(block), 0, apart.shape[1])] = HASH_BITS + 1  # j <= i
        i, j = np.nonzero(apart <= distance)
        i, j = _first_met(distinct, top + i, j, earlier)
        found = apart[i - top, j]
        for k in np.argsort(found, kind='stable').tolist():
            links.add(first[i[k]], first[j[k]], int(found[k]))
    return links.found


def _first_met(distinct, i, j, earlier):
    """The pairs (i, j) of distinct hashes that are not equal in a band of `earlier`."""
    keep = np.ones(len(i), bool)
    for shift, width in earlier:
        keep &= band_values(distinct[i], shift, width) != band_values(distinct[j], shift, width)
    return i[keep], j[keep]


class _Links:
    """The links of one bucket, closest first. Of bare hashes, a spanning forest: the hashes
    decide. Of window hashes, where each link is only a candidate until its thumbnails are
    checked (after the bucket, where each thumbnail is at hand once), _LAYERS edge-disjoint
    forests: a link joins the first forest in which its images are apart, so that where a link
    fails its check another path usually remains, and a bucket of n images still emits fewer
    than _LAYERS * n image pairs (each with up to alignment.TRIES window pairs)."""

    def __init__(self, ids, windows):
        self._ids, self._windows, self.found, self._tries = ids, windows, [], {}
        bare = windows is None or bool((windows == BARE).all())
        self._forests = [{} for _ in range(1 if bare else _LAYERS)]

    def add(self, p, q, apart):
        """Adds the link of entries p and q (indices into the bucket) where it joins a forest."""
        a, b = int(self._ids[p]), int(self._ids[q])
        if self._windows is None:
            if self._join(self._forests[0], a, b):
                self.found.append((a, b, apart))
            return
        if a == b:
            return
        pair = (a, b) if a < b else (b, a)
        tries = self._tries.get(pair, 0)
        if tries >= alignment.TRIES or not (
            tries or any(self._join(f, a, b) for f in self._forests)
        ):
            return
        self._tries[pair] = tries + 1
        windows = (int(self._windows[p]), int(self._windows[q]))
        self.found.append((*pair, apart, *(windows if a < b else windows[::-1])))

    @staticmethod
    def _join(parent, a, b) -> bool:
        a_root, b_root = _root_of(parent, a), _root_of(parent, b)
        if a_root == b_root:
            return False
        parent[max(a_root, b_root)] = min(a_root, b_root)
        return True


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
    whose hashes (of a window of each) are within `distance` and whose thumbnails say they are
    copies (`edges_of` reads one). Of bare hashes, every pair within `distance` is joined by a
    chain of them; of signatures, the pairs checked are those of two spanning forests per bucket.

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
        links = (
            refs
            | 'KeyByBand' >> beam.ParDo(_KeyByBand(self._store, self._layout, self._key_bits))
            # ((band, top bits of its value), (hashes, ids, windows))
            | 'GroupByBand' >> beam.GroupByKey()
            | 'LinksInBuckets' >> beam.ParDo(_LinksInBuckets(self._layout, self._distance))
            # packed LINK records
            | 'KeyByFirst' >> beam.FlatMap(keyed_links)
        )
        # (a, (b, distance, window of a, window of b))
        return (
            (refs, links)
            | 'CheckLinks' >> alignment.CheckLinks(self._store)
            # [(a, b, distance)] of the links of copies, per image b
            | 'PackEdges' >> beam.Map(lambda edges: np.array(edges, dtype=_EDGE).tobytes())
        )
