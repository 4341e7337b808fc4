"""Validating JPEG and PNG files by their structure, without decoding their pixels: the rules,
and JPEG's check (PNG's is in pipelines/validation/png_structure.py).

A full decode is most of a build's CPU time (bench/RESULTS.md, "Build throughput"), yet it finds
little that the file's structure does not show. What makes libjpeg (behind both Pillow and
TensorFlow) refuse a JPEG is in its markers: a bad or missing table, an impossible frame or scan, an
unsupported coding process, no scan, too many scans. Damage inside the entropy-coded data only ever
gives warnings: both decoders fill what they cannot decode with grey and go on (a flipped byte in a
scan, a truncated file whose end marker is still there). A PNG carries a CRC per chunk and its
pixels in one zlib stream: checking every CRC, inflating the stream to exactly the size the header
promises and checking every row's filter byte is what a decode does, less the unfiltering.

So a file that is plainly valid - every marker or chunk well formed, by the rules libjpeg and libpng
apply - is accepted here without a decode, and anything else (an unusual but maybe valid file, or a
broken one) is left to the full decode in pipelines/validation/images.py, which decides as before.
`Unusual` is that hand-over, never a rejection. The check is deliberately strict: it may send a
decodable file to the slow path, it must never pass one that the decode refuses
(tests/test_image_structure.py mutates real files by the thousand to show it).

One case is decided here: a PNG chunk whose CRC does not match. Pillow skips the CRC of chunks
it does not parse (IDAT, IEND) while libpng, and so TensorFlow, refuses the file: `Fault`.
"""

import re
import struct
import typing

# JPEG markers (ITU T.81 table B.1).
_SOI, _EOI, _SOS, _DQT, _DHT, _DRI = 0xD8, 0xD9, 0xDA, 0xDB, 0xC4, 0xDD
_SOF_SEQUENTIAL = frozenset([0xC0, 0xC1])  # baseline and extended sequential, Huffman coded
_SOF_PROGRESSIVE = 0xC2
_RST = frozenset(range(0xD0, 0xD8))
_APP1, _APP2, _APP14 = 0xE1, 0xE2, 0xEE
_READ_APPLICATIONS = frozenset([_APP1, _APP2, _APP14])  # EXIF/XMP, MPF, Adobe
_SKIPPED = frozenset([*range(0xE0, 0xF0), 0xFE])  # APPn, COM
# libjpeg's limits: JPEG_MAX_DIMENSION, MAX_SAMP_FACTOR, D_MAX_BLOCKS_IN_MCU, NUM_*_TBLS.
_MAX_DIMENSION = 65500
_MAX_SAMPLING = 4
_MAX_BLOCKS_IN_MCU = 10
_TABLES = 4
# In scan data, 0xFF 0x00 is a stuffed data byte; 0xFF and anything else starts a marker
# (after fill bytes, more 0xFF). A search for this pattern runs in C, not a Python loop.
_MARKER_CANDIDATE = re.compile(rb'\xff[^\x00]')
_EXIF = b'Exif\x00\x00'
_XMP = b'http://ns.adobe.com/xap/1.0/\x00'
_ORIENTATION = 0x0112


class Unusual(Exception):
    """Not plainly valid: the full decode decides."""


class Fault(Exception):
    """Broken in a way TensorFlow's decoder refuses even where Pillow's does not."""


class JpegFacts(typing.NamedTuple):
    width: int
    height: int
    components: int  # 1 (grey) or 3 (colour): Pillow's modes L and RGB


class _Component(typing.NamedTuple):
    h: int
    v: int
    quant_table: int


class _Jpeg:
    """What the markers so far defined, and the checks libjpeg makes of them."""

    def __init__(self, data, max_scans):
        self.data = data
        self.max_scans = max_scans
        self.frame = None  # (progressive, height, width, {component id: _Component})
        self.quant = set()
        self.huffman = set()  # (class, id): class 0 DC, 1 AC
        self.restart_interval = 0
        self.scans = 0
        self.sequential_seen = set()  # component ids already coded by a sequential scan
        self.dc_started = set()  # component ids with a first DC scan (progressive)
        self.exif_segments = 0

    def copy(self, data, max_scans):
        """This state, for checking `data` on from the same point."""
        other = _Jpeg(data, max_scans)
        other.frame = self.frame  # not changed once set
        other.quant, other.huffman = set(self.quant), set(self.huffman)
        other.restart_interval, other.scans = self.restart_interval, self.scans
        other.sequential_seen, other.dc_started = set(self.sequential_seen), set(self.dc_started)
        other.exif_segments = self.exif_segments
        return other

    def segment(self, marker, start, end):
        """Checks the segment of `marker` whose body is data[start:end]."""
        if marker in _SKIPPED:
            self._application(marker, start, end)
        elif marker in (_DQT, _DHT):
            self._tables(marker, start, end)
        elif marker == _DRI:
            if end - start != 2:
                raise Unusual('restart interval segment of the wrong length')
            self.restart_interval = struct.unpack_from('>H', self.data, start)[0]
        elif marker in _SOF_SEQUENTIAL or marker == _SOF_PROGRESSIVE:
            self._frame(marker == _SOF_PROGRESSIVE, start, end)
        elif marker == _SOS:
            self._scan(start, end)
        else:  # other frame types, arithmetic coding, DNL, hierarchical, reserved markers
            raise Unusual(f'marker 0x{marker:02X}')

    def _application(self, marker, start, end):
        if marker not in _READ_APPLICATIONS:  # JFIF, comments and the like: nothing to check
            return
        body = self.data[start : min(end, start + 64)]
        if marker == _APP1 and body.startswith(_EXIF):
            self.exif_segments += 1
            if self.exif_segments > 1 or _exif_orientation(self.data[start + 6 : end]) != 1:
                raise Unusual('EXIF orientation other than 1, or several EXIF segments')
        elif marker == _APP1 and body.startswith(_XMP):
            if b'tiff:Orientation' in self.data[start:end]:
                raise Unusual('XMP orientation')
        elif marker == _APP14 and body.startswith(b'Adobe') and end - start < 12:
            raise Unusual('short Adobe segment')
        elif marker == _APP2 and body.startswith(b'MPF\x00'):
            raise Unusual('multi-picture (MPO) file')

    def _tables(self, marker, start, end):
        """Records the tables a DQT or DHT segment defines; raises Unusual for a bad one.

        Encoders write the same tables into most files (libjpeg's standard Huffman tables, a
        quality setting's quantization tables): a segment seen before is not checked again.
        """
        key = (marker, self.data[start:end])
        tables = _TABLE_SEGMENTS.get(key)
        if tables is None:
            parse = _quantization_tables if marker == _DQT else _huffman_tables
            try:
                tables = frozenset(parse(self.data, start, end))
            except Unusual as e:
                tables = str(e)
            if len(_TABLE_SEGMENTS) >= _MAX_CACHED_SEGMENTS:
                _TABLE_SEGMENTS.clear()
            _TABLE_SEGMENTS[key] = tables
        if isinstance(tables, str):
            raise Unusual(tables)
        if marker == _DQT:
            self.quant |= tables
        else:
            self.huffman |= tables

    def _frame(self, progressive, start, end):
        data = self.data
        if self.frame is not None or end - start < 6:
            raise Unusual('second or short frame header')
        precision, height, width, count = struct.unpack_from('>BHHB', data, start)
        if precision != 8 or count not in (1, 3) or end - start != 6 + 3 * count:
            raise Unusual(f'{precision}-bit or {count}-component frame')
        if not (0 < height <= _MAX_DIMENSION and 0 < width <= _MAX_DIMENSION):
            raise Unusual(f'frame of {width}x{height}')
        components = {}
        for offset in range(start + 6, end, 3):
            identifier, sampling, quant_table = data[offset : offset + 3]
            h, v = sampling >> 4, sampling & 0x0F
            if identifier in components or not (
                1 <= h <= _MAX_SAMPLING and 1 <= v <= _MAX_SAMPLING and quant_table < _TABLES
            ):
                raise Unusual('bad frame component')
            components[identifier] = _Component(h, v, quant_table)
        max_h = max(c.h for c in components.values())
        max_v = max(c.v for c in components.values())
        if any(max_h % c.h or max_v % c.v for c in components.values()):
            raise Unusual('fractional sampling ratios (libjpeg: not implemented)')
        self.frame = (progressive, height, width, components)

    def _scan(self, start, end):
        if self.frame is None:
            raise Unusual('scan before frame')
        progressive, _, _, components = self.frame
        data = self.data
        count = data[start] if end > start else 0
        if not 1 <= count <= 4 or end - start != 4 + 2 * count:
            raise Unusual('malformed scan header')
        selectors = data[start + 1 : start + 1 + 2 * count]
        ids = selectors[0::2]
        if len(set(ids)) != count or any(i not in components for i in ids):
            raise Unusual('scan names unknown or repeated components')
        first, last, approximation = data[end - 3 : end]
        high, low = approximation >> 4, approximation & 0x0F
        if progressive:
            tables = self._progressive_tables(ids, selectors, first, last, high, low)
        else:
            if (first, last, approximation) != (0, 63, 0) or self.sequential_seen & set(ids):
                raise Unusual('sequential scan with progressive parameters or a repeated component')
            self.sequential_seen |= set(ids)
            tables = {(0, t >> 4) for t in selectors[1::2]} | {
                (1, t & 0x0F) for t in selectors[1::2]
            }
        if not tables <= self.huffman:
            raise Unusual('scan uses an undefined Huffman table')
        if any(components[i].quant_table not in self.quant for i in ids):
            raise Unusual('scan component without its quantization table')
        if count > 1 and sum(components[i].h * components[i].v for i in ids) > _MAX_BLOCKS_IN_MCU:
            raise Unusual('too many blocks in an MCU')
        self.scans += 1
        if self.scans > self.max_scans:
            raise Unusual('too many scans')

    def _progressive_tables(self, ids, selectors, first, last, high, low):
        """The Huffman tables a progressive scan decodes with; raises Unusual where libjpeg
        refuses its parameters (jdphuff.c start_pass_phuff_decoder)."""
        bad = low > 13 or (high and low != high - 1)
        if first == 0:  # DC scan: may interleave components
            bad = bad or last != 0
            if high == 0:
                self.dc_started |= set(ids)
                tables = {(0, t >> 4) for t in selectors[1::2]}
            else:
                bad = bad or not set(ids) <= self.dc_started
                tables = set()
        else:  # AC scan: one component, a band of coefficients
            bad = bad or last < first or last > 63 or len(ids) != 1
            bad = bad or ids[0] not in self.dc_started
            tables = {(1, selectors[1] & 0x0F)}
        if bad:
            raise Unusual('progressive scan parameters libjpeg refuses')
        return tables

    def restart(self, marker, expected):
        """Checks a restart marker inside a scan; returns the number expected next."""
        if not self.restart_interval or marker - 0xD0 != expected:
            raise Unusual('restart marker out of place')
        return (expected + 1) % 8

    def facts(self):
        progressive, height, width, components = self.frame
        coded = self.dc_started if progressive else self.sequential_seen
        if coded != set(components):
            raise Unusual('a component is never coded')
        return JpegFacts(width, height, len(components))


_TABLE_SEGMENTS = {}  # (marker, segment body) -> frozenset of the tables defined, or why not
_MAX_CACHED_SEGMENTS = 4096


def _quantization_tables(data, start, end):
    """The ids of the quantization tables of a DQT segment body."""
    position = start
    while position < end:
        precision, table = data[position] >> 4, data[position] & 0x0F
        size = 128 if precision else 64
        if precision > 1 or table >= _TABLES or position + 1 + size > end:
            raise Unusual('malformed quantization table')
        yield table
        position += 1 + size


def _huffman_tables(data, start, end):
    """The (class, id) of the Huffman tables of a DHT segment body, checked as libjpeg does."""
    position = start
    while position < end:
        table_class, table = data[position] >> 4, data[position] & 0x0F
        if table_class > 1 or table >= _TABLES or position + 17 > end:
            raise Unusual('malformed Huffman table')
        counts = data[position + 1 : position + 17]
        total = sum(counts)
        symbols = data[position + 17 : position + 17 + total]
        if not 0 < total <= 256 or len(symbols) != total or position + 17 + total > end:
            raise Unusual('Huffman table with a bad symbol count')
        if not _huffman_code_fits(counts) or (table_class == 0 and max(symbols) > 15):
            raise Unusual('Huffman table libjpeg refuses (bogus code lengths or DC symbol)')
        yield table_class, table
        position += 17 + total


def _huffman_code_fits(counts):
    """libjpeg's check of code lengths (jdhuff.c jpeg_make_d_derived_tbl): codes are assigned in
    order of length, and none may be all ones."""
    lengths = [length for length in range(1, 17) if counts[length - 1]]
    code = 0
    for length in range(lengths[0], lengths[-1] + 1):
        code += counts[length - 1]
        if code >= 1 << length:
            return False
        code <<= 1
    return True


def _exif_orientation(tiff):
    """The orientation tag of EXIF's first directory (1 when absent); Unusual where the
    directory cannot be read plainly (Pillow's reading of it decides then)."""
    if tiff[:4] == b'II*\x00':
        endian = '<'
    elif tiff[:4] == b'MM\x00*':
        endian = '>'
    else:
        raise Unusual('EXIF without a TIFF header')
    (offset,) = struct.unpack_from(endian + 'I', tiff, 4)
    if offset + 2 > len(tiff):
        raise Unusual('EXIF directory out of range')
    (entries,) = struct.unpack_from(endian + 'H', tiff, offset)
    if offset + 2 + 12 * entries > len(tiff):
        raise Unusual('EXIF directory out of range')
    found = []
    for position in range(offset + 2, offset + 2 + 12 * entries, 12):
        tag, kind, count = struct.unpack_from(endian + 'HHI', tiff, position)
        if tag == _ORIENTATION:
            if kind != 3 or count != 1:
                raise Unusual('EXIF orientation of an unusual type')
            found.append(struct.unpack_from(endian + 'H', tiff, position + 8)[0])
    if len(found) > 1:
        raise Unusual('several EXIF orientations')
    return found[0] if found else 1


def jpeg_facts(data, max_scans):
    """JpegFacts of a plainly valid baseline or progressive JPEG; raises Unusual otherwise.

    Walks every marker segment and scan up to the end marker, as libjpeg would read them;
    bytes after the end marker are ignored, as decoders do.
    """
    if data[:2] != b'\xff\xd8':
        raise Unusual('no start-of-image marker')
    header = _header(data)
    cached = _HEADERS.get(header) if header else None
    if cached is not None:  # the same bytes up to the first scan: the same checks passed
        jpeg = cached.copy(data, max_scans)
        position = _scan_end(jpeg, len(header))
    else:
        jpeg, position = _Jpeg(data, max_scans), 2
    size = len(data)
    while True:
        if position + 1 >= size or data[position] != 0xFF:
            raise Unusual(f'no marker at byte {position}')
        while position < size and data[position] == 0xFF:
            position += 1
        marker = data[position] if position < size else _SOI
        position += 1
        if marker == _EOI and jpeg.scans:
            return jpeg.facts()
        if marker in (_EOI, _SOI, 0x00, 0x01) or marker in _RST or position + 2 > size:
            raise Unusual(f'marker 0x{marker:02X} out of place')
        (length,) = struct.unpack_from('>H', data, position)
        end = position + length
        if length < 2 or end > size:
            raise Unusual('segment runs past the end of the file')
        jpeg.segment(marker, position + 2, end)
        if marker == _SOS:
            if jpeg.scans == 1 and header and len(header) == end and cached is None:
                _remember_header(header, jpeg)
            position = _scan_end(jpeg, end)
        else:
            position = end


def _header(data):
    """The bytes up to the end of what looks like the first scan header: files that an encoder
    wrote with the same settings share them, and so the checks of everything before the scan
    (images of one size from one pipeline, as training sets often are). b'' if none is found."""
    start = data.find(b'\xff\xda', 2, 65536)
    if start < 0 or start + 4 > len(data):
        return b''
    return data[: start + 2 + struct.unpack_from('>H', data, start + 2)[0]]


_HEADERS = {}  # header bytes -> the _Jpeg state after its first scan header
_MAX_HEADERS = 256


def _remember_header(header, jpeg):
    if len(_HEADERS) >= _MAX_HEADERS:
        _HEADERS.clear()
    _HEADERS[header] = jpeg.copy(b'', jpeg.max_scans)


def _scan_end(jpeg, position):
    """Where the marker after a scan's coded data starts; checks its restart markers."""
    data, expected = jpeg.data, 0
    while True:
        found = _MARKER_CANDIDATE.search(data, position)
        if found is None:
            raise Unusual('scan data runs to the end of the file')
        after = found.start() + 1
        while after < len(data) and data[after] == 0xFF:  # fill bytes before a marker
            after += 1
        marker = data[after] if after < len(data) else 0x00
        if marker == 0x00:
            raise Unusual('fill bytes inside scan data')
        if marker not in _RST:
            return found.start()
        expected = jpeg.restart(marker, expected)
        position = after + 1
