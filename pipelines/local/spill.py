"""The local runner's block store: blocks spilled to files, and the bytes of small images kept
for the writer.

The local FnApiRunner holds every element of its shuffles in the launching process, so its
builds pass blocks (pipelines/core/blocks.py) as byte ranges `(name, offset, length)` of
files under the build's temporary folder (OUT/.imageshards-tmp/blocks/). The files go through
`FileSystems`, and Finalize deletes them with the rest of `OUT/.imageshards-tmp/`. A build whose
output is not on this machine (gs://) spills to a temporary folder of this machine's instead
(`temporary`), which the store removes when closed: its blocks are read back many times, and
each read from Cloud Storage would wait for a request or three.

The store also keeps the bytes that records of small images will store ("payloads"): validation,
which has just read and checked them, appends each work item's to one file, and the writer reads
them back by byte range, a few files per shard, instead of opening every input a second time, which
for small images is most of the writer's time (bench/RESULTS.md, "Against the peers: TFDS, Hugging
Face `datasets`, Keras", its payload files). An ImageMeta then names its payload (`payload`, a file
number, and `payload_offset`). Larger images (over PAYLOAD_MAX_BYTES) are read again from their
inputs, as on Dataflow: for them, copying the bytes out and back costs more than opening the file. A
resize (--resize-shorter-side) is kept whatever its size: making it again would decode the input
again. A payload file writes each image out as it comes, so that a work item of large resizes costs
bounded memory.
"""

import collections
import os
import shutil
import tempfile
import threading
import uuid

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from imageshards import storage
from pipelines.core import blocks
from pipelines.core.reading import RangeReader
from pipelines.core.sources import SMALL_INPUT_BYTES

PAYLOAD_MAX_BYTES = SMALL_INPUT_BYTES


class SpillingStore(blocks.BlockStore):
    """Spills blocks to files in `spill_dir` and passes byte ranges of them as refs; keeps the
    stored bytes of small images in payload files.

    Configuration only, so that it pickles into every DoFn that puts or gets blocks.
    """

    def __init__(self, spill_dir, owned=False):
        self.spill_dir = spill_dir
        self._owned = owned  # a temporary folder of its own, removed on close

    @classmethod
    def temporary(cls):
        """A store in a new temporary folder of this machine's, removed when it is closed."""
        return cls(tempfile.mkdtemp(prefix='imageshards-blocks-'), owned=True)

    def put(self, prefix, blocks):
        """Refs of `blocks`: byte ranges of one new file named after `prefix`."""
        name = f'{prefix}-{uuid.uuid4().hex}.bin'
        refs, offset = [], 0
        with FileSystems.create(
            FileSystems.join(self.spill_dir, name), compression_type=CompressionTypes.UNCOMPRESSED
        ) as f:
            for block in blocks:
                f.write(block)
                refs.append((name, offset, len(block)))
                offset += len(block)
        return refs

    def appender(self):
        """Puts one bundle's blocks in one file of its own, not a file each (`_AppendedPuts`)."""
        if FileSystems.get_scheme(self.spill_dir) is None:
            return _AppendedPuts(self.spill_dir)
        return super().appender()

    def get(self, ref):
        """The block a ref stands for (an inline ref is the block itself)."""
        if isinstance(ref, bytes):
            return ref
        name, offset, length = ref
        if not length:
            return b''
        path = FileSystems.join(self.spill_dir, name)
        if FileSystems.get_scheme(path) is None:
            block = _read_local(path, offset, length)
        else:
            with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                f.seek(offset)
                block = f.read(length)
        if len(block) != length:
            raise OSError(f'{path}: expected {length} bytes at {offset}, read {len(block)}')
        return block

    def close(self):
        """Closes this process's descriptors of the store's files (a run in this process is
        done with them: kept open, a removed file would keep its disk space)."""
        with _OPEN_LOCK:
            for path in [path for path in _OPEN if path.startswith(self.spill_dir)]:
                os.close(_OPEN.pop(path))
        if getattr(self, '_owned', False):  # pickled copies own nothing
            shutil.rmtree(self.spill_dir, ignore_errors=True)

    def payloads(self):
        """A PayloadFile for one work item's stored bytes."""
        return PayloadFile(self.spill_dir)

    def read_payloads(self, metas, read_input, window_bytes=64 << 20, path_of=None):
        """Yields the stored bytes of each of `metas`, in their order: from its payload, or
        `read_input(meta)` for an image without one (whose file `path_of(meta)`, if given, is
        asked of the kernel ahead: `storage.prefetching`). Each window of at most
        `window_bytes` of payloads is read file by file, in offset order: a payload file is
        opened once per window, not once per image."""
        start = 0
        while start < len(metas):
            end, size = start, 0
            while end < len(metas) and (
                end == start or size + metas[end].num_bytes <= window_bytes
            ):
                size += metas[end].num_bytes if metas[end].payload else 0
                end += 1
            window = metas[start:end]
            found = [None] * len(window)
            kept = sorted(
                (m.payload, m.payload_offset, i) for i, m in enumerate(window) if m.payload
            )
            for _, _, i in kept:
                found[i] = self._read_payload(window[i])
            self._open_payloads.clear()
            if len(kept) == len(window):  # nothing to read from the inputs
                yield from found
            else:
                ahead = lambda m: None if m.payload or not path_of else path_of(m)
                for i, meta in enumerate(storage.prefetching(window, ahead)):
                    yield found[i] if meta.payload else read_input(meta)
                    found[i] = None
            start = end

    def _read_payload(self, meta):
        handle = self._open_payloads.get(meta.payload)
        if handle is None:
            self._open_payloads.clear()  # one file open at a time: reads come sorted by file
            path = storage.join(self.spill_dir, payload_name(meta.payload))
            # Local: one pread a read, where a buffered file's seek and read cost more than the
            # read of a few-KB image (bench/RESULTS.md, "Build cost per image").
            handle = self._open_payloads[meta.payload] = RangeReader(path, contiguous=True)
        data = handle.read(meta.payload_offset, meta.num_bytes)
        if len(data) != meta.num_bytes:
            path = storage.join(self.spill_dir, payload_name(meta.payload))
            raise OSError(f'{path}: expected {meta.num_bytes} bytes at {meta.payload_offset}')
        return data

    @property
    def _open_payloads(self):
        if not hasattr(self, '_handles'):
            self._handles = _Handles()
        return self._handles

    def __getstate__(self):
        return {'spill_dir': self.spill_dir}


def payload_name(number):
    return f'payload-{number:016x}.bin'


# Open descriptors of local spill files, by path, oldest first: a step reads the blocks of many
# groups from the same few files (one per work item that put them), and opening a file again
# for each of a multi-label build's thousands of label-set groups costs a system call or two
# per block.
_OPEN = collections.OrderedDict()
_MAX_OPEN = 256
_OPEN_LOCK = threading.Lock()


def _read_local(path, offset, length):
    """`length` bytes at `offset` of a local spill file, through a kept descriptor (read under
    the lock, so that no other thread closes it meanwhile)."""
    with _OPEN_LOCK:
        fd = _OPEN.pop(path, None)
        if fd is None:
            fd = os.open(path, os.O_RDONLY)
            while len(_OPEN) >= _MAX_OPEN:
                os.close(_OPEN.popitem(last=False)[1])
        _OPEN[path] = fd
        return os.pread(fd, length, offset)


class _Handles(dict):
    """Open payload files by number, closed when forgotten."""

    def clear(self):
        for handle in self.values():
            handle.close()
        super().clear()


class _AppendedPuts(blocks.Puts):
    """Appends every put's blocks to one local file, named after the first put's prefix: creating
    a file cost more than writing a work item's blocks (bench/RESULTS.md, "Build cost per
    image"). Each put is written at once, unbuffered, so its blocks can be read as soon as their
    refs leave."""

    def __init__(self, spill_dir):  # pylint: disable=super-init-not-called
        self._spill_dir = spill_dir
        self._fd, self._name, self._size = None, None, 0

    def put(self, prefix, blocks):
        if self._fd is None:
            os.makedirs(self._spill_dir, exist_ok=True)
            self._name = f'{prefix}-{uuid.uuid4().hex}.bin'
            path = os.path.join(self._spill_dir, self._name)
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        refs, blocks = [], list(blocks)
        for block in blocks:
            refs.append((self._name, self._size, len(block)))
            self._size += len(block)
        data = memoryview(b''.join(blocks))
        while data:  # a write may take less than it is given
            data = data[os.write(self._fd, data) :]
        return refs

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class PayloadFile:
    """Appends one work item's stored image bytes to a payload file of its own, as they come:
    validation holds no image's bytes once it has handed them here."""

    def __init__(self, spill_dir):
        self._spill_dir = spill_dir
        self.number = uuid.uuid4().int & ((1 << 63) - 1) or 1
        self._file, self._size = None, 0

    def add(self, data, always=False):
        """Keeps `data` if small enough to be worth it (PAYLOAD_MAX_BYTES), or `always`;
        returns (payload, offset) for its ImageMeta, or None."""
        if len(data) > PAYLOAD_MAX_BYTES and not always:
            return None
        if self._file is None:
            self._file = self._create()
        offset = self._size
        self._file.write(data)
        self._size += len(data)
        return self.number, offset

    def _create(self):
        path = FileSystems.join(self._spill_dir, payload_name(self.number))
        if FileSystems.get_scheme(path) is None:
            os.makedirs(self._spill_dir, exist_ok=True)
            # pylint: disable-next=consider-using-with
            return open(path, 'wb', buffering=storage.WRITE_BUFFER)
        return FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)

    def flush(self):
        """Writes what the buffer holds: the bytes added so far are then readable."""
        if self._file is not None:
            self._file.flush()

    def close(self):
        if self._file is not None:
            self._file.close()
            self._file = None
