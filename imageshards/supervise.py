"""Ctrl-C for a command that starts worker processes: one line, exit 130, nothing left running.

A terminal sends Ctrl-C's SIGINT to every process of its foreground process group, Beam's
local workers among them, and each would print its own traceback. So `imageshards build` runs
the build in a child process in a session of its own, which no terminal signal reaches, and
waits for it. On SIGINT (or SIGTERM) it ends the child's whole process group, the build and
every worker it started, says in one line what is left where and how to rerun, and exits
with 130, as a shell reports a command stopped by Ctrl-C.

The child also gets a temporary folder of its own (`TMPDIR`), removed when it ends however it
ends, so that nothing it or its workers kept in the system's temporary folder (Beam's
`beam-pipeline-temp*`, the build's scratch files) outlives it.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile

from imageshards import console

ENV = 'IMAGESHARDS_SUPERVISED'
_GRACE_SECONDS = 5.0


def _interrupt(signum, frame):
    del signum, frame
    raise KeyboardInterrupt


def run_supervised(module, argv, interrupted_message):
    """Runs `python -m module argv` as above; returns its exit status (130 if interrupted).

    Args:
        interrupted_message: a function of no arguments giving the line to print on Ctrl-C.
    """
    scratch = tempfile.mkdtemp(prefix='imageshards-run-')
    env = dict(os.environ, **{ENV: '1', 'TMPDIR': scratch})
    previous = signal.signal(signal.SIGTERM, _interrupt)
    child = None
    try:
        child = subprocess.Popen(
            [sys.executable, '-m', module, *argv], env=env, start_new_session=True
        )
        status = child.wait()
        return 128 - status if status < 0 else status
    except KeyboardInterrupt:
        _end(child, signal.SIGTERM)
        print(interrupted_message(), file=sys.stderr, flush=True)
        return console.INTERRUPTED_EXIT_CODE
    finally:
        signal.signal(signal.SIGTERM, previous)
        _end(child, signal.SIGKILL)  # workers the child left behind, if any
        shutil.rmtree(scratch, ignore_errors=True)


def _end(child, first_signal):
    """Sends `first_signal` to the child's process group, and SIGKILL to what is left of it."""
    if child is None:
        return
    _signal_group(child.pid, first_signal)
    try:
        child.wait(_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(child.pid, signal.SIGKILL)
    child.wait()


def _signal_group(group, sig):
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):  # the group is gone already
        pass
