"""The build's pipeline: its steps, in order, each handed what it needs of the BuildContext.

    ReadListing -> [JoinAnnotations] -> ValidateImages -> [DropDuplicates] -> [PlaceGroups]
        -> AssignShards -> WriteShards -> Finalize
        [WriteShards' summaries of the analysed split -> AnalyzeShards -> Finalize,
         and WriteTransformOutput (Dataflow, --analysis-in-pipeline; locally, the launcher
         writes it after the pipeline: pipelines/local/graph_process.py);
         with groups, --near-duplicates or --splits-from: ReadPreviousSplits -> PlaceGroups,
         and AssignShards' shards -> CountLeaks -> Finalize;
         a COCO file's annotations: JoinAnnotations' facts -> Finalize]

Between validation and writing, image metadata moves in packed blocks
(pipelines/core/blocks.py), passed as block refs: the blocks themselves on Dataflow, byte
ranges of files under OUT/.imageshards-tmp/blocks/ on the local runner.
"""

import typing

import apache_beam as beam

from pipelines.analysis.analyze import AnalyzeShards
from pipelines.analysis.tft_pipeline import WriteTransformOutput
from pipelines.assignment.assign import AssignShards
from pipelines.assignment.assign import RankGroups
from pipelines.assignment.assign import bucket_bits_for
from pipelines.assignment.grouping import CountLeaks
from pipelines.assignment.grouping import PlaceGroups
from pipelines.assignment.previous import ReadPreviousSplits
from pipelines.core import blocks
from pipelines.core.settings import TransformBy
from pipelines.inputs.coco_join import JoinAnnotations
from pipelines.inputs.listing import work_items
from pipelines.validation.dedup import DropDuplicates
from pipelines.validation.validate import ValidateImages
from pipelines.writing.finalize import Finalize
from pipelines.writing.write import WriteShards


def build_pipeline(pipeline, context, store=None, annotation_store=None) -> beam.PCollection:
    """Adds the build's steps to `pipeline`; returns the PCollection of dataset.json's counts.

    Args:
        context: the BuildContext.
        store: the BlockStore that keeps metadata between steps (default: inline).
        annotation_store: the one that keeps a COCO file's annotations until they are joined to
            their images (default: `store`).
    """
    store = store or blocks.BlockStore()
    config, listing = context.config, context.listing
    assignment = context.assignment
    rank_groups = RankGroups(
        assignment.seed, bucket_bits_for(listing.largest_group), context.kind.multi_label
    )
    # Without --dedup or groups, validation keys its blocks for AssignShards: one pass less.
    keyed_early = not (config.dedup or context.grouping)
    validated = _validated(
        pipeline, context, store, annotation_store or store, rank_groups if keyed_early else None
    )
    unique, duplicates = _deduplicated(pipeline, context, validated.blocks, store)
    grouped = _grouped(pipeline, context, unique, store, rank_groups)
    assigned = (grouped.keyed if grouped else unique) | 'AssignShards' >> AssignShards(
        assignment, rank_groups, store, keyed=keyed_early or bool(grouped), fill=bool(grouped)
    )
    # ((split, shard), block ref)
    written = assigned.placed | 'WriteShards' >> WriteShards(
        assigned.layout, context.writing, store
    )
    analysis, analyzed = _analysis(pipeline, context, written.summaries)
    return pipeline | 'Finalize' >> Finalize(
        context.finishing,
        shards=written.shards,
        rejections=validated.rejected,
        annotations=validated.annotations,
        duplicates=duplicates,
        shard_layout=assigned.layout,
        analysis=analysis,
        analyzed=analyzed,
        grouped=grouped and _grouped_outputs(grouped, assigned, store),
    )


def _grouped(pipeline, context, refs, store, rank_groups):
    """PlaceGroups' outputs, or None for a build without groups, near-duplicates or an earlier
    build's splits."""
    settings = context.grouping
    if settings is None:
        return None
    previous = None
    if settings.splits_from:
        previous = pipeline | 'ReadPreviousSplits' >> ReadPreviousSplits(settings.splits_from)
    return refs | 'PlaceGroups' >> PlaceGroups(
        settings, rank_groups, store, context.listing.num_inputs, previous
    )


def _grouped_outputs(grouped, assigned, store):
    """Finalize's `grouped`: what it writes of groups, clusters and an earlier build."""
    return {
        'tallies': assigned.placed | 'CountLeaks' >> CountLeaks(store, grouped.clusters),
        'clusters': grouped.clusters,
        'members': grouped.members,
        'previous': grouped.previous_splits,
        'previous_counts': grouped.previous,
    }


def _validated(pipeline, context, store, annotation_store, rank_groups):
    """The Validated outputs of every listed input, their blocks keyed by `rank_groups` if
    given, and what the pipeline read of their annotations where it joins them (a COCO file's,
    kept in `annotation_store`: pipelines/inputs/coco_join.py; else nothing)."""
    # (start, end) of a line of the listing file: one work item
    items = pipeline | 'ReadListing' >> ReadListing(context.listing_path)
    join = context.listing.annotation_join
    annotations = None
    if join:  # each work item with the blocks of its images' annotations
        items, annotations = items | 'JoinAnnotations' >> JoinAnnotations(
            context.listing_path, join, annotation_store
        )
    # Work items are few and small; spreading them lets every worker validate.
    validated = (
        items
        | 'SpreadWork' >> beam.Reshuffle()
        | 'ValidateImages'
        >> ValidateImages(
            context.listing_path, context.validation, store, rank_groups, join, annotation_store
        )
    )
    return _Validated(*validated, annotations)


class _Validated(typing.NamedTuple):
    blocks: beam.PCollection
    rejected: beam.PCollection
    annotations: beam.PCollection  # what JoinAnnotations read, for Finalize; None: no join


def _deduplicated(pipeline, context, refs, store):
    """(block refs of the images kept, duplicates.jsonl lines): all of them without --dedup."""
    if not context.config.dedup:
        return refs, pipeline | 'NoDuplicates' >> beam.Create([])
    listing = context.listing
    return refs | 'DropDuplicates' >> DropDuplicates(
        listing.base, store=store, bucket_bits=bucket_bits_for(listing.num_inputs)
    )


def _analysis(pipeline, context, summaries):
    """(PCollection of dataset.json's `analysis`, PCollection complete once the tf.Transform
    output is staged by the pipeline); empty without the analysis."""
    config = context.config
    if not config.analyze:
        return (pipeline | 'NoAnalysis' >> beam.Create([]),) * 2
    analysis = summaries | 'AnalyzeShards' >> AnalyzeShards(context.analysis)
    if context.transform_by is TransformBy.LAUNCHER:
        return analysis, pipeline | 'TransformOutsidePipeline' >> beam.Create([])
    transformed = pipeline | 'WriteTransformOutput' >> WriteTransformOutput(
        analysis, context.transform_settings
    )
    return analysis, transformed


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
