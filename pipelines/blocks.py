"""Image metadata in blocks: what the build's shuffles move, packed many images to one value.

A block is the metadata of many images (`ImageMeta`) packed into one bytes value, about 100
bytes per image. Every step between validation and writing passes blocks, never one element
per image: Python objects of a million images cost the local runner ~0.5 KB each, and one
element per image costs any shuffle its per-element overhead.

A block travels in one of two forms, both the `ref` of a `BlockStore`:
* inline (`bytes`): the block itself. On Dataflow, its shuffle service holds the data.
* spilled (`(name, offset, length)`): a byte range of a file under the build's temporary
  folder, for the local runner, whose shuffles hold every element in the launching process.
  The files go through `FileSystems`, so an output on gs:// works too, and Finalize deletes
  them with the rest of `OUT/.imageshards-tmp/`.

A spilling store also keeps the bytes that records of small images will store ("payloads"):
validation, which has just read and checked them, appends each work item's to one file, and
the writer reads them back by byte range, a few files per shard, instead of opening every input
a second time (at 200,000 images of 2 KB, half of the writer's time went to opening and reading
files). An ImageMeta then names its payload (`payload`, a file number, and `payload_offset`).
Larger images (over PAYLOAD_MAX_BYTES) are read again from their inputs, as on Dataflow: for
them, copying the bytes out and back costs more than opening the file (20,000 photos of 47 KB
built 0.5 to 2 s faster without payloads).
"""

import os
import struct
import typing
import uuid

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from imageshards import storage

PAYLOAD_MAX_BYTES = 16 << 10


class ImageMeta(typing.NamedTuple):
    """What the shuffle moves for one valid image: compact metadata, never pixels or bytes."""

    id: int
    key: str  # the source is `inputs.source_path(base, key)`
    label: int
    split: str  # a manifest's split, or '' to be assigned
    format: str
    height: int
    width: int
    channels: int
    sha256: bytes  # digest of the stored bytes (the original, or the lossless re-encode)
    num_bytes: int  # of the stored bytes
    source_sha256: bytes  # digest of the source file when re-encoded, else b''
    source_crc32c: int  # lets the writer check cheaply that the file has not changed since
    reencoded: bool
    levels: tuple = ()  # label level ids, in the build's level order (-1: missing)
    payload: int = 0  # the number of the payload file holding the stored bytes; 0: none
    payload_offset: int = 0  # where in it (`num_bytes` long)

    @property
    def content_digest(self):
        """The sha256 digest of the source file's bytes."""
        return self.source_sha256 or self.sha256

    def with_payload(self, payload, offset):
        """This ImageMeta with its stored bytes at `offset` in payload file `payload`."""
        return _new_meta(ImageMeta, (*self[:-2], payload, offset))


# ImageMeta from a tuple of every field, without the keyword handling of ImageMeta(...): a
# million images are made several times over in a build.
_new_meta = tuple.__new__


# id, label, height, width, channels, num_bytes, source_crc32c, reencoded, payload,
# payload_offset, then the byte lengths of key, split, format, sha256 and source_sha256 and the
# number of label level ids; then key, split, format, sha256 and source_sha256 and the level ids
# as int32, in that order.
_FIXED = struct.Struct('<qIIIHQI?QQIHBBBB')
_LEVEL_ID = struct.Struct('<i')


def pack(metas):
    """One block of `metas`, in their order."""
    parts = []
    for meta in metas:
        key, split, fmt = meta.key.encode(), meta.split.encode(), meta.format.encode()
        parts.append(
            _FIXED.pack(
                meta.id,
                meta.label,
                meta.height,
                meta.width,
                meta.channels,
                meta.num_bytes,
                meta.source_crc32c,
                meta.reencoded,
                meta.payload,
                meta.payload_offset,
                len(key),
                len(split),
                len(fmt),
                len(meta.sha256),
                len(meta.source_sha256),
                len(meta.levels),
            )
        )
        parts += (key, split, fmt, meta.sha256, meta.source_sha256)
        if meta.levels:
            parts.append(struct.pack(f'<{len(meta.levels)}i', *meta.levels))
    return b''.join(parts)


def unpack(block):
    """The ImageMeta of a block, in the order they were packed."""
    metas, position, size = [], 0, len(block)
    while position < size:
        (
            image_id,
            label,
            height,
            width,
            channels,
            num_bytes,
            crc,
            reencoded,
            payload,
            payload_offset,
            key_len,
            split_len,
            format_len,
            sha_len,
            source_len,
            num_levels,
        ) = _FIXED.unpack_from(block, position)
        position += _FIXED.size
        key = block[position : position + key_len].decode()
        position += key_len
        split = block[position : position + split_len].decode()
        position += split_len
        fmt = block[position : position + format_len].decode()
        position += format_len
        sha256 = block[position : position + sha_len]
        position += sha_len
        source_sha256 = block[position : position + source_len]
        position += source_len
        levels = struct.unpack_from(f'<{num_levels}i', block, position) if num_levels else ()
        position += _LEVEL_ID.size * num_levels
        metas.append(
            _new_meta(
                ImageMeta,
                (
                    image_id,
                    key,
                    label,
                    split,
                    fmt,
                    height,
                    width,
                    channels,
                    sha256,
                    num_bytes,
                    source_sha256,
                    crc,
                    reencoded,
                    levels,
                    payload,
                    payload_offset,
                ),
            )
        )
    return metas


class BlockStore:
    """Keeps blocks inline, or spills them to files in `spill_dir` and passes byte ranges.

    Configuration only, so that it pickles into every DoFn that puts or gets blocks.
    """

    def __init__(self, spill_dir=None):
        self.spill_dir = spill_dir

    def put(self, prefix, blocks):
        """Refs of `blocks`; spilled, they share one new file named after `prefix`."""
        if not self.spill_dir:
            return list(blocks)
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

    def get(self, ref):
        """The block a ref stands for (an inline ref is the block itself)."""
        if isinstance(ref, bytes):
            return ref
        name, offset, length = ref
        if not length:
            return b''
        path = FileSystems.join(self.spill_dir, name)
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            f.seek(offset)
            block = f.read(length)
        if len(block) != length:
            raise OSError(f'{path}: expected {length} bytes at {offset}, read {len(block)}')
        return block

    def metas(self, refs):
        """Every ImageMeta of the blocks `refs` stand for."""
        return [meta for ref in refs for meta in unpack(self.get(ref))]

    def payloads(self):
        """A PayloadFile for one work item's stored bytes, or None (inline: none are kept)."""
        return PayloadFile(self.spill_dir) if self.spill_dir else None

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
            kept = sorted(
                (i for i in range(len(window)) if window[i].payload),
                key=lambda i: _payload_position(window[i]),
            )
            found = {i: self._read_payload(window[i]) for i in kept}
            self._open_payloads.clear()
            ahead = (lambda m: None if m.payload else path_of(m)) if path_of else _nothing
            for i, meta in enumerate(storage.prefetching(window, ahead)):
                yield found.pop(i) if meta.payload else read_input(meta)
            start = end

    def _read_payload(self, meta):
        path = storage.join(self.spill_dir, payload_name(meta.payload))
        handle = self._open_payloads.get(path)
        if handle is None:
            self._open_payloads.clear()  # one file open at a time: reads come sorted by file
            handle = self._open_payloads[path] = _open_local_or_remote(path)
        handle.seek(meta.payload_offset)
        data = handle.read(meta.num_bytes)
        if len(data) != meta.num_bytes:
            raise OSError(f'{path}: expected {meta.num_bytes} bytes at {meta.payload_offset}')
        return data

    @property
    def _open_payloads(self):
        if not hasattr(self, '_handles'):
            self._handles = _Handles()
        return self._handles

    def __getstate__(self):
        return {'spill_dir': self.spill_dir}


def _nothing(unused_meta):
    return None


def _payload_position(meta):
    return meta.payload, meta.payload_offset


def payload_name(number):
    return f'payload-{number:016x}.bin'


class _Handles(dict):
    """Open payload files, closed when forgotten."""

    def clear(self):
        for handle in self.values():
            handle.close()
        super().clear()


def _open_local_or_remote(path):
    if FileSystems.get_scheme(path) is None:
        return open(path, 'rb')  # pylint: disable=consider-using-with
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


class PayloadFile:
    """Appends one work item's stored image bytes to a payload file of its own."""

    def __init__(self, spill_dir):
        self._spill_dir = spill_dir
        self.number = uuid.uuid4().int & ((1 << 63) - 1) or 1
        self._parts, self._size = [], 0

    def add(self, data):
        """Keeps `data`; returns (payload, offset) for its ImageMeta."""
        offset = self._size
        self._parts.append(data)
        self._size += len(data)
        return self.number, offset

    def close(self):
        if not self._parts:
            return
        path = FileSystems.join(self._spill_dir, payload_name(self.number))
        if FileSystems.get_scheme(path) is None:
            os.makedirs(self._spill_dir, exist_ok=True)
            with open(path, 'wb') as f:
                f.writelines(self._parts)
        else:
            with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                for part in self._parts:
                    f.write(part)
        self._parts = []
