"""`imageshards build` (also `python -m pipelines.build`): images -> shuffled, balanced shards.

    list inputs (launcher) -> prepare the output -> the pipeline (pipelines/steps.py):
        ReadListing -> ValidateImages -> [DropDuplicates] -> AssignShards -> WriteShards
        -> Finalize (rejected.jsonl, dataset.json, _SUCCESS)
        -> [AnalyzeShards: the train split's statistics, its sample measured as its shards
            are written -> Finalize
            -> WriteTransformOutput: tf.Transform, as steps on Dataflow, locally by the launcher
               after the pipeline, before _SUCCESS (pipelines/analysis/transform_output.py)]

Between validation and writing, image metadata moves in packed blocks
(pipelines/assignment/blocks.py), inline on Dataflow and spilled to OUT/.imageshards-tmp/blocks/
on the local runner (pipelines/local/spill.py), so that the launching process's memory does not
grow with the number of images.

Example:
    imageshards build --input data/ --output out/ --splits train=0.9,val=0.1 \\
        --direct_running_mode=multi_processing --direct_num_workers=2

On Dataflow, the same command with gs:// paths and `--config configs/dataflow.yaml` (and
`--project`, `--region`, `--temp_location`); see docs/dataflow.md.
"""

import gc
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid

from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.options.pipeline_options import TestOptions

from imageshards import console
from imageshards import dataset_json
from imageshards import file_names
from imageshards import gcs
from imageshards import layout
from imageshards import output_errors
from imageshards import storage
from imageshards import supervise
from imageshards.lock_holder import OutputBusy
from imageshards.output_errors import OutputError
from pipelines import counters
from pipelines import options
from pipelines import runner
from pipelines import summary as summary_lines
from pipelines.analysis import transform_output
from pipelines.assignment import blocks
from pipelines.context import BuildContext
from pipelines.inputs import entries
from pipelines.inputs import listing as listing_lib
from pipelines.local import direct
from pipelines.local import early
from pipelines.local import early_listing
from pipelines.local import progress
from pipelines.local import spill
from pipelines.local import transform_writer
from pipelines.local import worker_watch
from pipelines.output_guard import BuildFailed
from pipelines.output_guard import OutputGuard
from pipelines.steps import build_pipeline
from pipelines.writing import finalize
from pipelines.writing import overwrite

_LOG = logging.getLogger(__name__)


def analysis_in_pipeline(pipeline, config):
    """Whether the tf.Transform output is written by steps of the build's pipeline: on
    distributed runners, or when asked; on the local runner, the launcher writes it afterwards
    (pipelines/analysis/transform_output.py says why)."""
    return config.analyze and (
        config.analysis_in_pipeline or not direct.shuffles_in_memory(pipeline)
    )


def _transform_work_dir(pipeline, config, output_dir, dry_run):
    """Where TFT writes its temporary files and its output before Finalize moves them.

    The build's temporary folder, but for a local run with an object-store output: TensorFlow
    writes the TFT files, and its file system reaches Cloud Storage itself (not an emulator, nor
    with the pipeline's credentials), so those go to a local folder, copied up by Finalize. A
    dry run traces the analysis (TFT saves its graph while the job is built) into a local
    folder too, removed afterwards: nothing runs that would read it.
    """
    local = storage.is_uri(output_dir) and direct.shuffles_in_memory(pipeline)
    if config.analyze and (local or dry_run):
        return tempfile.mkdtemp(prefix='imageshards-transform-')
    return None


def _listable(spec):
    """The --input to list, with a folder of an object store (gs://b/data) as its `/**` glob.

    Object stores have no folders: `FileSystems.exists` is false for a prefix, so listing would
    call the folder missing. The glob lists the same objects below the same base, so ids, keys
    and labels are those of the folder.
    """
    if (
        not storage.is_uri(spec)
        or entries.is_manifest(spec)
        or any(char in spec for char in '*?[')
        or FileSystems.get_filesystem(spec).has_dirs()
    ):
        return spec
    try:
        is_object = storage.exists(spec)
    except ValueError:  # a bucket without a path (gs://b) is no object
        is_object = False
    return spec if is_object else spec.rstrip('/') + '/**'


def run(argv=None, test_pipeline=None):
    """Runs a build; returns the dataset.json it wrote, as a dict.

    With `--dry_run` (DataflowRunner), builds the job without submitting it, leaves the output
    as it was and returns None.
    """
    started = time.monotonic()
    config, beam_args = options.parse_build_args(argv)
    for flag, path in (('--input', config.input), ('--output', config.output)):
        if entries.redact(path) != path:  # before any message could repeat the secret
            raise ValueError(
                f'{flag} {entries.redact(path)} carries credentials; give them '
                f'to the storage client (gcloud auth, a service account) instead'
            )
    # Made first: a Pipeline checks its options and hands them to FileSystems, so that the
    # launcher's own listing and output checks reach gs:// with the pipeline's credentials.
    pipeline = test_pipeline or runner.make_pipeline(beam_args)
    # Now that FileSystems has the options: no credentials missed or looked up in vain on gs://.
    storage.check_credentials([config.input, config.output])
    on_dataflow = runner.is_dataflow(pipeline.options.view_as(StandardOptions).runner)
    if on_dataflow:
        runner.check_dataflow_paths(pipeline.options, config)
    # Only Dataflow honours --dry_run; the local runner would run the build anyway.
    dry_run = on_dataflow and pipeline.options.view_as(TestOptions).dry_run
    output_dir = storage.absolute(config.output).rstrip('/')
    if not file_names.is_utf8(output_dir):  # Beam passes it as text, which is Unicode
        raise ValueError(
            f'--output {file_names.display(output_dir)} is not a UTF-8 name; choose a folder '
            f'whose name is (inputs may have any name)'
        )
    scan = listing_lib.scan_inputs(
        _listable(config.input),
        config.allow_roots,
        config.follow_symlinks,
        config.label_levels,
        config.label_separator,
    )
    if not entries.is_manifest(config.input) and output_dir.startswith(scan.base + '/'):
        raise ValueError(
            f'--output {output_dir} is inside --input {scan.base}: a later build '
            f'would list its own output as images; choose another directory'
        )
    if test_pipeline is not None or direct.mode_given(beam_args):
        beam_args = None  # the pipeline or its mode is the caller's: keep it
    command = ['imageshards', 'build', *(sys.argv[1:] if argv is None else argv)]
    with OutputGuard(output_dir, command, dry_run) as guard:
        try:
            return _guarded(pipeline, config, scan, guard, started, beam_args)
        except Exception as error:
            failed = guard.failure(error)
            if failed is None:
                raise
            raise failed from error


def _guarded(pipeline, config, scan, guard, started, beam_args):
    """`run` once the output's lock is held: the build, and what it leaves to clean up."""
    output_dir = guard.output_dir
    on_dataflow = runner.is_dataflow(pipeline.options.view_as(StandardOptions).runner)
    dry_run = on_dataflow and pipeline.options.view_as(TestOptions).dry_run
    # A name of its own, so that a job that never ran removes its listing and nothing else.
    listing_path = storage.join(
        output_dir, layout.TEMP_DIR, f'listing-{uuid.uuid4().hex[:12]}.jsonl'
    )
    transform_dir = _transform_work_dir(pipeline, config, output_dir, dry_run)
    transform = _local_transform(pipeline, config, dry_run)
    try:
        return _build(
            pipeline,
            config,
            scan,
            guard,
            listing_path,
            transform_dir,
            transform,
            started,
            beam_args,
        )
    finally:
        if transform:
            transform.close()
        if transform_dir:
            shutil.rmtree(transform_dir, ignore_errors=True)


def _local_transform(pipeline, config, dry_run):
    """The LocalTransform of a local build with the analysis, or None: its graph process is
    the one the command started before importing Beam, else one started now, before listing,
    so that it imports TensorFlow while this process lists and the workers validate (none
    where a cached graph will likely do)."""
    if not config.analyze or analysis_in_pipeline(pipeline, config) or dry_run:
        transform_writer.stop_untaken()
        return None
    return transform_writer.LocalTransform(config)


def _build(
    pipeline, config, scan, guard, listing_path, transform_dir, transform, started, beam_args
):
    """`run` from the listing on; returns dataset.json, or None for a dry run.

    `guard`: the OutputGuard of the output. `beam_args`: the pipeline options, where the local
    runner's mode is ours to choose.
    """
    output_dir = guard.output_dir
    on_dataflow = runner.is_dataflow(pipeline.options.view_as(StandardOptions).runner)
    dry_run = on_dataflow and pipeline.options.view_as(TestOptions).dry_run
    summary = _write_listing(scan, config, guard, listing_path, dry_run)
    context = BuildContext.create(
        config, summary, listing_path, output_dir, transform_dir, guard.build
    )
    if transform:
        transform.prepare(
            transform_output.settings(
                summary.labels,
                config.format,
                list(summary.label_levels),
                config.transform_image_size,
                context.transform_staging,
                context.tft_temp_dir,
                summary.multi_label,
            )
        )
        context = context.written_after()
    if transform and transform.process:
        pipeline = direct.share_cores(pipeline, transform.process, summary.num_inputs, beam_args)
    if direct.shuffles_in_memory(pipeline) and not dry_run:
        _LOG.info('running on %s', direct.describe(pipeline))
    store = blocks.BlockStore()
    if direct.shuffles_in_memory(pipeline):
        # The local runner holds every shuffled element in this process: metadata goes to
        # files, and its shuffles move byte ranges of them (pipelines/local/spill.py); on this
        # machine's disk, also where the output is not (every block read from gs:// would wait
        # for a request or three).
        store = _spilling_store(output_dir)
    build_pipeline(pipeline, context, store)
    watched = direct.shuffles_in_memory(pipeline) and not dry_run
    with progress.Watch({counters.VALIDATE: summary.num_inputs}, _UNITS, enabled=watched):
        try:
            result = _launch(pipeline, listing_path, on_dataflow, dry_run)
        finally:
            store.close()
    if result is None:
        _LOG.info('--dry_run: built the job without running it; %s is as it was', output_dir)
        return None
    # Not complete yet where the local tf.Transform output (and _SUCCESS) are still to come.
    dataset = dataset_json.load(output_dir, complete=False)
    if transform:  # the local runner's last step: the tf.Transform output, then _SUCCESS
        transform.finish(summary.labels, dataset['analysis'])
        finalize.publish_transform(output_dir, context.transform_staging, dataset['analysis'])
        guard.check()
        finalize.complete(output_dir, guard.build)
    summary_lines.report(result, dataset, output_dir, time.monotonic() - started)
    return dataset


def _spilling_store(output_dir):
    """The local runner's block store: in the output's temporary folder, or for an output that
    is not local, in a temporary folder of this machine's, removed when the store is closed."""
    if storage.is_local(output_dir):
        return spill.SpillingStore(storage.join(output_dir, layout.TEMP_DIR, layout.BLOCKS_DIR))
    return spill.SpillingStore.temporary()


def _write_listing(scan, config, guard, listing_path, dry_run):
    """Streams the listing into `listing_path`; returns its ListingSummary.

    The inputs go to a local temporary file first: only once listing has succeeded (inputs
    found, manifest readable, room for them on a local output's disk) may the output be
    prepared, which with --overwrite deletes the earlier build.
    """
    output_dir = guard.output_dir
    with tempfile.TemporaryDirectory(prefix='imageshards-listing-') as scratch:
        local, summary = early_listing.listing_for(config, scan, scratch)
        summary.log()
        guard.check_space(config, summary)
        overwrite.prepare_output(output_dir, config.overwrite, dry_run=dry_run)
        guard.prepared()
        listing_lib.copy_listing(local, listing_path)
    return summary


def _launch(pipeline, listing_path, remote, dry_run):
    """Runs the pipeline to its end; returns its result, or None when no job ran (dry run).

    A remote job that was never submitted (a dry run, a refused submission) takes its listing
    file away again: left there, it would make the output non-empty, and a rerun need
    --overwrite. (A local run that fails is a build that started; --overwrite cleans it up.)
    """
    try:
        with worker_watch.running_watched():
            result = pipeline.run()
    except Exception:
        if remote:
            _delete_listing(listing_path)
        raise
    if dry_run:
        _delete_listing(listing_path)
        return None
    # On Dataflow, this waits for the job (and raises if it fails); the job goes on if this
    # process is stopped, and writes dataset.json and _SUCCESS itself.
    result.wait_until_finish()
    return result


def _delete_listing(listing_path):
    storage.delete([listing_path, listing_lib.index_path(listing_path)])


_UNITS = {counters.VALIDATE: 'images', counters.WRITE: 'records'}


def main(argv=None):
    """`imageshards build` in this process (see `command` for the one a person runs)."""
    argv = sys.argv[1:] if argv is None else argv
    verbose = '--verbose' in argv
    console.configure_logging(
        verbose=verbose, filters=[direct.worker_log_filter(verbose)], child_tracebacks=False
    )
    worker_watch.watch_workers(verbose)
    try:
        run(argv)
    except (OutputBusy, BuildFailed, OutputError) as e:
        _LOG.error('%s', e)
        return output_errors.EXIT_STATUS
    except (ValueError, FileExistsError, FileNotFoundError) as e:
        _LOG.error('%s', e)
        return 2
    except Exception as e:  # pylint: disable=broad-except
        if not gcs.is_transient(e):  # a bug: its traceback is what helps
            raise
        _LOG.error('%s', gcs.one_line(e))  # Cloud Storage, before the build had its output
        return output_errors.EXIT_STATUS
    except KeyboardInterrupt:
        print(interrupted_message(argv), file=sys.stderr)
        return console.INTERRUPTED_EXIT_CODE
    finally:
        early.stop_untaken()
    return 0


def command(argv):
    """The build as a command: in a child process that Ctrl-C ends cleanly, with its workers."""
    if os.environ.get(supervise.ENV):  # the child: a process for this build alone
        # What the imports made (Beam's, protobuf's, the runner's) lives as long as the
        # process: out of the collector's sight, a collection walks only what the build makes.
        # A multi-label build of 20,000 images: 4% less CPU, 7% less time (bench/RESULTS.md).
        gc.freeze()
        return main(argv)
    return supervise.run_supervised('pipelines.build', argv, lambda: interrupted_message(argv))


def interrupted_message(argv):
    """The line Ctrl-C leaves: what is left where, and how to go on."""
    try:
        output = storage.absolute(options.build_arg_parser().parse_known_args(argv)[0].output or '')
    except SystemExit:
        output = ''
    if not output:
        return 'imageshards build: interrupted'
    if not runner.is_local(_flag_value(argv, '--runner')):
        return (
            f'imageshards build: interrupted; a job already submitted to a remote runner goes on '
            f'and finishes {output} itself (cancel it in its console)'
        )
    return (
        f'imageshards build: interrupted; the unfinished build is in '
        f'{storage.join(output, layout.TEMP_DIR)} (no {layout.SUCCESS}): rerun the same '
        f'command with --overwrite to build again'
    )


def _flag_value(argv, flag):
    """The value of `flag` in `argv` (`--flag=value` or `--flag value`), or None."""
    for i, arg in enumerate(argv):
        if arg.startswith(flag + '='):
            return arg.split('=', 1)[1]
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
    return None


if __name__ == '__main__':
    sys.exit(command(sys.argv[1:]))
