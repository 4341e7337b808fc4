"""Files of a build, local or on `gs://`: joining, listing, reading, writing, deleting.

Everything goes through Beam's `FileSystems` (local paths, `gs://` and a Cloud Storage emulator
alike), which a Pipeline configures with its options: the launcher's own listing and output
steps then reach `gs://` with the pipeline's credentials. Two readers avoid it on purpose:
`read_input`, which reads every input image (a per-thread Cloud Storage client, or plain
`os.read`), and `read_text`, which reads the YAML files of both commands without Beam.

Beam's FileSystems is imported on first use (`_fs`): the trainer and the YAML loader use this
module without paying ~1.5 s for Beam.

Writes that others must not see half done go to a temporary name, renamed when complete
(`write_atomically`); a content-addressed file is written once (`write_once`). Object stores
have no folders: `make_parent` and `remove_empty_folders` act on local paths only.
"""

import functools
import logging
import os
import re
import shutil
import threading
import time

_LOG = logging.getLogger(__name__)

URI_SCHEME = re.compile(r'^[a-zA-Z][a-zA-Z0-9+.-]*://')
_COPY_BUFFER = 1 << 20


def _fs():
    """Beam's FileSystems (imported here, once, rather than by whoever imports this module)."""
    from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel

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
    return _fs().exists(path)


def list_files(directory):
    """Every file below `directory` (recursively); [] if it does not exist.

    Object stores have no folders; the empty objects named `folder/` that consoles and tools
    create to show one are not files, and do not make a directory non-empty.
    """
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
    """Deletes those of `paths` that exist; returns how many that was."""
    existing = [path for path in paths if exists(path)]
    if existing:
        _fs().delete(existing)
    return len(existing)


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
    """Bytes `start` to `end` (excluded) of a file; of an object on gs://, in one request."""
    if end <= start:
        return b''
    if path.startswith('gs://'):
        bucket, _, name = path[len('gs://') :].partition('/')
        blob = _gcs_client().bucket(bucket).blob(name)
        from google.api_core import exceptions  # pylint: disable=import-outside-toplevel

        try:
            return blob.download_as_bytes(start=start, end=end - 1)
        except exceptions.RequestRangeNotSatisfiable:  # a range past the object's end
            return b''
    with open_read(path) as f:
        f.seek(start)
        return f.read(end - start)


def read(path):
    """All bytes of a file of a build (through FileSystems)."""
    with open_read(path) as f:
        return f.read()


def create(path):
    """A binary file object writing `path`, as stored (never compressed); a local file's
    folders are made as needed."""
    if not is_uri(path):  # what Beam's LocalFileSystem does, without importing Beam
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, 'wb')  # pylint: disable=consider-using-with
    return _fs().create(path, compression_type=_compression())


def rename(sources, destinations):
    _fs().rename(sources, destinations)


def copy(source, destination):
    """Copies one file, streamed (local or gs://, either way)."""
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
    """Writes `data` to `path` through a temporary name (`path.tmp`), renamed when complete."""
    temporary = f'{path}.tmp'
    with _fs().create(temporary) as f:
        f.write(data)
    rename([temporary], [path])


def write_once(path, data):
    """Content-addressed write: an existing file already holds these bytes."""
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

    gs:// objects are read with a google-cloud-storage client kept per thread, in one request.
    Beam's FileSystems makes a new client for every call and fetches the object's metadata
    before its bytes: about 6 ms of CPU per object, more than decoding the image (measured
    against a GCS emulator; see docs/dataflow.md).
    """
    if path.startswith('gs://'):
        data = _read_gcs(path, max_bytes)
    elif not is_uri(path):  # Beam's FileSystems costs ~20 us per call to find the local one
        return _read_local(path, max_bytes)
    else:
        with open_read(path) as f:
            data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise TooLarge(path, None, max_bytes)
    return data


def _read_gcs(path, max_bytes):
    """An object's bytes (with `max_bytes`: its first max_bytes + 1, in one ranged request)."""
    bucket, _, name = path[len('gs://') :].partition('/')
    blob = _gcs_client().bucket(bucket).blob(name)
    if max_bytes is None:
        return blob.download_as_bytes()
    from google.api_core import exceptions  # pylint: disable=import-outside-toplevel

    try:
        return blob.download_as_bytes(start=0, end=max_bytes)
    except exceptions.RequestRangeNotSatisfiable:  # what a range of an empty object gets
        return b''


def _read_local(path, max_bytes=None):
    """A local file's bytes in as few calls as the OS allows (a third of `open().read()`'s
    cost, which goes to Python's buffered file objects); TooLarge, unread, beyond
    `max_bytes`."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if max_bytes is not None and size > max_bytes:
            raise TooLarge(path, size, max_bytes)
        parts = [os.read(fd, size)]
        while len(parts[-1]) and sum(map(len, parts)) < size:  # reads stop at 2 GiB
            parts.append(os.read(fd, size - sum(map(len, parts))))
        return b''.join(parts) if len(parts) > 1 else parts[0]
    finally:
        os.close(fd)


PREFETCH_AHEAD = 64  # files asked for ahead of the one being read
PREFETCH_MAX_BYTES = 64 << 20  # of each


def prefetching(items, path_of, ahead=PREFETCH_AHEAD):
    """Yields `items` (a sequence), having asked the kernel for the local files of the next
    `ahead` of them (`prefetch_local`) before each run of `ahead`: a file is then read from the
    page cache while the disk fetches those after it. `path_of(item)` may be None: nothing to
    fetch."""
    for start in range(0, len(items), ahead):
        if start == 0:
            prefetch_local(map(path_of, items[:ahead]))
        prefetch_local(map(path_of, items[start + ahead : start + 2 * ahead]))
        yield from items[start : start + ahead]


def prefetch_local(paths):
    """Asks the kernel to start reading the local files among `paths` into the page cache, and
    returns at once: the reads that follow find them there instead of each waiting on the disk
    in turn (on a cold cache, this halved a build of 200,000 small JPEGs: bench/RESULTS.md).
    Files that cannot be opened are left to the read that reports them."""
    if not hasattr(os, 'posix_fadvise'):
        return
    for path in paths:
        if path is None or is_uri(path):
            continue
        try:  # not blocking: a FIFO among the inputs must not hang the build here
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:  # at most PREFETCH_MAX_BYTES: a huge file is rejected by its size, never read
            os.posix_fadvise(fd, 0, PREFETCH_MAX_BYTES, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)


def input_exists(path):
    """Whether an input that could not be read exists (an unreachable store: assumed so)."""
    try:
        return exists(path)
    except Exception:  # pylint: disable=broad-except
        return True


def read_text(path, what='--config'):
    """A local file's text, or a gs:// object's (Vertex's /gcs/ FUSE paths are local files).

    Raises:
        ValueError: a gs:// path that names a bucket only, or an object that does not exist,
            in words that begin with `what` and the path.
    """
    if not path.startswith('gs://'):
        with open(path, encoding='utf-8') as f:
            return f.read()
    # pylint: disable=import-outside-toplevel
    from google.api_core import exceptions
    from google.cloud import storage as gcs

    bucket, _, name = path[len('gs://') :].partition('/')
    if not name:
        raise ValueError(f'{what} {path} names a bucket, not a file')
    try:  # a client of its own: a file read once needs none kept
        return gcs.Client().bucket(bucket).blob(name).download_as_text()
    except exceptions.NotFound as e:
        raise ValueError(f'{what} {path} does not exist') from e


_THREAD_STATE = threading.local()


def _gcs_client():
    """This thread's GCS client (a client's connection pool is not meant to be shared)."""
    client = getattr(_THREAD_STATE, 'gcs_client', None)
    if client is None:
        from google.cloud import storage as gcs  # pylint: disable=import-outside-toplevel

        credentials, project = _gcs_credentials()
        if credentials is None:
            client = gcs.Client.create_anonymous_client()
        else:
            client = gcs.Client(project=project, credentials=credentials)
        _THREAD_STATE.gcs_client = client
    return client


@functools.cache
def _gcs_credentials():
    """(credentials, project) of Application Default Credentials, looked up once per process.

    On Dataflow, those of the worker service account. (None, None) where there are none: public
    data can still be read anonymously, as Beam does.
    """
    import google.auth  # pylint: disable=import-outside-toplevel
    from google.auth import exceptions as auth_exceptions  # pylint: disable=import-outside-toplevel

    try:
        return google.auth.default()
    except auth_exceptions.DefaultCredentialsError as e:
        _LOG.warning('no Google credentials (%s); reading gs:// anonymously', e)
        return None, None
