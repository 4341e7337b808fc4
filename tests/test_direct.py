"""Choosing the local runner, deciding once how a local build runs, and making its workers'
logs readable."""

import logging
import os

import pytest
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from pipelines import runner
from pipelines.core import blocks
from pipelines.core import options
from pipelines.core.settings import TransformBy
from pipelines.local import direct
from pipelines.local import spill


def test_local_builds_default_to_one_worker_process_per_core():
    pipeline = direct.make_pipeline([])
    options = pipeline.options.view_as(DirectOptions)
    assert isinstance(pipeline.runner, FnApiRunner)
    assert options.direct_running_mode == 'multi_processing'
    assert options.direct_num_workers >= 1


def test_explicit_direct_options_win():
    pipeline = direct.make_pipeline(['--direct_running_mode=in_memory'])
    options = pipeline.options.view_as(DirectOptions)
    assert (options.direct_running_mode, options.direct_num_workers) == ('in_memory', 1)
    pipeline = direct.make_pipeline(
        ['--direct_running_mode', 'multi_threading', '--direct_num_workers=3']
    )
    options = pipeline.options.view_as(DirectOptions)
    assert (options.direct_running_mode, options.direct_num_workers) == ('multi_threading', 3)


@pytest.mark.parametrize(
    'flags, transform_by',
    [
        ([], TransformBy.LAUNCHER),
        (['--no-analyze'], TransformBy.NOBODY),
        (['--analysis-in-pipeline'], TransformBy.PIPELINE),
    ],
)
def test_a_local_build_is_decided_once(tmp_path, flags, transform_by):
    out = tmp_path / 'out'
    argv = ['--input', str(tmp_path), '--output', str(out), '--direct_running_mode=in_memory']
    launch = runner.decide(*options.parse_build_args([*argv, *flags]))
    assert (launch.dataflow, launch.dry_run, launch.in_memory, launch.progress) == (
        False,
        False,
        True,
        True,
    )
    assert launch.transform_by is transform_by
    with launch:
        assert launch.transform_dir is None  # a local output: the build's temporary folder
        store = launch.block_store(str(out))
        assert isinstance(store, spill.SpillingStore)
        assert store.spill_dir == os.path.join(str(out), '.imageshards-tmp', 'blocks')


def test_a_gs_output_of_a_local_build_has_its_transform_written_in_a_local_folder(tmp_path):
    argv = ['--input', str(tmp_path), '--output', 'gs://bucket/out']
    launch = runner.decide(*options.parse_build_args([*argv, '--direct_running_mode=in_memory']))
    with launch:
        folder = launch.transform_dir
        assert folder and os.path.isdir(folder)  # TensorFlow writes it, not the pipeline
    assert not os.path.exists(folder)


def test_a_distributed_runner_keeps_blocks_inline_and_writes_the_transform_in_its_steps(tmp_path):
    """Beam's Prism runner stands in for any runner that shuffles outside this process."""
    argv = ['--input', str(tmp_path), '--output', str(tmp_path / 'out'), '--runner=PrismRunner']
    launch = runner.decide(*options.parse_build_args(argv))
    assert (launch.dataflow, launch.in_memory, launch.progress) == (False, False, False)
    assert launch.transform_by is TransformBy.PIPELINE
    assert type(launch.block_store(str(tmp_path / 'out'))) is blocks.BlockStore


def _forwarded(message):
    """A record as Beam's local logging service logs a worker's LogEntry."""
    entry = beam_fn_api_pb2.LogEntry(
        severity=beam_fn_api_pb2.LogEntry.Severity.INFO,
        message=message,
        log_location='/x/validate.py:80',
        instruction_id='bundle_3',
        transform_id='ParDo(D)',
    )
    text = str(entry).replace('\n', ' ')
    return logging.LogRecord('apache_beam', logging.INFO, __file__, 1, 'Worker: %s', (text,), None)


def test_forwarded_worker_logs_are_condensed_to_their_message():
    log_filter = direct.worker_log_filter()
    record = _forwarded('validated 5 of 9 "ünï" inputs\nin this worker')
    assert log_filter.filter(record)
    assert record.getMessage() == 'worker: validated 5 of 9 "ünï" inputs\nin this worker'
    assert not log_filter.filter(_forwarded('No semi_persistent_directory found: whatever'))
    own = logging.LogRecord('pipelines', logging.INFO, __file__, 1, 'listed %d', (3,), None)
    assert log_filter.filter(own) and own.getMessage() == 'listed 3'


def _logged(name, level, message, exc_info=None):
    return logging.LogRecord(name, level, __file__, 1, message, (), exc_info)


def test_worker_and_runner_tracebacks_are_dropped_unless_verbose():
    try:
        raise RuntimeError('Channel closed prematurely.')
    except RuntimeError as e:
        failure = (type(e), e, e.__traceback__)
    entry = beam_fn_api_pb2.LogEntry(
        severity=beam_fn_api_pb2.LogEntry.Severity.ERROR,
        message='Error processing instruction bundle_7. Original traceback is\nTraceback (most '
        'recent call last):\n  File "x.py", line 1\nOSError: [Errno 28] No space left',
    )
    forwarded = _logged('apache_beam', logging.ERROR, 'Worker: ' + str(entry).replace('\n', ' '))
    runner = _logged('apache_beam.runners.worker.data_plane', logging.ERROR, 'Failed', failure)
    own = _logged('pipelines.launcher', logging.ERROR, 'no space left on device', failure)
    quiet, verbose = direct.worker_log_filter(), direct.worker_log_filter(verbose=True)
    assert [quiet.filter(r) for r in (forwarded, runner, own)] == [False, False, True]
    assert [verbose.filter(r) for r in (forwarded, runner, own)] == [True, True, True]
