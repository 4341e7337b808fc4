"""A perceptual signature of every valid image, for --near-duplicates: a 64-bit hash that a
re-encode, a downscale, a small crop, a brighter or blurred copy or a line of text change in a
few places, the same hash of nine windows of the image (to find crops and shifted frames), and a
grey thumbnail (to tell a copy from a look-alike: pipelines/assignment/alignment.py).

The hash is the DCT hash that imagededup's `PHash` computes (after Zauner's pHash): the image
as grey at 32x32, its 2D DCT-II, the 8x8 lowest frequencies, each bit set where a coefficient
is at least the median of the 63 besides the constant one; read row by row, first bit highest.
What it is computed from is the cheapest decode that serves: a JPEG decoded at 1/8 scale (or
the smallest scale that still has 32 pixels a side), grey only (libjpeg converts no colour),
shrunk by area averaging; other formats decoded whole. The image is seen as a viewer shows it
(EXIF orientation applied), so a copy rotated by its EXIF tag hashes like the original.

The windows are the image's 90% at nine places, its centre and 5% of a side from it in every
direction (a 3x3 grid): a border crop of 3-8% or a frame panned 2-6% from another has one
window pair within a few bits. The thumbnail is the grey image at 32x32 (aspect not kept), 8 bits
a pixel. A signature is one int (`ImageMeta.phash`): its low 64 bits the whole image's hash
(what it was before windows existed, so `hamming` of two signatures is the whole images'), above
them the windows' hashes, the thumbnail and a version byte (SIGNATURE_BYTES in all).

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
_HASH_MASK = (1 << HASH_BITS) - 1
THUMBNAIL_SIDE = 32
_VERSION = 1  # the signature's top byte: always there, so a signature is never a bare hash
# The windows, as shares of the image's width and height (left, top, right, bottom): the
# whole image first, then the 90% grid row by row.
WINDOWS = ((0.0, 0.0, 1.0, 1.0),) + tuple(
    (0.05 + dx, 0.05 + dy, 0.95 + dx, 0.95 + dy)
    for dy in (-0.05, 0.0, 0.05)
    for dx in (-0.05, 0.0, 0.05)
)
SIGNATURE_BYTES = 1 + THUMBNAIL_SIDE**2 + HASH_BITS // 8 * len(WINDOWS)
_SIDE = 32  # the grey image the DCT is taken of
_KEPT = 8  # the lowest frequencies kept per axis
# Rows k of the (unnormalised) DCT-II of a 32-sample signal, as scipy.fftpack.dct computes it
# up to a factor of 2 on every coefficient, which no comparison with the median sees.
_DCT = np.cos(np.pi / (2 * _SIDE) * np.outer(np.arange(_KEPT), 2 * np.arange(_SIDE) + 1))


def perceptual_hash(data) -> int:
    """The signature (an int of SIGNATURE_BYTES) of encoded image bytes that validation
    accepted: `whole_hash` of it is the 64-bit hash of the whole image.

    Raises:
        Rejected: Pillow cannot decode them after all (then no build may store them).
    """
    return pillow_call(data, _hash, data)


def hash_of_image(image) -> int:
    """The hash of a decoded PIL image, as shown (its orientation applied by the caller)."""
    grey = images.eight_bit(image).convert('L').resize((_SIDE, _SIDE), Image.Resampling.BOX)
    return int(_hashes(np.asarray(grey, dtype=np.float64)[None])[0])


def _hashes(pixels):
    """The hashes (uint64) of a stack of 32x32 grey images (float64, n x 32 x 32)."""
    coefficients = np.einsum('ki,nij,lj->nkl', _DCT, pixels, _DCT).reshape(len(pixels), -1)
    # Rounded, so that an image of one colour (every coefficient but the first 0 up to float
    # noise) has one hash whatever the colour: blank images are near-duplicates of each other.
    coefficients = np.round(coefficients, 3)
    bits = coefficients >= np.median(coefficients[:, 1:], axis=1, keepdims=True)
    return np.packbits(bits, axis=1).view('>u8').ravel()


def signature_of_image(image) -> int:
    """The signature of a decoded PIL image, as shown (its orientation applied by the caller)."""
    grey = images.eight_bit(image).convert('L')
    width, height = grey.size
    windows = np.stack(
        [
            np.asarray(
                grey.resize(
                    (_SIDE, _SIDE),
                    Image.Resampling.BOX,
                    box=(left * width, top * height, right * width, bottom * height),
                ),
                dtype=np.float64,
            )
            for left, top, right, bottom in WINDOWS
        ]
    )
    side = (THUMBNAIL_SIDE, THUMBNAIL_SIDE)
    thumbnail = grey.resize(side, Image.Resampling.BOX).tobytes()
    hashes = _hashes(windows)[::-1].astype('>u8').tobytes()  # the whole image's last: lowest
    return int.from_bytes(bytes([_VERSION]) + thumbnail + hashes, 'big')


def whole_hash(signature) -> int:
    """The 64-bit hash of the whole image, of a signature (or of a bare hash: itself)."""
    return signature & _HASH_MASK


def parts(signature):
    """(the hashes of WINDOWS as uint64, the whole image's first; the thumbnail, uint8 32x32)
    of a signature; of a bare 64-bit hash, ([that hash], None)."""
    if signature >> HASH_BITS == 0:
        return np.array([signature], np.uint64), None
    data = signature.to_bytes(SIGNATURE_BYTES, 'big')
    side = THUMBNAIL_SIDE
    hashes = np.frombuffer(data, '>u8', len(WINDOWS), 1 + side * side)[::-1].astype(np.uint64)
    return hashes, np.frombuffer(data, np.uint8, side * side, 1).reshape(side, side)


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
    return signature_of_image(image)


def hamming(a, b) -> int:
    """How many bits two hashes differ in (of two signatures: their whole images' hashes)."""
    return ((a ^ b) & _HASH_MASK).bit_count()
