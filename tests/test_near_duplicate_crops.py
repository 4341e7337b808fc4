"""Cropped copies and --near-duplicates (issue 41): a copy cut 3-8% from each border must pair
with its original, and images that are not near-duplicates, look-alike cuts of one picture
among them, must not. bench/near_duplicate_crops.py measures both on held-out photographs
(bench/RESULTS.md, "Cropped near-duplicates")."""

import pytest

from pipelines.core.settings import NEAR_DUPLICATE_DISTANCE
from pipelines.validation import perceptual

import images_for_tests as imgs

SIZE = (240, 320)


def _hash(image):
    return perceptual.perceptual_hash(imgs.encode(image, quality=90))


def _cut(image, left, top, right, bottom):
    """`image` with these shares of its width and height cut from each border."""
    width, height = image.size
    box = (round(left * width), round(top * height), width - round(right * width))
    return image.crop((*box, height - round(bottom * height)))


@pytest.mark.xfail(
    strict=True,
    reason='issue 41: a border crop of 5-8% moves the 64-bit DCT hash 10 bits or more (measured in '
    'bench/RESULTS.md, "Cropped near-duplicates"); the hash does not find crops yet',
)
def test_border_crops_of_3_to_8_percent_pair_with_their_original():
    far = []
    for index in range(6):
        image = imgs.photo_like(index, SIZE)
        original = _hash(image)
        for shares in ((0.03,) * 4, (0.05,) * 4, (0.08,) * 4, (0.08, 0.08, 0.03, 0.03)):
            apart = perceptual.hamming(original, _hash(_cut(image, *shares)))
            if apart > NEAR_DUPLICATE_DISTANCE:
                far.append((index, shares, apart))
    assert not far


def test_a_border_crop_of_3_percent_pairs_with_its_original():
    for index in range(6):
        image = imgs.photo_like(index, SIZE)
        cut = _cut(image, 0.03, 0.03, 0.03, 0.03)
        assert perceptual.hamming(_hash(image), _hash(cut)) <= NEAR_DUPLICATE_DISTANCE, index


def test_unrelated_images_and_look_alike_cuts_do_not_pair():
    images = [imgs.photo_like(index, SIZE) for index in range(16)]
    hashes = [_hash(image) for image in images]
    apart = [perceptual.hamming(a, b) for i, a in enumerate(hashes) for b in hashes[i + 1 :]]
    assert min(apart) > NEAR_DUPLICATE_DISTANCE
    # One picture cut differently by more than 30%: the same scene, not a near-duplicate.
    for image in images[:6]:
        cuts = [
            _cut(image, 0.0, 0.0, 0.35, 0.0),  # its left 65%
            _cut(image, 0.35, 0.0, 0.0, 0.0),  # its right 65%
            _cut(image, 0.2, 0.2, 0.2, 0.2),  # its centre 60%, zoomed in
        ]
        found = [_hash(image)] + [_hash(cut) for cut in cuts]
        for i, a in enumerate(found):
            for b in found[i + 1 :]:
                assert perceptual.hamming(a, b) > NEAR_DUPLICATE_DISTANCE
