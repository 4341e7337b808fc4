"""The build in the launcher's process: images -> shuffled, balanced shards. `imageshards build`
(pipelines/build.py) runs it in a process of its own.

Read top to bottom, `run` is the build: how it runs, decided once (pipelines/runner.py: the
runner, a dry run, the local runner's in-memory shuffle, who writes the tf.Transform output);
the inputs listed; the output's lock taken and the output prepared; the pipeline of the build's
steps (pipelines/steps.py) run; on the local runner, the tf.Transform output written by the
launcher and `_SUCCESS` last; and what the build did, printed.

Example:
    imageshards build --input data/ --output out/ --splits train=0.9,val=0.1 \\
        --direct_running_mode=multi_processing --direct_num_workers=2

On Dataflow, the same command with gs:// paths and `--config configs/dataflow.yaml` (and
`--project`, `--region`, `--temp_location`); see docs/dataflow.md.
"""

import logging
import sys
import tempfile
import time
import uuid

from apache_beam.io.filesystems import FileSystems

from imageshards import console
from imageshards import dataset_json
from imageshards import file_names
from imageshards import gcs
from imageshards import layout
from imageshards import output_errors
from imageshards import storage
from imageshards.kinds import features
from imageshards.lock_holder import OutputBusy
from imageshards.output_errors import OutputError
from pipelines import runner
from pipelines.core import counters
from pipelines.core import options
from pipelines.core.context import BuildContext
from pipelines.core.settings import TransformBy
from pipelines.inputs import entries
from pipelines.inputs import listing as listing_lib
from pipelines.steps import build_pipeline
from pipelines.writing import finalize
from pipelines.writing import overwrite
from pipelines.writing import summary as summary_lines
from pipelines.writing.output_guard import BuildFailed
from pipelines.writing.output_guard import OutputGuard

_LOG = logging.getLogger(__name__)
_UNITS = {counters.VALIDATE: 'images', counters.WRITE: 'records'}


def run(argv=None, test_pipeline=None) -> dict | None:
    """Runs a build; returns the dataset.json it wrote, as a dict.

    With `--dry_run` (DataflowRunner), builds the job without submitting it, leaves the output
    as it was and returns None.
    """
    started = time.monotonic()
    config, beam_args = options.parse_build_args(argv)
    _refuse_credentials(config)
    launch = runner.decide(config, beam_args, test_pipeline)
    # Now that FileSystems has the options: no credentials missed or looked up in vain on gs://.
    storage.check_credentials([config.input, config.output])
    output_dir = _output_dir(config)
    scan = listing_lib.scan_inputs(_listable(config.input), config.inputs, launch.index_archives)
    _refuse_paths_of_containers(config, scan)
    if scan.form == 'tree' and output_dir.startswith(scan.base + '/'):
        raise ValueError(
            f'--output {output_dir} is inside --input {scan.base}: a later build '
            f'would list its own output as images; choose another directory'
        )
    command = ['imageshards', 'build', *(sys.argv[1:] if argv is None else argv)]
    with OutputGuard(output_dir, command, launch.dry_run) as guard:
        try:
            with launch:
                return _build(launch, config, scan, guard, started)
        except Exception as error:
            failed = guard.failure(error)
            if failed is None:
                raise
            raise failed from error


def _build(launch, config, scan, guard, started):
    """`run` once the output's lock is held, from the listing on; returns dataset.json, or None
    for a dry run."""
    output_dir = guard.output_dir
    # A name of its own, so that a job that never ran removes its listing and nothing else.
    listing_path = storage.join(
        output_dir, layout.TEMP_DIR, f'listing-{uuid.uuid4().hex[:12]}.jsonl'
    )
    summary = _write_listing(launch, scan, config, guard, listing_path)
    context = BuildContext.create(
        config,
        summary,
        listing_path,
        output_dir,
        transform_dir=launch.transform_dir,
        lock_build=guard.build,
        transform_by=launch.transform_by,
    )
    launch.prepare(context)
    store = launch.block_store(output_dir)
    build_pipeline(launch.pipeline, context, store, launch.annotation_store(output_dir, store))
    with launch.watched({counters.VALIDATE: summary.num_inputs}, _UNITS):
        try:
            result = launch.run(listing_path)
        finally:
            store.close()
    if result is None:
        _LOG.info('--dry_run: built the job without running it; %s is as it was', output_dir)
        return None
    # Not complete yet where the launcher's tf.Transform output (and _SUCCESS) are to come.
    dataset = dataset_json.load(output_dir, complete=False)
    if launch.transform_by is TransformBy.LAUNCHER:
        launch.finish_transform(summary.labels, dataset['analysis'])
        finalize.publish_transform(output_dir, context.transform_staging, dataset['analysis'])
        guard.check()
        finalize.complete(output_dir, guard.build)
    summary_lines.report(result, dataset, output_dir, time.monotonic() - started)
    return dataset


def _refuse_credentials(config):
    """Refuses an --input or --output URL that carries credentials, before any message could
    repeat them."""
    for flag, path in (('--input', config.input), ('--output', config.output)):
        if entries.redact(path) != path:
            raise ValueError(
                f'{flag} {entries.redact(path)} carries credentials; give them '
                f'to the storage client (gcloud auth, a service account) instead'
            )


def _refuse_paths_of_containers(config, scan):
    """A `paths` build names files that training reads: images inside archives, arrays or
    TFRecord files have none."""
    if config.format == features.PATHS and scan.form not in ('tree', 'manifest'):
        raise ValueError(
            f'--format paths names image files that training reads, and the images of --input '
            f'({scan.form}) are inside files that hold many; build examples (the default), '
            'which store their bytes'
        )


def _output_dir(config):
    """--output, absolute, without a trailing '/'; refused where it is not a UTF-8 name."""
    output_dir = storage.absolute(config.output).rstrip('/')
    if not file_names.is_utf8(output_dir):  # Beam passes it as text, which is Unicode
        raise ValueError(
            f'--output {file_names.display(output_dir)} is not a UTF-8 name; choose a folder '
            f'whose name is (inputs may have any name)'
        )
    return output_dir


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


def _write_listing(launch, scan, config, guard, listing_path):
    """Streams the listing into `listing_path`; returns its ListingSummary.

    The inputs go to a local temporary file first: only once listing has succeeded (inputs
    found, manifest readable, room for them on a local output's disk) may the output be
    prepared, which with --overwrite deletes the earlier build.
    """
    with tempfile.TemporaryDirectory(prefix='imageshards-listing-') as scratch:
        local, summary = launch.write_listing(scan, scratch)
        summary.log()
        guard.check_space(config, summary)
        overwrite.prepare_output(guard.output_dir, config.overwrite, dry_run=launch.dry_run)
        guard.prepared()
        listing_lib.copy_listing(local, listing_path)
    return summary


def main(argv=None) -> int:
    """The build in this process, its errors as an exit status and a line (pipelines/build.py
    runs it as a person's command)."""
    argv = sys.argv[1:] if argv is None else argv
    verbose = '--verbose' in argv
    console.configure_logging(
        verbose=verbose, filters=runner.log_filters(verbose), child_tracebacks=False
    )
    runner.watch_workers(verbose)
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
    finally:
        runner.stop_early_processes()
    return 0
