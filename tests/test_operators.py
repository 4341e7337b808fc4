"""The operator scenarios of issue 24, tried again as written: a real `imageshards build`
command, real signals, a real 150 KB filesystem, a real 3 GB (sparse) file.

1. the command's process group SIGKILLed, and the build rerun at once;
2. a second build, with --overwrite, into an output a build is writing;
3. a 3 GB file named .jpg that starts as a JPEG, among 60 small images;
4. the output on a 150 KB filesystem;
5. a valid JPEG with a Latin-1 name;
and a worker process SIGKILLed in the middle of a build, as the out-of-memory killer would.
docs/reliability.md ("Operators and accidents") states each promise and points here.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from imageshards import layout
from imageshards import lifeline
from imageshards import output_lock
from pipelines.local import warm_workers

import images_for_tests as imgs

pytestmark = pytest.mark.slow

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMAND = os.path.join(os.path.dirname(sys.executable), 'imageshards')
HUGE = 3 << 30


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
    """The issue's tree: 60 small images."""
    root = tmp_path_factory.mktemp('operators') / 'in'
    imgs.write_tree(root, 20, ('ant', 'bee', 'cat'))
    return root


_started = []  # the commands of a test, ended with it if it fails while they run


@pytest.fixture(autouse=True)
def _no_command_left():
    yield
    while _started:
        command = _started.pop()
        if command.poll() is None:
            os.killpg(command.pid, signal.SIGKILL)  # its build ends with it (lifeline.py)
            command.communicate()


def _start(*args):
    command = subprocess.Popen(  # pylint: disable=consider-using-with
        [COMMAND, 'build', *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPOSITORY,
        start_new_session=True,
    )
    _started.append(command)
    return command


def _build(*args, timeout=300):
    """(exit status, stdout, stderr) of `imageshards build ARGS`."""
    command = _start(*args)
    out, err = command.communicate(timeout=timeout)
    return command.returncode, out, err


def _verify(out):
    return subprocess.run(
        [COMMAND, 'verify', str(out)], capture_output=True, text=True, cwd=REPOSITORY
    ).returncode


def _error_lines(stderr):
    return [line.split(' ERROR ', 1)[1] for line in stderr.splitlines() if ' ERROR ' in line]


def _serving(process):
    """Whether `process` is the workers' serving process or one it forked: forked from the
    launcher and named so (pipelines/local/warm_workers.py), or started as `serve`."""
    return process.name() == warm_workers.SERVER_NAME.decode() or (
        'warm_workers serve' in ' '.join(process.cmdline())
    )


def _workers(command, forked_only=False):
    """The worker processes of a running build command, once there are any."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and command.poll() is None:
        found = []
        for process in psutil.Process(command.pid).children(recursive=True):
            try:
                line, parent = ' '.join(process.cmdline()), process.parent()
                served = parent is not None and _serving(parent)
                forked = _serving(process) and served
            except psutil.NoSuchProcess:
                continue
            if forked:  # a worker forked for a claim
                found.append(process)
            elif not forked_only and ('sdk_worker_main' in line or 'warm_workers claim' in line):
                found.append(process)
        if found:
            return found
        time.sleep(0.01)
    raise AssertionError(f'the build ended before its workers ran: {command.communicate()}')


def test_1_a_killed_build_leaves_nothing_running_and_a_rerun_at_once_owns_the_output(
    tree, tmp_path
):
    out = tmp_path / 'out'
    killed = _start('--input', tree, '--output', out, '--direct_num_workers=2')
    workers = _workers(killed)
    token = json.loads(workers[0].environ()[lifeline.ENV])['token']
    os.killpg(killed.pid, signal.SIGKILL)  # a scheduler's, `timeout -s KILL`'s, systemd's kill
    killed.wait()
    at = time.monotonic()
    status, _, err = _build('--input', tree, '--output', out, '--overwrite')
    assert (status, _error_lines(err)) == (0, [])
    time.sleep(max(0.0, 10 - (time.monotonic() - at)))  # at filing, _SUCCESS came within 10 s
    assert lifeline.carrying(token) == []
    assert _verify(out) == 0  # the rerun's build alone: nothing of the killed one wrote since


def _build_group(command):
    """The process group of the build a command runs (its child's: a session of its own)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        children = psutil.Process(command.pid).children()
        if children:
            return children[0].pid
        time.sleep(0.01)
    raise AssertionError('the build command started no build')


def test_2_a_second_build_into_a_busy_output_is_refused_and_the_first_finishes(tree, tmp_path):
    out = tmp_path / 'out'
    first = _start('--input', tree, '--output', out)
    group = _build_group(first)
    deadline = time.monotonic() + 120
    while output_lock.holder(out) is None:  # the first build holds the output
        assert time.monotonic() < deadline and first.poll() is None, first.communicate()
        time.sleep(0.01)
    os.killpg(group, signal.SIGSTOP)  # kept busy for as long as the second build needs
    try:
        status, _, err = _build('--input', tree, '--output', out, '--overwrite')
        holder = output_lock.holder(out)
    finally:
        os.killpg(group, signal.SIGCONT)
    assert status == 1 and 'Traceback' not in err
    assert _error_lines(err) == [output_lock.busy_message(str(out), holder)]
    assert f'pid {first.pid} on ' in err  # the command a person would stop
    assert first.wait(timeout=300) == 0, first.communicate()
    assert _verify(out) == 0


class _PeakMemory:
    """The largest resident size of any process below this one, and of all of them together,
    sampled every 20 ms while it runs (reading 3 GB takes seconds: no spike goes unseen)."""

    def __init__(self):
        self.single = self.total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        me = psutil.Process()
        while not self._stop.wait(0.02):
            sizes = []
            for process in me.children(recursive=True):
                try:
                    sizes.append(process.memory_info().rss)
                except psutil.NoSuchProcess:
                    pass
            self.single = max(self.single, *sizes, 0)
            self.total = max(self.total, sum(sizes))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def test_3_a_huge_file_named_jpg_is_too_large_without_costing_its_size(tmp_path):
    root = tmp_path / 'in'
    imgs.write_tree(root, 20, ('ant', 'bee', 'cat'))
    with open(root / 'ant' / 'disk_image.jpg', 'wb') as f:
        f.write(imgs.jpeg(0)[:200])  # a JPEG's start, then 3 GB of hole
        f.truncate(HUGE)
    out = tmp_path / 'out'
    with _PeakMemory() as peak:
        status, _, err = _build('--input', root, '--output', out)
    assert (status, _error_lines(err)) == (0, [])
    rejected = [json.loads(line) for line in (out / 'rejected.jsonl').read_text().splitlines()]
    assert [(row['path'], row['reason']) for row in rejected] == [
        (str(root / 'ant' / 'disk_image.jpg'), 'too_large')
    ]
    # At filing: a 6.4 GB peak. Now every process stays far below the file's size (the build's
    # own figures with the file and without it: bench/huge_input.py).
    assert peak.single < (1 << 30) and peak.total < (2 << 30), (peak.single, peak.total)


def test_4_a_full_disk_is_one_line_and_leaves_nothing_that_looks_finished(tmp_path, mounted):
    images = imgs.write_noise_tree(tmp_path / 'in')
    disk = mounted('size=150k')
    status, _, err = _build('--input', images, '--output', disk / 'out')
    assert status == 1 and 'Traceback' not in err
    (early,) = _error_lines(err)
    assert early.startswith(f'not enough space for --output {disk}/out: 0.2 MB free on its disk')
    assert list(disk.iterdir()) == []
    status, out, err = _build('--input', images, '--output', disk / 'out', '--no-space-check')
    assert status == 1 and 'Traceback' not in out + err
    (line,) = _error_lines(err)
    assert line.startswith(f'no space left on device writing {disk}/out')
    assert len(err.splitlines()) <= 4, err  # listed, running on, the line (no traceback)
    assert [str(p) for p in disk.rglob('*') if p.is_file()] == []  # nothing, temporary or not


def test_5_a_valid_jpeg_with_a_latin1_name_is_kept(tmp_path):
    root = tmp_path / 'in'
    imgs.write_tree(root, 3, ('cats', 'dogs'))
    with open(os.fsencode(root / 'cats') + b'/latin1_\xe9t\xe9.jpg', 'wb') as f:
        f.write(imgs.jpeg(99))
    out = tmp_path / 'out'
    status, stdout, err = _build('--input', root, '--output', out)
    assert (status, _error_lines(err)) == (0, [])
    assert (out / layout.REJECTED_JSONL).read_text() == ''
    assert 'inputs 7 = written 7 + rejected 0' in stdout
    assert _verify(out) == 0


def test_a_worker_killed_mid_build_stops_it_in_one_line_not_a_hang(tree, tmp_path):
    out = tmp_path / 'out'
    command = _start('--input', tree, '--output', out, '--direct_num_workers=2')
    (_workers(command, forked_only=True)[0]).kill()  # what the out-of-memory killer does
    stdout, err = command.communicate(timeout=120)  # the runner alone would wait forever
    if command.returncode == 0:  # it ran none of the build's work: the others did it all
        pytest.skip('the killed worker had no work left; the build finished without it')
    assert command.returncode == 1 and 'Traceback' not in stdout + err
    assert _error_lines(err)[-1].startswith('a worker process of the build ended in the middle')
    assert len(err.splitlines()) <= 5, err
    assert not (out / layout.SUCCESS).exists() and not (out / layout.TEMP_DIR).exists()
