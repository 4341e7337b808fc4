"""The shard formats by name: a build's (dataset.json's `shard_format`), and what any of them
calls its files."""

from imageshards.shard_formats.shard_format import CorruptRecordError  # noqa: F401  (readers')
from imageshards.shard_formats.shard_format import ShardFormat
from imageshards.shard_formats.tfrecord import TFRecordFormat

DEFAULT = TFRecordFormat.name
FORMATS = {each.name: each for each in (TFRecordFormat(),)}


def named(name) -> ShardFormat:
    """The format of a name (dataset.json's `shard_format`); ValueError naming the known ones."""
    if name not in FORMATS:
        raise ValueError(f'unknown shard format {name!r}; known: {", ".join(sorted(FORMATS))}')
    return FORMATS[name]


def of_build(dataset) -> ShardFormat:
    """The format of a build's shards, from its dataset.json (a dict)."""
    return named(dataset.get('shard_format', DEFAULT))


def is_shard_path(relative) -> bool:
    """Whether a path relative to an output directory is named like a shard of any format."""
    return any(each.is_shard_path(relative) for each in FORMATS.values())


def is_index_path(relative) -> bool:
    """Whether a path relative to an output directory is named like a shard's index file."""
    return any(each.is_index_path(relative) for each in FORMATS.values())
