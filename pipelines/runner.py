"""How a build runs, decided once (`decide`): on which runner, whether it is a dry run, whether
the runner shuffles in this process's memory, and who writes the tf.Transform output. build.py
reads the build top to bottom from the `Launch` it returns, and imports nothing of local/.

On the local runner (pipelines/local/), which holds every shuffled element in the launching
process, metadata goes to files (the spilling block store), a live display shows the workers'
counts, a worker process that ends mid-run stops the build, and the launcher writes the
tf.Transform output after the pipeline. A remote runner is named by the options. For Dataflow:
Google Cloud credentials, paths its workers can reach, and this package staged for them, from
the checkout's `setup.py` by default or from a built wheel or sdist given as `--extra_package`
(imageshards/distribution.py).
"""

import copy
import logging
import os
import shutil
import tempfile
import uuid

import apache_beam as beam
from apache_beam.options.pipeline_options import GoogleCloudOptions
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.options.pipeline_options import SetupOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.options.pipeline_options import TestOptions
from apache_beam.runners.runner import PipelineResult

from imageshards import distribution
from imageshards import layout
from imageshards import storage
from pipelines.core import blocks
from pipelines.core import options
from pipelines.core.settings import TransformBy
from pipelines.inputs import archive_index
from pipelines.inputs import archive_inputs
from pipelines.inputs import listing as listing_lib
from pipelines.local import direct
from pipelines.local import early
from pipelines.local import early_listing
from pipelines.local import graph_process
from pipelines.local import progress
from pipelines.local import spill
from pipelines.local import worker_watch

_LOG = logging.getLogger(__name__)

_DATAFLOW_RUNNERS = ('dataflowrunner', 'testdataflowrunner')


class Launch:
    """How a build runs, as `decide` chose it; while entered (a context manager), what the
    launcher runs beside the pipeline.

    Attributes:
        pipeline: the Pipeline that the build's steps go into.
        dataflow: whether it runs on Dataflow: the job goes on without this process.
        dry_run: Dataflow's --dry_run: the job is built, not submitted (the local runner would
            run the build anyway, so only Dataflow honours it).
        in_memory: whether the runner holds every shuffled element in this process (the local
            runner): metadata is spilled to files, and its workers are watched.
        transform_by: who writes the tf.Transform output (TransformBy).
        progress: whether a live display shows the workers' counts (a local run).
        transform_dir: where the tf.Transform output and TFT's files go before Finalize moves
            them, if not the build's temporary folder (set while entered).
    """

    def __init__(self, config, pipeline, dataflow, dry_run, beam_args):
        self.pipeline = pipeline
        self.dataflow = dataflow
        self.dry_run = dry_run
        self.in_memory = direct.shuffles_in_memory(pipeline)
        self.transform_by = _transform_by(config, self.in_memory)
        self.progress = self.in_memory and not dry_run
        self.transform_dir = None
        self._config = config
        self._beam_args = beam_args  # the local runner's mode is ours to choose; else None
        self._transform = None  # the launcher's LocalTransform

    def __enter__(self):
        self.transform_dir = self._transform_work_dir()
        if self.transform_by is TransformBy.LAUNCHER:
            self._transform = graph_process.LocalTransform(self._config)
        else:
            graph_process.stop_untaken()
        return self

    def __exit__(self, *exc_info):
        if self._transform:
            self._transform.close()
        if self.transform_dir:
            shutil.rmtree(self.transform_dir, ignore_errors=True)

    def _transform_work_dir(self):
        """A local folder for TFT's output and temporary files, or None for the build's
        temporary folder.

        A local run with an object-store output needs one: TensorFlow writes the TFT files, and
        its file system reaches Cloud Storage itself (not an emulator, nor with the pipeline's
        credentials), so those go to a local folder, copied up by Finalize. A dry run traces the
        analysis (TFT saves its graph while the job is built) into a local folder too, removed
        afterwards: nothing runs that would read it.
        """
        local = storage.is_uri(self._config.output) and self.in_memory
        if self._config.analyze and (local or self.dry_run):
            return tempfile.mkdtemp(prefix='imageshards-transform-')
        return None

    def index_archives(self, files, form):
        """(container, its members) of each archive in `files`, in turn, for the listing: on an
        object store, indexed by the workers of this build's runner in a pipeline run before the
        build's, so that this process reads small indexes, not the archives
        (pipelines/inputs/archive_index.py); local archives, and those of a dry run (which runs
        nothing), read here."""
        if self.dry_run or not any(storage.is_uri(path) for path in files):
            return archive_inputs.read_here(files, form)
        return archive_index.indexed(self.run_indexing, files, form, self._index_folder())

    def run_indexing(self, transform):
        """Runs `transform` (archive_index.IndexArchives: a pipeline's root) to its end, as a
        pipeline of its own on this build's runner and options; on Dataflow, a job of the
        build's name with `-index` added, where the build's is named."""
        options = copy.deepcopy(self.pipeline.options)
        cloud = options.view_as(GoogleCloudOptions)
        if self.dataflow and cloud.job_name:
            cloud.job_name = f'{cloud.job_name}-index'
        pipeline = direct.removing_tempdir(
            beam.Pipeline(runner=self.pipeline.runner, options=options)
        )
        _ = pipeline | transform
        with worker_watch.running_watched():
            pipeline.run().wait_until_finish()

    def _index_folder(self):
        """Where the workers write the archives' indexes: below --temp_location, or where there
        is none on the local runner (whose workers share this machine), a local folder."""
        temp_location = self.pipeline.options.view_as(GoogleCloudOptions).temp_location
        if temp_location:
            return storage.join(temp_location, f'imageshards-archives-{uuid.uuid4().hex[:12]}')
        if self.in_memory:
            return tempfile.mkdtemp(prefix='imageshards-archives-')
        raise ValueError(
            'the workers index archives on an object store into --temp_location, and none is '
            'given: add --temp_location gs://BUCKET/tmp'
        )

    def write_listing(self, scan, folder) -> tuple:
        """(listing file in `folder`, ListingSummary): the early listing's where it was made for
        this build (pipelines/local/early_listing.py), else `scan` written now."""
        return early_listing.listing_for(self._config, scan, folder)

    def prepare(self, context) -> None:
        """Once the inputs are listed: hands the launcher's tf.Transform writer the build's
        settings (it takes a graph kept or shipped, else its graph process writes one); on a
        machine of two cores or fewer, the pipeline shares them with that process."""
        if self._transform:
            self._transform.prepare(context.transform_settings)
            if self._transform.process:
                self.pipeline = direct.share_cores(
                    self.pipeline,
                    self._transform.process,
                    context.listing.num_inputs,
                    self._beam_args,
                )
        if self.progress:
            _LOG.info('running on %s', direct.describe(self.pipeline))

    def block_store(self, output_dir) -> blocks.BlockStore:
        """Where metadata waits between steps: inline (a distributed runner's shuffle holds
        it), or spilled to files (pipelines/local/spill.py), so that the launching process's
        memory does not grow with the number of images: under the build's temporary folder, or
        for an output that is not local, in a temporary folder of this machine's, removed when
        the store is closed (every block read from gs:// would wait for a request or three)."""
        if not self.in_memory:
            return blocks.BlockStore()
        if storage.is_local(output_dir):
            return spill.SpillingStore(storage.join(output_dir, layout.TEMP_DIR, layout.BLOCKS_DIR))
        return spill.SpillingStore.temporary()

    def annotation_store(self, output_dir, store) -> blocks.BlockStore:
        """Where a COCO file's annotations wait for their images (pipelines/inputs/coco_join.py):
        `store` where it spills; where it is inline (a distributed runner's), files under the
        build's temporary folder, which Finalize removes. Inline, a work item's annotations
        would travel as one element through the shuffles, and the work item of a .tar.gz's
        images is all of them: COCO train's annotations, hundreds of MB, in one element."""
        if isinstance(store, spill.SpillingStore):
            return store
        return spill.SpillingStore(
            storage.join(output_dir, layout.TEMP_DIR, layout.ANNOTATIONS_DIR)
        )

    def watched(self, totals, units) -> progress.Watch:
        """A context manager showing the workers' live counts of a local run (`totals`: {phase:
        total known before the run}; `units`: {phase: unit word}); elsewhere nothing."""
        return progress.Watch(totals, units, enabled=self.progress)

    def run(self, listing_path) -> PipelineResult | None:
        """Runs the pipeline to its end; returns its result, or None where no job ran (a dry
        run).

        A remote job that was never submitted (a dry run, a refused submission) takes its
        listing file away again: left there, it would make the output non-empty, and a rerun
        need --overwrite. (A local run that fails is a build that started; --overwrite cleans it
        up.)
        """
        try:
            with worker_watch.running_watched():
                result = self.pipeline.run()
        except Exception:
            if self.dataflow:
                _delete_listing(listing_path)
            raise
        if self.dry_run:
            _delete_listing(listing_path)
            return None
        # On Dataflow, this waits for the job (and raises if it fails); the job goes on if this
        # process is stopped, and writes dataset.json and _SUCCESS itself.
        result.wait_until_finish()
        return result

    def finish_transform(self, labels, analysis) -> None:
        """Writes the launcher's tf.Transform output into the context's staging folder, from the
        graph, with the build's own assets (`labels`, dataset.json's `analysis`); raises
        RuntimeError where the graph process failed."""
        self._transform.finish(labels, analysis)


def _transform_by(config, in_memory):
    """Who writes a build's tf.Transform output: nobody without the analysis; steps of the
    pipeline on a distributed runner, or when asked (--analysis-in-pipeline); else, on the local
    runner, the launcher after the pipeline (pipelines/analysis/tft_pipeline.py says why)."""
    if not config.analyze:
        return TransformBy.NOBODY
    if config.analysis_in_pipeline or not in_memory:
        return TransformBy.PIPELINE
    return TransformBy.LAUNCHER


def _delete_listing(listing_path):
    storage.delete([listing_path, listing_lib.index_path(listing_path)])


def decide(config, beam_args, test_pipeline=None) -> Launch:
    """How a build of `config` runs, on the runner `beam_args` name (locally, the FnApiRunner
    on every core) or on `test_pipeline`; returns the Launch.

    Made first: a Pipeline checks its options and hands them to FileSystems, so that the
    launcher's own listing and output checks reach gs:// with the pipeline's credentials.
    """
    pipeline = test_pipeline or make_pipeline(beam_args)
    dataflow = is_dataflow(pipeline.options.view_as(StandardOptions).runner)
    if dataflow:
        check_dataflow_paths(pipeline.options, config)
    dry_run = dataflow and bool(pipeline.options.view_as(TestOptions).dry_run)
    ours = test_pipeline is None and not direct.mode_given(beam_args)
    return Launch(config, pipeline, dataflow, dry_run, beam_args if ours else None)


def log_filters(verbose) -> list:
    """The logging filters of a build's process: the local workers' forwarded lines condensed
    (and their tracebacks dropped, unless `verbose`)."""
    return [direct.worker_log_filter(verbose)]


def watch_workers(verbose) -> None:
    """From now on, a local worker process that ends mid-run stops the build in one line."""
    worker_watch.watch_workers(verbose)


def stop_early_processes() -> None:
    """Stops what the command started before Beam loaded (pipelines/local/early.py) and no build
    took, or a build is done with."""
    early.stop_untaken()


def make_pipeline(beam_args) -> beam.Pipeline:
    """A Pipeline for the runner the options name; locally, the FnApiRunner on every core
    (direct.make_pipeline)."""
    runner = PipelineOptions(beam_args).view_as(StandardOptions).runner
    if options.is_local_runner(runner):
        return direct.make_pipeline(beam_args)
    remote_options = PipelineOptions(beam_args)
    if is_dataflow(runner):
        check_credentials()
        _stage_this_package(remote_options)
    return direct.removing_tempdir(beam.Pipeline(options=remote_options))


def is_dataflow(runner) -> bool:
    """Whether a `--runner` value names Dataflow (`DataflowRunner`, `dataflow`, a module path)."""
    if not isinstance(runner, str):
        runner = type(runner).__name__
    name = runner.rsplit('.', 1)[-1].lower()
    return (name if name.endswith('runner') else name + 'runner') in _DATAFLOW_RUNNERS


def check_dataflow_paths(pipeline_options, config) -> None:
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


def check_credentials() -> None:
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
