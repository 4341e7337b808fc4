"""A worker process of the local runner that ends in the middle of a run (the out-of-memory
killer, a person's `kill`) fails the build at once, in one line.

The FnApiRunner has no answer to a worker that dies: the thread that started it raises (and prints a
traceback), and the runner waits for the bundle it gave that worker, forever on 5 of 8 runs whose
worker was SIGKILLed late in the build, and then for the other workers as it closes them. So once a
worker process has ended while a pipeline runs (`running_watched`), the other processes of the build
below this one are ended too, and the main thread, wherever it waits, raises WorkerLost (a signal to
it: Python runs its handler there); the build then says so in one line
(pipelines/writing/output_guard.py). Unless --verbose, the runner's threads that end with an
exception say so in a debug line rather than a traceback each.
"""

import contextlib
import functools
import logging
import os
import re
import signal
import threading

_LOG = logging.getLogger(__name__)
# The runner's thread that watches a worker process raises this when the process ends.
_WORKER_EXITED = re.compile(r'Worker subprocess exited with return code (-?\d+)')
_SIGNAL = signal.SIGUSR2  # to the main thread, once a worker is lost
_running = threading.Event()  # a pipeline runs, in `running_watched`
_lost = threading.Event()  # and has lost a worker


class WorkerLost(RuntimeError):
    """A worker process of the local runner ended in the middle of the build."""


def watch_workers(verbose=False):
    """Watches the runner's threads from now on. Call from the main thread."""
    signal.signal(_SIGNAL, _raise_worker_lost)
    threading.excepthook = functools.partial(_thread_failed, verbose=verbose)


@contextlib.contextmanager
def running_watched():
    """While the pipeline runs: a worker process that ends raises WorkerLost here."""
    _lost.clear()
    _running.set()
    try:
        yield
    finally:
        _running.clear()


def _raise_worker_lost(signum, frame):
    del signum, frame
    if _running.is_set():  # not once the pipeline has returned (a signal sent just before)
        raise WorkerLost('Worker subprocess exited in the middle of the run')


def _thread_failed(args, verbose):
    if verbose:
        threading.__excepthook__(args)
    else:
        _LOG.debug(
            'thread %s ended: %s',
            getattr(args.thread, 'name', '?'),
            args.exc_value,
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )
    exited = _WORKER_EXITED.search(str(args.exc_value))
    if not exited or not _running.is_set() or _lost.is_set():
        return  # not a worker; after the run; or the others, ended below
    _lost.set()
    _LOG.warning(
        'a worker process of the build ended (exit status %s: killed, or out of memory?)',
        exited.group(1),
    )
    end_processes_below()
    signal.pthread_kill(threading.main_thread().ident, _SIGNAL)


def end_processes_below():
    """SIGKILLs the processes below this one that share its process group: the runner's other
    workers (and what else the build started there); not the build's watchdog, in a group of
    its own (imageshards/lifeline.py). Linux only: elsewhere nothing."""
    if not os.path.isdir('/proc/self'):
        return
    group, below = os.getpgrp(), {os.getpid()}
    table = _process_table()
    grew = True
    while grew:  # each round adds the children of those found so far
        found = {pid for pid, (parent, pgrp) in table.items() if parent in below and pgrp == group}
        grew = not found <= below
        below |= found
    # Stopped first, all of them: a shell between the runner and a worker (Beam starts the
    # worker command with `sh -c`) that saw its child die before its own end came would print
    # "Killed" on the build's stderr.
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for pid in below - {os.getpid()}:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def _process_table():
    """{pid: (parent pid, process group)} of the processes this user may see."""
    table = {}
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open(f'/proc/{name}/stat', 'rb') as f:
                fields = f.read().rpartition(b')')[2].split()
        except OSError:  # gone
            continue
        table[int(name)] = (int(fields[1]), int(fields[2]))
    return table
