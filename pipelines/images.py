"""Validating one encoded image, and deciding which bytes a record stores.

Every input is decoded once with Pillow (JPEGs at 1/8 scale: the decoder still reads the whole
compressed stream, so truncation is caught, at about half the cost of a full decode). A record
keeps the original bytes when TensorFlow decodes them to the pixels Pillow shows (EXIF
orientation applied, converted to RGB); otherwise it stores a lossless PNG of those pixels.

TensorFlow's JPEG decoder gives Pillow's pixels exactly with `dct_method='INTEGER_ACCURATE'`;
`tf.io.decode_image` uses the fast integer IDCT, which differs by a few levels per pixel, as any
two conforming JPEG decoders may.
"""

import hashlib
import io
import struct
import typing

import numpy as np
from PIL import Image
from PIL import ImageOps
from PIL import UnidentifiedImageError

_ORIENTATION = 0x0112
# Modes TensorFlow decodes to Pillow's RGB pixels, by stored format.
_JPEG_KEEP_MODES = frozenset(['L', 'RGB'])
_PNG_KEEP_MODES = frozenset(['1', 'L', 'LA', 'P', 'RGB', 'RGBA'])
_CHANNELS = {'1': 1, 'L': 1, 'LA': 2, 'P': 3, 'RGB': 3, 'RGBA': 4}
_SIXTEEN_BIT_MODES = frozenset(['I', 'I;16', 'I;16B', 'I;16L', 'I;16N'])


class ImageInfo(typing.NamedTuple):
    """What a record stores about a valid image (of the stored bytes, not the source's)."""

    format: str  # 'jpeg' or 'png'
    height: int
    width: int
    channels: int
    sha256: str
    num_bytes: int
    reencoded: bool


class Rejected(Exception):
    """An input that cannot be written, with a reason code for rejected.jsonl and counters."""

    def __init__(self, reason, detail):
        super().__init__(f'{reason}: {detail}')
        self.reason = reason
        self.detail = detail


def inspect_image(data, max_pixels):
    """Validates encoded image bytes.

    Returns:
        (ImageInfo, stored): `stored` is None when the original bytes are kept, else the PNG bytes
        to store instead.
    Raises:
        Rejected: empty, not an image, truncated or corrupt, or declaring more than `max_pixels`.
    """
    if not data:
        raise Rejected('empty_file', 'file has 0 bytes')
    image = _open(data, max_pixels)
    width, height = image.size
    if _keeps_original(image, data):
        _decode(image, reduced=image.format == 'JPEG')
        channels = _CHANNELS[image.mode] + (image.mode == 'P' and 'transparency' in image.info)
        info = ImageInfo(
            image.format.lower(), height, width, channels, sha256_hex(data), len(data), False
        )
        return info, None
    rgb = to_rgb(_decode(image, reduced=False))
    stored = encode_png(rgb)
    width, height = rgb.size
    return ImageInfo('png', height, width, 3, sha256_hex(stored), len(stored), True), stored


def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def to_rgb(image):
    """The pixels a viewer shows: EXIF orientation applied, 16-bit samples scaled, as RGB."""
    image = ImageOps.exif_transpose(image)
    if image.mode in _SIXTEEN_BIT_MODES:
        samples = np.clip(np.asarray(image, dtype=np.int64), 0, 65535) >> 8
        image = Image.fromarray(samples.astype(np.uint8), mode='L')
    return image.convert('RGB')


def encode_png(image):
    """Lossless, deterministic PNG (same Pillow and zlib: same bytes)."""
    buffer = io.BytesIO()
    image.save(buffer, format='PNG', compress_level=6)
    return buffer.getvalue()


def reencode(data):
    """The lossless PNG a record stores for bytes TensorFlow would not decode as Pillow does."""
    image = Image.open(io.BytesIO(data))
    image.load()
    return encode_png(to_rgb(image))


def decode_rgb(data):
    """Reference decode: the RGB pixels of encoded bytes as a viewer shows them."""
    image = Image.open(io.BytesIO(data))
    image.load()
    return np.asarray(to_rgb(image))


def _open(data, max_pixels):
    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        signature = _signature(data)
        if signature:
            raise Rejected(
                'decode_error', f'{signature} signature but an unreadable header ({_head(data)})'
            ) from None
        raise Rejected('not_an_image', f'not a recognised image format ({_head(data)})') from None
    except _DECODE_ERRORS as e:
        raise _rejection(e) from None
    width, height = image.size
    if width * height > max_pixels:
        raise Rejected(
            'decompression_bomb',
            f'{width}x{height} = {width * height} pixels, more than --max-pixels {max_pixels}',
        )
    if width < 1 or height < 1:
        raise Rejected('decode_error', f'image declares size {width}x{height}')
    return image


def _keeps_original(image, data):
    """True when TensorFlow decodes these bytes to exactly `to_rgb` of them."""
    try:
        orientation = image.getexif().get(_ORIENTATION, 1)
    except Exception:  # Pillow raises many kinds on malformed EXIF
        # Unreadable EXIF cannot be trusted either way: store Pillow's pixels.
        return False
    if orientation not in (None, 1):
        return False
    if image.format == 'JPEG':
        return image.mode in _JPEG_KEEP_MODES
    if image.format == 'PNG':
        # Byte 24 of a PNG is the IHDR bit depth; TF and Pillow differ on 16-bit samples.
        return image.mode in _PNG_KEEP_MODES and len(data) > 24 and data[24] <= 8
    return False


def _decode(image, reduced):
    """Decodes all pixel data; raises Rejected for truncated or corrupt data."""
    try:
        if reduced:
            image.draft(image.mode, (max(1, image.width // 8), max(1, image.height // 8)))
        image.load()
    except _DECODE_ERRORS as e:
        raise _rejection(e) from None
    return image


# What Pillow raises on damaged data, by format plugin.
_DECODE_ERRORS = (
    Image.DecompressionBombError,
    OSError,
    ValueError,
    SyntaxError,
    EOFError,
    IndexError,
    struct.error,
)
_SIGNATURES = (
    (b'\x89PNG\r\n\x1a\n', 'PNG'),
    (b'\xff\xd8\xff', 'JPEG'),
    (b'GIF8', 'GIF'),
    (b'BM', 'BMP'),
    (b'II*\x00', 'TIFF'),
    (b'MM\x00*', 'TIFF'),
)


def _rejection(error):
    message = f'{type(error).__name__}: {error}'
    if isinstance(error, Image.DecompressionBombError):
        return Rejected('decompression_bomb', message)
    if isinstance(error, EOFError) or 'truncated' in message.lower():
        return Rejected('truncated', message)
    return Rejected('decode_error', message)


def _signature(data):
    if data[:4] == b'RIFF' and data[8:12] == b'WEBP':
        return 'WebP'
    return next((name for magic, name in _SIGNATURES if data.startswith(magic)), '')


def _head(data):
    return f'{len(data)} bytes starting {data[:8]!r}'
