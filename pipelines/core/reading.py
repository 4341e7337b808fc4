"""Reading an input's bytes, wherever they are (pipelines/core/sources.py): the one reader that
validation and the writer share.

A `Reader` reads a file of its own with `storage.read_input`, and an input inside a container
through the container, which it keeps open while it is used: validation reads a work item's
members one after another, in the container's order, through one stream of the container (on
gs://, a few large requests instead of one per member); the writer reads members in a shard's
order, each by its byte range. A sequential source is read by going forward through its
decompressed stream, which stays open between reads. Memory stays bounded by the input: a
member larger than the most a build reads of one (--max-image-bytes) is refused from its size,
unread, and a zip member is never inflated past the size its entry declares.

A container that does not hold what its listing found (cut short, corrupt, changed) raises
`Unreadable` with a reason code, which validation turns into a rejection.
"""

import gzip
import io
import os
import struct
import threading
import zlib

from PIL import Image

from imageshards import records
from imageshards import storage
from imageshards.shard_formats import tfrecord
from pipelines.core import sources
from pipelines.core.sources import Source

# A zip member's local header (30 bytes): its signature, and the lengths of its name and extra.
_LOCAL_HEADER = struct.Struct('<4s22xHH')
_SKIP_CHUNK = 1 << 20
_PNG_MODES = {1: 'L', 3: 'RGB'}


class Unreadable(Exception):
    """An input inside a container whose bytes cannot be read as listed: `reason` is its
    rejection's code, `detail` says what was found."""

    def __init__(self, reason, detail):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


class Reader:
    """Reads inputs' bytes for one thread (`thread_reader`), keeping open the containers it
    reads and its sequential streams.

    Args:
        contiguous: reads come in a container's order (a validation work item): a container
            on a remote store is read as one stream; else each read is a request of its own.
    """

    def __init__(self, contiguous=False, max_open=8):
        self._contiguous = contiguous
        self._max_open = max_open
        self._open = {}  # container -> RangeReader, oldest first
        self._streams = {}  # Source.stream -> _Stream

    def read(self, path, source, max_bytes) -> bytes:
        """The bytes of the input at `path` (`source`: its encoded Source, '' for a file of its
        own): the encoded image, for a PIXELS source its PNG, for an EXAMPLE its image.

        Raises:
            storage.TooLarge: an input larger than `max_bytes`, unread.
            Unreadable: a container that does not hold the input as it was listed.
        """
        if not source:
            return storage.read_input(path, max_bytes)
        source = Source.decode(source)
        size = source.zip_entry.size if source.how == sources.ZIP else source.length
        if size > max_bytes:
            raise storage.TooLarge(source.display, size, max_bytes)
        if source.sequential:
            data = self._stream(source).read(source.offset, source.length)
        elif source.how == sources.ZIP:
            data = _zip_member(self._handle(source.container), source)
        else:
            data = self._handle(source.container).read(source.offset, source.length)
        if len(data) != source.length and source.how != sources.ZIP:
            raise _cut_short(source, len(data))
        return _content(source, data)

    def close(self) -> None:
        for handle in [*self._open.values(), *self._streams.values()]:
            handle.close()
        self._open.clear()
        self._streams.clear()

    def _handle(self, container):
        handle = self._open.pop(container, None)
        if handle is None:
            handle = RangeReader(container, self._contiguous)
            while len(self._open) >= self._max_open:
                self._open.pop(next(iter(self._open))).close()
        self._open[container] = handle  # the most recent last
        return handle

    def _stream(self, source):
        stream = self._streams.get(source.stream)
        if stream is None:
            for other in self._streams.values():  # one stream at a time: they hold buffers
                other.close()
            self._streams = {source.stream: _Stream(source)}
            stream = self._streams[source.stream]
        return stream


_THREAD = threading.local()


def thread_reader() -> Reader:
    """This thread's Reader for reads in no set order (the writer's)."""
    reader = getattr(_THREAD, 'reader', None)
    if reader is None:
        reader = _THREAD.reader = Reader()
    return reader


class SourceStream:
    """An input's bytes inside a container as a file object read forward (`read(size)`), never
    held whole: what the listing streams of a large member (a COCO annotation file in an
    archive). A container that ends before the member does raises Unreadable."""

    def __init__(self, source):
        self._source = source
        self._position = 0
        if source.how == sources.RANGE:
            self._reader, self._start = RangeReader(source.container, True), source.offset
        else:  # a zip member is inflated from its start; a .tar.gz's member is reached forward
            self._reader = _Stream(source)
            self._start = 0 if source.how == sources.ZIP else source.offset

    def read(self, size=-1) -> bytes:
        left = self._source.length - self._position
        size = left if size is None or size < 0 else min(size, left)
        if size <= 0:
            return b''
        data = self._reader.read(self._start + self._position, size)
        if not data:
            raise _cut_short(self._source, self._position)
        self._position += len(data)
        return data

    def close(self) -> None:
        self._reader.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


class RangeReader:
    """A container open for reads of byte ranges: a local file's descriptor (one `pread`, no
    seek, a read), or a remote object's stream (contiguous reads) or ranged requests."""

    def __init__(self, container, contiguous):
        self._container = container
        self._fd = None if storage.is_uri(container) else os.open(container, os.O_RDONLY)
        self._file = None
        if self._fd is None and contiguous:
            self._file = storage.open_read(container)

    def read(self, offset, length):
        if self._fd is not None:
            return os.pread(self._fd, length, offset)
        if self._file is None:
            return storage.read_range(self._container, offset, offset + length)
        self._file.seek(offset)
        return self._file.read(length)

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._file is not None:
            self._file.close()
            self._file = None


def _zip_member(handle, source):
    """The bytes of a zip member, inflated and checked against its entry's size and CRC-32."""
    entry = sources.ZipEntry(*source.zip_entry)
    data_offset = _zip_data_offset(handle.read, source)
    data = handle.read(data_offset, entry.compressed_size)
    if len(data) != entry.compressed_size:
        raise _cut_short(source, len(data), entry.compressed_size)
    if entry.method == 8:
        data = _inflate(data, entry.size, source)
    if len(data) != entry.size:
        raise Unreadable(
            'corrupt_archive', f'{source.display}: {len(data):,} bytes, not {entry.size:,}'
        )
    if zlib.crc32(data) != entry.crc32:
        raise Unreadable('corrupt_archive', f'{source.display}: its bytes fail their CRC-32')
    return data


def _zip_data_offset(read_at, source):
    """Where a zip member's data begins, after its local header (`read_at(offset, length)`
    reads the container)."""
    at = sources.ZipEntry(*source.zip_entry).header_offset
    header = read_at(at, _LOCAL_HEADER.size)
    if len(header) < _LOCAL_HEADER.size or header[:4] != b'PK\x03\x04':
        raise Unreadable('corrupt_archive', f'{source.display}: no local header at byte {at:,}')
    _, name_length, extra_length = _LOCAL_HEADER.unpack(header)
    return at + _LOCAL_HEADER.size + name_length + extra_length


def _inflate(data, size, source):
    """Raw deflate data inflated to at most `size` + 1 bytes: a member that inflates past its
    declared size is a zip bomb, stopped there."""
    inflater = zlib.decompressobj(-15)
    try:
        inflated = inflater.decompress(data, size + 1)
    except zlib.error as e:
        raise Unreadable('corrupt_archive', f'{source.display}: {e}') from None
    if len(inflated) > size or inflater.unconsumed_tail:
        raise Unreadable(
            'zip_bomb',
            f'{source.display}: inflates to more than the {size:,} bytes its entry declares',
        )
    return inflated


def _cut_short(source, found, wanted=None):
    wanted = source.length if wanted is None else wanted
    return Unreadable(
        'truncated_archive',
        f'{source.display}: the container ends {found:,} bytes into it, of {wanted:,}',
    )


def _content(source, data):
    """The encoded image of a source's bytes."""
    if source.content == sources.PIXELS:
        return pixels_png(data, source.shape)
    if source.content == sources.EXAMPLE:
        return example_image(data, source.display)
    return data


def pixels_png(data, shape) -> bytes:
    """A lossless PNG of a uint8 array row of `shape` (height, width, channels): the same
    bytes from the same Pillow and zlib, so that the writer's equal validation's."""
    height, width, channels = shape
    image = Image.frombytes(_PNG_MODES[channels], (width, height), data)
    buffer = io.BytesIO()
    image.save(buffer, format='PNG', compress_level=6)
    return buffer.getvalue()


def example_image(framed, name) -> bytes:
    """The `image/encoded` of a framed TFRecord record of a `tf.train.Example`."""
    try:
        (record,) = tfrecord.read_records(io.BytesIO(framed), name)
        example = records.parse_example(record)
    except tfrecord.CorruptRecordError as e:
        raise Unreadable('corrupt_record', str(e)) from None
    except records.NotAnExampleError as e:
        raise Unreadable('not_an_example', f'{name}: {e}') from None
    encoded = example.features.feature.get('image/encoded')
    values = encoded.bytes_list.value if encoded is not None else []
    if len(values) != 1:
        raise Unreadable(
            'no_image_feature', f'{name}: {len(values)} values of image/encoded, not one'
        )
    return values[0]


class _Stream:
    """A sequential source's decompressed stream, read forward (opened again from its start
    for a read behind it)."""

    def __init__(self, source):
        self._source = source
        self._raw = self._decoded = None
        self._position = 0

    def read(self, offset, length):
        if self._decoded is None or offset < self._position:
            self._open()
        try:
            while self._position < offset:
                skipped = len(self._decoded.read(min(_SKIP_CHUNK, offset - self._position)))
                if not skipped:
                    break
                self._position += skipped
            data = self._decoded.read(length) if self._position == offset else b''
        except (OSError, EOFError, zlib.error) as e:  # gzip's BadGzipFile is an OSError
            self.close()
            raise Unreadable('corrupt_archive', f'{self._source.display}: {e}') from None
        self._position += len(data)
        return data

    def _open(self):
        self.close()
        source = self._source
        if storage.is_uri(source.container):
            self._raw = storage.open_read(source.container)
        else:
            self._raw = open(source.container, 'rb')  # pylint: disable=consider-using-with
        if source.how == sources.GZIP:
            self._decoded = gzip.GzipFile(fileobj=self._raw)
        else:
            self._decoded = _InflatingMember(self._raw, source)
        self._position = 0

    def close(self):
        for f in (self._decoded, self._raw):
            if f is not None:
                f.close()
        self._raw = self._decoded = None


class _InflatingMember:
    """A zip member's data, inflated as it is read (ZIP_STREAM), a chunk at a time."""

    def __init__(self, raw, source):
        entry = sources.ZipEntry(*source.zip_entry)
        raw.seek(_zip_data_offset(lambda offset, n: _read_at(raw, offset, n), source))
        self._raw = raw
        self._left = entry.compressed_size
        self._stored = entry.method == 0
        self._inflater = zlib.decompressobj(-15)
        self._pending = b''

    def read(self, size):
        parts, wanted = [], size
        while wanted > 0:
            if not self._pending:
                self._pending = self._more()
                if not self._pending:
                    break
            part, self._pending = self._pending[:wanted], self._pending[wanted:]
            parts.append(part)
            wanted -= len(part)
        return b''.join(parts)

    def _more(self):
        """The member's next data, at most _SKIP_CHUNK bytes of it; b'' at its end."""
        while True:
            tail = b'' if self._stored else self._inflater.unconsumed_tail
            if not tail:
                tail = self._raw.read(min(_SKIP_CHUNK, self._left)) if self._left else b''
                self._left -= len(tail)
                if not tail or self._stored:
                    return tail
            data = self._inflater.decompress(tail, _SKIP_CHUNK)
            if data or self._inflater.eof:
                return data

    def close(self):
        pass


def _read_at(f, offset, length):
    f.seek(offset)
    return f.read(length)
