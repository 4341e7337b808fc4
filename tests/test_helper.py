"""pipelines/helper.py: the tf.Transform helper the build command starts before importing Beam."""

import os

import pytest

from pipelines import build
from pipelines import helper

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
    assert helper.start_early(['--input', 'in', '--output', 'out', *extra]) is None
    assert helper.take() is None


def _tree(tmp_path):
    root = tmp_path / 'in'
    imgs.write_tree(root, 4, ('ant', 'bee'))
    return root


def test_a_build_takes_the_early_helper_for_its_transform(tmp_path, empty_transform_cache):
    out = tmp_path / 'out'
    argv = ['--input', str(_tree(tmp_path)), '--output', str(out)]
    early = helper.start_early(argv)
    assert early is not None
    build.run(argv + ['--direct_running_mode=in_memory'])
    assert helper.take() is None
    assert early.exit_status == 0  # it ran to the end: it wrote the transform
    assert (out / 'transform_fn' / 'saved_model.pb').exists()
    assert not os.path.exists(early.work_dir)


def test_a_build_whose_config_turns_the_analysis_off_starts_no_helper(
    tmp_path, empty_transform_cache
):
    config = tmp_path / 'build.yaml'
    config.write_text('analyze: false\n')
    out = tmp_path / 'out'
    argv = ['--input', str(_tree(tmp_path)), '--output', str(out), '--config', str(config)]
    assert helper.start_early(argv) is None
    build.run(argv + ['--direct_running_mode=in_memory'])
    assert not (out / 'transform_fn').exists()


def test_a_build_that_turns_out_not_to_want_the_early_helper_stops_it(
    tmp_path, empty_transform_cache
):
    out = tmp_path / 'out'
    argv = ['--input', str(_tree(tmp_path)), '--output', str(out)]
    early = helper.start_early(argv)
    assert early is not None
    build.run(argv + ['--no-analyze', '--direct_running_mode=in_memory'])
    assert helper.take() is None
    assert early.exit_status not in (None, 0)  # stopped, not left running
    assert not (out / 'transform_fn').exists()
    assert not os.path.exists(early.work_dir)
