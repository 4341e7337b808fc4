"""From an ImageMeta to its record: the bytes it stores, read again and checked, and the
serialized `tf.train.Example` of the build's kind (imageshards/kinds/). Used by WriteShards."""

import functools
import hashlib

import google_crc32c

from imageshards import file_names
from imageshards import layout
from imageshards import storage
from imageshards.kinds import features
from pipelines.core import reading
from pipelines.core import sources
from pipelines.validation import images
from pipelines.validation import resize


class InputChangedError(RuntimeError):
    """An input's bytes differ from those validated earlier in the same build."""


class RecordEncoder:
    """ImageMeta (and the stored bytes) -> the record its shard format writes: the serialized
    tf.train.Example of the build's kind (imageshards/kinds/), or what the format takes instead
    (`ShardFormat.encoder`: a Parquet row's values).

    Configuration only, so that it pickles into the DoFns that write records.

    Args:
        settings: the build's WriteSettings (its kind, label names, folders).
    """

    def __init__(self, settings):
        self._kind = settings.kind
        self._names = settings.names
        self._input_base = settings.input_base
        self._output_dir = settings.output_dir
        self._examples = settings.kind.format == features.EXAMPLES
        self._format = settings.shard_format

    def encode(self, meta, stored=None, source=None):
        """The record of `meta`; `stored` is the image bytes of an `examples` build, `source`
        the input's path or `container!member` (default: from its key and source)."""
        source = source or sources.display_path(self._input_base, meta.key, meta.source)
        filename = file_names.to_bytes(source)  # the name's bytes, as on disk
        if self._examples:
            payload = stored
        elif meta.reencoded:
            payload = storage.join(self._output_dir, layout.reencoded_file(meta.sha256.hex()))
            payload = file_names.to_bytes(payload)
        else:
            payload = filename
        values = self._kind.values(meta, self._names, filename, payload)
        return self._encode(values)

    @functools.cached_property
    def _encode(self):
        """values -> record, made on first use (where records are written): the kind's
        example_bytes.Plan's `encode` for a format of serialized Examples."""
        return self._format.encoder(self._kind)


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
