"""Choosing the local runner and making its workers' logs readable."""

import logging

from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from pipelines.local import direct


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
    log_filter = direct._CondenseWorkerLogs()  # pylint: disable=protected-access
    record = _forwarded('validated 5 of 9 "ünï" inputs\nin this worker')
    assert log_filter.filter(record)
    assert record.getMessage() == 'worker: validated 5 of 9 "ünï" inputs\nin this worker'
    assert not log_filter.filter(_forwarded('No semi_persistent_directory found: whatever'))
    own = logging.LogRecord('pipelines', logging.INFO, __file__, 1, 'listed %d', (3,), None)
    assert log_filter.filter(own) and own.getMessage() == 'listed 3'
