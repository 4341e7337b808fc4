"""One build per output: a build holds a lock on its output for its whole life.

A second build into a busy output, with or without --overwrite, is refused in one line that
names the holder and what to do (`OutputBusy`); `holder` tells `verify` and `report` whether an
output is being written now.

A local output's lock is the file OUT/.imageshards-lock (`layout.LOCK_FILE`), `flock`ed by the
build's process for its whole life. The kernel releases it when that process dies, however it
dies (and imageshards/lifeline.py ends that process when its command ends), so no dead build
holds a lock. The file names its holder (host, the pid of its command, start time, command
line), for a refused build to say. The holder removes it when done; one left by a killed build is
locked by no one, and the next build takes it over, saying whose it was. flock also works on
NFS (Linux emulates it there with byte-range locks, across hosts).

A lock file removed while locked would let a third build lock a new file of the same name: so a
build that has locked a file checks that the name still leads to it (else it locks the new one),
--overwrite keeps the file (pipelines/writing/overwrite.is_own_file), and `check` finds a file
that went. Readers probe with a shared lock held for an instant; a build that meets one retries
for a second before it calls the output busy.

A `gs://` output's lock is an object written with a generation precondition and refreshed
(imageshards/gcs_lock.py). Other schemes have no lock (a warning says so).
"""

import fcntl
import logging
import os
import time

from imageshards import layout
from imageshards import lifeline
from imageshards import storage
from imageshards.lock_holder import Holder
from imageshards.lock_holder import LockLost
from imageshards.lock_holder import OutputBusy
from imageshards.lock_holder import busy_message
from imageshards.lock_holder import takeover_message

_LOG = logging.getLogger(__name__)
_BUSY_RETRY_SECONDS = 1.0  # a reader's shared lock lasts an instant; a build's, its life
_READ_PATIENCE_SECONDS = 0.5  # a holder writes its name just after it has locked the file
_PAUSE_SECONDS = 0.02


def acquire(output, command, log=_LOG, **gcs_options):
    """Takes the lock of `output` for this build, creating a local folder; returns the lock
    (`check()`, `release()`, a context manager).

    Args:
        command: this build's command line (argv or a string), for a refused build to show.
        gcs_options: for a gs:// output, gcs_lock.acquire's (client, expiry, refresh).

    Raises:
        OutputBusy: another build holds it.
    """
    output = _absolute(output)
    me = Holder.this_build(command)
    if output.startswith('gs://'):
        from imageshards import gcs_lock  # pylint: disable=import-outside-toplevel

        return gcs_lock.acquire(output, me, log, **gcs_options)
    if storage.is_uri(output):
        log.warning('%s cannot be locked: make sure no other build writes it', output)
        return _NoLock()
    return _acquire_local(output, me, log)


def holder(output, **gcs_options):
    """The Holder of the build writing `output` now, or None: "is it being written?"."""
    output = _absolute(output)
    if output.startswith('gs://'):
        from imageshards import gcs_lock  # pylint: disable=import-outside-toplevel

        return gcs_lock.holder(output, **gcs_options)
    if storage.is_uri(output):
        return None
    return _local_holder(output)


def ensure_held(output, build=None, **gcs_options):
    """In any process of a build: raises LockLost unless `output`'s lock is still this build's
    (`build`: its token, by default imageshards/lifeline.py's). Does nothing where there is no
    token to compare (a build run directly, not by its command)."""
    build = build or lifeline.build_token()
    output = _absolute(output)
    if build is None or (storage.is_uri(output) and not output.startswith('gs://')):
        return
    found = holder(output, **gcs_options)
    if found is None or found.build != build:
        raise LockLost(f'{output} is no longer locked by this build: another build may write it')


def _absolute(output):
    return storage.absolute(os.fspath(output))


class _NoLock:
    def check(self):
        pass

    def release(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class LocalLock(_NoLock):
    """The flock of a local output's lock file, held until `release`."""

    def __init__(self, output, path, fd, me, created):
        self.output, self.path, self.holder = output, path, me
        self._fd, self._created = fd, created

    def check(self):
        """Raises LockLost if the lock file went (removed, or replaced) while held."""
        if self._fd is None or not _is_file_at(self._fd, self.path):
            raise LockLost(
                f'{self.path} was removed while this build held it: another build may be '
                f'writing {self.output}'
            )

    def release(self):
        """Removes the lock file (while still locked: see the module's docstring), and the
        output folder if taking the lock made it and nothing else went there; unlocks."""
        if self._fd is None:
            return
        try:
            if _is_file_at(self._fd, self.path):
                os.unlink(self.path)
                if self._created:
                    _remove_if_empty(self.output)
        finally:
            os.close(self._fd)
            self._fd = None


def _remove_if_empty(folder):
    try:
        os.rmdir(folder)
    except OSError:  # not empty, or gone: a build's output, or another build's lock
        pass


def _acquire_local(output, me, log):
    created = not os.path.isdir(output)
    path = os.path.join(output, layout.LOCK_FILE)
    while True:
        os.makedirs(output, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:  # a build that made the folder removed it as it ended
            continue
        try:
            if not _lock_within(fd, _BUSY_RETRY_SECONDS):
                raise OutputBusy(busy_message(output, _read_holder(fd, _READ_PATIENCE_SECONDS)))
            if _is_file_at(fd, path):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # its holder released and removed it since we opened it: lock the new one
    previous = _read_holder(fd, 0)
    if previous is not None:
        log.warning('%s', takeover_message(output, previous))
    data = me.to_json()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)
    return LocalLock(output, path, fd, me, created)


def _lock_within(fd, seconds):
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() > deadline:
                return False
            time.sleep(_PAUSE_SECONDS)


def _is_file_at(fd, path):
    """Whether `path` still leads to the open file `fd`."""
    opened = os.fstat(fd)
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    return (opened.st_dev, opened.st_ino) == (named.st_dev, named.st_ino)


def _read_holder(fd, patience):
    deadline = time.monotonic() + patience
    while True:
        found = Holder.from_json(os.pread(fd, 1 << 16, 0))
        if found is not None or time.monotonic() >= deadline:
            return found
        time.sleep(_PAUSE_SECONDS)


def _local_holder(output):
    try:
        fd = os.open(os.path.join(output, layout.LOCK_FILE), os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held: by a build
            return _read_holder(fd, _READ_PATIENCE_SECONDS) or Holder('?', 0, '?', '?', '')
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None  # left by a build that was killed
    finally:
        os.close(fd)
