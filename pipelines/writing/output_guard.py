"""The output a build owns: its lock for the build's whole life, room on its disk, and one line
for what goes wrong writing it.

A build holds its output's lock (imageshards/output_lock.py) from before it prepares the output
until it ends, however it ends; a second build is refused in one line (`OutputBusy`), and a
`--dry_run` only checks that no build holds it. A local build whose listed inputs cannot fit on
the output's disk is refused before it writes anything (`check_space`). What stops a build
that has started in a way a person can act on (a full disk, a read-only or removed output, a
permission error, its lock lost, a worker process killed, Cloud Storage not answering within
its retries) becomes `BuildFailed`, whose message is the one line to show; its temporary files
are removed first, and where the output had been prepared, every file the build wrote there, so
that nothing looks finished (imageshards/output_errors.py has the lines). Cleaning up after a
failure, or releasing the lock, never replaces the error that stopped the build: what goes wrong
then is a warning.
"""

import logging
import re

from imageshards import gcs
from imageshards import layout
from imageshards import lifeline
from imageshards import output_errors
from imageshards import output_lock
from imageshards import storage
from imageshards.lock_holder import OutputBusy
from pipelines.core.groups import SplitConflict
from pipelines.writing import overwrite

_LOG = logging.getLogger(__name__)
SKIP_SPACE_CHECK_FLAG = '--no-space-check'
# Raised in a worker, these reach the launcher only as text: `...LockLost: <line> [while ...`.
_ONE_LINE_ERRORS = re.compile(
    r'\b(?:LockLost|CommandGone|StoreUnavailable|CredentialsMissing|SplitConflict): ([^\n\[]+)'
)
# What the local runner raises when one of its worker processes ended in the middle of a bundle
# (the out-of-memory killer, a person's kill), in the launcher or as a worker's text; and what
# pipelines/local/worker_watch.py raises in its place.
_WORKER_GONE = ('Channel closed prematurely', 'Worker subprocess exited')
_RUNNER_STEP = re.compile(r" \[while running '[^\n]*'\]$")


class BuildFailed(Exception):
    """A build that stopped for a reason one line says (the message)."""

    exit_status = output_errors.EXIT_STATUS


class OutputGuard:
    """The lock of `output_dir` while a build runs (a context manager), and what it knows to
    clean up and say when the build fails.

    Args:
        command: the build's command line, recorded in the lock for a refused build to show.
        dry_run: check that no build holds the output, and take nothing.
    """

    def __init__(self, output_dir, command, dry_run=False):
        self.output_dir = output_dir
        self._command = command
        self._dry_run = dry_run
        self._lock = None
        self._prepared = False  # the output has been prepared: what is ours in it, this build's
        self.needed_bytes = None  # what the build needs on the output's disk, once listed

    def __enter__(self):
        if self._dry_run:
            found = output_lock.holder(self.output_dir)
            if found is not None:
                raise OutputBusy(output_lock.busy_message(self.output_dir, found))
        else:
            self._lock = output_lock.acquire(self.output_dir, self._command)
        return self

    def __exit__(self, exc_type, *exc):
        if self._lock is None:
            return
        lock, self._lock = self._lock, None
        try:
            lock.release()
        except Exception as e:  # pylint: disable=broad-except
            if exc_type is None:
                raise
            _LOG.warning('could not release the lock of %s: %s', self.output_dir, e)

    @property
    def build(self):
        """The token that this build's lock records (None for a dry run, or without a lock),
        for a step in another process to check the lock is still this build's."""
        holder = getattr(self._lock, 'holder', None)
        return holder.build if holder is not None else None

    def check(self):
        """Raises LockLost where this build no longer holds its lock."""
        if self._lock is not None:
            self._lock.check()

    def check_space(self, config, summary):
        """Refuses (OutputError) a local build whose inputs cannot fit on its output's disk, as
        far as the listing knows their sizes; remembers the estimate for the failure line."""
        self.needed_bytes = output_errors.estimate_needed_bytes(
            config.format, summary.input_bytes, summary.num_inputs, summary.small_input_bytes
        )
        if config.space_check and not self._dry_run:
            output_errors.check_free_space(
                self.output_dir, self.needed_bytes, SKIP_SPACE_CHECK_FLAG
            )

    def prepared(self):
        """From now on, what is ours in the output is this build's: a failure removes it."""
        self._prepared = True

    def failure(self, error):
        """The BuildFailed for `error`, once the build's files are removed; None where `error`
        is not one a line can say (a bug: its traceback is what helps). A build that lost its
        lock removes nothing: the output may be another build's now."""
        line = one_line(error, self.output_dir, self.needed_bytes)
        if line is None:
            return None
        if _lost_lock(error):
            return BuildFailed(line)
        try:
            self._remove_build()
        except Exception as e:  # pylint: disable=broad-except  # the line says what stopped it
            _LOG.warning('could not remove the unfinished build from %s: %s', self.output_dir, e)
        return BuildFailed(line)

    def _remove_build(self):
        temp = storage.join(self.output_dir, layout.TEMP_DIR)
        if self._prepared:
            overwrite.remove_build(self.output_dir)
        elif storage.exists(temp):  # the listing of a build that could not be prepared
            storage.delete_tree(temp)


def _lost_lock(error):
    return isinstance(error, output_lock.LockLost) or 'LockLost: ' in str(error)


def one_line(error, output_dir, needed_bytes=None):
    """The line that says why a build stopped, or None."""
    said_already = (
        OutputBusy,
        output_lock.LockLost,
        lifeline.CommandGone,
        output_errors.OutputError,
        gcs.StoreUnavailable,
        gcs.CredentialsMissing,
        SplitConflict,
    )
    if isinstance(error, said_already):  # but the step the local runner adds to the text
        return _RUNNER_STEP.sub('', str(error))
    os_error = output_errors.find_os_error(error)
    if os_error is not None:
        return output_errors.describe(os_error, output_dir, needed_bytes)
    if gcs.is_transient(error):  # raised where no StoreUnavailable said it (Beam's FileSystems)
        return gcs.one_line(error)
    text = str(error)
    said = _ONE_LINE_ERRORS.search(text)
    if said:
        return said.group(1).strip()
    if any(sign in text for sign in _WORKER_GONE):
        return (
            f'a worker process of the build ended in the middle of its work (killed, or out of '
            f'memory: see `dmesg`); {output_dir} is not complete: run the same command again '
            f'(add --verbose to see what the runner said)'
        )
    return None
