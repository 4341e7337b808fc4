"""ArrayRecord shards (`ArrayRecordFormat`): what Grain, TFDS's `as_data_source()` and JAX input
pipelines read by index, so that a reader can draw a new global permutation every epoch.

The records are the same serialized `tensorflow.Example`s as a TFRecord build's, written with the
`array_record` package (which comes with TFDS) with the options Grain asks for and TFDS writes:
`group_size:1`, one record per chunk, so that reading record i reads only its chunk. Unlike TFDS
(zstd at level 3, the library's default) the chunks are stored `uncompressed`: a record is
an encoded image, which zstd makes no smaller (see bench/RESULTS.md), and every random read
would otherwise pay a decompression.

The library writes and reads local files only (it has no `gs://`; array_record #120): a shard is
written to a local temporary file and then moved (a local output) or uploaded through the file
layer (`gs://`, with its retries), which is what lets Dataflow workers write a build that TFDS's
ArrayRecord writer cannot (tensorflow/datasets #10981). Reading a shard that is not a local file
copies it to a local temporary file first. Each chunk holds a hash of its data, which the reader
checks: a damaged shard raises CorruptRecordError, naming the first record it cannot read.

ArrayRecord files hold their own index (in their footer), so no index file goes beside them.
"""

import contextlib
import ctypes
import functools
import hashlib
import mmap
import os
import tempfile
import uuid

from imageshards.shard_formats.shard_format import CorruptRecordError
from imageshards.shard_formats.shard_format import ShardFormat
from imageshards.shard_formats.shard_format import WrittenShard
from imageshards.shard_formats.shard_format import local_copy

WRITER_OPTIONS = 'group_size:1,uncompressed'
# Random access: no read-ahead, no thread pool per reader (the options Grain's source uses).
RANDOM_ACCESS_OPTIONS = 'readahead_buffer_size:0,max_parallelism:0'
_READ_BATCH = 256  # records read at once when a shard is read through in order
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)
_TRIM_THRESHOLD = 64 << 20


def _module():
    from array_record.python import array_record_module  # pylint: disable=import-outside-toplevel

    return array_record_module


@functools.cache
def _keep_freed_memory():
    """Lets glibc keep the memory the library frees after each chunk, instead of giving it back
    to the system and faulting it in again for the next: that doubled a shard's system time
    (bench/RESULTS.md). The threshold is what MALLOC_TRIM_THRESHOLD_ sets; glibc only."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, _TRIM_THRESHOLD)  # a chunk's buffers from the heap
        libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
    except (OSError, AttributeError):  # not glibc: its allocator, as it is
        pass


class ArrayRecordFormat(ShardFormat):
    """ArrayRecord shards, one record per chunk, for random access."""

    name = 'array_record'
    suffix = '.array_record'
    position_word = 'record'
    random_access = True
    tfds_file_format = 'array_record'

    def write(self, path, records, files, temp_dir) -> WrittenShard:
        local_output = files.is_local(path) and files.is_local(temp_dir)
        folder = temp_dir if local_output else tempfile.gettempdir()
        files.make_parent(folder + '/')
        local = os.path.join(folder, f'{uuid.uuid4().hex}-{path.rsplit("/", 1)[-1]}')
        _keep_freed_memory()
        try:
            writer = _module().ArrayRecordWriter(local, WRITER_OPTIONS)
            count = 0
            for record in records:
                writer.write(record)
                count += 1
            writer.close()
            num_bytes, sha256 = _size_and_digest(local)
            if local_output:
                files.make_parent(path)
                files.rename([local], [path])
            else:
                files.copy(local, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(local)
        return WrittenShard(count, num_bytes, sha256, False)

    def read(self, f, name):
        with local_copy(f, self.suffix) as local:
            try:
                reader = _module().ArrayRecordReader(local)
                total = reader.num_records()
            except (RuntimeError, ValueError, OSError) as e:
                raise CorruptRecordError(f'{name}: not a whole ArrayRecord file ({e})') from e
            try:
                yield from _records(reader, total, name)
            finally:
                try:
                    reader.close()
                except (RuntimeError, ValueError, OSError) as e:  # past the records: its footer
                    raise CorruptRecordError(f'{name}: damaged ({e})') from e

    def random_reader(self, path):
        """A reader of the shard `path` by record position, for random access: its
        `read([position])` gives that record (thread-safe; on gs://, through `local_path`)."""
        return _module().ArrayRecordReader(local_path(path), RANDOM_ACCESS_OPTIONS)

    def tf_records(self, path):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        def records(name):  # a Python generator; the path may be a tensor (tf.data's interleave)
            name = name.decode('utf-8')
            with open(local_path(name), 'rb') as f:
                for _, record in self.read(f, name):
                    yield record

        dataset = tf.data.Dataset.from_generator(
            records, args=(path,), output_signature=tf.TensorSpec((), tf.string)
        )
        return dataset


def local_path(path) -> str:
    """The local path to open a shard at: itself, or on Vertex AI, where Cloud Storage FUSE
    mounts `gs://BUCKET/...` at `/gcs/BUCKET/...`, its mounted path. ValueError otherwise (the
    library reads local files only)."""
    if not path.startswith('gs://'):
        return path
    mounted = '/gcs/' + path[len('gs://') :]
    if os.path.exists(mounted):
        return mounted
    raise ValueError(
        f'{path}: ArrayRecord shards are read from a local path; on gs:// mount the bucket '
        f'(Cloud Storage FUSE, as Vertex AI does at /gcs/) or copy the build'
    )


def _size_and_digest(path):
    """(bytes, sha256) of the shard just written, hashed through a memory map: read(2) would
    copy the whole shard out of the page cache again (a tenth of a second of system time per
    500 MB, bench/RESULTS.md)."""
    with open(path, 'rb') as f:
        size = os.fstat(f.fileno()).st_size
        if not size:  # mmap refuses an empty file
            return 0, hashlib.sha256().hexdigest()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            return size, hashlib.sha256(mapped).hexdigest()


def _records(reader, total, name):
    """(position, record) of every record of an open reader, a batch of reads at a time."""
    for start in range(0, total, _READ_BATCH):
        positions = list(range(start, min(start + _READ_BATCH, total)))
        try:
            batch = reader.read(positions)
        except (RuntimeError, ValueError, OSError) as e:
            first = _first_unreadable(reader, positions)
            raise CorruptRecordError(f'{name}: corrupt record {first} ({e})') from e
        yield from zip(positions, batch)


def _first_unreadable(reader, positions):
    for position in positions:
        try:
            reader.read([position])
        except (RuntimeError, ValueError, OSError):
            return position
    return positions[0]
