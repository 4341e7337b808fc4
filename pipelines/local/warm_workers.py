"""The local runner's worker processes, forked from the launcher once it has imported Beam.

The FnApiRunner starts its workers (`python -m apache_beam.runners.worker.sdk_worker_main`,
one per core) once the pipeline runs, and each then imports Beam after the launcher has
imported it too: on a small machine, every core spends a second more on the same imports before
any image is read (bench/RESULTS.md, "Against the peers, with the workers' imports done early").
So the `imageshards build` command makes a folder of worker slots first (`start_early`, beside
the early listing), and the launcher, once its imports are done and before the runner makes a
thread or a channel, forks the **serving process** (`serve_from_here`): a copy of it that waits,
with every module a worker needs already imported, at no CPU of its own (bench/RESULTS.md,
"Build CPU at or below TFDS's": one that imported for itself cost a second of CPU). The
runner's worker command then is `python -m pipelines.local.warm_workers claim FOLDER`, a process
of no imports that takes a slot and hands it the environment the runner gave the command (where
to reach the runner, the pipeline options, the progress folder); the serving process forks a
worker for it, which runs Beam's worker in that environment, and the claim waits for that
worker to end and exits with its status, as the runner expects of the process it started.
Forking is safe there: the serving process has one thread (the launcher's other one, its
stderr filter's, is not copied, and the copy's logging and stderr are set as a new process's:
console.unconfigure_in_forked_child) and has opened no gRPC channel.
With no slot left, or no serving process, the claim becomes Beam's own worker.

Where no launcher of ours forks it (a build run from Python, `start_early(argv, fork=False)`),
the serving process is `python -m pipelines.local.warm_workers serve FOLDER`, which imports what
a worker needs itself while the launcher imports Beam.

    python -m pipelines.local.warm_workers serve FOLDER   a serving process that imports
    python -m pipelines.local.warm_workers claim FOLDER   the runner's worker command

FOLDER/free/N is there until a claim takes slot N (a rename: one claim wins); FOLDER/slots/N/
then gets the claim's `environment.json`, the forked worker's `pid` and the `exit` status it
leaves. No Beam at module level: the build command imports this before Beam.
"""

import ctypes
import gc
import importlib
import json
import logging
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

_LOG = logging.getLogger(__name__)
PID, ENVIRONMENT, EXIT = 'pid', 'environment.json', 'exit'
CLAIMED = 'claimed-'  # FOLDER/free/N, once taken
SERVER = 'server.pid'  # the serving process's
BEAM_WORKER = 'apache_beam.runners.worker.sdk_worker_main'
_POLL_SECONDS = 0.01
SERVER_NAME = b'warm_workers'  # the forked serving process's name (`ps -o comm`), and its workers'
_PR_SET_NAME = 15
# What a worker unpickles the build's steps from: the modules of their DoFns and functions
# (pipelines/steps.py composes them; a test checks that this names every stage module it
# imports), and the local runner's block store, pickled into them.
WORKER_MODULES = (
    'pipelines.inputs.archive_index',  # its own pipeline's, run before the build's
    'pipelines.inputs.listing',
    'pipelines.inputs.coco_join',  # a COCO file's annotations, joined to their images
    'pipelines.validation.validate',
    'pipelines.validation.dedup',
    'pipelines.assignment.assign',
    'pipelines.assignment.grouping',
    'pipelines.assignment.previous',
    'pipelines.writing.encode',
    'pipelines.writing.sample',
    'pipelines.writing.write',
    'pipelines.writing.finalize',
    'pipelines.analysis.analyze',
    'pipelines.analysis.tft_pipeline',
    'pipelines.local.spill',
)
_early = None  # the WarmWorkers `start_early` started, until the build ends


class WarmWorkers:
    """The serving process for `count` workers, and its folder. With `fork`, the process is
    made by `serve_from_here`, in the launcher, once it has imported; else started now."""

    def __init__(self, count, fork=False):
        self.folder = tempfile.mkdtemp(prefix='imageshards-workers-')
        self.count = count
        for index in range(count):
            os.makedirs(os.path.join(self.folder, 'slots', str(index)))
        self._process = self._pid = None
        if not fork:
            self._process = subprocess.Popen(  # pylint: disable=consider-using-with
                [sys.executable, '-m', __name__, 'serve', self.folder]
            )
            self._serving(self._process.pid)

    @property
    def serving(self) -> bool:
        """Whether a serving process was started (claims can take its workers)."""
        return self._pid is not None

    def fork(self) -> None:
        """Forks the serving process from this one: call once what a worker needs is imported,
        before the runner makes a thread or a gRPC channel, and after `gc.freeze()`."""
        pid = os.fork()
        if pid == 0:  # pragma: no cover (the child; tests see what it serves)
            status = 1
            try:
                status = _serve_forked(self.folder)
            finally:
                os._exit(status)  # pylint: disable=protected-access
        self._serving(pid)

    def _serving(self, pid):
        _write_atomically(os.path.join(self.folder, SERVER), str(pid).encode())
        os.makedirs(os.path.join(self.folder, 'free'))
        for index in range(self.count):  # claimable once the server's pid is there to watch
            open(os.path.join(self.folder, 'free', str(index)), 'wb').close()
        self._pid = pid

    @property
    def command(self) -> str:
        """The runner's worker command line (a shell command, as Beam's environments take)."""
        return shlex.join([sys.executable, '-m', __name__, 'claim', self.folder])

    @property
    def claimed(self) -> int:
        """How many of the workers a claim has taken."""
        return sum(name.startswith(CLAIMED) for name in os.listdir(self.folder))

    def close(self) -> None:
        """Stops the workers still running (a claimed one has ended with the pipeline) and
        removes the folder."""
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
        elif self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGKILL)
                os.waitpid(self._pid, 0)
            except (ProcessLookupError, ChildProcessError):  # reaped or gone already
                pass
        shutil.rmtree(self.folder, ignore_errors=True)


def start_early(argv, fork=False) -> WarmWorkers | None:
    """Starts the workers now (with `fork`: their folder now, their serving process when the
    launcher calls `serve_from_here`) where `argv` (the build's arguments) runs the local runner
    with worker processes: no --runner, --dry_run, --config (it may name another runner) or
    help, and `--direct_running_mode`, if given, multi_processing; and on Linux (pidfds, and
    forking a process that imported gRPC but opened nothing, which macOS does not promise to
    allow). Returns the WarmWorkers, or None.
    """
    global _early  # pylint: disable=global-statement
    if not hasattr(os, 'pidfd_open') or not hasattr(os, 'fork'):
        return None  # Linux 5.3 and later only: elsewhere, Beam's own workers
    values = dict(arg.split('=', 1) if '=' in arg else (arg, '') for arg in argv)
    if set(values) & {'--runner', '--dry_run', '--config', '--help', '-h'}:
        return None
    if values.get('--direct_running_mode', 'multi_processing') != 'multi_processing':
        return None
    try:
        count = int(values.get('--direct_num_workers') or 0) or os.cpu_count() or 1
    except ValueError:
        return None  # the build itself says what is wrong with it
    _early = WarmWorkers(count, fork)
    return _early


def serve_from_here() -> None:
    """In the launcher, its imports done: forks the serving process of the workers
    `start_early(argv, fork=True)` made the folder of; nothing where there are none to serve."""
    if _early is not None and not _early.serving:
        try:
            _early.fork()
        except OSError as e:  # no process to be had: claims become Beam's own workers
            _LOG.debug('the workers started early cannot be served: %s', e)


def worker_command(num_workers) -> str | None:
    """The worker command for a local run of `num_workers` worker processes: the early workers',
    where they were started for as many; else None (Beam's own)."""
    if _early is not None and _early.serving and _early.count == num_workers:
        return _early.command
    return None


def stop_untaken() -> None:
    """Stops the early workers, once the build is done with them, or does not want them."""
    global _early  # pylint: disable=global-statement
    early, _early = _early, None
    if early:
        if early.claimed:
            _LOG.debug('%d of %d workers started early were used', early.claimed, early.count)
        early.close()


def serve(folder) -> int:
    """A serving process started anew: imports what a worker needs once, then serves."""
    # pylint: disable=import-outside-toplevel
    # Nothing to collect among what the imports make, only to walk again and again (a fifth of
    # their CPU): the collector is off until they are frozen.
    gc.disable()
    from apache_beam.runners.worker import sdk_worker_main

    for module in WORKER_MODULES:
        importlib.import_module(module)
    # Out of the collector's sight, as in the build's own process (pipelines/build.py): the
    # objects of these imports, which every forked worker shares and would otherwise walk at
    # each full collection (and copy, page by page, as the walk touches them).
    gc.freeze()
    gc.enable()
    return _serve(sdk_worker_main, folder)


def _serve_forked(folder) -> int:
    """The serving process forked from the launcher, which has imported (and frozen) it all."""
    # pylint: disable=import-outside-toplevel
    from apache_beam.runners.worker import sdk_worker_main

    from imageshards import console

    console.unconfigure_in_forked_child()
    _name_this_process(SERVER_NAME)
    return _serve(sdk_worker_main, folder)


def _name_this_process(name):
    """Sets this process's name (`ps -o comm`, psutil's `name()`; Linux), which its forks keep:
    its command line is the launcher's."""
    try:
        ctypes.CDLL(None).prctl(_PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _serve(sdk_worker_main, folder):
    """As claims hand the slots their environments, forks a worker for each, and waits for them
    to end."""
    slots = os.path.join(folder, 'slots')
    waiting, children = set(os.listdir(slots)), []
    while waiting:
        for name in sorted(waiting):
            slot = os.path.join(slots, name)
            if not os.path.exists(os.path.join(slot, ENVIRONMENT)):
                continue
            waiting.discard(name)
            child = os.fork()  # one thread here, and no gRPC channel yet: safe to fork
            if child == 0:
                os._exit(_run_worker(sdk_worker_main, slot))  # pylint: disable=protected-access
            children.append(child)
            _write_atomically(os.path.join(slot, PID), str(child).encode('ascii'))
        time.sleep(_POLL_SECONDS)
    for child in children:  # reaped here; their claims wait for them to end, not for this
        os.waitpid(child, 0)
    return 0


def _run_worker(sdk_worker_main, slot):
    """Beam's worker in the environment of the claim of `slot`; returns its exit status."""
    with open(os.path.join(slot, ENVIRONMENT), encoding='utf-8') as f:
        environment = json.load(f)
    os.environ.clear()
    os.environ.update(environment)
    status = 1
    try:
        sdk_worker_main.main(sys.argv)
        status = 0
    finally:
        try:
            _write_atomically(os.path.join(slot, EXIT), str(status).encode('ascii'))
        except OSError:  # the build has ended and removed the folder: no claim waits for it
            pass
    return status


def claim(folder) -> int:
    """The runner's worker command: takes a waiting worker and waits for it; returns its exit
    status. Becomes Beam's worker where none is left."""
    free = os.path.join(folder, 'free')
    for name in sorted(os.listdir(free)):
        try:
            os.rename(os.path.join(free, name), os.path.join(folder, f'{CLAIMED}{name}'))
        except FileNotFoundError:  # another claim took it first
            continue
        return _hand_over(folder, os.path.join(folder, 'slots', name))
    os.execv(sys.executable, [sys.executable, '-m', BEAM_WORKER])
    return 1  # not reached


def _hand_over(folder, slot):
    """Hands `slot` this process's environment and waits for the worker forked for it; where
    the serving process ended without forking it (it failed), becomes Beam's own worker."""
    _write_atomically(os.path.join(slot, ENVIRONMENT), json.dumps(dict(os.environ)).encode())
    path = os.path.join(slot, PID)
    server = _ended(_read_int(os.path.join(folder, SERVER)))
    while not os.path.exists(path):
        if server is None or select.select([server], [], [], _POLL_SECONDS)[0]:
            if not os.path.exists(path):  # written before the server could end, if at all
                os.execv(sys.executable, [sys.executable, '-m', BEAM_WORKER])
    worker = _ended(_read_int(path))
    if worker is not None:
        select.select([worker], [], [])
    try:
        with open(os.path.join(slot, EXIT), encoding='ascii') as f:
            return int(f.read())
    except (OSError, ValueError):  # killed: no status written
        return 1


def _ended(pid):
    """A descriptor readable once process `pid` has ended, or None where it has already."""
    try:
        return os.pidfd_open(pid)
    except OSError:
        return None


def _read_int(path):
    with open(path, encoding='ascii') as f:
        return int(f.read())


def _write_atomically(path, data):
    with open(f'{path}.tmp', 'wb') as f:
        f.write(data)
    os.replace(f'{path}.tmp', path)


def main(argv=None) -> int:
    role, path = (sys.argv[1:] if argv is None else argv)[:2]
    return serve(path) if role == 'serve' else claim(path)


if __name__ == '__main__':
    sys.exit(main())
