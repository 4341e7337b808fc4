"""What Pillow's failures on untrusted bytes mean: a `Rejected` with a reason code.

Pillow's plugins raise many kinds of exception on hostile bytes; `pillow_call` turns each into
a rejection of that one input, naming why (decompression bomb, truncated, unsupported format,
not an image, decode error; docs/reliability.md), from the error and the file's own header.
"""

from PIL import Image


class Rejected(Exception):
    """An input that cannot be written, with a reason code for rejected.jsonl and counters."""

    def __init__(self, reason, detail):
        super().__init__(f'{reason}: {detail}')
        self.reason = reason
        self.detail = detail


def pillow_call(data, fn, *args):
    """Calls Pillow on untrusted data: its failures become rejections, one input at a time.

    Pillow's plugins raise many kinds of exception on hostile bytes (OSError, ValueError,
    SyntaxError, struct.error, IndexError, ...); one bad file must never fail the build.
    Running out of memory is the machine's problem, not the file's, and is not caught.
    """
    try:
        return fn(*args)
    except MemoryError:
        raise
    except Exception as e:  # pylint: disable=broad-except
        raise rejection(e, data) from None


# What Pillow raises when a file's metadata would decompress past its safety limits.
_METADATA_BOMBS = ('Decompressed data too large', 'Too much memory used in text chunks')
_SIGNATURES = (
    (b'\x89PNG\r\n\x1a\n', 'PNG'),
    (b'\xff\xd8\xff', 'JPEG'),
    (b'GIF8', 'GIF'),
    (b'BM', 'BMP'),
    (b'II*\x00', 'TIFF'),
    (b'MM\x00*', 'TIFF'),
)
# Formats people save with an image extension that a build does not read.
_UNSUPPORTED_SIGNATURES = (
    (b'8BPS', 'Photoshop PSD'),
    (b'%PDF', 'PDF'),
    (b'%!PS', 'PostScript/EPS'),
    (b'\xc5\xd0\xd3\xc6', 'EPS'),
    (b'\x00\x00\x01\x00', 'ICO'),
    (b'icns', 'ICNS'),
    (b'\x00\x00\x00\x0cjP  \r\n\x87\n', 'JPEG 2000'),
    (b'\xff\x4f\xff\x51', 'JPEG 2000'),
    (b'\x00\x00\x00\x0cJXL \r\n\x87\n', 'JPEG XL'),
    (b'\xff\x0a', 'JPEG XL'),
    (b'qoif', 'QOI'),
    (b'DDS ', 'DDS'),
    (b'II\xbc', 'JPEG XR'),
)
_ISO_BRANDS = {b'avif': 'AVIF', b'avis': 'AVIF', b'mif1': 'HEIF', b'msf1': 'HEIF'}


def rejection(error, data):
    """The Rejected that a Pillow failure on `data` means."""
    message = f'{type(error).__name__}: {error}'
    if isinstance(error, Image.DecompressionBombError) or any(
        marker in message for marker in _METADATA_BOMBS
    ):
        return Rejected('decompression_bomb', message)
    if isinstance(error, EOFError) or 'truncated' in message.lower():
        return Rejected('truncated', message)
    missing = _missing_bytes(data)
    if missing:
        return Rejected('truncated', f'{missing} ({message})')
    return Rejected('decode_error', message)


def _missing_bytes(data):
    """Why the file is shorter than its own header says, or '' (for Pillow's vaguer errors)."""
    if data[:4] == b'RIFF' and data[8:12] == b'WEBP':
        declared = int.from_bytes(data[4:8], 'little') + 8
        if len(data) < declared:
            return f'WebP header declares {declared} bytes, the file has {len(data)}'
    if data[:4] in (b'II*\x00', b'MM\x00*'):
        offset = int.from_bytes(data[4:8], 'little' if data[:2] == b'II' else 'big')
        if offset + 2 > len(data):
            return f'TIFF directory at byte {offset}, past the end of the {len(data)}-byte file'
    return ''


def unidentified(data, supported):
    """The rejection of bytes no supported Pillow plugin (`supported`) opens."""
    unsupported = _unsupported_format(data)
    if unsupported:
        return Rejected(
            'unsupported_format',
            f'{unsupported} data; a build reads {", ".join(supported)} ({_head(data)})',
        )
    missing = _missing_bytes(data)
    if missing:
        return Rejected('truncated', missing)
    signature = _signature(data)
    if signature:
        return Rejected(
            'decode_error', f'{signature} signature but an unreadable header ({_head(data)})'
        )
    return Rejected('not_an_image', f'not a recognised image format ({_head(data)})')


def _signature(data):
    if data[:4] == b'RIFF' and data[8:12] == b'WEBP':
        return 'WebP'
    return next((name for magic, name in _SIGNATURES if data.startswith(magic)), '')


def _unsupported_format(data):
    if data[4:8] == b'ftyp':
        brand = data[8:12]
        return _ISO_BRANDS.get(brand, 'HEIF' if brand.startswith(b'he') else '')
    if data[:1] == b'P' and data[1:2] in b'1234567' and data[2:3] in b' \t\r\n':
        return 'Netpbm'
    head = data[:512].lstrip().lower()
    if head.startswith(b'<svg') or (head.startswith(b'<?xml') and b'<svg' in head):
        return 'SVG'
    return next((name for magic, name in _UNSUPPORTED_SIGNATURES if data.startswith(magic)), '')


def _head(data):
    return f'{len(data)} bytes starting {data[:8]!r}'
