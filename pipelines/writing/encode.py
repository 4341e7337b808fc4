"""From an ImageMeta to its record: the bytes it stores, read again and checked, and the
serialized `tf.train.Example` (imageshards/features.py). Used by WriteShards and by the
analysis, which encodes its sample exactly as the shards hold it."""

import hashlib

import google_crc32c

from imageshards import example_bytes
from imageshards import features
from imageshards import file_names
from imageshards import layout
from imageshards import storage
from pipelines.core import reading
from pipelines.core import sources
from pipelines.validation import images
from pipelines.validation import resize


class InputChangedError(RuntimeError):
    """An input's bytes differ from those validated earlier in the same build."""


class RecordEncoder:
    """ImageMeta (and the stored bytes) -> the serialized tf.train.Example of a record.

    Configuration only, so that it pickles into the DoFns that write records.

    Args:
        input_base: what image keys are relative to (the listing's base).
        output_dir: the build's output directory (a `paths` build's re-encoded copies are there).
        fmt: `examples` or `paths`.
        label_names: every label name, by id.
        label_levels: {level: names} of a build with label levels.
        multi_label: a multi-label build (a meta's label and level values are tuples of ids).
        resize_spec: the build's settings.ResizeSpec, if any: records keep their original's size
            and digest too.
        grouped: records name their group (a build with groups).
    """

    def __init__(
        self,
        input_base,
        output_dir,
        fmt,
        label_names,
        label_levels=None,
        multi_label=False,
        resize_spec=None,
        grouped=False,
    ):
        self.input_base = input_base
        self.output_dir = output_dir
        self.format = fmt
        self.label_names = label_names
        self.label_levels = list((label_levels or {}).items())  # [(level, [names])]
        self.multi_label = multi_label
        self.resize = resize_spec
        self.grouped = grouped
        self._level_names = tuple(level for level, _ in self.label_levels)

    def encode(self, meta, stored=None, source=None):
        """The record of `meta`; `stored` is the image bytes of an `examples` build, `source`
        the input's path or `container!member` (default: from its key and source)."""
        source = source or sources.display_path(self.input_base, meta.key, meta.source)
        values = {
            features.FORMAT: meta.format,
            features.HEIGHT: meta.height,
            features.WIDTH: meta.width,
            features.CHANNELS: meta.channels,
            features.LABEL: meta.label,
            features.LABEL_TEXT: _names(self.label_names, meta.label),
            features.FILENAME: file_names.to_bytes(source),  # the name's bytes, as on disk
            features.SHA256: meta.sha256.hex(),
            features.ID: meta.id,
        }
        if self.resize:
            values[features.ORIGINAL_HEIGHT] = meta.original_height or meta.height
            values[features.ORIGINAL_WIDTH] = meta.original_width or meta.width
            values[features.ORIGINAL_SHA256] = meta.content_digest.hex()
        if self.grouped:
            values[features.GROUP] = meta.group
        for (level, names), level_id in zip(self.label_levels, meta.levels):
            values[features.level_label(level)] = level_id
            values[features.level_text(level)] = _names(names, level_id)
        if self.format == features.EXAMPLES:
            values[features.ENCODED] = stored
        else:
            if meta.reencoded:
                source = storage.join(self.output_dir, layout.reencoded_file(meta.sha256.hex()))
            values[features.PATH] = file_names.to_bytes(source)
        return example_bytes.encode_example(
            self.format,
            values,
            self._level_names,
            self.multi_label,
            bool(self.resize),
            self.grouped,
        )


def _names(names, ids):
    """The name of an id ('' for a missing level, -1), or the names of a tuple of ids."""
    if isinstance(ids, tuple):
        return tuple(names[i] for i in ids)
    return names[ids] if ids >= 0 else ''


def read_checked(source, meta, max_bytes, reader=None):
    """The input's bytes (of the file `source`, or of `meta.source`), checked against the CRC
    validation took of them.

    No more is read than validation could have read: a record that stores its source as it is
    knows the source's size (`meta.num_bytes`), and one that stores a resize or re-encoding of
    it reads at most `max_bytes` (--max-image-bytes). A file that has grown past that since
    (replaced by a video, a disk image) is found from its size, read no further. `reader`:
    the pipelines.core.reading.Reader to read with (default: this thread's)."""
    stored_as_is = not (meta.reencoded or meta.resized)
    reader = reader or reading.thread_reader()
    try:
        data = reader.read(source, meta.source, meta.num_bytes if stored_as_is else max_bytes)
    except storage.TooLarge as too_large:
        size = too_large.size
        now = f'{size:,} bytes' if size is not None else f'over {too_large.limit:,} bytes'
        was = f'{meta.num_bytes:,} bytes' if stored_as_is else 'under --max-image-bytes'
        raise InputChangedError(
            f'{source} changed while the build was running: now {now}, {was} when validated; '
            'not read; rerun the build on inputs that are not being modified'
        ) from None
    except reading.Unreadable as e:
        raise InputChangedError(
            f'{e.detail} ({e.reason}), unlike when validated: it changed while the build was '
            'running; rerun the build on inputs that are not being modified'
        ) from None
    if google_crc32c.value(data) != meta.source_crc32c:
        raise InputChangedError(
            f'{source} changed while the build was running (its bytes differ from those '
            f'validated); rerun the build on inputs that are not being modified'
        )
    return data


def read_streamed(metas, input_base, max_bytes) -> dict:
    """{id: bytes, checked} of those of `metas` in sequential sources (a .tar.gz's members, the
    rows of a .gz IDX file), each stream read once, forward: they cannot be read one by one.
    Holds their bytes (at most a shard's)."""
    streamed = sorted(
        (meta for meta in metas if sources.is_sequential(meta.source)), key=_stream_order
    )
    reader = reading.Reader(contiguous=True)
    try:
        return {
            meta.id: read_checked(
                sources.display_path(input_base, meta.key, meta.source), meta, max_bytes, reader
            )
            for meta in streamed
        }
    finally:
        reader.close()


def _stream_order(meta):
    source = sources.Source.decode(meta.source)
    return source.stream, source.offset


def stored_bytes(data, meta, source, resize_spec=None):
    """The bytes a record stores of source bytes `data`: as they are, re-encoded, or resized
    (by `resize_spec`, the build's)."""
    if meta.reencoded or meta.resized:
        made = 'resizing' if meta.resized else 're-encoding'
        if meta.resized:
            data = resize.resized_bytes(data, resize_spec)
        else:
            data = images.reencode(data)
        if hashlib.sha256(data).digest() != meta.sha256:
            raise InputChangedError(
                f'{made} {source} gave other bytes than during '
                f'validation: workers must share one Pillow version'
            )
    return data
