"""The runner a build runs on: the local runner (pipelines/local/direct.py), or a remote one
named by the options. For Dataflow: Google Cloud credentials, paths its workers can reach, and
this package staged for them, from the checkout's `setup.py` by default or from a built wheel
or sdist given as `--extra_package` (imageshards/distribution.py).
"""

import logging
import os

import apache_beam as beam
from apache_beam.options.pipeline_options import GoogleCloudOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import SetupOptions
from apache_beam.options.pipeline_options import StandardOptions

from imageshards import distribution
from imageshards import storage
from pipelines.local import direct

_LOG = logging.getLogger(__name__)

_DATAFLOW_RUNNERS = ('dataflowrunner', 'testdataflowrunner')


def make_pipeline(beam_args):
    """A Pipeline for the runner the options name; locally, the FnApiRunner on every core
    (direct.make_pipeline)."""
    runner = PipelineOptions(beam_args).view_as(StandardOptions).runner
    if is_local(runner):
        return direct.make_pipeline(beam_args)
    remote_options = PipelineOptions(beam_args)
    if is_dataflow(runner):
        check_credentials()
        _stage_this_package(remote_options)
    return direct.removing_tempdir(beam.Pipeline(options=remote_options))


def is_local(runner):
    """Whether a `--runner` value (None: not given) runs the pipeline on this machine."""
    return runner in (None, 'DirectRunner')


def is_dataflow(runner):
    """Whether a `--runner` value names Dataflow (`DataflowRunner`, `dataflow`, a module path)."""
    if not isinstance(runner, str):
        runner = type(runner).__name__
    name = runner.rsplit('.', 1)[-1].lower()
    return (name if name.endswith('runner') else name + 'runner') in _DATAFLOW_RUNNERS


def check_dataflow_paths(pipeline_options, config):
    """Refuses local paths on Dataflow, whose workers cannot reach this machine's disk."""
    for flag, path in (('--input', config.input), ('--output', config.output)):
        if not storage.is_uri(path):
            raise ValueError(
                f'{flag} {path} is a local path, which Dataflow workers cannot read or write; '
                f'use gs:// paths (gsutil -m cp -r ... gs://BUCKET/...) or the DirectRunner'
            )
    if pipeline_options.view_as(GoogleCloudOptions).template_location:
        raise ValueError(
            '--template_location is not supported: the launcher lists the inputs before each '
            'run, so a template would replay one listing; run the build command instead'
        )


def check_credentials():
    """Raises ValueError, in one sentence, where there are no Google Cloud credentials.

    Without them, Beam's Cloud Storage and Dataflow clients retry for minutes and end in a long
    traceback; Application Default Credentials are what they would use.
    """
    import google.auth  # pylint: disable=import-outside-toplevel
    from google.auth import exceptions  # pylint: disable=import-outside-toplevel

    try:
        google.auth.default()
    except exceptions.DefaultCredentialsError:
        raise ValueError(
            'Dataflow needs Google Cloud credentials and none were found: run '
            '`gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS '
            'to the key file of a service account'
        ) from None


def _stage_this_package(pipeline_options):
    """Stages this package for the Dataflow workers: a --setup_file or an imageshards
    --extra_package the options name, else the checkout's setup.py."""
    setup = pipeline_options.view_as(SetupOptions)
    given = [
        distribution.package_file(path, '--extra_package')
        for path in setup.extra_packages or []
        if os.path.basename(path).startswith('imageshards-')
    ]
    if setup.setup_file or given:
        return
    setup.setup_file = distribution.checkout_setup_py()
    if setup.setup_file is None:
        raise ValueError(distribution.no_source('--extra_package'))
    _LOG.info('staging %s for the Dataflow workers (--setup_file)', setup.setup_file)
