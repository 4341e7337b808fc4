"""`imageshards build` (also `python -m pipelines.build`): images -> shuffled, balanced shards.

    list inputs (launcher) -> ReadListing -> ValidateImages -> [DropDuplicates] -> AssignShards
        -> WriteShards -> Finalize (rejected.jsonl, dataset.json, _SUCCESS)
        -> [AnalyzeSplit: the train split's statistics and sample -> Finalize
            -> WriteTransformOutput: tf.Transform, as steps on Dataflow, locally by the launcher
               after the pipeline, before _SUCCESS (pipelines/transform_output.py)]

Between validation and writing, image metadata moves in packed blocks (pipelines/blocks.py),
inline on Dataflow and spilled to OUT/.imageshards-tmp/blocks/ on the local runner, so that the
launching process's memory does not grow with the number of images.

Example:
    imageshards build --input data/ --output out/ --splits train=0.9,val=0.1 \\
        --direct_running_mode=multi_processing --direct_num_workers=2

On Dataflow, the same command with gs:// paths and `--config configs/dataflow.yaml` (and
`--project`, `--region`, `--temp_location`); see docs/dataflow.md.
"""

import logging
import os
import shutil
import sys
import tempfile
import time
import uuid

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.options.pipeline_options import GoogleCloudOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.options.pipeline_options import TestOptions

from imageshards import console
from imageshards import features
from imageshards import supervise
from pipelines import blocks
from pipelines import finalize
from pipelines import inputs
from pipelines import listing as listing_lib
from pipelines import options
from pipelines import progress
from pipelines import runner
from pipelines import transform_output
from pipelines.analyze import AnalyzeSplit
from pipelines.assign import AssignShards
from pipelines.assign import bucket_bits_for
from pipelines.dedup import DropDuplicates
from pipelines.transform_output import WriteTransformOutput
from pipelines.validate import NAMESPACE
from pipelines.validate import ValidateImages
from pipelines.write import RecordEncoder
from pipelines.write import WriteShards

_LOG = logging.getLogger(__name__)


def build_pipeline(
    pipeline,
    config,
    listing,
    listing_path,
    output_dir,
    store=None,
    transform_dir=None,
    handover_dir=None,
):
    """Adds the build's steps to `pipeline`; returns the PCollection of final counts.

    Args:
        listing: the ListingSummary of the inputs, whose entries are in `listing_path`.
        store: the BlockStore that keeps metadata between steps (default: inline).
        transform_dir: where the tf.Transform output is staged and TFT keeps its temporary files
            (default: the build's temporary folder).
        handover_dir: the local folder where the analysis hands its sample over to the
            tf.Transform helper process (the local runner; see pipelines/transform_output.py).
    """
    store = store or blocks.BlockStore()
    label_ids = {name: i for i, name in enumerate(listing.labels)}
    level_ids = [
        (level, {name: i for i, name in enumerate(names)})
        for level, names in listing.label_levels.items()
    ]
    temp_dir = finalize.join(output_dir, finalize.TEMP_DIR)
    items = (
        pipeline
        | 'ReadListing' >> listing_lib.ReadListing(listing_path)
        # Work items are few and small; spreading them lets every worker validate.
        | 'SpreadWork' >> beam.Reshuffle()
    )
    # (start, end) of a line of the listing file (one work item)
    validated = items | 'ValidateImages' >> ValidateImages(
        listing_path,
        label_ids,
        config.max_pixels,
        config.threads,
        total=listing.num_inputs,
        store=store,
        reencode_dir=output_dir if config.format == features.PATHS else None,
        levels=level_ids,
        allow_missing_levels=config.allow_missing_levels,
    )
    chunks = validated.valid
    # block of ImageMeta
    if config.dedup:
        unique = chunks | 'DropDuplicates' >> DropDuplicates(
            listing.base, store, bucket_bits_for(listing.num_inputs)
        )
        chunks, duplicates = unique.unique, unique.duplicates
    else:
        duplicates = pipeline | 'NoDuplicates' >> beam.Create([])
    assigned = chunks | 'AssignShards' >> AssignShards(
        config.seed,
        config.splits,
        config.num_shards,
        config.shard_size_mb * 1e6,
        bucket_bits_for(listing.largest_group),
        store,
    )
    # ((split, shard), block of ImageMeta)
    in_pipeline = config.analyze and not handover_dir  # else the helper process writes it
    transform_dir = transform_dir or temp_dir
    analysis, transformed, handed_over = _analysis_steps(
        pipeline,
        config,
        listing,
        assigned['placed'],
        store,
        output_dir,
        transform_dir,
        handover_dir,
    )
    shards = assigned['placed'] | 'WriteShards' >> WriteShards(
        assigned['plan'],
        listing.base,
        output_dir,
        temp_dir,
        config.format,
        config.seed,
        listing.labels,
        config.threads,
        store,
        listing.label_levels,
        # Locally, the tf.Transform helper process gets its sample before the shards are
        # written, and transforms while they are.
        after=handed_over,
    )
    # dataset.json entry of each shard
    context = {
        'output': output_dir,
        'input': config.input,
        'format': config.format,
        'seed': config.seed,
        'labels': listing.labels,
        'inputs': listing.num_inputs,
        'skipped': dict(listing.skipped),
        'dedup': config.dedup,
        'label_levels': listing.label_levels,
        'allow_missing_levels': config.allow_missing_levels,
        'transform_staging': finalize.join(transform_dir, finalize.TRANSFORM_STAGING),
        'analysis_in_pipeline': in_pipeline,
        # With the analysis outside the pipeline, the launcher completes the build after it.
        'complete': not config.analyze or in_pipeline,
    }
    return pipeline | 'Finalize' >> finalize.Finalize(
        shards, validated.rejected, duplicates, assigned['plan'], context, (analysis, transformed)
    )


def analysis_in_pipeline(pipeline, config):
    """Whether the tf.Transform output is written by steps of the build's pipeline: on
    distributed runners, or when asked; on the local runner, the launcher writes it afterwards
    (pipelines/transform_output.py says why)."""
    return config.analyze and (
        config.analysis_in_pipeline or not runner.shuffles_in_memory(pipeline)
    )


def _analysis_steps(pipeline, config, listing, placed, store, output_dir, transform_dir, handover):
    """(PCollection of dataset.json's `analysis`, PCollection that completes once the TFT
    output is staged in the pipeline, PCollection that completes once the sample is handed over
    to the helper process, or None); empty without the analysis."""
    if not config.analyze:
        return (pipeline | 'NoAnalysis' >> beam.Create([]),) * 2 + (None,)
    encoder = RecordEncoder(
        listing.base, output_dir, config.format, listing.labels, listing.label_levels
    )
    analyzed = placed | 'AnalyzeSplit' >> AnalyzeSplit(
        config, listing.labels, encoder, listing.base, store, handover
    )
    if handover:
        nothing = pipeline | 'TransformOutsidePipeline' >> beam.Create([])
        return analyzed['analysis'], nothing, analyzed['handed_over']
    transformed = analyzed['records'] | 'WriteTransformOutput' >> WriteTransformOutput(
        analyzed['analysis'],
        listing.labels,
        config.format,
        list(listing.label_levels),
        config.transform_image_size,
        finalize.join(transform_dir, finalize.TRANSFORM_STAGING),
        finalize.join(transform_dir, 'tft'),
    )
    return analyzed['analysis'], transformed, None


def _transform_work_dir(pipeline, config, output_dir, dry_run):
    """Where TFT writes its temporary files and its output before Finalize moves them.

    The build's temporary folder, but for a local run with an object-store output: TensorFlow
    writes the TFT files, and its file system reaches Cloud Storage itself (not an emulator, nor
    with the pipeline's credentials), so those go to a local folder, copied up by Finalize. A
    dry run traces the analysis (TFT saves its graph while the job is built) into a local
    folder too, removed afterwards: nothing runs that would read it.
    """
    local = inputs.is_uri(output_dir) and runner.shuffles_in_memory(pipeline)
    if config.analyze and (local or dry_run):
        return tempfile.mkdtemp(prefix='imageshards-transform-')
    return None


def _absolute(path):
    return path if inputs.is_uri(path) else os.path.abspath(path)


def _listable(spec):
    """The --input to list, with a folder of an object store (gs://b/data) as its `/**` glob.

    Object stores have no folders: `FileSystems.exists` is false for a prefix, so listing would
    call the folder missing. The glob lists the same objects below the same base, so ids, keys
    and labels are those of the folder.
    """
    if (
        not inputs.is_uri(spec)
        or inputs.is_manifest(spec)
        or any(char in spec for char in '*?[')
        or FileSystems.get_filesystem(spec).has_dirs()
    ):
        return spec
    try:
        is_object = FileSystems.exists(spec)
    except ValueError:  # a bucket without a path (gs://b) is no object
        is_object = False
    return spec if is_object else spec.rstrip('/') + '/**'


def _check_dataflow_paths(pipeline_options, config):
    """Refuses local paths on Dataflow, whose workers cannot reach this machine's disk."""
    for flag, path in (('--input', config.input), ('--output', config.output)):
        if not inputs.is_uri(path):
            raise ValueError(
                f'{flag} {path} is a local path, which Dataflow workers cannot read or write; '
                f'use gs:// paths (gsutil -m cp -r ... gs://BUCKET/...) or the DirectRunner'
            )
    if pipeline_options.view_as(GoogleCloudOptions).template_location:
        raise ValueError(
            '--template_location is not supported: the launcher lists the inputs before each '
            'run, so a template would replay one listing; run the build command instead'
        )


def run(argv=None, test_pipeline=None):
    """Runs a build; returns the dataset.json it wrote, as a dict.

    With `--dry_run` (DataflowRunner), builds the job without submitting it, leaves the output
    as it was and returns None.
    """
    started = time.monotonic()
    config, beam_args = options.parse_build_args(argv)
    for flag, path in (('--input', config.input), ('--output', config.output)):
        if inputs.redact(path) != path:  # before any message could repeat the secret
            raise ValueError(
                f'{flag} {inputs.redact(path)} carries credentials; give them '
                f'to the storage client (gcloud auth, a service account) instead'
            )
    # Made first: a Pipeline checks its options and hands them to FileSystems, so that the
    # launcher's own listing and output checks reach gs:// with the pipeline's credentials.
    pipeline = test_pipeline or runner.make_pipeline(beam_args)
    on_dataflow = runner.is_dataflow(pipeline.options.view_as(StandardOptions).runner)
    if on_dataflow:
        _check_dataflow_paths(pipeline.options, config)
    # Only Dataflow honours --dry_run; the local runner would run the build anyway.
    dry_run = on_dataflow and pipeline.options.view_as(TestOptions).dry_run
    output_dir = _absolute(config.output).rstrip('/')
    scan = listing_lib.scan_inputs(
        _listable(config.input), config.allow_roots, config.follow_symlinks, config.label_levels
    )
    if not inputs.is_manifest(config.input) and output_dir.startswith(scan.base + '/'):
        raise ValueError(
            f'--output {output_dir} is inside --input {scan.base}: a later build '
            f'would list its own output as images; choose another directory'
        )
    # A name of its own, so that a job that never ran removes its listing and nothing else.
    listing_path = finalize.join(
        output_dir, finalize.TEMP_DIR, f'listing-{uuid.uuid4().hex[:12]}.jsonl'
    )
    transform_dir = _transform_work_dir(pipeline, config, output_dir, dry_run)
    helper = None
    if config.analyze and not analysis_in_pipeline(pipeline, config) and not dry_run:
        # Started now: it imports TensorFlow while this process lists and the workers validate.
        root = transform_dir or finalize.join(output_dir, finalize.TEMP_DIR)
        helper = transform_output.Helper(
            tempfile.mkdtemp(prefix='imageshards-analysis-'),
            finalize.join(root, finalize.TRANSFORM_STAGING),
            finalize.join(root, 'tft'),
        )
    try:
        if test_pipeline is not None or runner.mode_given(beam_args):
            beam_args = None  # the pipeline or its mode is the caller's: keep it
        return _build(
            pipeline,
            config,
            scan,
            output_dir,
            listing_path,
            transform_dir,
            helper,
            started,
            beam_args,
        )
    finally:
        if helper:
            helper.stop()
            shutil.rmtree(helper.work_dir, ignore_errors=True)
        if transform_dir:
            shutil.rmtree(transform_dir, ignore_errors=True)


def _build(
    pipeline, config, scan, output_dir, listing_path, transform_dir, helper, started, beam_args
):
    """`run` from the listing on; returns dataset.json, or None for a dry run.

    `beam_args`: the pipeline options, where the local runner's mode is ours to choose.
    """
    on_dataflow = runner.is_dataflow(pipeline.options.view_as(StandardOptions).runner)
    dry_run = on_dataflow and pipeline.options.view_as(TestOptions).dry_run
    summary = _write_listing(scan, config, output_dir, listing_path, dry_run)
    if helper:
        transform_output.prepare(
            helper.work_dir,
            summary.labels,
            config.format,
            list(summary.label_levels),
            config.transform_image_size,
        )
    if helper:
        pipeline = _share_cores(pipeline, helper, summary.num_inputs, beam_args)
    if runner.shuffles_in_memory(pipeline) and not dry_run:
        _LOG.info('running on %s', runner.describe(pipeline))
    store = blocks.BlockStore()
    if runner.shuffles_in_memory(pipeline):
        # The local runner holds every shuffled element in this process: metadata goes to
        # files, and its shuffles move byte ranges of them (pipelines/blocks.py).
        store = blocks.BlockStore(finalize.join(output_dir, finalize.TEMP_DIR, 'blocks'))
    handover = helper.work_dir if helper else None
    build_pipeline(
        pipeline, config, summary, listing_path, output_dir, store, transform_dir, handover
    )
    watched = runner.shuffles_in_memory(pipeline) and not dry_run
    with progress.Watch({progress.VALIDATE: summary.num_inputs}, _UNITS, enabled=watched):
        result = _launch(pipeline, listing_path, on_dataflow, dry_run)
    if result is None:
        _LOG.info('--dry_run: built the job without running it; %s is as it was', output_dir)
        return None
    dataset = finalize.load_dataset_json(output_dir)
    if helper:  # the local runner's last step: the tf.Transform output, then _SUCCESS
        helper.finish()
        root = transform_dir or finalize.join(output_dir, finalize.TEMP_DIR)
        finalize.publish_transform(
            output_dir, finalize.join(root, finalize.TRANSFORM_STAGING), dataset['analysis']
        )
        finalize.complete(output_dir)
    _report(result, dataset, output_dir, time.monotonic() - started)
    return dataset


# Below this many inputs, a 2-core machine builds faster in one process, leaving the other core to
# the tf.Transform helper, than with a worker per core (bench/RESULTS.md: 20,000 photos 9.7 s
# against 12.9 s; 200,000 small images 22 s against 17.5 s).
IN_MEMORY_BELOW = 50_000


def _share_cores(pipeline, helper, num_inputs, beam_args):
    """The local pipeline to run beside the tf.Transform helper on a machine of two cores or
    fewer: where the mode is ours to choose (`beam_args` given), one process for a small build;
    with worker processes, the helper at low priority, so that it takes the time they leave."""
    if (os.cpu_count() or 1) > 2:
        return pipeline
    if beam_args is not None and num_inputs < IN_MEMORY_BELOW:
        return runner.make_pipeline([*beam_args, '--direct_running_mode=in_memory'])
    if pipeline.options.view_as(DirectOptions).direct_running_mode == 'multi_processing':
        helper.lower_priority()
    return pipeline


def _write_listing(scan, config, output_dir, listing_path, dry_run):
    """Streams the listing into `listing_path`; returns its ListingSummary.

    The inputs go to a local temporary file first: only once listing has succeeded (inputs
    found, manifest readable) may the output be prepared, which with --overwrite deletes the
    earlier build.
    """
    with tempfile.TemporaryDirectory(prefix='imageshards-listing-') as scratch:
        local = os.path.join(scratch, 'listing.jsonl')
        summary = listing_lib.write_listing_file(scan, local, config.chunk_size, config.input)
        _LOG.info(
            'listed %s with %s (skipped %s%s)',
            console.plural(summary.num_inputs, 'input'),
            console.plural(len(summary.labels), 'label'),
            console.plural(summary.num_skipped, 'file'),
            f': {summary.skipped}' if summary.num_skipped else '',
        )
        for level, names in summary.label_levels.items():
            _LOG.info('label level %s: %s', level, console.plural(len(names), 'name'))
        if summary.manifest_splits:
            _LOG.info(
                "the manifest's split column places %s itself (%s), whatever --splits says; "
                '--splits divides the rest',
                console.plural(sum(summary.manifest_splits.values()), 'input'),
                ', '.join(f'{split} {n:,}' for split, n in summary.manifest_splits.items()),
            )
        if len(summary.labels) == 1:
            _LOG.warning(
                'every input has the label %r: a classifier cannot learn from one class, and '
                'the trainer refuses such a build; give images of two or more labels',
                summary.labels[0],
            )
        finalize.prepare_output(output_dir, config.overwrite, dry_run=dry_run)
        listing_lib.copy_listing(local, listing_path)
    return summary


def _launch(pipeline, listing_path, remote, dry_run):
    """Runs the pipeline to its end; returns its result, or None when no job ran (dry run).

    A remote job that was never submitted (a dry run, a refused submission) takes its listing
    file away again: left there, it would make the output non-empty, and a rerun need
    --overwrite. (A local run that fails is a build that started; --overwrite cleans it up.)
    """
    try:
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
    for path in (listing_path, listing_lib.index_path(listing_path)):
        finalize.delete_if_present(path)


def _report(result, dataset, output_dir, seconds):
    counters = {}
    try:
        for counter in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))[
            'counters'
        ]:
            value = counter.committed if counter.committed is not None else counter.attempted
            counters[counter.key.metric.name] = counters.get(counter.key.metric.name, 0) + value
    except Exception:  # pylint: disable=broad-except
        _LOG.warning('the runner reported no metrics; dataset.json has the counts')
    lines = [f'imageshards build: {output_dir} in {console.duration(seconds)}']
    lines += [f'  counter {name:<28} {value:>12,}' for name, value in sorted(counters.items())]
    counts = dataset['counts']
    lines.append(
        '  inputs {inputs:,} = written {written:,} + rejected {rejected:,} + duplicates '
        '{duplicates:,}; skipped {skipped:,} non-image files'.format(**counts)
    )
    for split, info in dataset['splits'].items():
        records, shards = info['num_records'], info['num_shards']
        lines.append(
            f'  {split}: {console.plural(records, "record")} in {console.plural(shards, "shard")}'
        )
    if counts['rejected']:
        lines.append(
            f'  rejected by reason: {counts["rejected_by_reason"]} (see {finalize.REJECTED_JSONL})'
        )
    print('\n'.join(lines))
    strays = finalize.stray_shards(output_dir, dataset)
    if strays:
        _LOG.warning(
            "%d files in %s look like shards but are not in this build's "
            'dataset.json (left alone): %s',
            len(strays),
            output_dir,
            strays[:10],
        )


_UNITS = {progress.VALIDATE: 'images', progress.WRITE: 'records'}


def main(argv=None):
    """`imageshards build` in this process (see `command` for the one a person runs)."""
    argv = sys.argv[1:] if argv is None else argv
    console.configure_logging(verbose='--verbose' in argv, filters=[runner.worker_log_filter()])
    try:
        run(argv)
    except (ValueError, FileExistsError, FileNotFoundError) as e:
        _LOG.error('%s', e)
        return 2
    except KeyboardInterrupt:
        print(interrupted_message(argv), file=sys.stderr)
        return supervise.INTERRUPTED_EXIT_CODE
    return 0


def command(argv):
    """The build as a command: in a child process that Ctrl-C ends cleanly, with its workers."""
    if os.environ.get(supervise.ENV):
        return main(argv)
    return supervise.run_supervised('pipelines.build', argv, lambda: interrupted_message(argv))


def interrupted_message(argv):
    """The line Ctrl-C leaves: what is left where, and how to go on."""
    try:
        output = _absolute(options.build_arg_parser().parse_known_args(argv)[0].output or '')
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
        f'{finalize.join(output, finalize.TEMP_DIR)} (no {finalize.SUCCESS}): rerun the same '
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
