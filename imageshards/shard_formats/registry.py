"""The shard formats by name: a build's (dataset.json's `shard_format`), and what any of them
calls its files."""

from imageshards.kinds import registry as kinds
from imageshards.kinds.record_kind import LabelNames
from imageshards.shard_formats.array_record import ArrayRecordFormat
from imageshards.shard_formats.parquet import ParquetFormat
from imageshards.shard_formats.shard_format import CorruptRecordError  # noqa: F401  (readers')
from imageshards.shard_formats.shard_format import ShardFormat
from imageshards.shard_formats.tfrecord import TFRecordFormat

DEFAULT = TFRecordFormat.name
FORMATS = {each.name: each for each in (TFRecordFormat(), ArrayRecordFormat(), ParquetFormat())}


def named(name) -> ShardFormat:
    """The format of a name (dataset.json's `shard_format`); ValueError naming the known ones."""
    if name not in FORMATS:
        raise ValueError(f'unknown shard format {name!r}; known: {", ".join(sorted(FORMATS))}')
    return FORMATS[name]


def of_build(dataset) -> ShardFormat:
    """The format of a build's shards, from its dataset.json (a dict), for its records."""
    found = named(dataset.get('shard_format', DEFAULT))
    if found.name == DEFAULT:  # a build's dataset.json as every reader has it: no kind needed
        return found
    return found.for_records(kinds.of_build(dataset), LabelNames.of_dataset(dataset))


def of_path(path) -> ShardFormat:
    """The format a file's name says (its suffix), TFRecord for any other name."""
    for each in FORMATS.values():
        if path.endswith(each.suffix):
            return each
    return FORMATS[DEFAULT]


def is_shard_path(relative) -> bool:
    """Whether a path relative to an output directory is named like a shard of any format."""
    return any(each.is_shard_path(relative) for each in FORMATS.values())


def is_index_path(relative) -> bool:
    """Whether a path relative to an output directory is named like a shard's index file."""
    return any(each.is_index_path(relative) for each in FORMATS.values())
