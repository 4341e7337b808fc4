"""The lock of a `gs://` output (imageshards/output_lock.py): the object OUT/.imageshards-lock.

A build creates it only where none exists (`ifGenerationMatch=0`: of two builds racing, Cloud
Storage creates it for one and refuses the other with 412 Precondition Failed), and a thread
rewrites it every REFRESH_SECONDS, each time only if it is still the version this build wrote
last. A lock not rewritten for EXPIRY_SECONDS belongs to a build that is gone: the next build
takes it over, saying so, again under a precondition (the generation it found stale), so that of
two builds taking over one lock one wins. Its age is Cloud Storage's `updated` time against this
machine's clock: clocks a minute apart shorten or lengthen the expiry by that minute.

A holder whose lock was taken over or removed, or that could not refresh it for EXPIRY_SECONDS,
has lost it: `check` raises LockLost, and the build must not mark its output finished. A build
that ends releases its lock (deletes it, if still its version); one killed leaves it to expire,
and so does one whose release Cloud Storage does not answer: a warning says so, and whatever
stopped the build stays the error it reports.
"""

import logging
import threading
import time

from google.api_core import exceptions
from google.auth import exceptions as auth_exceptions

from imageshards import gcs
from imageshards import layout
from imageshards.lock_holder import Holder
from imageshards.lock_holder import LockLost
from imageshards.lock_holder import OutputBusy
from imageshards.lock_holder import busy_message
from imageshards.lock_holder import takeover_message

_LOG = logging.getLogger(__name__)
EXPIRY_SECONDS = 120.0
REFRESH_SECONDS = 20.0
_ATTEMPTS = 5  # of creating or taking over, where the lock changes under us each time
_TRANSIENT = (exceptions.GoogleAPIError, auth_exceptions.GoogleAuthError, OSError)
_CONTENT_TYPE = 'application/json'


def _blob(uri, client):
    bucket, _, prefix = uri[len('gs://') :].partition('/')
    name = f'{prefix.rstrip("/")}/{layout.LOCK_FILE}' if prefix.strip('/') else layout.LOCK_FILE
    return (client or gcs.client()).bucket(bucket).blob(name)


def acquire(uri, me, log=_LOG, client=None, expiry=EXPIRY_SECONDS, refresh=REFRESH_SECONDS):
    """Takes the lock of output `uri` for Holder `me`; returns the GcsLock, refreshing.

    Raises:
        OutputBusy: another build holds it (and has refreshed it within `expiry` seconds).
    """
    blob = _blob(uri, client)
    for _ in range(_ATTEMPTS):
        try:
            blob.upload_from_string(me.to_json(), _CONTENT_TYPE, if_generation_match=0)
            return GcsLock(uri, blob, me, blob.generation, expiry, refresh, log)
        except exceptions.PreconditionFailed:
            pass  # there is one
        generation = _take_over_or_refuse(uri, blob, me, log, expiry)
        if generation is not None:
            return GcsLock(uri, blob, me, generation, expiry, refresh, log)
    raise OutputBusy(busy_message(uri, None))  # it changed hands each time we looked


def _take_over_or_refuse(uri, blob, me, log, expiry):
    """The generation of the lock, once this build has it; None where it went (try again)."""
    found, held, age = _read(blob)
    if found is None:
        return None
    if held is not None and held.build == me.build:
        return found.generation  # ours: a create that Cloud Storage did, answered by a retry
    if age <= expiry:
        raise OutputBusy(busy_message(uri, _with_age(held, age), expiry))
    try:
        blob.upload_from_string(me.to_json(), _CONTENT_TYPE, if_generation_match=found.generation)
    except exceptions.PreconditionFailed:
        return None  # another build took it over, or its holder refreshed it, first
    gone = f'stopped refreshing it {age:.0f} s ago (its lock lapses after {expiry:.0f} s)'
    log.warning('%s', takeover_message(uri, held or Holder('?', 0, '?', '?', ''), gone))
    return blob.generation


def _read(blob):
    """(the lock's metadata, its Holder, seconds since it was last written), or (None, ...)."""
    found = blob.bucket.get_blob(blob.name)
    if found is None:
        return None, None, None
    try:
        data = found.download_as_bytes(if_generation_match=found.generation)
    except (exceptions.NotFound, exceptions.PreconditionFailed):
        return None, None, None  # rewritten or removed since: look again
    return found, Holder.from_json(data), time.time() - found.updated.timestamp()


def _with_age(held, age):
    held = held or Holder('?', 0, '?', '?', '')
    return Holder(held.host, held.pid, held.started, held.command, held.build, age)


def holder(uri, client=None, expiry=EXPIRY_SECONDS):
    """The Holder of the live lock of output `uri`, or None (none, or expired)."""
    _, held, age = _read(_blob(uri, client))
    if age is None or age > expiry:
        return None
    return _with_age(held, age)


class GcsLock:
    """A lock this build holds, refreshed by a thread of its own until `release`."""

    def __init__(self, uri, blob, me, generation, expiry, refresh, log):
        self.uri, self.holder = uri, me
        self._blob, self._generation = blob, generation
        self._expiry, self._refresh, self._log = expiry, refresh, log
        self._lost = None  # why, once lost
        self._released = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name='output-lock', daemon=True)
        self._thread.start()

    def _keep(self):
        refreshed = time.monotonic()
        while not self._stop.wait(self._refresh):
            try:
                self._blob.upload_from_string(
                    self.holder.to_json(), _CONTENT_TYPE, if_generation_match=self._generation
                )
                self._generation, refreshed = self._blob.generation, time.monotonic()
            except (exceptions.PreconditionFailed, exceptions.NotFound):
                self._lose(f'{self.uri} was taken over or removed while this build held its lock')
                return
            except _TRANSIENT as e:  # tried again at the next refresh, until it expires
                if time.monotonic() - refreshed > self._expiry:
                    self._lose(f'the lock of {self.uri} could not be refreshed ({e})')
                    return
                self._log.warning(
                    'refreshing the lock of %s failed (%s); trying again', self.uri, e
                )

    def _lose(self, why):
        self._lost = f'{why}: another build may write it'
        self._log.error('%s', self._lost)

    def check(self):
        """Raises LockLost once the lock is lost."""
        if self._lost:
            raise LockLost(self._lost)

    def release(self):
        """Stops refreshing and removes the lock, if it is still this build's version; where
        Cloud Storage does not answer, leaves it to expire, saying so (never raises for that:
        a release runs as a build ends, also when it ends with an error of its own)."""
        self._stop.set()
        self._thread.join()
        if self._lost is None and not self._released:
            try:
                self._blob.delete(if_generation_match=self._generation, retry=gcs.retry())
            except (exceptions.NotFound, exceptions.PreconditionFailed):
                pass
            except _TRANSIENT as e:
                self._log.warning(
                    'could not remove the lock of %s (%s); it lapses %.0f s after its last refresh',
                    self.uri,
                    ' '.join(str(e).split())[:200],
                    self._expiry,
                )
        self._released = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
