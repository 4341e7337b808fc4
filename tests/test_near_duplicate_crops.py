"""Cropped copies and --near-duplicates (issue 41): a copy cut 3-8% from each border, or a frame
panned 2-6% from another, must pair with its original, and images that are not near-duplicates,
look-alike cuts of one picture among them, must not. Pairs are what FindNearDuplicates' two
steps join (window hashes met in a band's bucket, thumbnails verified).
bench/near_duplicate_crops.py measures both on held-out photographs (bench/RESULTS.md,
"Cropped near-duplicates")."""

import collections

import apache_beam as beam
import numpy as np

from pipelines.assignment import alignment
from pipelines.assignment import neighbours
from pipelines.core import blocks
from pipelines.core.settings import NEAR_DUPLICATE_DISTANCE
from pipelines.validation import perceptual

import images_for_tests as imgs
from beam_helpers import collect

SIZE = (240, 320)


def _signature(image):
    return perceptual.perceptual_hash(imgs.encode(image, quality=90))


def _cut(image, left, top, right, bottom):
    """`image` with these shares of its width and height cut from each border."""
    width, height = image.size
    box = (round(left * width), round(top * height), width - round(right * width))
    return image.crop((*box, height - round(bottom * height)))


def _joined(tmp_path, *sets):
    """What the build's near-duplicate search (FindNearDuplicates on a TestPipeline) joins of
    each list of images in `sets`, searched together: per list, {frozenset of its indices} of
    every component of two images or more."""
    metas, owner = [], []
    for number, images in enumerate(sets):
        for index, image in enumerate(images):
            meta = blocks.ImageMeta(
                len(metas), f'{len(metas)}.jpg', 0, '', 'jpeg', 1, 1, 1, b'', 0, b'', 0, False
            )
            metas.append(meta._replace(phash=_signature(image)))
            owner.append((number, index))
    store = blocks.BlockStore()

    def build(pipeline):
        refs = pipeline | beam.Create([blocks.pack(metas[:7]), blocks.pack(metas[7:])])
        found = refs | neighbours.FindNearDuplicates(store, NEAR_DUPLICATE_DISTANCE, len(metas))
        return found | beam.FlatMap(lambda packed: neighbours.edges_of(packed).tolist())

    parent = list(range(len(metas)))
    for a, b, _ in collect(build, tmp_path):
        parent[neighbours._root(parent, b)] = neighbours._root(parent, a)  # pylint: disable=protected-access
    components = collections.defaultdict(set)
    for image in range(len(metas)):
        components[neighbours._root(parent, image)].add(image)  # pylint: disable=protected-access
    found = [set() for _ in sets]
    for members in components.values():
        numbers = {owner[m][0] for m in members}
        assert len(numbers) == 1, 'images of two lists joined'
        if len(members) > 1:
            found[numbers.pop()].add(frozenset(owner[m][1] for m in members))
    return found


def test_border_crops_of_3_to_8_percent_pair_with_their_original(tmp_path):
    sets = []
    for index in range(6):
        image = imgs.photo_like(index, SIZE)
        cuts = [
            _cut(image, *shares)
            for shares in ((0.03,) * 4, (0.05,) * 4, (0.08,) * 4, (0.08, 0.08, 0.03, 0.03))
        ]
        cuts[1] = cuts[1].resize(image.size)  # a crop stored at the original's size
        sets.append([image, *cuts])
    assert _joined(tmp_path, *sets) == [{frozenset(range(5))}] * 6


def test_frames_of_a_pan_pair_with_the_next(tmp_path):
    sets = []
    for index in range(4):
        scene = imgs.photo_like(index, (300, 400))
        step, frames = 0.04 * 300, []  # 4% of the frame's width a frame, as a camera pans
        for frame in range(4):
            left = round(20 + frame * step)
            frames.append(scene.crop((left, 20, left + 240, 200)))
        sets.append(frames)
    assert _joined(tmp_path, *sets) == [{frozenset(range(4))}] * 4


def test_unrelated_images_and_look_alike_cuts_do_not_pair(tmp_path):
    images = [imgs.photo_like(index, SIZE) for index in range(16)]
    # One picture cut differently by more than 30%: the same scene, not a near-duplicate.
    cut = [
        [
            image,
            _cut(image, 0.0, 0.0, 0.35, 0.0),  # its left 65%
            _cut(image, 0.35, 0.0, 0.0, 0.0),  # its right 65%
            _cut(image, 0.2, 0.2, 0.2, 0.2),  # its centre 60%, zoomed in
        ]
        for image in images[:6]
    ]
    assert _joined(tmp_path, images[6:], *cut) == [set()] * 7


def test_thumbnails_tell_a_copy_from_a_picture_of_the_same_broad_shapes():
    # Two different pictures of one soft bright glow on dark, as a retina's rim or a night
    # sky: the same low frequencies (their hashes alike), different detail.
    rng = np.random.default_rng(0)
    grid = np.mgrid[0:32, 0:32]
    disc = 120.0 * np.exp(-((grid[0] - 16.0) ** 2 + (grid[1] - 16.0) ** 2) / 128)
    first, second = (np.clip(disc + rng.normal(0, 12, (32, 32)), 0, 255) for _ in range(2))
    whole = perceptual.WINDOWS[0]
    assert not alignment.copies(first, second, whole, whole)
    assert alignment.copies(first, np.clip(first * 1.2 + 5, 0, 255), whole, whole)
    blank = np.full((32, 32), 77.0)
    assert alignment.copies(blank, np.full((32, 32), 200.0), whole, whole)  # as blank images'
    assert not alignment.copies(blank, first, whole, whole)


def test_a_bucket_of_many_alike_images_emits_two_forests_of_links_to_check():
    # 60 images whose ten window hashes are each a bit or two from the others': every pair of
    # images is within the distance, 1,770 pairs, yet the bucket emits two spanning forests.
    rng = np.random.default_rng(0)
    windows_of_one = rng.integers(0, 2**63, 10, dtype=np.int64).astype(np.uint64)
    count = 60
    flips = rng.integers(0, 64, (count, 10)).astype(np.uint64)
    hashes = (windows_of_one[None, :] ^ (np.uint64(1) << flips)).ravel()
    ids = np.repeat(np.arange(count, dtype=np.int64), 10)
    windows = np.tile(np.arange(10, dtype=np.uint8), count)
    links = neighbours.close_pairs(hashes, ids, NEAR_DUPLICATE_DISTANCE, windows)
    pairs = {(a, b) for a, b, *_ in links}
    assert len(pairs) == len(links) == 2 * (count - 1)
    assert all(a < b and window_a == window_b for a, b, _, window_a, window_b in links)
