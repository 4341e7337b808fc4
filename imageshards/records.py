"""Reading the records of a build, or of any TFRecord file, without TensorFlow.

Files are read through Beam's `FileSystems` (imageshards/storage.py: local and `gs://` alike)
and streamed: one record in memory at a time, checked as their shard format reads them
(imageshards/shard_formats/: a TFRecord's every length and CRC). Records are parsed with the
`tensorflow.Example` class of imageshards/kinds/example_bytes.py, so nothing here imports
TensorFlow.
"""

import hashlib

from google.protobuf.message import DecodeError

from imageshards import storage
from imageshards.kinds import example_bytes

KINDS = {'bytes_list': 'bytes', 'int64_list': 'int64', 'float_list': 'float'}


class NotAnExampleError(ValueError):
    """A record whose bytes do not parse as a `tensorflow.Example`."""


def match_files(pattern):
    """The files a path or glob names, sorted; raises ValueError if there are none."""
    paths = storage.match(pattern)
    if not paths:
        raise ValueError(f'{pattern} matched no files; give a TFRecord file, a glob or a build')
    return paths


class HashingReader:
    """A binary file whose bytes, as they are read, go into a sha256 and a byte count."""

    def __init__(self, f):
        self._f = f
        self.sha256 = hashlib.sha256()
        self.num_bytes = 0

    def read(self, size=-1):
        data = self._f.read(size)
        self.sha256.update(data)
        self.num_bytes += len(data)
        return data

    def drain(self, chunk=1 << 22):
        """Reads the rest of the file, so that the digest and count cover all of it."""
        while self.read(chunk):
            pass


def shard_records(path, shard_format):
    """Yields (position, record) of each record of the shard file `path`, as its ShardFormat
    reads them (for TFRecord, the position is the record's byte offset).

    Raises:
        shard_formats.CorruptRecordError: naming `path` and where the first bad record is.
    """
    with storage.open_read(path) as f:
        yield from shard_format.read(f, path)


def parse_example(record):
    """The `tensorflow.Example` in a record; raises NotAnExampleError if it is none."""
    try:
        return example_bytes.example_class().FromString(record)
    except DecodeError as e:
        raise NotAnExampleError(f'not a tf.train.Example ({len(record):,} bytes): {e}') from e


def feature_values(feature):
    """(kind, values) of one feature: kind is 'bytes', 'int64', 'float', or None if unset."""
    which = feature.WhichOneof('kind')
    if which is None:
        return None, []
    return KINDS[which], list(getattr(feature, which).value)


def example_values(example):
    """{key: (kind, values)} for every feature of an Example, keys sorted."""
    feature_map = example.features.feature
    return {key: feature_values(feature_map[key]) for key in sorted(feature_map)}
