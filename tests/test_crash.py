"""Crash and rerun: a build killed with SIGKILL while it writes shards, then built again.

A killed build must not look finished (no `_SUCCESS`, no file named like a finished shard), and
a rerun, into the same directory with --overwrite or into a fresh one, must give the bytes of a
build that was never interrupted. Finalizing twice must change nothing.
"""

import json
import os
import re
import signal
import subprocess
import time

import pytest

from imageshards import layout
from pipelines import launcher
from pipelines.assignment import plan as plan_lib
from pipelines.core.context import BuildContext
from pipelines.core.context import ListingSummary
from pipelines.core.settings import BuildConfig
from pipelines.writing import finalize

import images_for_tests as imgs
from build_commands import build_flags
from build_commands import module_command

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONTRACT_SHARD = re.compile(r'^([^/]+)/\1-\d{5}-of-\d{5}\.tfrecord$')
NUM_SHARDS = 40
LOCAL = {'seed': 5, 'in_memory': True}
FLAGS = {'num_shards': NUM_SHARDS, **LOCAL}


@pytest.fixture(scope='module')
def slow_to_write(tmp_path_factory):
    """1,200 images; the EXIF-rotated two thirds are re-encoded again by the shard writer, so
    that writing 40 shards takes over a second: time to kill the build between two shards."""
    root = tmp_path_factory.mktemp('crash') / 'in'
    for c, name in enumerate(('ant', 'bee', 'cat', 'dog')):
        (root / name).mkdir(parents=True)
        for i in range(300):
            index = c * 1000 + i
            if i % 3:
                data = imgs.exif_rotated_jpeg(index, 6, (192, 256), c)
            else:
                data = imgs.jpeg(index, c, (96, 128))
            (root / name / f'{i:04d}.jpg').write_bytes(data)
    return root


def _shards(out):
    """{relative path: bytes} of every file in `out` named like a finished shard."""
    found = {}
    for folder, _, names in os.walk(out):
        for name in names:
            relative = os.path.relpath(os.path.join(folder, name), out)
            if CONTRACT_SHARD.match(relative):
                with open(os.path.join(out, relative), 'rb') as f:
                    found[relative] = f.read()
    return found


def _temp_shards(out):
    """Names of the shard files being written below the build's temporary folder."""
    names = set()
    for _, _, files in os.walk(os.path.join(out, layout.TEMP_DIR)):
        names.update(name for name in files if name.endswith('.tfrecord'))
    return names


def _start_build(root, out):
    """`python -m pipelines.build` in a process group of its own, so that a kill reaches all."""
    return subprocess.Popen(
        module_command(root, out, **FLAGS),
        cwd=REPOSITORY,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'),
    )


def _kill_while_writing(root, out, timeout=180):
    """Starts a build and SIGKILLs it once it has moved on from its first shard to another."""
    process = _start_build(root, out)
    seen, deadline = set(), time.monotonic() + timeout
    try:
        while len(seen) < 2:
            if process.poll() is not None:
                pytest.fail(f'the build ended (rc {process.returncode}) before it could be killed')
            if time.monotonic() > deadline:
                pytest.fail(f'the build wrote no shards in {timeout} s')
            seen |= _temp_shards(out)
            time.sleep(0.002)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL
    return seen


@pytest.fixture(scope='module')
def uninterrupted(slow_to_write, tmp_path_factory):
    """The shards of the same command as the killed one, left to finish."""
    out = tmp_path_factory.mktemp('uninterrupted') / 'out'
    assert _start_build(slow_to_write, out).wait(timeout=300) == 0
    shards = _shards(out)
    assert len(shards) == NUM_SHARDS
    return shards


@pytest.fixture(scope='module')
def killed(slow_to_write, tmp_path_factory):
    """The output directory of a build killed between two shards, as the kill left it."""
    out = tmp_path_factory.mktemp('killed') / 'out'
    _kill_while_writing(slow_to_write, out)
    return out, sorted(
        os.path.relpath(os.path.join(d, n), out) for d, _, ns in os.walk(out) for n in ns
    )


@pytest.mark.slow
def test_a_killed_build_is_not_marked_complete(killed):
    out, files = killed
    assert layout.SUCCESS not in files and layout.DATASET_JSON not in files
    assert any(path.startswith(layout.TEMP_DIR + '/') for path in files)


@pytest.mark.slow
def test_a_killed_build_leaves_no_file_that_looks_like_a_finished_shard(killed):
    out, files = killed
    assert [path for path in files if CONTRACT_SHARD.match(path)] == []


@pytest.mark.slow
def test_a_rerun_without_overwrite_is_refused(killed, slow_to_write):
    out, _ = killed
    with pytest.raises(FileExistsError, match='--overwrite'):
        launcher.run(build_flags(slow_to_write, out, **FLAGS))


@pytest.mark.slow
def test_a_rerun_with_overwrite_gives_the_uninterrupted_bytes(killed, slow_to_write, uninterrupted):
    out, _ = killed
    launcher.run(build_flags(slow_to_write, out, '--overwrite', **FLAGS))
    assert _shards(out) == uninterrupted
    assert (out / layout.SUCCESS).exists() and not (out / layout.TEMP_DIR).exists()


@pytest.mark.slow
def test_a_rerun_into_a_fresh_directory_gives_the_uninterrupted_bytes(
    killed, slow_to_write, uninterrupted, tmp_path_factory
):
    del killed  # the build that was killed, elsewhere
    fresh = tmp_path_factory.mktemp('fresh') / 'out'
    launcher.run(build_flags(slow_to_write, fresh, **FLAGS))
    assert _shards(fresh) == uninterrupted


def _finalize_inputs(out, dataset):
    """What the Finalize step received in the build that wrote `out`, rebuilt from its output."""
    shards = []
    for split, info in dataset['splits'].items():
        for index, shard in enumerate(info['shards']):
            shards.append(dict(shard, split=split, index=index, reencoded=0))
    shards[0]['reencoded'] = dataset['counts']['reencoded']
    rejections = [json.loads(line) for line in (out / layout.REJECTED_JSONL).open()]
    labels = dataset['labels']
    counts = {
        ('', label, 0): (dataset['splits']['train']['class_counts'][label], 0) for label in labels
    }
    plan = plan_lib.make_plan(counts, [('train', 1.0)], num_shards=len(shards))
    config = BuildConfig(
        input=dataset['input'],
        output=str(out),
        format=dataset['format'],
        seed=dataset['seed'],
        analysis_in_pipeline=True,  # as on Dataflow: Finalize moves the TFT output
    )
    listing = ListingSummary(
        labels=labels,
        num_inputs=dataset['counts']['inputs'],
        skipped=dataset['counts']['skipped_by_reason'],
        base=dataset['input'],
        largest_group=0,
    )
    context = BuildContext.create(config, listing, '', str(out))
    # The analysis entry, and the (empty) signal that the TFT output was staged.
    return shards, rejections, [], plan.layout, context.finishing, [dataset['analysis']], [None]


def _output_files(out):
    return {
        str(path.relative_to(out)): path.read_bytes() for path in out.rglob('*') if path.is_file()
    }


def test_finalizing_twice_is_harmless(tmp_path):
    root = tmp_path / 'in'
    imgs.write_tree(root, 5, ('a', 'b'))
    (root / 'a' / 'broken.jpg').write_bytes(b'')
    out = tmp_path / 'out'
    dataset = launcher.run(build_flags(root, out, num_shards=3, **LOCAL))
    before = _output_files(out)
    inputs = _finalize_inputs(out, dataset)
    first = list(finalize._finalize(None, *inputs))  # pylint: disable=protected-access
    after_one = _output_files(out)
    second = list(finalize._finalize(None, *inputs))  # pylint: disable=protected-access
    after_two = _output_files(out)
    assert first == second == [dataset['counts']]
    for files in (after_one, after_two):
        # Everything but the time in dataset.json is as the build left it.
        assert set(files) == set(before)
        for name in set(before) - {layout.DATASET_JSON}:
            assert files[name] == before[name], name
        rewritten = json.loads(files[layout.DATASET_JSON])
        assert {**rewritten, 'created': None} == {**dataset, 'created': None}
