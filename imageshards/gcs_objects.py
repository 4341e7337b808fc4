"""What a build does with objects on gs://, each in as few requests as Cloud Storage allows:
one request to read, write, or ask whether an object exists; one per 1,000 objects to list; one
per 100 objects to delete or copy (JSON API batches, several at once). Clients, retries and
errors are imageshards/gcs.py's; imageshards/storage.py sends gs:// paths here.

Object writes need no temporary name: Cloud Storage creates an object only once its upload is
complete, so a reader never sees half of one (https://cloud.google.com/storage/docs/consistency).
"""

import contextlib
import errno
import io
import re

from imageshards import gcs

_OCTETS = 'application/octet-stream'
BATCH_SIZE = 100  # calls per JSON API batch request: Cloud Storage's limit
CHUNK_BYTES = 16 << 20  # of a streamed upload, as Beam's GCS filesystem sends them


def read(uri, max_bytes=None):
    """An object's bytes (with `max_bytes`: its first max_bytes + 1 at most), in one request."""
    from google.api_core import exceptions  # pylint: disable=import-outside-toplevel

    with gcs.answering('reading', uri):
        if max_bytes is None:
            return gcs.blob(uri).download_as_bytes(retry=gcs.retry())
        try:
            return gcs.blob(uri).download_as_bytes(start=0, end=max_bytes, retry=gcs.retry())
        except exceptions.RequestRangeNotSatisfiable:  # what a range of an empty object gets
            return b''


def read_range(uri, start, end):
    """Bytes `start` to `end` (excluded) of an object, in one request; past its end, those
    there are (none wholly past it: a cut-short archive's member), as a local file's read."""
    from google.api_core import exceptions  # pylint: disable=import-outside-toplevel

    with gcs.answering('reading', uri):
        try:
            return gcs.blob(uri).download_as_bytes(start=start, end=end - 1, retry=gcs.retry())
        except exceptions.RequestRangeNotSatisfiable:
            return b''


def exists(uri):
    if not gcs.split(uri)[1]:
        raise ValueError(f'{uri} names a bucket, not an object')
    with gcs.answering('looking up', uri):
        return gcs.blob(uri).exists(retry=gcs.retry())


def list_below(folder):
    """The URIs of every object below `folder/`, in name order, but the empty `name/` objects
    that consoles make to show a folder."""
    bucket, name = gcs.split(folder.rstrip('/') + '/')
    with gcs.answering('listing', folder):
        blobs = gcs.client().list_blobs(bucket, prefix=name, retry=gcs.retry())
        return [f'gs://{bucket}/{b.name}' for b in blobs if not b.name.endswith('/')]


def match(pattern):
    """(URI, size) of each object `pattern` names, as Beam's FileSystems.match finds them (a
    listing of what precedes its first glob character, filtered by Beam's translation of the
    pattern), one request per 1,000 objects."""
    from apache_beam.io.filesystem import FileSystem  # pylint: disable=import-outside-toplevel

    pattern += '*' if pattern.endswith('/') else ''
    prefix = re.match(r'^[^[*?]*', pattern).group(0)
    bucket, name = gcs.split(prefix)
    named = re.compile(FileSystem.translate_pattern(pattern)).match
    with gcs.answering('listing', prefix):
        blobs = gcs.client().list_blobs(bucket, prefix=name, retry=gcs.retry())
        found = ((f'gs://{bucket}/{b.name}', b.size) for b in blobs)
        return [(uri, size) for uri, size in found if named(uri)]


def write(uri, data, if_absent=False):
    """Creates or replaces object `uri` with `data`, in one request; with `if_absent`, leaves
    an existing object as it is (a content-addressed file already holds the same bytes)."""
    from google.api_core import exceptions  # pylint: disable=import-outside-toplevel

    with gcs.answering('writing', uri), _permission(uri):
        try:
            gcs.blob(uri).upload_from_string(
                data, _OCTETS, if_generation_match=0 if if_absent else None, retry=gcs.retry()
            )
        except exceptions.PreconditionFailed:
            if not if_absent:
                raise


def write_many(files):
    """Writes {uri: bytes} at once."""
    gcs.concurrently(lambda item: write(*item), files.items())


def upload_file(path, uri):
    """Copies local file `path` to object `uri`."""
    with gcs.answering('writing', uri), _permission(uri):
        gcs.blob(uri).upload_from_filename(path, _OCTETS, retry=gcs.retry())


def open_write(uri):
    """A binary file object writing object `uri`, which exists once closed (abandoned where a
    `with` block raises); StoreUnavailable where Cloud Storage stops answering."""
    return _Upload(uri)


class _Upload:
    """Keeps what is written in memory up to CHUNK_BYTES, sent in one request when closed; from
    there on streams it as a resumable upload, chunk by chunk, each chunk retried."""

    def __init__(self, uri):
        self._uri = uri
        self._buffer = io.BytesIO()
        self._writer = None

    def write(self, data):
        if self._writer is None:
            self._buffer.write(data)
            if self._buffer.tell() < CHUNK_BYTES:
                return len(data)
            from google.cloud.storage.fileio import BlobWriter  # pylint: disable=C0415

            blob = gcs.blob(self._uri)
            self._writer = BlobWriter(
                blob, chunk_size=CHUNK_BYTES, ignore_flush=True, retry=gcs.retry()
            )
            data, self._buffer = self._buffer.getvalue(), None
        with gcs.answering('writing', self._uri), _permission(self._uri):
            self._writer.write(data)
        return len(data)

    def close(self):
        if self._writer is None:
            if self._buffer is not None:
                write(self._uri, self._buffer.getvalue())
                self._buffer = None
            return
        with gcs.answering('writing', self._uri), _permission(self._uri):
            self._writer.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.close()


def delete(uris):
    """Deletes the objects `uris` (one missing is not an error); returns how many there were."""
    uris = list(uris)

    def call(client, uri):
        _bucket(client, uri).delete_blob(gcs.split(uri)[1])

    statuses = _batched(uris, 'deleting', call)
    _raise_failed('deleting', uris, statuses, ignore=(404,))
    return sum(status < 300 for status in statuses)


def rename(sources, destinations):
    """Moves objects `sources` to `destinations`: copies, then deletes the sources, batched."""
    pairs = list(zip(sources, destinations, strict=True))

    def call(client, pair):
        source, destination = pair
        bucket = _bucket(client, source)
        new_name = gcs.split(destination)[1]
        bucket.copy_blob(bucket.blob(gcs.split(source)[1]), _bucket(client, destination), new_name)

    _raise_failed('copying', [source for source, _ in pairs], _batched(pairs, 'copying', call))
    delete([source for source, _ in pairs])


def _bucket(client, uri):
    return client.bucket(gcs.split(uri)[0])


def _batched(items, what, call):
    """The HTTP status of `call(client, item)` for each of `items`, sent in JSON API batches of
    BATCH_SIZE calls, several batches at once."""
    chunks = [items[i : i + BATCH_SIZE] for i in range(0, len(items), BATCH_SIZE)]
    answered = gcs.concurrently(lambda chunk: _batch(chunk, what, call), chunks)
    return [status for statuses in answered for status in statuses]


def _batch(items, what, call):
    """The HTTP status of each call of one batch. The calls that fail transiently (and the whole
    batch, where its request does) are sent again, with the client's backoff, until they
    succeed or the retries run out: StoreUnavailable."""
    from google.cloud import exceptions  # pylint: disable=import-outside-toplevel

    statuses = [None] * len(items)
    pending = list(range(len(items)))

    def attempt():
        client = gcs.client()
        batch = client.batch(raise_exception=False)
        with batch:
            for i in pending:
                call(client, items[i])
        failed = []
        # finish()'s answers, one per call, kept where Beam's gcsio reads them too.
        for i, answer in zip(list(pending), batch._responses):  # pylint: disable=W0212
            statuses[i] = answer.status_code
            error = exceptions.from_http_response(answer) if answer.status_code >= 400 else None
            if error is not None and gcs.is_transient(error):
                failed.append((i, error))
        pending[:] = [i for i, _ in failed]
        if failed:
            raise failed[0][1]

    with gcs.answering(what, _named(items[0])):
        gcs.retry()(attempt)()
    return statuses


def _named(item):
    return item[0] if isinstance(item, tuple) else item


def _raise_failed(what, names, statuses, ignore=()):
    """Raises PermissionError (403) or OSError for the first call that failed otherwise."""
    for name, status in zip(names, statuses):
        if status >= 400 and status not in ignore:
            if status == 403:
                raise PermissionError(errno.EACCES, 'Permission denied', name)
            raise OSError(errno.EIO, f'Cloud Storage answered {status} {what} it', name)


@contextlib.contextmanager
def _permission(uri):
    """PermissionError (EACCES, naming the object) in place of Forbidden, for
    imageshards/output_errors.py to say in one line."""
    from google.api_core import exceptions  # pylint: disable=import-outside-toplevel

    try:
        yield
    except exceptions.Forbidden as e:
        raise PermissionError(errno.EACCES, 'Permission denied', uri) from e
