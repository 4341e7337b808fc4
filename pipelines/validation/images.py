"""Validating one encoded image, and deciding which bytes a record stores.

A plainly valid JPEG or PNG (pipelines/validation/image_structure.py and png_structure.py: every
marker or chunk well formed as libjpeg and libpng require, the scans or the pixel stream complete)
is accepted by its structure, without decoding its pixels; every other input is decoded once with
Pillow (JPEGs at 1/8 scale: the decoder still reads the whole compressed stream, so truncation is
caught, at about half the cost of a full decode), which decides as it always did. A record keeps the
original bytes when TensorFlow decodes them to the pixels Pillow shows (EXIF orientation applied,
converted to RGB); otherwise it stores a lossless PNG of those pixels. Animated images (GIF, APNG,
WebP, MPO) are their first frame, as `tf.io.decode_image(..., expand_animations=False)` reads them.

TensorFlow's JPEG decoder gives Pillow's pixels exactly with `dct_method='INTEGER_ACCURATE'`;
`tf.io.decode_image` uses the fast integer IDCT, which differs by a few levels per pixel, as any
two conforming JPEG decoders may.

Inputs are untrusted: only the formats the accepted extensions name are parsed (Pillow would
otherwise try some forty plugins, EPS among them, which runs Ghostscript), and every way Pillow
fails on hostile bytes becomes a `Rejected` with a reason code
(pipelines/validation/image_errors.py; see docs/reliability.md).
"""

import hashlib
import io
import typing

import numpy as np
from PIL import Image
from PIL import ImageFile
from PIL import UnidentifiedImageError

from pipelines.validation import image_structure
from pipelines.validation import png_structure
from pipelines.validation.image_errors import Rejected
from pipelines.validation.image_errors import pillow_call
from pipelines.validation.image_errors import rejection
from pipelines.validation.image_errors import unidentified

# The Pillow plugins of the extensions a build accepts (the JPEG plugin also opens MPO: a JPEG
# with more images appended, as phones write).
SUPPORTED_FORMATS = ('JPEG', 'PNG', 'GIF', 'BMP', 'WEBP', 'TIFF')
_ORIENTATION = 0x0112
_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
# Modes TensorFlow decodes to Pillow's RGB pixels, by stored format.
_TURNS = frozenset(_TRANSPOSE[o] for o in (5, 6, 7, 8))  # those that swap width and height
_JPEG_KEEP_MODES = frozenset(['L', 'RGB'])
_PNG_KEEP_MODES = frozenset(['1', 'L', 'LA', 'P', 'RGB', 'RGBA'])
_CHANNELS = {'1': 1, 'L': 1, 'LA': 2, 'P': 3, 'RGB': 3, 'RGBA': 4}
_SIXTEEN_BIT_MODES = frozenset(['I', 'I;16', 'I;16B', 'I;16L', 'I;16N'])
_JPEG_START = b'\xff\xd8\xff'
# A progressive JPEG decodes every scan over the whole image: a small file with thousands of
# scans costs minutes of CPU. Encoders write about 10; libjpeg-turbo's tools stop at 500.
MAX_JPEG_SCANS = 256


class ImageInfo(typing.NamedTuple):
    """What a record stores about a valid image (of the stored bytes, not the source's)."""

    format: str  # 'jpeg' or 'png'
    height: int
    width: int
    channels: int
    sha256: str
    num_bytes: int
    reencoded: bool


def inspect_image(data, max_pixels, reencode=True):
    """Validates encoded image bytes.

    A plainly valid JPEG or PNG that TensorFlow decodes to Pillow's pixels is checked by its
    structure alone (pipelines/validation/image_structure.py); everything else is decoded with
    Pillow.

    Args:
        reencode: make the lossless PNG a record stores of an image that TensorFlow would not
            decode as Pillow does; False leaves that to the caller (who may store a resize
            instead): `stored` is then None and the ImageInfo's sha256 and num_bytes empty.
    Returns:
        (ImageInfo, stored): `stored` is None when the original bytes are kept, else the PNG bytes
        to store instead.
    Raises:
        Rejected: empty, not an image, an unsupported format, truncated or corrupt, or a
            decompression bomb (more than `max_pixels`, oversized metadata, too many scans).
    """
    if not data:
        raise Rejected('empty_file', 'file has 0 bytes')
    if data.startswith(_JPEG_START):
        info = _plain_jpeg(data, max_pixels)
        if info is not None:
            return info, None
    image = _open(data, max_pixels)
    fault = None
    if image.format == 'PNG' and _png_mode_keeps(image, data):
        try:
            png_structure.png_facts(data)
        except image_structure.Unusual:
            pass
        except image_structure.Fault as e:
            fault = e
        else:  # no eXIf or EXIF text chunk: orientation 1 without decoding (see _orientation)
            return _png_info(image, data), None
    info, stored = _inspect_decoded(image, data, reencode)
    if fault:  # Pillow read it; TensorFlow would not
        raise Rejected('decode_error', f'{fault}; TensorFlow refuses such a file')
    return info, stored


def _plain_jpeg(data, max_pixels):
    """The ImageInfo of a plainly valid JPEG kept as it is, or None (then decode it)."""
    try:
        facts = image_structure.jpeg_facts(data, MAX_JPEG_SCANS)
    except image_structure.Unusual:
        return None
    _check_size(facts.width, facts.height, max_pixels)
    return ImageInfo(
        'jpeg', facts.height, facts.width, facts.components, sha256_hex(data), len(data), False
    )


def _inspect_decoded(image, data, reencode=True):
    """inspect_image's result for an image Pillow opened, from a decode of it."""
    width, height = image.size
    if _is_jpeg(image):
        _check_jpeg_structure(data)
        if image.mode in _JPEG_KEEP_MODES and _orientation(image) == 1:
            _decode(image, data, reduced=True)
            info = ImageInfo(
                'jpeg', height, width, _CHANNELS[image.mode], sha256_hex(data), len(data), False
            )
            return info, None
    # Other formats are decoded in full before their metadata is read: a PNG may carry its
    # EXIF (and oversized text) after the pixel data.
    _decode(image, data, reduced=False)
    if _png_keeps_original(image, data):
        return _png_info(image, data), None
    if not reencode:  # the size as shown, without making the PNG
        width, height = image.size
        if _TRANSPOSE.get(_orientation(image)) in _TURNS:
            width, height = height, width
        return ImageInfo('png', height, width, 3, '', 0, True), None
    rgb = pillow_call(data, to_rgb, image)
    stored = encode_png(rgb)
    width, height = rgb.size
    return ImageInfo('png', height, width, 3, sha256_hex(stored), len(stored), True), stored


def _png_info(image, data):
    width, height = image.size
    channels = _CHANNELS[image.mode] + (image.mode == 'P' and 'transparency' in image.info)
    return ImageInfo('png', height, width, channels, sha256_hex(data), len(data), False)


def pixel_sums(data, size):
    """Integer sums of the RGB values and of their squares, (R, G, B, R², G², B²), of an image
    resized to size x size: what the build's analysis measures of each image of its sample.

    The image is decoded as a viewer shows it (EXIF orientation, RGB), a JPEG at the smallest
    scale that keeps `size` pixels on each side (as far as it has them), and resized with
    Pillow's bilinear filter (antialiased when shrinking), whatever its aspect ratio. The sums
    are exact, so that statistics combined from them do not depend on the order of the images.
    """
    image = _load(data, draft_to=size)
    small = to_rgb(image).resize((size, size), Image.Resampling.BILINEAR)
    histograms = np.array(small.histogram(), dtype=np.int64).reshape(3, 256)
    return tuple((histograms @ _VALUES).tolist() + (histograms @ _VALUES**2).tolist())


_VALUES = np.arange(256, dtype=np.int64)


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def to_rgb(image):
    """The pixels a viewer shows: EXIF orientation applied, 16-bit samples scaled, as RGB."""
    method = transposition(image)
    if method is not None:
        image = image.transpose(method)
    return eight_bit(image).convert('RGB')


def transposition(image):
    """The Image.Transpose that shows a loaded `image` as a viewer does (its EXIF orientation),
    or None."""
    return _TRANSPOSE.get(_orientation(image))


def eight_bit(image):
    """`image` with 16-bit (or 32-bit integer) samples scaled to 8-bit grey; others as they are."""
    if image.mode not in _SIXTEEN_BIT_MODES:
        return image
    samples = np.clip(np.asarray(image, dtype=np.int64), 0, 65535) >> 8
    return Image.fromarray(samples.astype(np.uint8), mode='L')


def encode_png(image):
    """Lossless, deterministic PNG (same Pillow and zlib: same bytes)."""
    buffer = io.BytesIO()
    image.save(buffer, format='PNG', compress_level=6)
    return buffer.getvalue()


def reencode(data):
    """The lossless PNG a record stores for bytes TensorFlow would not decode as Pillow does."""
    return encode_png(to_rgb(_load(data)))


def decode_rgb(data):
    """Reference decode: the RGB pixels of encoded bytes as a viewer shows them."""
    return np.asarray(to_rgb(_load(data)))


def _refuse_truncated():
    """Makes Pillow fail on a truncated file, as it does by default: a library in the same
    process may have told it to fill the rest with grey (TFDS does so process-wide)."""
    ImageFile.LOAD_TRUNCATED_IMAGES = False


def _load(data, draft_to=0):
    _refuse_truncated()
    image = Image.open(io.BytesIO(data), formats=SUPPORTED_FORMATS)
    if draft_to and _is_jpeg(image):
        _decode(image, data, reduced=True, min_size=draft_to)
    image.load()
    return image


def _open(data, max_pixels):
    try:
        image = Image.open(io.BytesIO(data), formats=SUPPORTED_FORMATS)
    except UnidentifiedImageError:
        raise unidentified(data, SUPPORTED_FORMATS) from None
    except MemoryError:
        raise
    except Exception as e:  # pylint: disable=broad-except
        raise rejection(e, data) from None
    _check_size(*image.size, max_pixels)
    return image


def _check_size(width, height, max_pixels):
    if width * height > max_pixels:
        raise Rejected(
            'decompression_bomb',
            f'{width}x{height} = {width * height} pixels, more than --max-pixels {max_pixels}',
        )
    if width < 1 or height < 1:
        raise Rejected('decode_error', f'image declares size {width}x{height}')


def _is_jpeg(image):
    return image.format in ('JPEG', 'MPO')


def _check_jpeg_structure(data):
    """Rejects what Pillow lets through: a missing end marker, too many scans.

    Coded data never holds 0xFF followed by 0xDA (start of scan) or 0xD9 (end of image), so the
    markers can be found by searching the bytes.
    """
    if data.rfind(b'\xff\xd9') < data.rfind(b'\xff\xda'):
        # Pillow decodes some of these without a word when only the marker is missing;
        # TensorFlow refuses them all, so a record of one would fail training.
        raise Rejected('truncated', 'no JPEG end marker after the last scan: the file is cut short')
    scans = data.count(b'\xff\xda')
    if scans > MAX_JPEG_SCANS:
        raise Rejected(
            'decompression_bomb',
            f'{scans} JPEG scans, more than {MAX_JPEG_SCANS}: each scan decodes the whole image',
        )


def _orientation(image):
    """The EXIF orientation (1 to 8); 1 when absent, invalid or unreadable.

    TensorFlow ignores EXIF, and so do viewers when it cannot be parsed: either way the stored
    pixels are the ones as coded.
    """
    try:
        orientation = image.getexif().get(_ORIENTATION, 1)
    except MemoryError:
        raise
    except Exception:  # pylint: disable=broad-except  # Pillow raises many kinds on bad EXIF
        return 1
    return orientation if orientation in _TRANSPOSE else 1


def _png_keeps_original(image, data):
    """True for a PNG that TensorFlow decodes to exactly `to_rgb` of it."""
    return _png_mode_keeps(image, data) and _orientation(image) == 1


def _png_mode_keeps(image, data):
    """A PNG whose pixels TensorFlow decodes as Pillow does, unless EXIF rotates them."""
    if image.format != 'PNG' or image.mode not in _PNG_KEEP_MODES:
        return False
    # Byte 24 of a PNG is the IHDR bit depth; TF and Pillow differ on 16-bit samples.
    return len(data) > 24 and data[24] <= 8


def _decode(image, data, reduced, min_size=0):
    """Decodes all pixel data (of the first frame); raises Rejected for bad data.

    `reduced` decodes a JPEG at 1/8 scale, or at the smallest scale that keeps `min_size` pixels
    on each side (as far as the image has them).
    """
    _refuse_truncated()
    if reduced:
        image.draft(
            image.mode, (draft_side(image.width, min_size), draft_side(image.height, min_size))
        )
    pillow_call(data, image.load)


def draft_side(side, min_size):
    return max(1, side // 8, min(side, min_size))
