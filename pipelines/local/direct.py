"""The local runner: Beam's FnApiRunner (the DirectRunner's own engine) on every core, its
workers those the build command started early (pipelines/local/warm_workers.py), one process
beside the tf.Transform graph process on a small machine, and its workers' log lines condensed.

Unless --verbose, a worker's failure shows no traceback: the runner's own threads and loggers,
and the workers' forwarded error entries, tell of it at length (a worker killed by the
out-of-memory killer, one failing on a full disk); the build says in its own line what failed.
A worker process that ends in the middle of the run fails the build at once (`watch_workers`).
"""

import json
import logging
import os
import re
import shutil
import weakref

import apache_beam as beam
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability import python_urns
from apache_beam.portability.api import beam_fn_api_pb2
from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.direct import direct_runner
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle
from google.protobuf import text_format

from imageshards import console
from pipelines.local import warm_workers

_LOG = logging.getLogger(__name__)

# Beam's local workers forward every log record as a printed LogEntry proto.
_FORWARDED = re.compile(r'^(?:Worker: )?(severity: .*)', re.DOTALL)
# Logged by every local worker as it starts, before log levels apply: of no use to a build.
_WORKER_START_NOTES = (
    'Logging handler created',
    'No semi_persistent_directory found',
    'Discarding unparseable args',
)


def make_pipeline(beam_args):
    """A Pipeline on the FnApiRunner, by default with a worker process per core.

    Beam's DirectRunner first tries the Prism runner, which downloads a binary and ignores
    `--direct_running_mode`; the FnApiRunner is the DirectRunner's own engine. Unless the
    options say otherwise, it runs one worker process per core (`multi_processing`), which
    builds small images several times faster than one process, and its workers log warnings
    and this package's progress only.
    """
    given = {arg.split('=')[0] for arg in beam_args}
    defaults = []
    if '--default_sdk_harness_log_level' not in given:
        defaults.append('--default_sdk_harness_log_level=WARNING')
    if '--sdk_harness_log_level_overrides' not in given:
        defaults.append('--sdk_harness_log_level_overrides=' + json.dumps({'pipelines': 'INFO'}))
    pipeline_options = PipelineOptions([*beam_args, *defaults])
    direct = pipeline_options.view_as(DirectOptions)
    if '--direct_running_mode' not in given:
        direct.direct_running_mode = 'multi_processing'
    if '--direct_num_workers' not in given and direct.direct_running_mode != 'in_memory':
        direct.direct_num_workers = os.cpu_count() or 1
    # As Beam's DirectRunner does: workers read the pipeline options (log levels among them)
    # from the provision info.
    encoded = JobServiceHandle.encode_pipeline_options(pipeline_options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
    # Workers log at their own levels; what they forward arrives through this logger.
    logging.getLogger('apache_beam.runners.portability.local_job_service').setLevel(logging.INFO)
    command = None
    if direct.direct_running_mode == 'multi_processing':
        command = warm_workers.worker_command(direct.direct_num_workers)
    local_runner = (
        _EarlyWorkersRunner(command, provision_info=provision)
        if command
        else fn_runner.FnApiRunner(provision_info=provision)
    )
    return removing_tempdir(beam.Pipeline(runner=local_runner, options=pipeline_options))


class _EarlyWorkersRunner(fn_runner.FnApiRunner):
    """The FnApiRunner, its worker processes those the build command started early
    (pipelines/local/warm_workers.py): `worker_command` in place of Beam's in the job's subprocess
    environments."""

    def __init__(self, worker_command, **kwargs):
        super().__init__(**kwargs)
        self._worker_command = worker_command

    def run_via_runner_api(self, pipeline_proto, options):
        for environment in pipeline_proto.components.environments.values():
            if environment.urn == python_urns.SUBPROCESS_SDK:
                environment.payload = self._worker_command.encode('utf-8')
        return super().run_via_runner_api(pipeline_proto, options)


def removing_tempdir(pipeline):
    """`pipeline`, whose local temporary folder goes when it does (on any runner).

    A Pipeline makes a `beam-pipeline-temp*` folder as it is created and removes it at the end
    of `run()`: a build that fails before running (a refused output directory, inputs that
    cannot be listed) would leave it behind.
    """
    weakref.finalize(pipeline, shutil.rmtree, pipeline.local_tempdir, True)
    return pipeline


# Below this many inputs, a 2-core machine builds faster in one process, leaving the other core to
# the tf.Transform graph process, than with a worker per core; above it, slower
# (bench/RESULTS.md, "Against the peers: TFDS, Hugging Face `datasets`, Keras").
IN_MEMORY_BELOW = 50_000


def share_cores(pipeline, graph_process, num_inputs, beam_args):
    """The local pipeline to run beside the tf.Transform graph process on a machine of two
    cores or fewer: where the mode is ours to choose (`beam_args` given), one process for a
    small build; with worker processes, the graph process at low priority, so that it takes
    the time they leave."""
    if (os.cpu_count() or 1) > 2:
        return pipeline
    if beam_args is not None and num_inputs < IN_MEMORY_BELOW:
        warm_workers.stop_untaken()  # one process: the early workers are not wanted
        return make_pipeline([*beam_args, '--direct_running_mode=in_memory'])
    if pipeline.options.view_as(DirectOptions).direct_running_mode == 'multi_processing':
        graph_process.lower_priority()
    return pipeline


def describe(pipeline):
    """How a local pipeline runs, for the log: its mode and workers."""
    direct = pipeline.options.view_as(DirectOptions)
    if direct.direct_running_mode == 'in_memory':
        return 'the DirectRunner (FnApiRunner) in this process (in_memory)'
    return (
        f'the DirectRunner (FnApiRunner): {direct.direct_running_mode} with '
        f'{console.plural(direct.direct_num_workers, "worker")}'
    )


def mode_given(beam_args):
    """Whether the command line (or config) chose the local runner's mode or workers."""
    given = {arg.split('=')[0] for arg in beam_args}
    return bool(given & {'--direct_running_mode', '--direct_num_workers'})


def shuffles_in_memory(pipeline):
    """Whether the pipeline's runner holds every shuffled element in the launching process.

    The local FnApiRunner (also behind Beam's DirectRunner) keeps each GroupByKey's input in
    its own memory, as Python objects, until the next stage has read it; Dataflow and other
    distributed runners shuffle on a service or on disk.
    """
    local = (
        fn_runner.FnApiRunner,
        direct_runner.DirectRunner,
        direct_runner.BundleBasedDirectRunner,
    )
    return isinstance(pipeline.runner, local)


class _CondenseWorkerLogs(logging.Filter):
    """Turns a forwarded worker LogEntry into `worker: <message>` at its own level; unless
    `verbose`, drops the runner's and the workers' errors that carry a traceback."""

    def __init__(self, verbose):
        super().__init__()
        self._verbose = verbose

    def filter(self, record):
        if not self._verbose and record.exc_info and not _ours(record.name):
            return False  # the runner's account of a worker's failure, in its threads
        match = _FORWARDED.match(record.getMessage())
        if not match:
            return True
        entry = beam_fn_api_pb2.LogEntry()
        try:
            text_format.Parse(match.group(1), entry)
        except text_format.ParseError:
            return True
        if entry.message.startswith(_WORKER_START_NOTES):
            return False
        if not self._verbose and record.levelno >= logging.ERROR and _has_traceback(entry):
            return False  # a failing worker's traceback: the build's error says what failed
        record.msg, record.args = 'worker: %s', (entry.message,)
        return True


def _ours(logger_name):
    return logger_name.split('.', 1)[0] in console.OUR_PACKAGES


def _has_traceback(entry):
    return bool(entry.trace) or 'Traceback (most recent call last)' in entry.message


def worker_log_filter(verbose=False):
    """A logging filter that turns the local workers' forwarded LogEntries into plain lines
    (and drops their tracebacks, unless `verbose`)."""
    return _CondenseWorkerLogs(verbose)
