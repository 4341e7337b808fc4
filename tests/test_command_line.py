"""The commands as a person meets them: quiet output, progress, a summary, Ctrl-C, --version."""

import os
import re
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

import imageshards
from imageshards import console
from imageshards import progress as display_lib
from imageshards import supervise
from imageshards_cli import main as cli
from pipelines.core import counters
from pipelines.local import progress

import images_for_tests as imgs

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMAND = os.path.join(os.path.dirname(sys.executable), 'imageshards')
OUR_LOG_LINE = re.compile(r'^\d\d:\d\d:\d\d (INFO|WARNING) ')


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp('cli_tree')
    imgs.write_tree(root, 30, ('ant', 'bee', 'cat'))
    return root


def _environment(tmp_path):
    """The machine's environment with a temporary folder of the test's own."""
    temporary = tmp_path / 'tmp'
    temporary.mkdir()
    env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}
    return dict(env, TMPDIR=str(temporary)), temporary


def test_version(capsys):
    assert cli.main(['--version']) == 0
    assert capsys.readouterr().out.strip() == f'imageshards {imageshards.__version__}'


@pytest.mark.parametrize('command', ['preview', 'report', 'submit-training'])
def test_help_comes_before_tensorflow_is_imported(command):
    done = subprocess.run(
        [
            sys.executable,
            '-c',
            'import sys\nfrom imageshards_cli import main as cli\n'
            f'try:\n    cli.main([{command!r}, "--help"])\nexcept SystemExit:\n    pass\n'
            'print(sorted(m for m in ("tensorflow", "keras") if m in sys.modules))',
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPOSITORY,
    )
    assert '--config' in done.stdout  # the help itself
    assert done.stdout.strip().splitlines()[-1] == '[]'


def test_build_help_is_printed_once(tmp_path):
    """The build's child prints its help; what it starts early parses the same flags silently."""
    env, _ = _environment(tmp_path)
    done = subprocess.run(
        [COMMAND, 'build', '--help'], capture_output=True, text=True, env=env, check=True
    )
    assert done.stdout.count('usage: imageshards build') == 1
    assert '--resize-shorter-side' in done.stdout
    assert done.stderr == ''


def test_a_build_prints_its_own_lines_its_progress_and_a_summary(tree, tmp_path):
    env, temporary = _environment(tmp_path)
    done = subprocess.run(
        [COMMAND, 'build', '--input', str(tree), '--output', str(tmp_path / 'out')]
        + ['--num-shards', '1', '--direct_num_workers=2'],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPOSITORY,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    strangers = [line for line in lines if not OUR_LOG_LINE.match(line)]
    assert not strangers, done.stderr  # no TensorFlow, absl, CUDA or Beam start-up lines
    # Counted in the two worker processes, summed by the launcher.
    assert any('validating: 90 of 90 images (100%)' in line for line in lines), done.stderr
    assert any('writing: 90 of 90 records (100%)' in line for line in lines), done.stderr
    assert 'listed 90 inputs with 3 labels' in done.stderr
    assert re.search(r'^imageshards build: .* in \d+\.\d s$', done.stdout, re.M), done.stdout
    assert 'train: 90 records in 1 shard\n' in done.stdout
    assert not list(temporary.iterdir())  # Beam's beam-pipeline-temp* among them


@pytest.mark.parametrize('supervised', [True, False])
def test_a_failed_build_leaves_nothing_in_the_temporary_folder(tree, tmp_path, supervised):
    env, temporary = _environment(tmp_path)
    if not supervised:  # the build in this process: its own clean-up, not the supervisor's
        env[supervise.ENV] = '1'
    out = tmp_path / 'out'
    out.mkdir()
    (out / 'other.txt').write_text('not a build')
    done = subprocess.run(
        [sys.executable, '-m', 'pipelines.build', '--input', str(tree), '--output', str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPOSITORY,
        check=False,
    )
    assert done.returncode == 2 and 'is not empty' in done.stderr, done.stderr
    assert not list(temporary.iterdir())  # Beam's beam-pipeline-temp* among them


def _ctrl_c_as_in_a_terminal():
    """SIGINT's default action in the command's process, as in a terminal's foreground job:
    a test run started in the background (`cmd &`, nohup) hands its children SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _workers(process):
    """The Beam worker processes below `process` (pipelines/local/warm_workers.py: their claims)."""
    found = []
    for child in process.children(recursive=True):
        try:
            # Beam's own worker command, or the claim of a worker started early.
            command = ' '.join(child.cmdline())
            if 'sdk_worker_main' in command or 'warm_workers claim' in command:
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def test_ctrl_c_stops_a_build_in_one_line_with_no_process_left(tree, tmp_path):
    env, temporary = _environment(tmp_path)
    out = tmp_path / 'out'
    process = subprocess.Popen(
        [COMMAND, 'build', '--input', str(tree), '--output', str(out), '--direct_num_workers=2'],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPOSITORY,
        start_new_session=True,  # a process group of its own, as a terminal's foreground job
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )
    supervisor = psutil.Process(process.pid)
    deadline = time.monotonic() + 120
    while not _workers(supervisor) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert process.poll() is None, 'the build ended before it could be interrupted'
    running = supervisor.children(recursive=True)
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    lines = err.strip().splitlines()
    assert lines[-1] == (
        f'imageshards build: interrupted; the unfinished build is in {out}/.imageshards-tmp '
        f'(no _SUCCESS): rerun the same command with --overwrite to build again'
    )
    assert all(OUR_LOG_LINE.match(line) for line in lines[:-1]), err
    _, alive = psutil.wait_procs(running, timeout=10)
    assert not alive, alive
    assert not list(temporary.iterdir())


def test_progress_counts_add_up_across_threads(tmp_path, monkeypatch):
    monkeypatch.setenv(counters.PROGRESS_ENV, str(tmp_path))
    threads = [
        threading.Thread(
            target=lambda: [counters.advance('validating', 3, total=600) for _ in range(50)]
        )
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    time.sleep(2 * counters.FLUSH_SECONDS)  # the last burst is written by the flushing thread
    assert progress.read_counts(str(tmp_path)) == ({'validating': 600}, {'validating': 600})


def test_a_bundles_last_counts_are_written_at_its_end(tmp_path, monkeypatch):
    # The runner may stop a worker right after its last bundle, before the timed flush.
    monkeypatch.setenv(counters.PROGRESS_ENV, str(tmp_path))
    monkeypatch.setattr(counters, 'FLUSH_SECONDS', 3600.0)
    counters.advance('writing', 5, total=7)  # the first count is written at once
    counters.advance('writing', 2)
    assert progress.read_counts(str(tmp_path)) == ({'writing': 5}, {'writing': 7})
    counters.flush()
    assert progress.read_counts(str(tmp_path)) == ({'writing': 7}, {'writing': 7})


def test_a_progress_line_states_a_rate_only_over_a_second_or_more():
    # A phase first seen done (all its counts in one poll) has no rate worth saying.
    assert display_lib.describe('writing', 1797, 1797, 'records', 0.0004) == (
        'writing: 1,797 of 1,797 records (100%)'
    )
    assert display_lib.describe('validating', 500, 1000, 'images', 2.0) == (
        'validating: 500 of 1,000 images (50%), 250/s, about 2.0 s left'
    )
    assert display_lib.describe('listing', 30, None, 'files', 3.0) == 'listing: 30 files, 10/s'


def test_words():
    assert [console.plural(n, 'shard') for n in (0, 1, 2)] == ['0 shards', '1 shard', '2 shards']
    assert console.plural(1797, 'input') == '1,797 inputs'
    assert console.duration(4.24) == '4.2 s'
    assert console.duration(187) == '3 min 07 s'
    assert console.duration(7500) == '2 h 05 min'


def test_ctrl_c_stops_training_in_one_line_keeping_its_checkpoints(color_builds, tmp_path):
    job = tmp_path / 'job'
    process = subprocess.Popen(
        [sys.executable, '-m', 'trainer.task', '--data', str(color_builds['examples'])]
        + ['--job-dir', str(job), '--epochs', '1000', '--image-size', '16', '--batch-size', '8'],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPOSITORY,
        start_new_session=True,
        preexec_fn=_ctrl_c_as_in_a_terminal,
    )
    deadline = time.monotonic() + 120
    while not (job / 'checkpoints' / 'checkpoint').exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    lines = err.strip().splitlines()
    assert lines[-1] == (
        f'interrupted: the checkpoints in {job}/checkpoints are kept; rerun the same command to '
        f'resume from the last one'
    )
    assert all(OUR_LOG_LINE.match(line) for line in lines[:-1]), err


def test_what_workers_print_to_stderr_is_filtered_to_what_a_person_needs():
    """The lines a build's worker processes write to its stderr: native log lines and Beam's
    `Logging client failed` blocks always go, Python tracebacks (chained ones whole) unless
    shown on purpose; everything else stays."""
    printed = [
        b'I0000 00:00:1795359270.81 9009 port.cc:153] oneDNN custom operations are on',
        b'Logging client failed: <_MultiThreadedRendezvous of RPC that terminated with:',
        b'\tstatus = StatusCode.UNAVAILABLE',
        b'>... resetting',
        b'a line of its own',
        b'Traceback (most recent call last):',
        b'  File "x.py", line 1, in <module>',
        b'OSError: [Errno 28] No space left on device',
        b'',
        b'During handling of the above exception, another exception occurred:',
        b'',
        b'Traceback (most recent call last):',
        b'  File "y.py", line 2, in f',
        b"RuntimeError: OSError: [Errno 28] No space left on device [while running 'X']",
        b'',
        b'another line',
    ]
    for tracebacks, kept in ((True, printed[4:]), (False, [printed[4], printed[-1]])):
        noise = console._Noise()  # pylint: disable=protected-access
        noise.tracebacks = tracebacks
        assert [line for line in printed if not noise.drops(line)] == kept


def test_the_build_collects_garbage_again_once_its_imports_are_frozen(tmp_path):
    """The collector is off while Beam is imported (imageshards_cli/main.py), back on for the
    build itself."""
    script = (
        'import gc, sys\n'
        'from imageshards_cli import main\n'
        'from pipelines import launcher\n'
        'seen = []\n'
        'launcher.run = lambda argv: seen.append(gc.isenabled())\n'
        'main.main(["build", "--input", sys.argv[1], "--output", sys.argv[2]])\n'
        'print(seen, gc.isenabled())\n'
    )
    env, _ = _environment(tmp_path)
    env[supervise.ENV] = '1'  # the supervised child, in this process
    done = subprocess.run(
        [sys.executable, '-c', script, str(tmp_path / 'in'), str(tmp_path / 'out')],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPOSITORY,
        check=True,
        start_new_session=True,  # a supervised child ends its process group's stragglers
    )
    assert done.stdout.split() == ['[True]', 'True'], done.stderr
