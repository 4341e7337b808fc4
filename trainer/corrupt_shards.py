"""Naming the shards behind a tf.data DataLossError, which names no file itself."""

import tensorflow as tf

from imageshards import tfrecord


class CorruptShardError(RuntimeError):
    """A shard whose TFRecord framing or checksums fail; the message names the file."""


def find_corrupt_shards(paths):
    """['path: problem'] for each of `paths` whose records do not all check out.

    tf.data reports a corrupt record without naming its file; this reads the shards again with
    the project's own TFRecord reader, which does.
    """
    problems = []
    for path in paths:
        try:
            with tf.io.gfile.GFile(path, 'rb') as f:
                for _ in tfrecord.read_records(f, path):
                    pass
        except tfrecord.CorruptRecordError as e:
            problems.append(str(e))
    return problems


def name_corrupt_shards(error, paths):
    """A CorruptShardError naming the files behind a tf.data DataLossError (or `error` itself)."""
    problems = find_corrupt_shards(paths)
    if not problems:
        return error
    return CorruptShardError(
        'corrupt shard(s): '
        + '; '.join(problems)
        + ' (rebuild them, or check them with `imageshards verify`)'
    )
