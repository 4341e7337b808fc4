"""pipelines/local/transform_writer.py: the tf.Transform graph process that the build command
starts before importing Beam (pipelines/local/early.py), and that a build takes or stops."""

import os

import pytest

from pipelines import launcher
from pipelines.core import options
from pipelines.local import early as early_lib
from pipelines.local import transform_writer

import images_for_tests as imgs


@pytest.mark.parametrize(
    'extra',
    [
        ['--no-analyze'],
        ['--analysis-in-pipeline'],
        ['--runner', 'DataflowRunner', '--dry_run=True'],
        ['--config', 'configs/dataflow.yaml'],
        ['--help'],
    ],
)
def test_not_started_for_builds_that_will_not_want_it(extra):
    try:
        early_lib.start(['--input', 'in', '--output', 'out', *extra])
        assert transform_writer.take() is None
    finally:
        early_lib.stop_untaken()


def _tree(tmp_path):
    root = tmp_path / 'in'
    imgs.write_tree(root, 4, ('ant', 'bee'))
    return root


def test_a_build_takes_the_early_graph_process_for_its_transform(tmp_path, empty_transform_cache):
    out = tmp_path / 'out'
    argv = ['--input', str(_tree(tmp_path)), '--output', str(out)]
    early = transform_writer.start_early(options.peek_build_config(argv))
    assert early is not None
    launcher.run(argv + ['--direct_running_mode=in_memory'])
    assert transform_writer.take() is None
    assert early.exit_status == 0  # it ran to the end: it wrote the transform
    assert (out / 'transform_fn' / 'saved_model.pb').exists()
    assert not os.path.exists(early.work_dir)


def test_a_build_whose_config_turns_the_analysis_off_starts_no_graph_process(
    tmp_path, empty_transform_cache
):
    config = tmp_path / 'build.yaml'
    config.write_text('analyze: false\n')
    out = tmp_path / 'out'
    argv = ['--input', str(_tree(tmp_path)), '--output', str(out), '--config', str(config)]
    assert transform_writer.start_early(options.peek_build_config(argv)) is None
    launcher.run(argv + ['--direct_running_mode=in_memory'])
    assert not (out / 'transform_fn').exists()


def test_a_build_that_turns_out_not_to_want_the_early_graph_process_stops_it(
    tmp_path, empty_transform_cache
):
    out = tmp_path / 'out'
    argv = ['--input', str(_tree(tmp_path)), '--output', str(out)]
    early = transform_writer.start_early(options.peek_build_config(argv))
    assert early is not None
    launcher.run(argv + ['--no-analyze', '--direct_running_mode=in_memory'])
    assert transform_writer.take() is None
    assert early.exit_status not in (None, 0)  # stopped, not left running
    assert not (out / 'transform_fn').exists()
    assert not os.path.exists(early.work_dir)
