"""A build lives and dies with its command: no process of it outlives `imageshards build`.

The command runs the build in a child process in a session of its own (imageshards/supervise.py),
so that a terminal's Ctrl-C reaches the command alone. The child and what it starts (the early
listing, the tf.Transform helper, the warm-worker server and the workers it forks, Beam's
`sh -c ... sdk_worker_main` workers) stay in the child's process group; but a SIGKILL of the
command, or of the command's group, reaches none of them. So:

* The command keeps the write end of a pipe that no other process holds; the child gets the
  read end (`pass_fds`), and the spec below in `IMAGESHARDS_LIFELINE`.
* First thing (`guard`, run by the child's boot line before the build's module), the child
  asks the kernel for SIGKILL when the command dies (Linux: PR_SET_PDEATHSIG), and forks a
  **watchdog**: a process that does nothing but block reading the pipe. The read returns (end
  of file) when the command's write end closes: when the command exits, however it exits. The
  watchdog then SIGKILLs the child's process group, then every process whose environment
  carries this build's token (one that left the group: `setsid`, `start_new_session`; Linux),
  removes the command's scratch folder, and exits. The watchdog has a process group of its
  own, so that killing the build's group leaves it to clean up; it ends with the command.
* `command_alive` lets any process of the build ask whether its command still runs: a step
  that marks an output finished (`_SUCCESS`) asks first, so a killed build never writes it.

Processes of the build that clear their environment and leave the process group are out of
reach; none does today. Elsewhere than Linux the watchdog kills the group (no parent-death
signal, no sweep by token).
"""

import ctypes
import json
import os
import runpy
import secrets
import shutil
import signal
import sys
import time

ENV = 'IMAGESHARDS_LIFELINE'  # JSON: fd, command (pid), started, token, scratch
EXIT_ORPHANED = 137  # the child found its command gone before it could watch it: as if killed
_PR_SET_PDEATHSIG = 1
_SWEEP_ROUNDS = 40
_SWEEP_PAUSE_SECONDS = 0.05
# The child's first line: guard, then the build's module run as `python -m MODULE` runs it.
_BOOT = 'import sys; from imageshards import lifeline; lifeline.guard(); lifeline.run(sys.argv)'


class CommandGone(RuntimeError):
    """The command that started this build has ended: the build must not mark anything done."""


def open_pipe():
    """(read end, write end) of the lifeline, both closed on exec (the read end is handed to
    the child with `pass_fds`): the command's write end is its own alone."""
    return os.pipe()


def spec(read_end, scratch):
    """The value of ENV for the child of this process (the command)."""
    pid = os.getpid()
    fields = {'fd': read_end, 'command': pid, 'started': _start_ticks(pid)}
    fields.update(token=secrets.token_hex(16), scratch=scratch)
    return json.dumps(fields, sort_keys=True)


def child_command(module, argv):
    """The child's command line: `python -m module argv`, guarded first."""
    return [sys.executable, '-c', _BOOT, module, *argv]


def run(argv):
    """Runs `argv[1]` as `python -m` runs a module, with `argv[2:]` as its arguments."""
    module = argv.pop(1)
    if sys.path and sys.path[0] == '':  # `-c` puts the working directory first as ''; -m in full
        sys.path[0] = os.getcwd()
    runpy._run_module_as_main(module)  # pylint: disable=protected-access  (what -m calls)


def _spec():
    value = os.environ.get(ENV)
    return json.loads(value) if value else None


def build_token():
    """This build's token (every process of a guarded build has it), or None."""
    fields = _spec()
    return fields['token'] if fields else None


def command_pid():
    """The pid of the command that started this build (what a person would stop), or None."""
    fields = _spec()
    return fields['command'] if fields else None


def guard():
    """In the command's child, first: dies with the command, and starts the watchdog.
    Does nothing in a process that no command started with a lifeline."""
    fields = _spec()
    if fields is None:
        return
    _die_with_parent()
    if os.getppid() != fields['command']:  # the command died before the line above
        os._exit(EXIT_ORPHANED)  # pylint: disable=protected-access
    group = os.getpgrp()
    if os.fork() == 0:
        try:
            _watch(fields, group)
        finally:
            os._exit(0)  # pylint: disable=protected-access
    os.close(fields['fd'])  # the watchdog holds it; the build's processes need not


def _die_with_parent():
    """Asks Linux for SIGKILL when the parent (the command) dies; elsewhere, nothing."""
    if not sys.platform.startswith('linux'):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the watchdog alone
        pass


def _watch(fields, group):
    """The watchdog: waits for the command's end, then ends the build and removes its scratch."""
    os.setpgid(0, 0)  # out of the build's group: a kill of the group leaves it to clean up
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # hold nothing a reader of the command's output waits on
        os.dup2(devnull, fd)
    try:
        while os.read(fields['fd'], 1):  # nothing is written: b'' once the command is gone
            pass
    except OSError:  # no lifeline to watch (a bug): end the build rather than leave it unwatched
        pass
    kill_build(group, fields['token'])
    if fields.get('scratch'):
        shutil.rmtree(fields['scratch'], ignore_errors=True)


def kill_build(group, token):
    """SIGKILLs process group `group`, then every process carrying `token` (Linux), until none
    is left (one may be forking as it dies)."""
    _kill_group(group)
    for _ in range(_SWEEP_ROUNDS):
        found = carrying(token)
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(_SWEEP_PAUSE_SECONDS)


def _kill_group(group):
    try:
        os.killpg(group, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # gone already
        pass


def carrying(token):
    """Pids of the live processes (but this one) whose environment holds `token`; Linux only,
    and only those this user may read (all, for root). A zombie's environment reads empty."""
    if not token or not os.path.isdir('/proc/self'):
        return []
    needle, own = token.encode('ascii'), os.getpid()
    found = []
    for name in os.listdir('/proc'):
        if not name.isdigit() or int(name) == own:
            continue
        try:
            with open(f'/proc/{name}/environ', 'rb') as f:
                if needle in f.read():
                    found.append(int(name))
        except OSError:  # gone, or not ours to read
            continue
    return found


def command_alive():
    """Whether the command that started this build still runs (True outside a guarded build:
    a build run directly, a Dataflow worker). Its pid must also have its start time, so that
    another process that took the pid over is not taken for it."""
    fields = _spec()
    if fields is None:
        return True
    return _start_ticks(fields['command']) == fields['started'] and _running(fields['command'])


def ensure_command_alive(what):
    """Raises CommandGone unless the command still runs; `what` names the step, for the line."""
    if not command_alive():
        raise CommandGone(f'the build command has ended: not {what}')


def _running(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _state(pid) not in ('Z', 'X')


def _stat_fields(pid):
    """The fields of /proc/PID/stat after the command name, or None (gone, or not Linux)."""
    try:
        with open(f'/proc/{pid}/stat', 'rb') as f:
            return f.read().rpartition(b')')[2].split()
    except OSError:
        return None


def _state(pid):
    fields = _stat_fields(pid)
    return fields[0].decode('ascii') if fields else None


def _start_ticks(pid):
    """When process `pid` started, in clock ticks since boot (Linux); None elsewhere or if gone."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None
