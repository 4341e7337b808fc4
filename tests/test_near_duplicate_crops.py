"""Cropped copies and --near-duplicates (issue 41): a copy cut 3-8% from each border, or a frame
panned 2-6% from another, must pair with its original, and images that are not near-duplicates,
look-alike cuts of one picture among them, must not. Pairs are what FindNearDuplicates' two
steps join (window hashes met in a band's bucket, thumbnails verified).
bench/near_duplicate_crops.py measures both on held-out photographs (bench/RESULTS.md,
"Cropped near-duplicates")."""

import collections

import numpy as np

from pipelines.assignment import alignment
from pipelines.assignment import neighbours
from pipelines.core import blocks
from pipelines.core.settings import NEAR_DUPLICATE_DISTANCE
from pipelines.validation import perceptual

import images_for_tests as imgs

SIZE = (240, 320)


def _signature(image):
    return perceptual.perceptual_hash(imgs.encode(image, quality=90))


def _cut(image, left, top, right, bottom):
    """`image` with these shares of its width and height cut from each border."""
    width, height = image.size
    box = (round(left * width), round(top * height), width - round(right * width))
    return image.crop((*box, height - round(bottom * height)))


def _joined(images):
    """The pairs (i, j) of `images` that the build's near-duplicate search joins, as sets of
    components: {frozenset of indices} of every component of two images or more."""
    # pylint: disable=protected-access
    metas = [
        blocks.ImageMeta(i, f'{i}.jpg', 0, '', 'jpeg', 1, 1, 1, b'', 0, b'', 0, False)._replace(
            phash=_signature(image)
        )
        for i, image in enumerate(images)
    ]
    layout = neighbours.band_layout(NEAR_DUPLICATE_DISTANCE)
    keyed = neighbours._KeyByBand(blocks.BlockStore(), layout, 4)
    buckets = collections.defaultdict(list)
    for key, value in keyed.process(blocks.pack(metas)):
        buckets[key].append(value)
    parent = list(range(len(images)))
    pairs = neighbours._PairsInBuckets(layout, NEAR_DUPLICATE_DISTANCE)
    for grouped in buckets.items():
        for packed in pairs.process(grouped):
            for a, b, _ in neighbours.edges_of(packed).tolist():
                parent[neighbours._root(parent, b)] = neighbours._root(parent, a)
    components = collections.defaultdict(set)
    for i in range(len(images)):
        components[neighbours._root(parent, i)].add(i)
    return {frozenset(c) for c in components.values() if len(c) > 1}


def test_border_crops_of_3_to_8_percent_pair_with_their_original():
    for index in range(6):
        image = imgs.photo_like(index, SIZE)
        cuts = [
            _cut(image, *shares)
            for shares in ((0.03,) * 4, (0.05,) * 4, (0.08,) * 4, (0.08, 0.08, 0.03, 0.03))
        ]
        cuts[1] = cuts[1].resize(image.size)  # a crop stored at the original's size
        assert _joined([image, *cuts]) == {frozenset(range(5))}, index


def test_frames_of_a_pan_pair_with_the_next():
    for index in range(4):
        scene = imgs.photo_like(index, (300, 400))
        step, frames = 0.04 * 300, []  # 4% of the frame's width a frame, as a camera pans
        for frame in range(4):
            left = round(20 + frame * step)
            frames.append(scene.crop((left, 20, left + 240, 200)))
        assert _joined(frames) == {frozenset(range(4))}, index


def test_unrelated_images_and_look_alike_cuts_do_not_pair():
    images = [imgs.photo_like(index, SIZE) for index in range(16)]
    assert _joined(images) == set()
    # One picture cut differently by more than 30%: the same scene, not a near-duplicate.
    for image in images[:6]:
        cuts = [
            _cut(image, 0.0, 0.0, 0.35, 0.0),  # its left 65%
            _cut(image, 0.35, 0.0, 0.0, 0.0),  # its right 65%
            _cut(image, 0.2, 0.2, 0.2, 0.2),  # its centre 60%, zoomed in
        ]
        assert _joined([image, *cuts]) == set()


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
