"""Image metadata in blocks: what the build's shuffles move, packed many images to one value.

A block is the metadata of many images (`ImageMeta`) packed into one bytes value, about 100
bytes per image. Every step between validation and writing passes blocks, never one element
per image: a Python object per image would cost the local runner several times its packed size,
and one element per image costs any shuffle its per-element overhead.

Steps pass a block as the `ref` a store gives for it. `BlockStore` keeps blocks inline: the ref
is the block itself, and on Dataflow its shuffle service holds the data. The local runner,
whose shuffles hold every element in the launching process, passes a store that spills blocks
to files and refs to byte ranges of them, and keeps the bytes of small images for the writer
(pipelines/local/spill.py); steps see only the store's methods.
"""

import struct
import typing

from imageshards import file_names
from imageshards import storage


class ImageMeta(typing.NamedTuple):
    """What the shuffle moves for one valid image: compact metadata, never pixels or bytes."""

    id: int
    key: str  # the file is `sources.source_path(base, key)`, unless `source`; packed as bytes
    label: int  # the label's id; in a multi-label build, the sorted tuple of the image's ids
    split: str  # a manifest's split, or '' to be assigned
    format: str
    height: int
    width: int
    channels: int
    sha256: bytes  # digest of the stored bytes (the original, a lossless re-encode, a resize)
    num_bytes: int  # of the stored bytes
    source_sha256: bytes  # digest of the source file when re-encoded or resized, else b''
    source_crc32c: int  # lets the writer check cheaply that the file has not changed since
    reencoded: bool
    levels: tuple = ()  # label level ids, in the build's level order (-1: missing); a tuple
    # of ids per level in a multi-label build
    original_height: int = 0  # the source's size (as shown) where the record stores a resize
    original_width: int = 0  # of it (--resize-shorter-side); 0 where it stores the source
    group: str = ''  # its group (a manifest's group column, --group-pattern; packed as a key is)
    phash: int = -1  # its perceptual hash or signature (--near-duplicates: validation/
    # perceptual.py; a signature is an int of more than 64 bits); -1: none
    source: str = ''  # an input inside a container: its encoded sources.Source; '' for a file
    # What its input's annotation gives its record, packed by the build's kind
    # (imageshards/kinds/): boxes, masks, weights; b'' for none. Carried, never opened here.
    annotation: bytes = b''
    payload: int = 0  # the number of the payload file holding the stored bytes; 0: none
    payload_offset: int = 0  # where in it (`num_bytes` long)

    @property
    def resized(self) -> bool:
        """Whether the record stores a resize of the source (pipelines/validation/resize.py)."""
        return self.original_height > 0

    @property
    def content_digest(self) -> bytes:
        """The sha256 digest of the source file's bytes."""
        return self.source_sha256 or self.sha256

    def with_payload(self, payload, offset) -> 'ImageMeta':
        """This ImageMeta with its stored bytes at `offset` in payload file `payload`."""
        return _new_meta(ImageMeta, (*self[:-2], payload, offset))


# ImageMeta from a tuple of every field, without the keyword handling of ImageMeta(...): a
# million images are made several times over in a build.
_new_meta = tuple.__new__


def new_meta(fields) -> ImageMeta:
    """The ImageMeta of a tuple of all its fields, in order (what a step makes per image)."""
    if len(fields) != _NUM_FIELDS:
        raise TypeError(f'ImageMeta has {_NUM_FIELDS} fields, not {len(fields)}')
    return _new_meta(ImageMeta, fields)


_NUM_FIELDS = len(ImageMeta._fields)  # pylint: disable=protected-access


# id, label, height, width, channels, num_bytes, source_crc32c, reencoded, payload,
# payload_offset, then the byte lengths of key, split, format, sha256 and source_sha256, the
# number of level int32s and flags (bit 0: a multi-label image; bit 1: a resized one; bit 2: one
# with a group; bit 3: one with a perceptual hash; bit 4: one inside a container; bit 5: one
# with an annotation; bit 6: one whose hash is a signature, wider than 64 bits); then key,
# split, format, sha256 and source_sha256 and the level ids as int32, in that order, for a
# resized image its original height and width as uint32, then the group's length (uint16) and
# bytes, then the hash (uint64; a signature: its length, uint16, and big-endian bytes), then
# the source's length (uint32) and bytes, then the
# annotation's length (uint32) and bytes. A multi-label
# image's `label` field is its number of label ids, which follow the strings as int32s, and its
# levels are each a count and that many ids. An image without a group, a hash, a source or an
# annotation packs as it did before any existed.
_FIXED = struct.Struct('<qIIIHQI?QQIHBBBHB')
# A key is the bytes of its file name (imageshards/file_names.py): UTF-8, as always, for a name
# that is UTF-8; its own bytes for one that is not.
to_bytes, from_bytes = file_names.to_bytes, file_names.from_bytes
_LEVEL_ID = struct.Struct('<i')
_ORIGINAL_SIZE = struct.Struct('<II')
_GROUP_LENGTH = struct.Struct('<H')
_HASH = struct.Struct('<Q')
_SOURCE_LENGTH = struct.Struct('<I')
_GROUPED, _HASHED, _SOURCED, _ANNOTATED, _SIGNED = 4, 8, 16, 32, 64  # flag bits
_WIDEST_HASH = (1 << 64) - 1


def pack(metas) -> bytes:
    """One block of `metas`, in their order."""
    parts = []
    for meta in metas:
        key, split, fmt = to_bytes(meta.key), meta.split.encode(), meta.format.encode()
        multi = isinstance(meta.label, tuple)
        levels = _flat_levels(meta.levels) if multi else meta.levels
        parts.append(
            _FIXED.pack(
                meta.id,
                len(meta.label) if multi else meta.label,
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
                len(levels),
                multi
                | meta.resized << 1
                | _GROUPED * bool(meta.group)
                | _HASHED * (meta.phash >= 0)
                | _SOURCED * bool(meta.source)
                | _ANNOTATED * bool(meta.annotation)
                | _SIGNED * (meta.phash > _WIDEST_HASH),
            )
        )
        parts += (key, split, fmt, meta.sha256, meta.source_sha256)
        if multi and meta.label:
            parts.append(struct.pack(f'<{len(meta.label)}i', *meta.label))
        if levels:
            parts.append(struct.pack(f'<{len(levels)}i', *levels))
        if meta.resized:
            parts.append(_ORIGINAL_SIZE.pack(meta.original_height, meta.original_width))
        if meta.group:
            group = to_bytes(meta.group)
            parts += (_GROUP_LENGTH.pack(len(group)), group)
        if meta.phash > _WIDEST_HASH:
            signature = meta.phash.to_bytes((meta.phash.bit_length() + 7) // 8, 'big')
            parts += (_GROUP_LENGTH.pack(len(signature)), signature)
        elif meta.phash >= 0:
            parts.append(_HASH.pack(meta.phash))
        if meta.source:
            source = to_bytes(meta.source)
            parts += (_SOURCE_LENGTH.pack(len(source)), source)
        if meta.annotation:
            parts += (_SOURCE_LENGTH.pack(len(meta.annotation)), meta.annotation)
    return b''.join(parts)


def _labels(block, position, label, num_levels, flags):
    """(label, levels, (original height, original width, group, perceptual hash, source),
    position after them) of an image whose strings end at `position`."""
    multi = flags & 1
    if multi:
        label = struct.unpack_from(f'<{label}i', block, position) if label else ()
        position += _LEVEL_ID.size * len(label)
    levels = struct.unpack_from(f'<{num_levels}i', block, position) if num_levels else ()
    position += _LEVEL_ID.size * num_levels
    levels = _nested_levels(levels) if multi else levels
    if flags < 2:  # neither resized, nor with a group or a hash: most images
        return label, levels, _PLAIN_TAIL, position
    original, position = _original_size(block, position, flags)
    if flags > 3:  # a group, a hash, a source or an annotation
        group, phash, position = _group_and_hash(block, position, flags)
        source, position = _source(block, position, flags)
        annotation, position = _annotation(block, position, flags)
        return label, levels, (*original, group, phash, source, annotation), position
    return label, levels, (*original, '', -1, '', b''), position


def _group_and_hash(block, position, flags):
    """(group, perceptual hash, position after them): ('', -1) where the flags say none."""
    group, phash = '', -1
    if flags & _GROUPED:
        (length,) = _GROUP_LENGTH.unpack_from(block, position)
        position += _GROUP_LENGTH.size
        group = from_bytes(block[position : position + length])
        position += length
    if flags & _SIGNED:
        (length,) = _GROUP_LENGTH.unpack_from(block, position)
        position += _GROUP_LENGTH.size
        phash = int.from_bytes(block[position : position + length], 'big')
        position += length
    elif flags & _HASHED:
        (phash,) = _HASH.unpack_from(block, position)
        position += _HASH.size
    return group, phash, position


def _source(block, position, flags):
    """(source, position after it) of an input inside a container (flags bit 4), else ''."""
    if not flags & _SOURCED:
        return '', position
    (length,) = _SOURCE_LENGTH.unpack_from(block, position)
    position += _SOURCE_LENGTH.size
    return from_bytes(block[position : position + length]), position + length


def _annotation(block, position, flags):
    """(annotation, position after it) of an image with one (flags bit 5), else b''."""
    if not flags & _ANNOTATED:
        return b'', position
    (length,) = _SOURCE_LENGTH.unpack_from(block, position)
    position += _SOURCE_LENGTH.size
    return bytes(block[position : position + length]), position + length


def _original_size(block, position, flags):
    """((original height, original width), position after them) of a resized image (flags bit
    1), else ((0, 0), position)."""
    if not flags & 2:
        return _NOT_RESIZED, position
    return _ORIGINAL_SIZE.unpack_from(block, position), position + _ORIGINAL_SIZE.size


_NOT_RESIZED = (0, 0)
# original height and width, group, hash, source and annotation of most
_PLAIN_TAIL = (0, 0, '', -1, '', b'')


def _flat_levels(levels):
    """A multi-label image's levels as int32s: each level's count, then its ids."""
    return [value for ids in levels for value in (len(ids), *ids)]


def _nested_levels(flat):
    levels, position = [], 0
    while position < len(flat):
        count = flat[position]
        levels.append(tuple(flat[position + 1 : position + 1 + count]))
        position += 1 + count
    return tuple(levels)


def unpack(block) -> list:
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
            flags,
        ) = _FIXED.unpack_from(block, position)
        position += _FIXED.size
        key = from_bytes(block[position : position + key_len])
        position += key_len
        split = block[position : position + split_len].decode()
        position += split_len
        fmt = block[position : position + format_len].decode()
        position += format_len
        sha256 = block[position : position + sha_len]
        position += sha_len
        source_sha256 = block[position : position + source_len]
        position += source_len
        label, levels, tail, position = _labels(block, position, label, num_levels, flags)
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
                    *tail,
                    payload,
                    payload_offset,
                ),
            )
        )
    return metas


def split(block) -> list:
    """(key's bytes, label, the image's packed bytes) of each image of a block, in the order
    they were packed: what a step that only regroups and reorders images needs, at a fraction
    of `unpack`'s cost; `b''.join` of any of them is a block again."""
    images, position, size = [], 0, len(block)
    while position < size:
        start = position
        fixed = _FIXED.unpack_from(block, position)
        label, key_len, num_levels, flags = fixed[1], fixed[10], fixed[15], fixed[16]
        position += _FIXED.size
        key = block[position : position + key_len]
        position += key_len + fixed[11] + fixed[12] + fixed[13] + fixed[14]
        if flags or num_levels:  # a label set, levels, a tail: where the image ends
            label, _, _, position = _labels(block, position, label, num_levels, flags)
        images.append((key, label, block[start:position]))
    return images


class BlockStore:
    """Keeps blocks inline: a ref is its block. The interface every store has; configuration
    only, so that it pickles into every DoFn that puts or gets blocks."""

    def put(self, prefix, blocks) -> list:
        """Refs of `blocks` (`prefix` names where a spilling store puts them)."""
        del prefix
        return list(blocks)

    def get(self, ref) -> bytes:
        """The block a ref stands for."""
        return ref

    def appender(self) -> 'Puts':
        """What puts the blocks of one bundle, closed at its end: here, this store's `put`."""
        return Puts(self)

    def metas(self, refs) -> list:
        """Every ImageMeta of the blocks `refs` stand for."""
        return [meta for ref in refs for meta in unpack(self.get(ref))]

    def close(self) -> None:
        """Releases what this process holds open of the store (an inline one: nothing)."""

    def payloads(self):
        """Where validation keeps one work item's stored bytes for the writer, or None: an
        inline store keeps none, and the writer reads the inputs again."""
        return None

    def read_payloads(self, metas, read_input, path_of=None) -> typing.Iterator[bytes]:
        """Yields the stored bytes of each of `metas`, in their order: `read_input(meta)`, the
        file `path_of(meta)` (if given) asked of the kernel ahead (`storage.prefetching`)."""
        for meta in storage.prefetching(metas, path_of or _nothing):
            yield read_input(meta)


class Puts:
    """A store's `put` for one bundle's blocks; `close` when the bundle is done with it."""

    def __init__(self, store):
        self._store = store

    def put(self, prefix, blocks) -> list:
        return self._store.put(prefix, blocks)

    def close(self) -> None:
        """Nothing to release: each `put` holds nothing open."""


def _nothing(unused_meta):
    return None
