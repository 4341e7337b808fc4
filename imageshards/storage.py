"""Files of a build, local or on `gs://`: joining, listing, reading, writing, deleting.

Local paths and other schemes go through Beam's `FileSystems`, which a Pipeline configures with
its options. `gs://` goes to imageshards/gcs_objects.py for what a build does often or many at
once (reading an input, writing, listing, deleting and renaming its files: one request each,
batched or sent at once, a fault of the network told from an answer about an object), and to
FileSystems for streams (manifests, the listing). `read_text` reads the YAML files of both
commands without Beam.

Beam's FileSystems is imported on first use (`_fs`): the trainer and the YAML loader use this
module without paying ~1.5 s for Beam.

Writes that others must not see half done go to a temporary name, renamed when complete
(`write_atomically`; an object on gs:// needs none: it exists once its upload is complete); a
content-addressed file is written once (`write_once`). Object stores have no folders:
`make_parent` and `remove_empty_folders` act on local paths only.
"""

import contextlib
import os
import re
import shutil
import stat
import threading
import time
import uuid

from imageshards import gcs
from imageshards import gcs_objects
from imageshards import local_reads
from imageshards.gcs import StoreUnavailable  # noqa: F401  (raised by the reads and writes here)
from imageshards.local_reads import PREFETCH_MAX_BYTES  # noqa: F401  (the steps' reads ahead)
from imageshards.local_reads import prefetch_local  # noqa: F401
from imageshards.local_reads import prefetching  # noqa: F401

URI_SCHEME = re.compile(r'^[a-zA-Z][a-zA-Z0-9+.-]*://')
_COPY_BUFFER = 1 << 20
# A local file written through a buffer this large: a shard's records and the payload files'
# small images come a few KB a write, and the OS's block-sized default buffer made a system call
# of nearly each (bench/RESULTS.md, "Build cost per image").
WRITE_BUFFER = 1 << 20


def _fs():
    """Beam's FileSystems (imported here, once, rather than by whoever imports this module),
    told not to look up credentials where gs:// requests go without (gcs.quiet_beam)."""
    from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel

    gcs.quiet_beam()
    return FileSystems


def _compression(guess=False):
    """FileSystems guesses a compression from a file's name (`.gz`) with AUTO; ours have none."""
    from apache_beam.io.filesystem import CompressionTypes  # pylint: disable=import-outside-toplevel

    return CompressionTypes.AUTO if guess else CompressionTypes.UNCOMPRESSED


def is_uri(path):
    """Whether `path` is a URI (`gs://b/x`, `s3://...`) rather than a local path."""
    return '://' in path and bool(URI_SCHEME.match(path))  # `in` first: ~10x faster, per image


def absolute(path):
    """A local path made absolute; a URI as it is."""
    return path if is_uri(path) else os.path.abspath(path)


def scheme(path):
    """The URI scheme of `path` (`gs`), or None for a local path."""
    return _fs().get_scheme(path)


def is_local(path):
    """Whether `path` is on this machine's file system (no scheme, or `file://`)."""
    return scheme(path) in (None, 'file')


def join(base, *parts):
    if not is_uri(base):  # what Beam's LocalFileSystem does, without importing Beam
        return os.path.join(base, *parts)
    return _fs().join(base, *parts)


def exists(path):
    if not is_uri(path):
        return os.path.exists(path)
    if path.startswith('gs://'):
        return gcs_objects.exists(path)
    return _fs().exists(path)


def list_files(directory):
    """Every file below `directory` (recursively); [] if it does not exist.

    Object stores have no folders; the empty objects named `folder/` that consoles and tools
    create to show one are not files, and do not make a directory non-empty.
    """
    if directory.startswith('gs://'):
        return gcs_objects.list_below(directory)
    results = _fs().match([join(directory, '**')])
    return [
        metadata.path
        for result in results
        for metadata in result.metadata_list
        if not metadata.path.endswith('/')
    ]


def match(pattern):
    """The files a path or glob names, sorted."""
    results = _fs().match([pattern])
    return sorted(metadata.path for result in results for metadata in result.metadata_list)


def relative_files(directory):
    """Every file below `directory`, as paths relative to it."""
    prefix = directory.rstrip('/') + '/'
    return [path[len(prefix) :] for path in list_files(directory) if path.startswith(prefix)]


def delete(paths):
    """Deletes those of `paths` that exist; returns how many that was. Objects on gs:// go in
    batches, without asking first whether each exists."""
    objects = [path for path in paths if path.startswith('gs://')]
    existing = [path for path in paths if not path.startswith('gs://') and exists(path)]
    if existing:
        _fs().delete(existing)
    return len(existing) + (gcs_objects.delete(objects) if objects else 0)


def delete_tree(directory):
    """Deletes a folder of ours and every file below it (a local folder goes last, once empty)."""
    if is_local(directory):  # one call, not a lookup and a delete per file (thousands at scale)
        if not os.path.isdir(directory):
            return delete([directory])
        count = sum(len(files) for _, _, files in os.walk(directory))
        shutil.rmtree(directory)
        return count + 1
    return delete(list_files(directory) + [directory])


def remove_empty_folders(directory, removed):
    """Removes the local folders that held the `removed` files (paths relative to `directory`),
    deepest first, where empty now (one that still holds someone else's file stays)."""
    if not is_local(directory):
        return
    folders = set()
    for path in removed:
        parent = os.path.dirname(path)
        while parent:
            folders.add(parent)
            parent = os.path.dirname(parent)
    for folder in sorted(folders, key=lambda name: name.count('/'), reverse=True):
        try:
            os.rmdir(join(directory, folder))
        except OSError:  # not empty, or already gone
            pass


def open_read(path, guess_compression=False):
    """A binary file object reading `path`: as stored, or decompressed as its name says."""
    return _fs().open(path, compression_type=_compression(guess_compression))


def read_range(path, start, end):
    """Bytes `start` to `end` (excluded) of a file of a build; of an object on gs://, in one
    request."""
    if path.startswith('gs://'):
        return gcs_objects.read_range(path, start, end) if end > start else b''
    with open_read(path) as f:
        f.seek(start)
        return f.read(end - start)


def read(path):
    """All bytes of a file of a build (of an object on gs://, in one request)."""
    if path.startswith('gs://'):
        return gcs_objects.read(path)
    with open_read(path) as f:
        return f.read()


def create(path):
    """A binary file object writing `path`, as stored (never compressed); a local file's
    folders are made as needed."""
    if not is_uri(path):  # what Beam's LocalFileSystem does, without importing Beam
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, 'wb', buffering=WRITE_BUFFER)  # pylint: disable=consider-using-with
    if path.startswith('gs://'):
        return gcs_objects.open_write(path)
    return _fs().create(path, compression_type=_compression())


@contextlib.contextmanager
def created_whole(path, temp_dir):
    """A binary file object writing `path`, which appears there only once complete: an object
    on gs:// is written in place (it exists once its upload completes), another file under a
    temporary name in `temp_dir`, renamed when closed."""
    if path.startswith('gs://'):
        with create(path) as f:
            yield f
        return
    temporary = join(temp_dir, f'{uuid.uuid4().hex}-{path.rsplit("/", 1)[-1]}')
    with create(temporary) as f:
        yield f
    make_parent(path)
    rename([temporary], [path])


def rename(sources, destinations):
    if all(path.startswith('gs://') for path in [*sources, *destinations]):
        gcs_objects.rename(sources, destinations)  # in batches, not a copy and a delete each
    else:
        _fs().rename(sources, destinations)


def copy_many(pairs):
    """Copies (source, destination) pairs; to gs://, several at once."""
    gcs.concurrently(lambda pair: copy(*pair), pairs)


def copy(source, destination):
    """Copies one file, streamed (local or gs://, either way)."""
    if destination.startswith('gs://') and not is_uri(source):
        gcs_objects.upload_file(source, destination)
        return
    with open_read(source) as f_in:
        with create(destination) as f_out:
            shutil.copyfileobj(f_in, f_out, _COPY_BUFFER)


def make_parent(path):
    """Creates the local folder `path` goes in (object stores have no folders)."""
    parent = path.rsplit('/', 1)[0]
    fs = _fs()
    if fs.get_scheme(path) is None and not fs.exists(parent):
        try:
            fs.mkdirs(parent)
        except OSError:  # another writer created it first
            pass


def write_atomically(path, data):
    """Writes `data` to `path` through a temporary name (`path.tmp`), renamed when complete (an
    object on gs:// is written in one request: it exists once complete)."""
    if path.startswith('gs://'):
        gcs_objects.write(path, data)
        return
    temporary = f'{path}.tmp'
    with _fs().create(temporary) as f:
        f.write(data)
    rename([temporary], [path])


def write_files(files):
    """write_atomically of each of {path: bytes}, the objects on gs:// all at once."""
    gcs_objects.write_many({path: data for path, data in files.items() if path.startswith('gs://')})
    for path, data in files.items():
        if not path.startswith('gs://'):
            write_atomically(path, data)


def write_once(path, data):
    """Content-addressed write: an existing file already holds these bytes."""
    if path.startswith('gs://'):
        gcs_objects.write(path, data, if_absent=True)
        return
    fs = _fs()
    if fs.exists(path):
        return
    temporary = f'{path}.tmp-{threading.get_ident()}-{time.monotonic_ns()}'
    with fs.create(temporary) as f:
        f.write(data)
    fs.rename([temporary], [path])


class TooLarge(Exception):
    """An input larger than the most a build reads of one (`size`: its size, None if unknown)."""

    def __init__(self, path, size, limit):
        if size is None:
            said = f'more than --max-image-bytes {limit:,} bytes; not read past them'
        else:
            said = f'{size:,} bytes, more than --max-image-bytes {limit:,}; not read'
        super().__init__(said)
        self.path, self.size, self.limit = path, size, limit


def read_input(path, max_bytes=None):
    """All bytes of an input file or object; with `max_bytes`, raises TooLarge for one larger
    than that, having read none of a local file (its size first) and at most `max_bytes` + 1
    of any other.

    gs:// objects are read with a google-cloud-storage client kept per thread, in one request
    (imageshards/gcs_objects.py): Beam's FileSystems makes a new client for every call and
    fetches the object's metadata before its bytes, about 6 ms of CPU per object, more than
    decoding the image (measured against a GCS emulator; see docs/dataflow.md). A read that
    Cloud Storage does not answer within the retries raises StoreUnavailable.
    """
    if path.startswith('gs://'):
        data = gcs_objects.read(path, max_bytes)
    elif not is_uri(path):  # Beam's FileSystems costs ~20 us per call to find the local one
        return _read_local(path, max_bytes)
    else:
        with open_read(path) as f:
            data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise TooLarge(path, None, max_bytes)
    return data


def _read_local(path, max_bytes=None):
    """A local file's bytes in as few calls as the OS allows (a third of `open().read()`'s
    cost, which goes to Python's buffered file objects); TooLarge, unread, beyond
    `max_bytes`."""
    fd = handed = local_reads.take(path)  # opened to ask the kernel for it ahead
    if fd is None:
        fd = os.open(path, os.O_RDONLY)
    try:
        status = os.fstat(fd)
        if handed is not None and not stat.S_ISREG(status.st_mode):  # a FIFO, opened not blocking
            os.close(fd)
            fd = None
            return _read_local(path, max_bytes)  # opened as a read opens it
        size = status.st_size
        if max_bytes is not None and size > max_bytes:
            raise TooLarge(path, size, max_bytes)
        parts = [os.read(fd, size)]
        while len(parts[-1]) and sum(map(len, parts)) < size:  # reads stop at 2 GiB
            parts.append(os.read(fd, size - sum(map(len, parts))))
        return b''.join(parts) if len(parts) > 1 else parts[0]
    finally:
        if fd is not None:
            os.close(fd)


def check_credentials(paths):
    """Raises gcs.CredentialsMissing, in one line, where any of `paths` is on gs:// and this
    machine has no credentials for requests that need them (see imageshards/gcs.py)."""
    gcs.check_credentials(paths)


def input_missing(path, error):
    """Whether the failed read of an input (`error`) says it does not exist; where it says
    nothing (another store), whether it does not exist now (an unreachable store: it does)."""
    from google.api_core import exceptions  # pylint: disable=import-outside-toplevel

    if isinstance(error, (FileNotFoundError, exceptions.NotFound)):
        return True
    if path.startswith('gs://') or not is_uri(path):
        return False
    try:
        return not exists(path)
    except Exception:  # pylint: disable=broad-except
        return False


def read_text(path, what='--config'):
    """A local file's text, or a gs:// object's (Vertex's /gcs/ FUSE paths are local files).

    Raises:
        ValueError: a gs:// path that names a bucket only, or an object that does not exist,
            in words that begin with `what` and the path.
    """
    if not path.startswith('gs://'):
        with open(path, encoding='utf-8') as f:
            return f.read()
    from google.api_core import exceptions  # pylint: disable=import-outside-toplevel

    if not gcs.split(path)[1]:
        raise ValueError(f'{what} {path} names a bucket, not a file')
    try:
        return gcs_objects.read(path).decode('utf-8')
    except exceptions.NotFound as e:
        raise ValueError(f'{what} {path} does not exist') from e
