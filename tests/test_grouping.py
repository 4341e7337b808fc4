"""The pieces of trustworthy splits (tests/test_trusted_splits.py builds with them): the
perceptual hash, the banded search for close hashes, clusters and their cap, groups in the
packed metadata and from a pattern, whole groups placed among splits, and the fill around them."""

import collections

import numpy as np
import pytest

from pipelines.assignment import clusters as cluster_lib
from pipelines.assignment import neighbours
from pipelines.assignment import splits as split_lib
from pipelines.assignment.placement import Unit
from pipelines.assignment.placement import place_units
from pipelines.core import blocks
from pipelines.core.blocks import ImageMeta
from pipelines.core.groups import group_of
from pipelines.validation import perceptual

import images_for_tests as imgs

# -- the perceptual hash and the banded search ---------------------------------------------------


def test_the_hash_keeps_planted_copies_close_and_distinct_images_apart():
    originals = [imgs.photo_like(i) for i in range(12)]
    hashes = [perceptual.perceptual_hash(imgs.encode(image, quality=90)) for image in originals]
    for image, original in zip(originals, hashes):
        for kind, data in imgs.near_duplicates_of(image).items():
            assert perceptual.hamming(perceptual.perceptual_hash(data), original) <= 8, kind
    apart = [perceptual.hamming(a, b) for i, a in enumerate(hashes) for b in hashes[i + 1 :]]
    assert min(apart) > 12


def test_the_hash_of_a_jpeg_drafted_small_equals_the_hash_of_its_png_twin_within_a_few_bits():
    image = imgs.photo_like(3, size=(480, 640))
    jpeg = perceptual.perceptual_hash(imgs.encode(image, quality=95))
    png = perceptual.perceptual_hash(imgs.encode(image, 'PNG'))
    assert perceptual.hamming(jpeg, png) <= 4


@pytest.mark.parametrize('distance', [0, 3, 8, 12])
def test_bands_find_every_pair_within_the_distance(distance):
    rng = np.random.default_rng(distance)
    hashes = rng.integers(0, 2**63, 400, dtype=np.int64).astype(np.uint64) * np.uint64(2)
    for i in range(0, 400, 5):  # plant a neighbour of every fifth hash, 1..distance+2 bits away
        flips = rng.choice(64, int(rng.integers(1, distance + 3)), replace=False)
        hashes[i + 1] = hashes[i] ^ np.uint64(sum(1 << int(b) for b in flips))
        hashes[i + 2] = hashes[i] if i % 10 == 0 else hashes[i + 2]  # byte copies, blank images
    ids = np.arange(len(hashes), dtype=np.int64)
    edges = []
    for shift, width in neighbours.band_layout(distance):
        values = neighbours.band_values(hashes, shift, width)
        for value in np.unique(values):
            picked = np.flatnonzero(values == value)
            if len(picked) > 1:
                edges += neighbours.close_pairs(hashes[picked], ids[picked], distance)
    packed = np.array(edges, dtype=neighbours._EDGE).tobytes()  # pylint: disable=protected-access
    found = cluster_lib.make_clusters([packed], len(hashes), max_cluster_size=len(hashes))
    want = cluster_lib.make_clusters([_brute_force(hashes, distance)], len(hashes), len(hashes))
    assert found.cluster_of == want.cluster_of
    assert want.cluster_of  # the planted pairs within the distance are there to find


def _brute_force(hashes, distance):
    pairs = [
        (i, j, (int(hashes[i]) ^ int(hashes[j])).bit_count())
        for i in range(len(hashes))
        for j in range(i + 1, len(hashes))
        if (int(hashes[i]) ^ int(hashes[j])).bit_count() <= distance
    ]
    return np.array(pairs, dtype=neighbours._EDGE).tobytes()  # pylint: disable=protected-access


def test_a_cluster_over_the_cap_is_capped_and_kept_by_no_split():
    edges = [(0, i, 0) for i in range(1, 30)] + [(40, 41, 3)]
    packed = np.array(edges, dtype=neighbours._EDGE).tobytes()  # pylint: disable=protected-access
    found = cluster_lib.make_clusters([packed], 1000, max_cluster_size=20)
    assert found.sizes == {0: 30, 40: 2} and found.capped == {0}
    assert found.kept(5) == -1 and found.kept(41) == 40


# -- metadata, groups, placement -----------------------------------------------------------------


def test_a_group_and_a_hash_survive_packing_and_an_image_without_them_packs_as_before():
    plain = ImageMeta(3, 'a/x.jpg', 1, '', 'jpeg', 10, 12, 3, b'd' * 32, 100, b'', 7, False)
    both = plain._replace(group='patient ü 7', phash=2**64 - 1)
    assert blocks.unpack(blocks.pack([plain, both])) == [plain, both]
    assert len(blocks.pack([both])) > len(blocks.pack([plain]))
    assert blocks.pack([plain._replace(group='', phash=-1)]) == blocks.pack([plain])


def test_a_row_group_wins_over_the_pattern_and_the_named_group_over_the_first():
    pattern = r'(scan)_(?P<group>p\d+)_'
    assert group_of('cat/scan_p042_01.jpg', '', pattern) == 'p042'
    assert group_of('cat/scan_p042_01.jpg', 'own', pattern) == 'own'
    assert group_of('cat/other.jpg', '', pattern) == ''
    assert group_of('clinic/p7/a.jpg', '', r'^[^/]+/([^/]+)/') == 'p7'


def test_whole_groups_are_placed_near_their_shares_rare_labels_first():
    sizes = [1, 1, 2, 3, 5, 8, 13, 1, 2, 4, 6, 1, 1, 3, 2, 9, 1, 1, 2, 4]
    units = [Unit(f'g{i}', n, {i % 3: n}, '') for i, n in enumerate(sizes)]
    units.append(Unit('rare', 3, {'rare': 3}, ''))
    placed = place_units(units, (('train', 0.6), ('val', 0.2), ('test', 0.2)), seed=1)
    assert placed == place_units(units, (('train', 0.6), ('val', 0.2), ('test', 0.2)), seed=1)
    totals = collections.Counter()
    for unit in units:
        totals[placed[unit.key]] += unit.size
    whole = sum(totals.values())
    assert abs(totals['train'] - 0.6 * whole) <= 13  # within the largest group
    assert set(placed.values()) == {'train', 'val', 'test'}


def test_fill_brings_each_class_with_what_is_placed_to_its_shares():
    placed = [[0, 10, 0], [6, 0, 0]]  # class 0: 10 already in val; class 1: 6 in train
    rows = split_lib.fill_split_counts([40, 14], placed, [0.6, 0.2, 0.2])
    assert [sum(row) for row in rows] == [40, 14]
    assert rows[0] == [30, 0, 10]  # val holds its 10 of 50 already
    assert rows[1][0] == 6 and abs(rows[1][1] - rows[1][2]) <= 1  # train 12 of 20
