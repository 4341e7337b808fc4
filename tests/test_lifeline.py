"""A build lives and dies with its command (imageshards/lifeline.py, imageshards/supervise.py).

However the command ends (SIGKILL of it or of its process group, SIGTERM, Ctrl-C, its terminal
closing, or its child simply returning), no process the build started outlives it by more than
a couple of seconds, none writes anything later, and the command's scratch folder is gone.
Real processes and real signals: tests/stand_in_build.py starts processes the ways a build does
(`sh -c`, Popen, fork, a new session), each writing a file after a delay; the last test kills a
real `imageshards build`.
"""

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from imageshards import layout
from imageshards import lifeline

import images_for_tests as imgs
from build_commands import build_command

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(REPOSITORY, 'tests')
SUPERVISE = (
    'import sys; from imageshards import supervise; sys.exit(supervise.run_supervised('
    '"stand_in_build", sys.argv[1:], lambda: "stand-in: stopped"))'
)
DELAY = 3.0  # seconds from each stand-in process's start to its late write
GONE_WITHIN = 2.0  # seconds after the command's end
STAND_IN_PROCESSES = ('shell', 'plain', 'forked', 'escaped', 'child')  # stand_in_build.NAMES


def _terminal_signals_as_in_a_terminal():
    """A test run in the background hands its children SIGINT ignored; a terminal job has the
    default (Python's KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _start_stand_in(folder, *extra):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPOSITORY, TESTS]))
    return subprocess.Popen(
        [sys.executable, '-c', SUPERVISE, str(folder), str(DELAY), *extra],
        cwd=REPOSITORY,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal's foreground job
        preexec_fn=_terminal_signals_as_in_a_terminal,
    )


def _pids(folder, command, names=STAND_IN_PROCESSES):
    """{name: pid} of the stand-in's processes, once all have started."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if all((folder / f'pid-{name}').exists() for name in names):
            return {name: int((folder / f'pid-{name}').read_text()) for name in names}
        assert command.poll() is None or 'exit' in command.args, command.communicate()
        time.sleep(0.02)
    raise AssertionError(f'the stand-in build did not start: {sorted(os.listdir(folder))}')


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _still_alive_after(pids, seconds):
    """The pids still running `seconds` from now (checked until then)."""
    deadline = time.monotonic() + seconds
    while True:
        alive = [pid for pid in pids if _alive(pid)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


ENDINGS = {
    'SIGKILL of the command': lambda command: os.kill(command.pid, signal.SIGKILL),
    'SIGKILL of its process group': lambda command: os.killpg(command.pid, signal.SIGKILL),
    'SIGTERM': lambda command: os.kill(command.pid, signal.SIGTERM),
    'Ctrl-C': lambda command: os.killpg(command.pid, signal.SIGINT),
    'its terminal closing': lambda command: os.killpg(command.pid, signal.SIGHUP),
}


@pytest.mark.slow
@pytest.mark.parametrize('ending', list(ENDINGS))
def test_no_process_of_the_build_outlives_its_command(tmp_path, ending):
    command = _start_stand_in(tmp_path)
    pids = _pids(tmp_path, command)
    ended = time.monotonic()
    ENDINGS[ending](command)
    _, err = command.communicate(timeout=30)
    assert _still_alive_after(pids.values(), GONE_WITHIN) == [], pids
    if 'SIGKILL' in ending:
        assert command.returncode == -signal.SIGKILL
    else:
        assert command.returncode == 130 and err.strip().splitlines() == ['stand-in: stopped']
    time.sleep(max(0.0, ended + DELAY + 0.5 - time.monotonic()))
    assert sorted(path.name for path in tmp_path.glob('late-*')) == []
    assert not os.path.exists((tmp_path / 'scratch').read_text())


@pytest.mark.slow
def test_what_a_build_that_returned_left_running_ends_with_its_command(tmp_path):
    command = _start_stand_in(tmp_path, 'exit')
    pids = _pids(tmp_path, command)
    assert command.wait(timeout=30) == 0
    assert _still_alive_after(pids.values(), GONE_WITHIN) == [], pids
    time.sleep(DELAY)
    assert sorted(path.name for path in tmp_path.glob('late-*')) == []


def _lifeline_env(**fields):
    value = {'fd': 0, 'command': os.getpid(), 'started': None, 'token': 't', 'scratch': ''}
    value.update(fields)
    return dict(os.environ, **{lifeline.ENV: json.dumps(value)})


def test_a_child_whose_command_is_already_gone_exits_at_once_without_running(tmp_path):
    marker = tmp_path / 'ran'
    boot = lifeline.child_command('stand_in_build', ['late', str(tmp_path), 'x', '0'])
    # Its parent is this process, not the command the spec names (pid 1: never ours).
    env = _lifeline_env(command=1)
    env['PYTHONPATH'] = os.pathsep.join([REPOSITORY, TESTS])
    done = subprocess.run(boot, env=env, cwd=REPOSITORY, check=False, timeout=60)
    assert done.returncode == lifeline.EXIT_ORPHANED
    assert not marker.exists() and not (tmp_path / 'pid-x').exists()


def _command_alive_in(env):
    code = 'from imageshards import lifeline; print(lifeline.command_alive())'
    done = subprocess.run(
        [sys.executable, '-c', code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip() == 'True'


def test_a_process_of_the_build_knows_whether_its_command_still_runs():
    sleeper = subprocess.Popen(['sleep', '60'])  # pylint: disable=consider-using-with
    try:
        started = lifeline._start_ticks(sleeper.pid)  # pylint: disable=protected-access
        assert _command_alive_in(_lifeline_env(command=sleeper.pid, started=started))
        # The pid's process started at another time: another process that took the pid over.
        assert not _command_alive_in(_lifeline_env(command=sleeper.pid, started=started - 1))
        sleeper.kill()
        sleeper.wait()
        assert not _command_alive_in(_lifeline_env(command=sleeper.pid, started=started))
        with pytest.raises(lifeline.CommandGone, match='the build command has ended'):
            os.environ[lifeline.ENV] = _lifeline_env(command=sleeper.pid)[lifeline.ENV]
            try:
                lifeline.ensure_command_alive('writing _SUCCESS')
            finally:
                del os.environ[lifeline.ENV]
    finally:
        sleeper.kill()
        sleeper.wait()
    env = {k: v for k, v in os.environ.items() if k != lifeline.ENV}
    assert _command_alive_in(env)  # no lifeline: a build run directly, a Dataflow worker


def test_the_processes_of_a_build_are_found_by_its_token():
    token = 'a0' * 16
    env = dict(os.environ, **{lifeline.ENV: json.dumps({'token': token})})
    with subprocess.Popen(['sleep', '60'], env=env, start_new_session=True) as escaped:
        assert lifeline.carrying(token) == [escaped.pid]
        lifeline.kill_build(escaped.pid, token)
        assert escaped.wait(timeout=10) == -signal.SIGKILL
    assert lifeline.carrying(token) == []


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp('lifeline_tree')
    imgs.write_tree(root, 100, ('ant', 'bee', 'cat'))
    return root


def _is_worker(command_line):
    """Beam's worker, or the claim of a worker started early (pipelines/local/warm_workers.py)."""
    return 'sdk_worker_main' in command_line or 'warm_workers claim' in command_line


def _command_line(process):
    try:
        return ' '.join(process.cmdline())
    except psutil.NoSuchProcess:  # ended (a zombie included)
        return ''


def _build_processes(command):
    """The processes of a real build below its command, once Beam's workers run."""
    supervisor = psutil.Process(command.pid)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and command.poll() is None:
        processes = supervisor.children(recursive=True)
        if any(_is_worker(_command_line(process)) for process in processes):
            return processes
        time.sleep(0.02)
    raise AssertionError(f'the build ended before it could be killed: {command.communicate()}')


@pytest.mark.slow
@pytest.mark.parametrize('target', ['process', 'group'])
def test_a_killed_build_command_leaves_no_build_running_and_never_finishes(tree, tmp_path, target):
    out = tmp_path / 'out'
    command = subprocess.Popen(
        build_command(tree, out, '--direct_num_workers=2'),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=REPOSITORY,
        start_new_session=True,
    )
    processes = _build_processes(command)
    tokens = {_token(process) for process in processes} - {None}
    (os.killpg if target == 'group' else os.kill)(command.pid, signal.SIGKILL)
    command.wait()
    assert _still_alive_after([p.pid for p in processes], GONE_WITHIN) == []
    time.sleep(10)  # at filing, the orphaned build wrote _SUCCESS within 10 s
    assert not (out / layout.SUCCESS).exists()
    assert [lifeline.carrying(token) for token in tokens] == [[]]  # nothing anywhere


def _token(process):
    try:
        return json.loads(process.environ()[lifeline.ENV])['token']
    except (psutil.NoSuchProcess, KeyError):
        return None
