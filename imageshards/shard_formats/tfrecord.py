"""TFRecord shards (`TFRecordFormat`), and TFRecord framing written and checked without
TensorFlow's file layer (also for TFRecord inputs: pipelines/inputs/tfrecord_inputs.py).

Shards go through Beam's `FileSystems` (local, `gs://`, and a GCS emulator alike), which
`tf.io.TFRecordWriter` cannot do. The format: for each record, its length as little-endian
uint64, the masked CRC32C of those 8 bytes, the data, and the masked CRC32C of the data.

A shard's index file (`<shard>.idx`) is what NVIDIA DALI's `tfrecord2idx` writes, and what
DALI's `fn.readers.tfrecord` and the PyTorch `tfrecord` package read: one line per record, its
byte offset in the file and its framed length (header, data and footer), as decimal ASCII
(`0 1234\n1234 987\n...`).
"""

import hashlib
import struct

import google_crc32c

from imageshards.shard_formats.shard_format import CorruptRecordError
from imageshards.shard_formats.shard_format import ShardFormat
from imageshards.shard_formats.shard_format import WrittenShard
from imageshards.shard_formats.shard_format import write_whole

_MASK_DELTA = 0xA282EAD8
_HEADER = struct.Struct('<QI')
_FOOTER = struct.Struct('<I')


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


class TFRecordFormat(ShardFormat):
    """TFRecord shards: what TensorFlow, TFDS, DALI and the PyTorch `tfrecord` package read.

    Beside each shard goes its index file (`.idx`), the offset and framed length of every
    record as DALI's tfrecord2idx writes them, so that DALI and the `tfrecord` package read a
    build as it is.
    """

    name = 'tfrecord'
    suffix = '.tfrecord'
    index_suffix = '.idx'
    tfds_file_format = 'tfrecord'

    def write(self, path, records, files, temp_dir) -> WrittenShard:
        digest, lengths = hashlib.sha256(), []
        with files.created_whole(path, temp_dir) as f:
            for record in records:
                framed = frame(record)
                f.write(framed)
                digest.update(framed)
                lengths.append(len(framed))
        write_whole(files, path + self.index_suffix, temp_dir, index_text(lengths))
        return WrittenShard(len(lengths), sum(lengths), digest.hexdigest(), True)

    def read(self, f, name):
        offset = 0
        for record in read_records(f, name):
            yield offset, record
            offset += FRAMING_BYTES + len(record)

    def index_entries(self, record_lengths) -> list:
        return parse_index(index_text(FRAMING_BYTES + length for length in record_lengths))

    def parse_index(self, data) -> list:
        return parse_index(data)

    def tf_records(self, path):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        return tf.data.TFRecordDataset(path, buffer_size=1 << 20)
