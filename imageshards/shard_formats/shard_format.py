"""What a file format of shards is to the rest of imageshards: `ShardFormat`.

A build's writer hands a format the records of one shard, in order, and the path to write; the
format writes the shard file (and its index file, if it keeps one) and says what it wrote. Its
readers (`imageshards verify`, `inspect`, `--splits-from`, the trainer) ask the format to read a
shard's records back, to name the shard files, and to say what its index should hold. Nothing
else in imageshards knows how a format lays out its bytes: a new format is one module with a
subclass (imageshards/shard_formats/__init__.py names them), as TFDS's `FileAdapter`s are.
"""

import contextlib
import dataclasses
import os
import re
import shutil
import tempfile

from imageshards.kinds import example_bytes


class CorruptRecordError(ValueError):
    """A shard file whose records cannot all be read back as written (framing, checksums)."""


@dataclasses.dataclass(frozen=True)
class WrittenShard:
    """What a format wrote of one shard: dataset.json's `num_records`, `num_bytes` and `sha256`
    of the shard file, and whether an index file went beside it."""

    num_records: int
    num_bytes: int
    sha256: str
    indexed: bool


class ShardFormat:
    """A file format of shards. Subclasses set the class attributes and write and read records.

    Attributes:
        name: the format's name (dataset.json's `shard_format`).
        suffix: the end of a shard file's name (`.tfrecord`).
        index_suffix: the end added to a shard's name for its index file; None: no index file.
        position_word: what `read`'s positions count (`byte`: an offset in the file).
        random_access: whether a reader can read any record by its index (ArrayRecord), so
            that every epoch can be a new global permutation.
        tfds_file_format: the `tfds.core.FileFormat` name TFDS reads the shards as; None: TFDS
            cannot read them (no TFDS metadata is written).
    """

    name = None
    suffix = None
    index_suffix = None
    position_word = 'byte'
    random_access = False
    tfds_file_format = None

    def for_records(self, kind, names) -> 'ShardFormat':
        """The format writing the records of `kind` (a RecordKind) with label `names`: itself,
        for a format that stores records as bytes."""
        del kind, names
        return self

    def shard_name(self, split, index, num_shards) -> str:
        return f'{split}-{index:05d}-of-{num_shards:05d}{self.suffix}'

    def shard_path(self, split, index, num_shards) -> str:
        """A shard's path relative to the output directory (as listed in dataset.json)."""
        return f'{split}/{self.shard_name(split, index, num_shards)}'

    def index_path(self, shard_relative) -> str | None:
        """The index file beside a shard (relative as the shard is), or None: no index."""
        return shard_relative + self.index_suffix if self.index_suffix else None

    def is_shard_path(self, relative) -> bool:
        """Whether a path relative to the output directory is named like a shard of this
        format: `split/split-SSSSS-of-NNNNN<suffix>`."""
        return bool(self._shard_name_pattern.match(relative))

    def is_index_path(self, relative) -> bool:
        """Whether a path relative to the output directory is named like a shard's index."""
        suffix = self.index_suffix
        return (
            bool(suffix)
            and relative.endswith(suffix)
            and self.is_shard_path(relative[: -len(suffix)])
        )

    @property
    def _shard_name_pattern(self):
        return re.compile(r'^([^/]+)/\1-\d{5}-of-\d{5}' + re.escape(self.suffix) + '$')

    @property
    def tfds_template(self) -> str:
        """The shards' names in TFDS's template language (tfds.core.ShardedFileTemplate)."""
        return '{SPLIT}/{SPLIT}-{SHARD_X_OF_Y}' + self.suffix

    def encoder(self, kind):
        """What the writer makes of each record's values ({key: value} of `kind`'s schema) for
        `write`: a function of the values. The serialized `tensorflow.Example`
        (imageshards/kinds/example_bytes.py), unless the format stores values otherwise."""
        return example_bytes.plan(kind).encode

    def write(self, path, records, files, temp_dir) -> WrittenShard:
        """Writes `records` (what `encoder` made of each record, an iterable read once: the
        serialized records) as the shard file `path`, and its index file beside it if the
        format keeps one, through `files` (the file layer: imageshards/storage.py); each appears
        only once complete (`files.created_whole`, temporary files in `temp_dir`)."""
        raise NotImplementedError

    def read(self, f, name):
        """Yields (position, record) of each record of an open binary shard file, in order,
        checking what the format lets it check; `position` says where in the file a record is
        (for messages). Raises CorruptRecordError, naming `name`, where a record cannot be
        read back."""
        raise NotImplementedError

    def index_entries(self, record_lengths) -> list:
        """The entries of the index file of a shard whose records have `record_lengths`, in
        order, as `parse_index` reads them ([] for a format without an index)."""
        del record_lengths
        return []

    def parse_index(self, data) -> list:
        """The entries of an index file's bytes; ValueError naming a line that is not one."""
        raise NotImplementedError(f'{self.name} shards have no index file')

    def random_reader(self, path):
        """A reader of the shard `path` by record position (`read([position])`), for a format
        with `random_access`."""
        raise NotImplementedError(f'{self.name} shards are read in order only')

    def tf_records(self, path):
        """A `tf.data.Dataset` of the serialized records of the shard file `path` (TensorFlow
        imported on first use)."""
        raise NotImplementedError


def write_whole(files, path, temp_dir, data) -> None:
    """Writes `data` as the file `path` through `files`, which appears only once complete."""
    with files.created_whole(path, temp_dir) as f:
        f.write(data)


@contextlib.contextmanager
def local_copy(f, suffix):
    """The path of a local file with the contents of the open binary file `f`, for a library
    that opens files by name: `f`'s own where it is a local file, else a temporary copy (read
    through `f`, so that a reader counting its bytes sees them all), removed afterwards."""
    name = getattr(f, 'name', None)
    if isinstance(name, str) and os.path.isfile(name):
        yield name
        return
    with tempfile.NamedTemporaryFile(suffix=suffix) as copy:
        shutil.copyfileobj(f, copy, 1 << 22)
        copy.flush()
        yield copy.name
