"""The build's pipeline: its steps, in order, each handed what it needs of the BuildContext.

    ReadListing -> ValidateImages -> [DropDuplicates] -> AssignShards -> WriteShards -> Finalize
                                                                      -> [AnalyzeSplit ->
        WriteTransformOutput (Dataflow, --analysis-in-pipeline) or the hand-over to the helper]

Between validation and writing, image metadata moves in packed blocks (pipelines/blocks.py),
passed as block refs: the blocks themselves on Dataflow, byte ranges of files under
OUT/.imageshards-tmp/blocks/ on the local runner.
"""

import apache_beam as beam

from imageshards import features
from pipelines import blocks
from pipelines.analyze import AnalyzeSplit
from pipelines.assign import AssignShards
from pipelines.assign import bucket_bits_for
from pipelines.dedup import DropDuplicates
from pipelines.encode import RecordEncoder
from pipelines.finalize import Finalize
from pipelines.listing import work_items
from pipelines.transform_output import WriteTransformOutput
from pipelines.validate import ValidateImages
from pipelines.write import WriteShards


def build_pipeline(pipeline, context, store=None):
    """Adds the build's steps to `pipeline`; returns the PCollection of dataset.json's counts.

    Args:
        context: the BuildContext.
        store: the BlockStore that keeps metadata between steps (default: inline).
    """
    store = store or blocks.BlockStore()
    config, listing = context.config, context.listing
    encoder = RecordEncoder(
        listing.base, context.output_dir, config.format, listing.labels, listing.label_levels
    )
    validated = _validated(pipeline, context, store)
    unique, duplicates = _deduplicated(pipeline, context, validated.blocks, store)
    assigned = unique | 'AssignShards' >> AssignShards(
        config.seed,
        config.splits,
        num_shards=config.num_shards,
        shard_bytes=config.shard_size_mb * 1e6,
        bucket_bits=bucket_bits_for(listing.largest_group),
        store=store,
    )
    # ((split, shard), block ref)
    analysis, analyzed, handed_over = _analysis(pipeline, context, assigned.placed, encoder, store)
    shards = assigned.placed | 'WriteShards' >> WriteShards(
        assigned.plan,
        encoder,
        seed=config.seed,
        temp_dir=context.temp_dir,
        store=store,
        io_threads=config.threads,
        # Locally, the tf.Transform helper process gets its sample before the shards are
        # written, and transforms while they are.
        after=handed_over,
    )
    # dataset.json entry of each shard
    return pipeline | 'Finalize' >> Finalize(
        context,
        shards=shards,
        rejections=validated.rejected,
        duplicates=duplicates,
        plan=assigned.plan,
        analysis=analysis,
        analyzed=analyzed,
    )


def _validated(pipeline, context, store):
    """The Validated outputs of every listed input."""
    config = context.config
    items = (
        pipeline
        | 'ReadListing' >> ReadListing(context.listing_path)
        # Work items are few and small; spreading them lets every worker validate.
        | 'SpreadWork' >> beam.Reshuffle()
    )
    # (start, end) of a line of the listing file: one work item
    return items | 'ValidateImages' >> ValidateImages(
        context.listing_path,
        context.label_ids,
        store,
        max_pixels=config.max_pixels,
        io_threads=config.threads,
        reencode_dir=context.output_dir if config.format == features.PATHS else None,
        levels=context.level_ids,
        allow_missing_levels=config.allow_missing_levels,
    )


def _deduplicated(pipeline, context, refs, store):
    """(block refs of the images kept, duplicates.jsonl lines): all of them without --dedup."""
    if not context.config.dedup:
        return refs, pipeline | 'NoDuplicates' >> beam.Create([])
    listing = context.listing
    return refs | 'DropDuplicates' >> DropDuplicates(
        listing.base, store=store, bucket_bits=bucket_bits_for(listing.num_inputs)
    )


def _analysis(pipeline, context, placed, encoder, store):
    """(PCollection of dataset.json's `analysis`, PCollection complete once the tf.Transform
    output is staged in the pipeline, PCollection complete once the sample is handed over to
    the helper process, or None); empty without the analysis."""
    config = context.config
    if not config.analyze:
        return (pipeline | 'NoAnalysis' >> beam.Create([]),) * 2 + (None,)
    analyzed = placed | 'AnalyzeSplit' >> AnalyzeSplit(
        config,
        encoder,
        store=store,
        handover_dir=context.handover_dir,
        records=context.analysis_in_pipeline,
    )
    if context.transform_by_launcher:
        nothing = pipeline | 'TransformOutsidePipeline' >> beam.Create([])
        return analyzed.analysis, nothing, analyzed.handed_over
    transformed = analyzed.records | 'WriteTransformOutput' >> WriteTransformOutput(
        analyzed.analysis,
        labels=context.listing.labels,
        fmt=config.format,
        levels=list(context.listing.label_levels),
        image_size=config.transform_image_size,
        staging_dir=context.transform_staging,
        temp_dir=context.tft_temp_dir,
    )
    return analyzed.analysis, transformed, None


class ReadListing(beam.PTransform):
    """A listing file -> the (start, end) byte range of each of its work items (lines)."""

    def __init__(self, listing_path):
        super().__init__()
        self._listing_path = listing_path

    def expand(self, pipeline):
        # The ranges are read by a worker, not embedded in the job: at 100 million images
        # they would be 400,000 pairs in a job graph that Dataflow limits to 10 MB.
        return (
            pipeline
            | 'ListingPath' >> beam.Create([self._listing_path])
            | 'WorkItems' >> beam.FlatMap(work_items)
        )
