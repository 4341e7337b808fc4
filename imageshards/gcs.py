"""Cloud Storage as a build uses it: a google-cloud-storage client per thread, each request retried
where it can be, many requests batched or sent at once, and a fault of the network told apart
from an answer about an object.

imageshards/storage.py sends gs:// paths here for what a build does often or many times at once
(read an input, write, list, delete and rename its own files) rather than through Beam's
`FileSystems`, which makes a new client for every call, asks `exists()` of each file before
deleting it and then deletes it in a batch of its own, and turns a batch that never got an
answer into an AttributeError (apache_beam 2.77 gcsio `_batch_with_retry`). Streams (manifests,
the listing) still go through FileSystems.

Retries: a request that fails transiently (429, 408, 5xx, a reset or refused connection, a
timeout: google-cloud-storage's own retry predicate) is sent again with exponential backoff and
full jitter (google.api_core's Retry, as the client does by default) for `retry_seconds()`
(120 s, the client's default; IMAGESHARDS_GCS_RETRY_SECONDS sets it). One that still fails
raises StoreUnavailable, whose message is the one line a failed build shows: a fault of the
network is never taken for an answer about an object; so does a 401, which is about the
credentials. NotFound, Forbidden and the other answers about an object itself are raised as the
client raises them.

Credentials: none where requests go to an emulator (STORAGE_EMULATOR_HOST) or the pipeline's
options say `--no_auth`; else Application Default Credentials, looked up once per process,
and where there are none, CredentialsMissing says what to do in one line.
"""

import concurrent.futures
import contextlib
import functools
import http
import os
import sys
import threading

from imageshards import layout

RETRY_SECONDS_ENV = 'IMAGESHARDS_GCS_RETRY_SECONDS'
_DEFAULT_RETRY_SECONDS = 120.0  # google-cloud-storage's DEFAULT_RETRY
_THREADS = 16  # requests a process sends at once where it has many (a batch is one)
# google-cloud-storage fetches each bucket's metadata in the background for every new client,
# for OpenTelemetry attributes, traces or not: a request per client, and a denied
# storage.buckets.get where the build's account may read objects only. Its maintainers'
# switch (googleapis/google-cloud-python#17650), unless the user has set it.
os.environ.setdefault('DISABLE_GCS_PYTHON_CLIENT_OTEL_BUCKET_METADATA', 'true')


class StoreUnavailable(Exception):
    """A request that Cloud Storage did not answer (or answered 429/5xx) within the retries, or
    whose credentials it refused: the build's trouble, never an object's."""


class CredentialsMissing(ValueError):
    """No Google Cloud credentials, where gs:// needs them."""


def retry_seconds():
    return float(os.environ.get(RETRY_SECONDS_ENV) or _DEFAULT_RETRY_SECONDS)


def retry():
    """The retry policy of every request: the client's own, for `retry_seconds()`."""
    from google.cloud.storage.retry import DEFAULT_RETRY  # pylint: disable=C0415

    return DEFAULT_RETRY.with_timeout(retry_seconds())


def is_transient(error):
    """Whether `error` (or the one it was raised from) is a fault of the network or the
    service, one that a retry may get past: google-cloud-storage's retry predicate, or retries
    that ran out."""
    # pylint: disable=import-outside-toplevel
    from google.api_core import exceptions
    from google.cloud.storage.retry import _should_retry  # what DEFAULT_RETRY asks, as Beam's

    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, (StoreUnavailable, exceptions.RetryError)) or _should_retry(error):
            return True
        if any(is_transient(cause) for cause in _details(error).values()):
            return True
        error = error.__cause__  # not __context__: an answer met while handling a fault is one
    return False


def _details(error):
    """{path: error} of an error of Beam's FileSystems (BeamIOError), else {}."""
    details = getattr(error, 'exception_details', None)
    return details if isinstance(details, dict) else {}


def one_line(error):
    """The line of a transient `error` met anywhere, also in Beam's FileSystems (whose errors
    name the path in `exception_details`)."""
    if isinstance(error, StoreUnavailable):
        return str(error)
    for where, cause in _details(error).items():
        if is_transient(cause):
            where = where[0] if isinstance(where, tuple) else where  # a rename's (source, dest)
            return (
                one_line(cause) if _details(cause) else str(unavailable('reaching', where, cause))
            )
    return str(unavailable('reaching', 'Cloud Storage', error))


def unavailable(what, uri, error):
    """The StoreUnavailable for `error`, met `what`ing (reading, writing, ...) `uri`."""
    return StoreUnavailable(
        f'Cloud Storage did not answer {what} {uri} within {retry_seconds():.0f} s of retries '
        f'({_cause(error)}); the build stopped without {layout.SUCCESS}: run the same command '
        f'again'
    )


def _cause(error):
    """`HTTP 503 Service Unavailable`, or the error's type and text, in one short line."""
    error = getattr(error, 'cause', None) or error  # a RetryError's last error
    status = getattr(error, 'code', None)  # google.api_core's errors
    status = getattr(getattr(error, 'response', None), 'status_code', status)  # a download's
    if isinstance(status, int):
        return (
            f'HTTP {status} {http.HTTPStatus(status).phrase}'
            if status in _PHRASES
            else f'HTTP {status}'
        )
    text = ' '.join(str(error).split()).replace('[', '(').replace(']', ')')  # a runner's ends at [
    return f'{type(error).__name__}: {text}'[:300]


_PHRASES = {status.value for status in http.HTTPStatus}


@contextlib.contextmanager
def answering(what, uri):
    """Raises StoreUnavailable in place of a transient error (left after the retries)."""
    # pylint: disable=import-outside-toplevel
    from google.api_core import exceptions
    from google.auth import exceptions as auth_exceptions

    try:
        yield
    except StoreUnavailable:
        raise
    except (exceptions.Unauthorized, auth_exceptions.GoogleAuthError) as e:
        if is_transient(e):  # a token endpoint that did not answer
            raise unavailable(what, uri, e) from e
        raise StoreUnavailable(  # about the credentials (a 401, a refresh refused), not the object
            f'Cloud Storage refused the credentials of this build {what} {uri} ({_cause(e)}); '
            f'check them (gcloud auth application-default login; without --no_auth where the data '
            f'is not public) and run the same command again'
        ) from e
    except Exception as e:  # pylint: disable=broad-except
        if is_transient(e):
            raise unavailable(what, uri, e) from e
        raise


def split(uri):
    """(bucket, object name) of `gs://bucket/name`."""
    bucket, _, name = uri[len('gs://') :].partition('/')
    return bucket, name


def blob(uri):
    bucket, name = split(uri)
    return client().bucket(bucket).blob(name)


_THREAD_STATE = threading.local()


def client():
    """This thread's google-cloud-storage client (a client's connections are not meant to be
    shared between threads); a new one where the emulator it spoke to is another now."""
    key = (os.environ.get('STORAGE_EMULATOR_HOST'), anonymous())
    found = getattr(_THREAD_STATE, 'client', None)
    if found is None or found[0] != key:
        from google.cloud import storage as gcs  # pylint: disable=import-outside-toplevel

        if key[1]:
            made = gcs.Client.create_anonymous_client()
        else:
            credentials, project = _credentials()
            made = gcs.Client(project=project, credentials=credentials)
        found = _THREAD_STATE.client = (key, made)
    return found[1]


def anonymous():
    """Whether requests go without credentials: to an emulator, or with `--no_auth` in the
    options of the pipeline that runs here (Beam gives them to FileSystems in every process)."""
    if os.environ.get('STORAGE_EMULATOR_HOST'):
        return True
    filesystems = sys.modules.get('apache_beam.io.filesystems')  # no pipeline without Beam
    options = filesystems and filesystems.FileSystems._pipeline_options  # pylint: disable=W0212
    if not options:
        return False
    from apache_beam.options.pipeline_options import GoogleCloudOptions  # pylint: disable=C0415

    return bool(options.view_as(GoogleCloudOptions).no_auth)


def check_credentials(paths):
    """Raises CredentialsMissing at once where any of `paths` is on gs:// and requests there
    need credentials that this machine does not have; else makes Beam's GCS filesystem, in this
    process, skip its own lookup where requests go without (`quiet_beam`)."""
    if not any(path.startswith('gs://') for path in paths):
        return
    if anonymous():
        quiet_beam()
    else:
        _credentials()


def quiet_beam():
    """Tells Beam's GCS filesystem, in this process, that there are no credentials to look up,
    where requests go without: it looks up Application Default Credentials in every process,
    whatever `--no_auth` says, and where there are none it retries for about 20 s before it
    connects anonymously (apache_beam/internal/gcp/auth.py caches the answer per process)."""
    if _QUIETED or not anonymous():
        return
    from apache_beam.internal.gcp import auth  # pylint: disable=import-outside-toplevel

    cache = auth._Credentials  # pylint: disable=protected-access
    with cache._credentials_lock:  # pylint: disable=protected-access
        if not cache._credentials_init:  # pylint: disable=protected-access
            cache._credentials, cache._credentials_init = None, True  # pylint: disable=W0212
    _QUIETED.append(True)


_QUIETED = []  # once Beam is told


@functools.cache
def _credentials():
    """(credentials, project) of Application Default Credentials, looked up once per process
    (on Dataflow, the worker service account's)."""
    import google.auth  # pylint: disable=import-outside-toplevel
    from google.auth import exceptions  # pylint: disable=import-outside-toplevel

    try:
        return google.auth.default()
    except exceptions.DefaultCredentialsError:
        raise CredentialsMissing(
            'gs:// needs Google Cloud credentials and none were found: run `gcloud auth '
            'application-default login`, set GOOGLE_APPLICATION_CREDENTIALS to the key file of '
            'a service account, or pass --no_auth to read public data anonymously'
        ) from None


_POOL_LOCK = threading.Lock()
_POOL = []


def concurrently(fn, items):
    """[fn(item) for item in items], `_THREADS` at a time (each thread with its client kept
    for the process's next calls); the first error is raised once all are done."""
    items = list(items)
    if len(items) <= 1:
        return [fn(item) for item in items]
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(concurrent.futures.ThreadPoolExecutor(_THREADS, 'gcs'))
    futures = [_POOL[0].submit(fn, item) for item in items]
    concurrent.futures.wait(futures)
    return [future.result() for future in futures]
