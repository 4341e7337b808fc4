"""A perceptual hash of every valid image, for --near-duplicates: 64 bits that a re-encode, a
downscale, a small crop, a brighter or blurred copy or a line of text change in a few places.

The hash is the DCT hash that imagededup's `PHash` computes (after Zauner's pHash): the image
as grey at 32x32, its 2D DCT-II, the 8x8 lowest frequencies, each bit set where a coefficient
is at least the median of the 63 besides the constant one; read row by row, first bit highest.
What it is computed from is the cheapest decode that serves: a JPEG decoded at 1/8 scale (or
the smallest scale that still has 32 pixels a side), grey only (libjpeg converts no colour),
shrunk by area averaging; other formats decoded whole. The image is seen as a viewer shows it
(EXIF orientation applied), so a copy rotated by its EXIF tag hashes like the original.

Distances are the number of differing bits (`hamming`). bench/RESULTS.md, "Splits you can
trust", measures how many planted copies of real photographs each distance finds, and how many
false pairs, against imagededup's PHash.
"""

import io

import numpy as np
from PIL import Image
from PIL import ImageFile

from pipelines.validation import images
from pipelines.validation.image_errors import pillow_call

HASH_BITS = 64
_SIDE = 32  # the grey image the DCT is taken of
_KEPT = 8  # the lowest frequencies kept per axis
# Rows k of the (unnormalised) DCT-II of a 32-sample signal, as scipy.fftpack.dct computes it
# up to a factor of 2 on every coefficient, which no comparison with the median sees.
_DCT = np.cos(np.pi / (2 * _SIDE) * np.outer(np.arange(_KEPT), 2 * np.arange(_SIDE) + 1))


def perceptual_hash(data) -> int:
    """The 64-bit hash of encoded image bytes that validation accepted.

    Raises:
        Rejected: Pillow cannot decode them after all (then no build may store them).
    """
    return pillow_call(data, _hash, data)


def hash_of_image(image) -> int:
    """The hash of a decoded PIL image, as shown (its orientation applied by the caller)."""
    grey = images.eight_bit(image).convert('L').resize((_SIDE, _SIDE), Image.Resampling.BOX)
    pixels = np.asarray(grey, dtype=np.float64)
    coefficients = _DCT @ pixels @ _DCT.T
    # Rounded, so that an image of one colour (every coefficient but the first 0 up to float
    # noise) has one hash whatever the colour: blank images are near-duplicates of each other.
    coefficients = np.round(coefficients, 3).ravel()
    bits = coefficients >= np.median(coefficients[1:])
    return int.from_bytes(np.packbits(bits).tobytes(), 'big')


def _hash(data):
    ImageFile.LOAD_TRUNCATED_IMAGES = False  # as validation: never a grey-filled guess
    image = Image.open(io.BytesIO(data), formats=images.SUPPORTED_FORMATS)
    if image.format in ('JPEG', 'MPO'):
        side = lambda length: images.draft_side(length, _SIDE)  # noqa: E731
        image.draft('L', (side(image.width), side(image.height)))
    image.load()
    method = images.transposition(image)
    if method is not None:
        image = image.transpose(method)
    return hash_of_image(image)


def hamming(a, b) -> int:
    """How many bits two hashes differ in."""
    return (a ^ b).bit_count()
