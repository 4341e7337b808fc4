"""Naming the shards behind a tf.data DataLossError, which names no file itself."""

import tensorflow as tf

from imageshards.shard_formats import registry as shard_formats


class CorruptShardError(RuntimeError):
    """A shard whose framing or checksums fail; the message names the file."""


def find_corrupt_shards(paths, shard_format):
    """['path: problem'] for each of `paths` (shards of `shard_format`) whose records do not all
    check out.

    tf.data reports a corrupt record without naming its file; this reads the shards again with
    the project's own reader of their format, which does.
    """
    problems = []
    for path in paths:
        try:
            with tf.io.gfile.GFile(path, 'rb') as f:
                for _ in shard_format.read(f, path):
                    pass
        except shard_formats.CorruptRecordError as e:
            problems.append(str(e))
    return problems


def name_corrupt_shards(error, paths, shard_format):
    """A CorruptShardError naming the files behind a tf.data DataLossError (or `error` itself)."""
    problems = find_corrupt_shards(paths, shard_format)
    if not problems:
        return error
    return CorruptShardError(
        'corrupt shard(s): '
        + '; '.join(problems)
        + ' (rebuild them, or check them with `imageshards verify`)'
    )
