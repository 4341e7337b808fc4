"""Validating PNG files by their structure, without decoding their pixels.

A PNG carries a CRC per chunk and its pixels in one zlib stream: checking every CRC, inflating the
stream to exactly the size the header promises and checking every row's filter byte is what a decode
does, less the unfiltering. The rules and the hand-over are those of
pipelines/validation/image_structure.py (`Unusual`: the full decode decides; `Fault`: TensorFlow
refuses).
"""

import struct
import typing
import zlib

from pipelines.validation.image_structure import Fault
from pipelines.validation.image_structure import Unusual

# PNG (ISO/IEC 15948): bit depths allowed per colour type, and samples per pixel.
_PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_PNG_SAMPLES = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
# Adam7 passes: (first row, first column, row step, column step).
_ADAM7 = (
    (0, 0, 8, 8),
    (0, 4, 8, 8),
    (4, 0, 8, 4),
    (0, 2, 4, 4),
    (2, 0, 4, 2),
    (0, 1, 2, 2),
    (1, 0, 2, 1),
)
# Chunks that hold or change what Pillow reads as metadata (EXIF orientation, compressed text or
# profiles, which it decompresses within limits), or animation: the full decode handles those.
_PNG_SLOW_CHUNKS = frozenset([b'eXIf', b'zTXt', b'iTXt', b'iCCP', b'acTL', b'fcTL', b'fdAT'])
_PNG_KNOWN_CRITICAL = frozenset([b'IHDR', b'PLTE', b'IDAT', b'IEND'])
_RAW_EXIF = b'Raw profile type exif'


class PngFacts(typing.NamedTuple):
    width: int
    height: int
    bit_depth: int
    color_type: int
    interlaced: bool


def png_facts(data):
    """PngFacts of a plainly valid PNG; raises Unusual otherwise, Fault for a CRC mismatch.

    Every chunk's CRC is checked, the IDAT stream inflated to exactly the size the header
    declares, and every row's filter type checked; bytes after IEND are ignored.
    """
    if not data.startswith(_PNG_SIGNATURE):
        raise Unusual('no PNG signature')
    position, size, header, idat, seen = 8, len(data), None, [], []
    while True:
        if position + 12 > size:
            raise Unusual('file ends inside a chunk')
        length, kind = struct.unpack_from('>I4s', data, position)
        end = position + 12 + length
        if length > 0x7FFFFFFF or end > size:
            raise Unusual('chunk runs past the end of the file')
        body = data[position + 8 : end - 4]
        if zlib.crc32(body, zlib.crc32(kind)) != struct.unpack_from('>I', data, end - 4)[0]:
            raise Fault(f'PNG chunk {kind.decode("latin-1")!r} at byte {position}: CRC mismatch')
        _check_png_chunk(kind, body, header, seen)
        if kind == b'IHDR':
            header = _png_header(body)
        elif kind == b'IDAT':
            idat.append(body)
        elif kind == b'IEND':
            break
        seen.append(kind)
        position = end
    _check_pixel_stream(header, b''.join(idat))
    return header


def _check_png_chunk(kind, body, header, seen):
    """Where a chunk may stand, and whether the full decode should see the file instead."""
    if (header is None) != (kind == b'IHDR'):
        raise Unusual('IHDR is not the first and only header')
    if kind in _PNG_SLOW_CHUNKS or (kind[0] < 0x61 and kind not in _PNG_KNOWN_CRITICAL):
        raise Unusual(f'chunk {kind!r}')
    if kind == b'tEXt' and body.startswith(_RAW_EXIF):
        raise Unusual('EXIF in a text chunk')
    if kind == b'IDAT' and b'IDAT' in seen and seen[-1] != b'IDAT':
        raise Unusual('IDAT chunks are not consecutive')
    if kind == b'IDAT' and header.color_type == 3 and b'PLTE' not in seen:
        raise Unusual('palette image without a palette')
    if kind == b'PLTE' and (b'IDAT' in seen or b'PLTE' in seen or header.color_type in (0, 4)):
        raise Unusual('palette out of place')
    if kind == b'IEND' and (body or b'IDAT' not in seen):
        raise Unusual('IEND with data, or no IDAT')


def _png_header(body):
    if len(body) != 13:
        raise Unusual('IHDR of the wrong length')
    width, height, depth, color, compression, filtering, interlace = struct.unpack('>IIBBBBB', body)
    if not (0 < width <= 0x7FFFFFFF and 0 < height <= 0x7FFFFFFF):
        raise Unusual(f'image of {width}x{height}')
    if depth not in _PNG_DEPTHS.get(color, ()) or (compression, filtering) != (0, 0):
        raise Unusual('bit depth, colour type or method not in the standard')
    if interlace > 1:
        raise Unusual('unknown interlace method')
    return PngFacts(width, height, depth, color, bool(interlace))


def _check_pixel_stream(header, stream):
    """The inflated IDAT stream holds exactly the rows the header declares, each with a
    known filter type."""
    bits = header.bit_depth * _PNG_SAMPLES[header.color_type]
    rows = []  # (row count, bytes per row with its filter byte) of each non-empty pass
    for top, left, row_step, column_step in _ADAM7 if header.interlaced else ((0, 0, 1, 1),):
        height = (header.height - top + row_step - 1) // row_step
        width = (header.width - left + column_step - 1) // column_step
        if height and width:
            rows.append((height, 1 + (width * bits + 7) // 8))
    expected = sum(count * stride for count, stride in rows)
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(stream, expected + 1)
    except zlib.error as e:
        raise Unusual(f'pixel data does not inflate: {e}') from None
    if len(raw) != expected or not inflater.eof or inflater.unused_data:
        raise Unusual('pixel data of the wrong size')
    offset = 0
    for count, stride in rows:
        if max(raw[offset : offset + count * stride : stride]) > 4:
            raise Unusual('unknown row filter type')
        offset += count * stride
