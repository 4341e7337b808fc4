"""TFRecord framing, written and checked without TensorFlow's file layer.

Shards go through Beam's `FileSystems` (local, `gs://`, and a GCS emulator alike), which
`tf.io.TFRecordWriter` cannot do. The format: for each record, its length as little-endian
uint64, the masked CRC32C of those 8 bytes, the data, and the masked CRC32C of the data.

A shard's index file (`<shard>.idx`) is what NVIDIA DALI's `tfrecord2idx` writes, and what
DALI's `fn.readers.tfrecord` and the PyTorch `tfrecord` package read: one line per record, its
byte offset in the file and its framed length (header, data and footer), as decimal ASCII
(`0 1234\n1234 987\n...`).
"""

import struct

import google_crc32c

_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct('<QI')
_FOOTER = struct.Struct('<I')


class CorruptRecordError(ValueError):
    """A TFRecord file whose framing or checksums do not hold."""


def masked_crc32c(data):
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class _Headers(dict):
    """A record's header (its length and the length's masked CRC) by its length: records of
    a shard have a few thousand lengths between them (at most _MAX_HEADERS kept)."""

    def __missing__(self, length):
        if len(self) > _MAX_HEADERS:
            self.clear()
        packed = struct.pack('<Q', length)
        header = self[length] = _HEADER.pack(length, masked_crc32c(packed))
        return header


_MAX_HEADERS = 100_000
_HEADERS = _Headers()


def frame(record):
    """The bytes that store one record in a TFRecord file."""
    return b''.join((_HEADERS[len(record)], record, _FOOTER.pack(masked_crc32c(record))))


FRAMING_BYTES = _HEADER.size + _FOOTER.size  # what framing adds to a record's length


def index_text(framed_lengths):
    """The index file of a TFRecord file whose framed records have `framed_lengths`, in order."""
    lines, offset = [], 0
    for length in framed_lengths:
        lines.append(f'{offset} {length}\n')
        offset += length
    return ''.join(lines).encode('ascii')


def parse_index(data):
    """[(offset, framed length)] of an index file's bytes.

    Raises:
        ValueError: a line that is not two non-negative decimal integers (naming it).
    """
    entries = []
    for number, line in enumerate(data.decode('ascii', 'replace').splitlines(), 1):
        fields = line.split()
        if len(fields) != 2 or not all(field.isdigit() for field in fields):
            raise ValueError(f'line {number} is {line[:40]!r}, not "offset length"')
        entries.append((int(fields[0]), int(fields[1])))
    return entries


def read_records(f, name='<stream>'):
    """Yields the records of an open binary TFRecord file, checking every length and CRC.

    Raises:
        CorruptRecordError: naming `name` and the record's offset, on a bad checksum or a
            truncated file.
    """
    offset = 0
    while True:
        header = f.read(_HEADER.size)
        if not header:
            return
        if len(header) < _HEADER.size:
            raise CorruptRecordError(f'{name}: truncated record header at byte {offset}')
        length, length_crc = _HEADER.unpack(header)
        if masked_crc32c(header[:8]) != length_crc:
            raise CorruptRecordError(f'{name}: corrupt record length at byte {offset}')
        data = f.read(length)
        footer = f.read(_FOOTER.size)
        if len(data) < length or len(footer) < _FOOTER.size:
            raise CorruptRecordError(f'{name}: truncated record at byte {offset}')
        if masked_crc32c(data) != _FOOTER.unpack(footer)[0]:
            raise CorruptRecordError(f'{name}: corrupt record data at byte {offset}')
        offset += FRAMING_BYTES + length
        yield data
