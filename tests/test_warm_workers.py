"""pipelines/local/warm_workers.py: the local runner's workers, started before the launcher imports
Beam and claimed by the runner's worker command."""

import ast
import importlib.util
import os
import pathlib
import signal

import psutil
import pytest

from pipelines import launcher
from pipelines.local import warm_workers

import images_for_tests as imgs
from beam_helpers import built

WORKERS = ['--direct_running_mode=multi_processing', '--direct_num_workers=2']


@pytest.fixture(name='tree', scope='module')
def _tree(tmp_path_factory):
    root = tmp_path_factory.mktemp('warm_tree')
    imgs.write_tree(root, 12, ('ant', 'bee', 'cow'))
    (root / 'bee' / 'broken.jpg').write_bytes(imgs.jpeg(7)[:300])  # rejected
    return root


def _argv(root, out, *extra):
    return ['--input', str(root), '--output', str(out), '--seed', '5', '--num-shards', '2', *extra]


def _processes_of(folder):
    """Processes whose command line names `folder` (the early workers and their claims)."""
    found = []
    for process in psutil.process_iter(['cmdline']):
        if any(folder in part for part in process.info['cmdline'] or ()):
            found.append(process)
    return found


def test_a_build_runs_on_the_early_workers_and_builds_what_it_would_have(tree, tmp_path):
    early = warm_workers.start_early(_argv(tree, tmp_path / 'early', *WORKERS))
    assert early is not None and early.count == 2
    try:
        launcher.run(_argv(tree, tmp_path / 'early', '--no-analyze', *WORKERS))
        assert early.claimed == 2  # both workers of the run were the early ones
    finally:
        warm_workers.stop_untaken()
    assert not os.path.exists(early.folder)
    assert not _processes_of(early.folder)
    launcher.run(_argv(tree, tmp_path / 'beam', '--no-analyze', *WORKERS))  # Beam's own workers
    early_built, beam_built = built(tmp_path / 'early'), built(tmp_path / 'beam')
    assert early_built == beam_built
    assert early_built[0]['counts']['rejected'] == 1


def test_a_run_wanting_more_workers_than_were_started_early_starts_beams_own(tree, tmp_path):
    early = warm_workers.start_early(_argv(tree, tmp_path / 'out', '--direct_num_workers=1'))
    assert early.count == 1
    try:
        # For as many workers as were started, the early ones; else Beam's own.
        assert warm_workers.worker_command(1) == early.command
        assert warm_workers.worker_command(2) is None
        early.count = 2  # as if two had been started: the second claim finds none left
        launcher.run(_argv(tree, tmp_path / 'out', '--no-analyze', *WORKERS))
        assert early.claimed == 1
    finally:
        warm_workers.stop_untaken()
    assert not _processes_of(early.folder)
    assert built(tmp_path / 'out')[0]['counts']['written'] == 36


def test_claims_become_beams_own_workers_where_the_serving_process_failed(tree, tmp_path):
    early = warm_workers.start_early(_argv(tree, tmp_path / 'out', *WORKERS))
    try:
        with open(os.path.join(early.folder, warm_workers.SERVER), encoding='ascii') as f:
            os.kill(int(f.read()), signal.SIGKILL)  # as a failed import would end it
        launcher.run(_argv(tree, tmp_path / 'out', '--no-analyze', *WORKERS))
        assert early.claimed == 2
    finally:
        warm_workers.stop_untaken()
    assert built(tmp_path / 'out')[0]['counts']['written'] == 36


def test_workers_a_build_does_not_take_are_stopped(tree, tmp_path):
    early = warm_workers.start_early(_argv(tree, tmp_path / 'out'))
    assert early.count == (os.cpu_count() or 1)
    assert _processes_of(early.folder)
    warm_workers.stop_untaken()
    assert not _processes_of(early.folder)
    assert not os.path.exists(early.folder)
    assert warm_workers.worker_command(early.count) is None


@pytest.mark.parametrize(
    'extra',
    [
        ['--runner=DataflowRunner'],
        ['--dry_run'],
        ['--config', 'build.yaml'],
        ['--direct_running_mode=in_memory'],
        ['--direct_running_mode=multi_threading'],
        ['--direct_num_workers=many'],
        ['--help'],
    ],
)
def test_not_started_where_the_build_will_not_run_local_worker_processes(tmp_path, extra):
    assert warm_workers.start_early(_argv(tmp_path, tmp_path / 'out', *extra)) is None
    assert warm_workers.worker_command(os.cpu_count() or 1) is None


def test_not_started_where_processes_cannot_be_waited_on_by_pidfd(tmp_path, monkeypatch):
    monkeypatch.delattr(os, 'pidfd_open')  # macOS, or an older Python
    assert warm_workers.start_early(_argv(tmp_path, tmp_path / 'out')) is None


def test_the_waiting_workers_import_every_stage_module_the_pipeline_is_made_of():
    # A module the pipeline's steps come from but the waiting process did not import would be
    # imported by each forked worker instead, costing each the time the early start saves.
    steps = pathlib.Path(warm_workers.__file__).parent.parent / 'steps.py'
    imported = {
        node.module
        for node in ast.walk(ast.parse(steps.read_text(encoding='utf-8')))
        if isinstance(node, ast.ImportFrom)
        and node.module.split('.')[:2] != ['pipelines', 'core']
        and node.module.startswith('pipelines.')
    }
    assert imported and imported <= set(warm_workers.WORKER_MODULES)
    for module in warm_workers.WORKER_MODULES:
        assert importlib.util.find_spec(module) is not None, module
