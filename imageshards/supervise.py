"""Ctrl-C for a command that starts worker processes: one line, exit 130, nothing left running.

A terminal sends Ctrl-C's SIGINT to every process of its foreground process group, Beam's
local workers among them, and each would print its own traceback. So `imageshards build` runs
the build in a child process in a session of its own, which no terminal signal reaches, and
waits for it. On SIGINT (or SIGTERM) it ends the child's whole process group, the build and
every worker it started, says in one line what is left where and how to rerun, and exits
with 130, as a shell reports a command stopped by Ctrl-C. Its terminal closing (SIGHUP) ends
it the same way, unless SIGHUP is ignored (`nohup`).

Where the command ends without a word (SIGKILL of it or of its process group), the child and
every process it started end with it, within a second: imageshards/lifeline.py.

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
from imageshards import lifeline

ENV = 'IMAGESHARDS_SUPERVISED'
_GRACE_SECONDS = 5.0


def _interrupt(signum, frame):
    del signum, frame
    raise KeyboardInterrupt


def is_supervised() -> bool:
    """Whether this process is the supervised child of a command (`run_supervised` made it)."""
    return bool(os.environ.get(ENV))


def run_supervised(module, argv, interrupted_message):
    """Runs `python -m module argv` as above; returns its exit status (130 if interrupted).

    Call it from the main thread: the child's parent-death signal follows the thread that
    started it (Linux).

    Args:
        interrupted_message: a function of no arguments giving the line to print on Ctrl-C.
    """
    scratch = tempfile.mkdtemp(prefix='imageshards-run-')
    read_end, write_end = lifeline.open_pipe()
    env = dict(os.environ, **{ENV: '1', 'TMPDIR': scratch})
    env[lifeline.ENV] = lifeline.spec(read_end, scratch)
    previous = _handle_end_signals()
    child = None
    try:
        child = subprocess.Popen(
            lifeline.child_command(module, argv),
            env=env,
            start_new_session=True,
            pass_fds=(read_end,),
        )
        os.close(read_end)
        read_end = None
        status = child.wait()
        return 128 - status if status < 0 else status
    except KeyboardInterrupt:
        _end(child, signal.SIGTERM)
        _say(interrupted_message())
        return console.INTERRUPTED_EXIT_CODE
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _end(child, signal.SIGKILL)  # workers the child left behind, if any
        shutil.rmtree(scratch, ignore_errors=True)
        for end in (read_end, write_end):  # the watchdog, if any, ends the rest
            if end is not None:
                os.close(end)


def _handle_end_signals():
    """SIGTERM, and SIGHUP unless ignored (nohup), end the command as Ctrl-C does; returns
    the handlers they had."""
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _interrupt)}
    if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, _interrupt)
    return previous


def _say(line):
    """Prints the line, if there is still somewhere to print it (a closed terminal: EIO)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


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
