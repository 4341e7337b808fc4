"""What a build does with its output (pipelines/writing/output_guard.py): it holds the output's lock
for its whole life, refuses an output it cannot fit on before it starts, and says in one line what
stopped it, leaving nothing that looks finished. (The same, as an operator meets it with real
processes: tests/test_operators.py.)"""

import errno
import json
import subprocess

import pytest
from apache_beam.io.filesystem import BeamIOError
from google.api_core.exceptions import ServiceUnavailable

from imageshards import layout
from imageshards import lifeline
from imageshards import output_lock
from imageshards.gcs import StoreUnavailable
from pipelines import launcher
from pipelines.writing import finalize
from pipelines.writing import output_guard

import images_for_tests as imgs


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp('guarded') / 'in'
    imgs.write_tree(root, 4, ('cat', 'dog'))
    return root


def _argv(tree, out, *extra):
    return ['--input', str(tree), '--output', str(out), '--no-analyze', *extra] + [
        '--direct_running_mode=in_memory'
    ]


def _files(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob('*') if p.is_file())


def _errors(capsys):
    """The error lines a person sees (a build's own: Beam's logged traceback is not shown)."""
    lines = capsys.readouterr().err.splitlines()
    return [line.split(' ERROR ', 1)[1] for line in lines if ' ERROR ' in line]


def test_a_build_into_an_output_another_build_holds_is_refused_in_one_line(tree, tmp_path, capsys):
    out = tmp_path / 'out'
    launcher.run(_argv(tree, out))
    before = _files(out)
    # Another build's lock: flock refuses a second open file even in the same process.
    with output_lock.acquire(out, ['imageshards', 'build', '--output', str(out)]) as held:
        assert launcher.main(_argv(tree, out)) == 1
        assert launcher.main(_argv(tree, out, '--overwrite')) == 1
        assert _files(out) == sorted([*before, layout.LOCK_FILE])  # the earlier build stays
    errors = _errors(capsys)
    assert errors == [output_lock.busy_message(str(out), held.holder)] * 2
    assert f'(kill {held.holder.pid} on {held.holder.host})' in errors[0]
    assert launcher.main(_argv(tree, out, '--overwrite')) == 0  # released: it builds


def test_a_build_holds_its_lock_while_it_runs_and_removes_it_at_the_end(tree, tmp_path):
    out = tmp_path / 'out'
    seen = []
    real_complete = finalize.complete

    def complete(output_dir, build_token=None):
        seen.append(output_lock.holder(output_dir))
        real_complete(output_dir, build_token)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(finalize, 'complete', complete)
        launcher.run(_argv(tree, out))
    assert seen[0] is not None and seen[0].command.startswith('imageshards build --input')
    assert not (out / layout.LOCK_FILE).exists() and output_lock.holder(out) is None


def test_success_is_written_only_by_a_build_that_holds_the_lock_and_whose_command_runs(
    tmp_path, monkeypatch
):
    out = tmp_path / 'out'
    with output_lock.acquire(out, 'imageshards build') as lock:
        with pytest.raises(output_lock.LockLost):
            finalize.complete(str(out), 'the token of another build')
        gone = subprocess.Popen(['true'])  # a command that has ended  # pylint: disable=R1732
        gone.wait()
        spec = {'fd': -1, 'command': gone.pid, 'started': 0, 'token': 't', 'scratch': ''}
        monkeypatch.setenv(lifeline.ENV, json.dumps(spec))
        with pytest.raises(lifeline.CommandGone, match='not writing _SUCCESS'):
            finalize.complete(str(out), lock.holder.build)
        assert not (out / layout.SUCCESS).exists()
        monkeypatch.delenv(lifeline.ENV)
        finalize.complete(str(out), lock.holder.build)
        assert (out / layout.SUCCESS).exists()


def test_a_full_disk_is_one_line_and_leaves_nothing_that_looks_finished(tmp_path, mounted, capsys):
    disk = mounted('size=150k')
    images = imgs.write_noise_tree(tmp_path / 'in')
    assert launcher.main(_argv(images, disk / 'out', '--no-space-check')) == 1
    (line,) = _errors(capsys)
    assert line.startswith(f'no space left on device writing {disk}/out')
    assert ' MB free, this build needs about 0.' in line
    assert _files(disk) == []  # no temporary file, no shard, no _SUCCESS, no lock


def test_a_build_that_cannot_fit_is_refused_before_it_writes_anything(tmp_path, mounted, capsys):
    disk = mounted('size=150k')
    images = imgs.write_noise_tree(tmp_path / 'in')
    assert launcher.main(_argv(images, disk / 'out')) == 1
    (line,) = _errors(capsys)
    assert line.startswith(f'not enough space for --output {disk}/out: 0.2 MB free on its disk')
    assert line.endswith('(--no-space-check builds anyway)')
    assert list(disk.iterdir()) == []


def test_a_failure_removes_this_builds_files_and_never_an_earlier_build(tmp_path):
    out = tmp_path / 'out'
    earlier = ['_SUCCESS', 'dataset.json', 'train/train-00000-of-00001.tfrecord', 'notes.txt']
    for name in earlier:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(b'x')
    full = OSError(errno.ENOSPC, 'No space left on device')
    with output_guard.OutputGuard(str(out), 'imageshards build') as guard:
        (out / layout.TEMP_DIR).mkdir()
        (out / layout.TEMP_DIR / 'listing.jsonl').write_bytes(b'[]')
        assert guard.failure(ValueError('a bug')) is None  # no line: its traceback helps
        line = str(guard.failure(full))  # before the output is prepared: the earlier build stays
        assert line.startswith(f'no space left on device writing {out}: ')
        assert _files(out) == sorted([*earlier, layout.LOCK_FILE])
        guard.prepared()  # from here on, what is ours in the output is this build's
        lost = output_lock.LockLost(f'{out} was taken over')  # then it may be another build's
        assert str(guard.failure(lost)) == f'{out} was taken over'
        assert _files(out) == sorted([*earlier, layout.LOCK_FILE])
        assert isinstance(guard.failure(full), output_guard.BuildFailed)
        assert _files(out) == ['.imageshards-lock', 'notes.txt']  # someone else's stays
    assert _files(out) == ['notes.txt']


@pytest.mark.parametrize(
    'raised, line',
    [
        (RuntimeError("OSError: [Errno 28] No space left on device [while running 'X']"), 'no sp'),
        (RuntimeError("OSError: [Errno 30] Read-only file system: '/o/x'"), 'read-only file'),
        (RuntimeError('imageshards.lock_holder.LockLost: /o was taken [while running'), '/o was'),
        (RuntimeError('RuntimeError: Channel closed prematurely.'), 'a worker process of'),
        (RuntimeError('Worker subprocess exited in the middle of the run'), 'a worker process'),
        (PermissionError(errno.EACCES, 'Permission denied', '/o/x'), 'permission denied'),
        (
            RuntimeError(
                'imageshards.gcs.StoreUnavailable: Cloud Storage did not answer reading gs://b/x '
                "within 120 s of retries (HTTP 503 Service Unavailable); ... [while running 'V']"
            ),
            'Cloud Storage did not answer reading gs://b/x within 120 s',
        ),
        (StoreUnavailable("Cloud Storage did not answer ... again [while running 'V']"), 'Cloud'),
        (  # what Beam's FileSystems raises once its own retries run out
            BeamIOError(
                'Match operation failed',
                {'gs://b/x/**': BeamIOError('List failed', {'gs://b/x/': ServiceUnavailable('')})},
            ),
            'Cloud Storage did not answer reaching gs://b/x/ within 120 s of retries (HTTP 503 ',
        ),
        (ValueError('a bug'), None),
        (RuntimeError('a bug in a DoFn'), None),
    ],
)
def test_the_line_is_found_behind_what_a_runner_raises(raised, line):
    found = output_guard.one_line(raised, '/o', 10**6)
    if line is None:
        assert found is None
    else:
        assert found.startswith(line)
        assert '[while running' not in found
