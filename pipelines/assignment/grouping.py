"""PlaceGroups: the images that belong together get one split before AssignShards places them.

What belongs together: the images of a group (a manifest's `group` column, --group-pattern),
the images of a near-duplicate cluster (--near-duplicates: pipelines/assignment/neighbours.py
and clusters.py), and, joined by the images they share, several of those: a unit. Where
an image comes from an earlier build (--splits-from: pipelines/assignment/previous.py), it keeps
that build's split, and the rest of its unit follows the split most of the unit's kept images
(and manifest rows) are in. The units are placed among the splits as a whole
(pipelines/assignment/placement.py); every image of a unit then carries its split as a
manifest's split column would, and AssignShards divides the images of no unit among the splits
to fill what the units leave of each class's share (plan.make_plan's `fill`).

    blocks -> [FindNearDuplicates -> clusters] -> SummarizeUnits -> PlaceUnits -> ApplySplits
           -> RankGroups.keyed_blocks, as AssignShards(keyed=True) takes them

After AssignShards, CountLeaks counts the groups and clusters of each split, and those with
images in more than one (a capped cluster, an earlier build's leak, a manifest's own splits).
"""

import collections
import typing

import apache_beam as beam
import numpy as np

from imageshards.grouping_facts import CAPPED
from imageshards.grouping_facts import CLUSTER
from imageshards.grouping_facts import GROUP
from pipelines.assignment import clusters as cluster_lib
from pipelines.assignment.neighbours import FindNearDuplicates
from pipelines.assignment.placement import Unit
from pipelines.assignment.placement import place_units
from pipelines.core import blocks
from pipelines.core.groups import SplitConflict

MEMBERS, LINKS, PREVIOUS = 'members', 'links', 'previous'


def node_of(meta, clusters):
    """What an image's split follows: ('g', its group), else ('c', its kept cluster), else None
    (it is placed alone)."""
    if meta.group:
        return ('g', meta.group)
    cluster = clusters.kept(meta.id)
    return ('c', cluster) if cluster >= 0 else None


def merge_summaries(summaries):
    """[images, {label: images}, {manifest split: images}, {earlier split: images}] of a node,
    summed (a CombinePerKey function: associative, its output like its input)."""
    total = [0, collections.Counter(), collections.Counter(), collections.Counter()]
    for images, labels, manifest, previous in summaries:
        total[0] += images
        total[1].update(labels)
        total[2].update(manifest)
        total[3].update(previous)
    return total


class _SummarizeNodes(beam.DoFn):
    """Block ref -> (node, summary) per group or kept cluster in it (merge_summaries' form);
    LINKS: (group node, cluster node) of an image in both. Where `multi_label`, an image's
    label is a set of ids, each counted."""

    def __init__(self, store, multi_label):
        self._store, self._multi_label = store, multi_label

    def process(self, ref, clusters, previous):
        summaries, links = {}, set()
        for meta in blocks.unpack(self._store.get(ref)):
            node = node_of(meta, clusters)
            if node is None:
                continue
            if meta.group and clusters.kept(meta.id) >= 0:
                links.add((node, ('c', clusters.kept(meta.id))))
            found = previous.find(meta) if previous else None
            summary = summaries.setdefault(node, [0, {}, {}, {}])
            summary[0] += 1
            for label in meta.label if self._multi_label else (meta.label,):
                summary[1][label] = summary[1].get(label, 0) + 1
            if meta.split:
                summary[2][meta.split] = summary[2].get(meta.split, 0) + 1
            if found:
                summary[3][found[0]] = summary[3].get(found[0], 0) + 1
        yield from summaries.items()
        for link in sorted(links):
            yield beam.pvalue.TaggedOutput(LINKS, link)


def place_nodes(summaries, links, fractions, seed=0) -> dict:
    """{node: split} of every group and kept cluster: each unit (the nodes `links` join) placed
    whole (placement.place_units), in the split most of its manifest rows and earlier images
    are in where it has any.

    Raises:
        SplitConflict: a group whose manifest rows name two splits.
    """
    parent = {}
    for a, b in links:
        root_a, root_b = cluster_lib.root(parent, a), cluster_lib.root(parent, b)
        if root_a != root_b:
            parent[max(root_a, root_b)] = min(root_a, root_b)
    units = collections.defaultdict(list)
    for node, summary in summaries:
        manifest = summary[2]
        if node[0] == 'g' and len(manifest) > 1:
            named = ', '.join(f'{split} ({n})' for split, n in sorted(manifest.items()))
            raise SplitConflict(
                f'group {node[1]!r}: its manifest rows name the splits {named}; the images of a '
                f'group share one split: give its rows one split, or none'
            )
        units[cluster_lib.root(parent, node)].append((node, summary))
    order = {name: i for i, (name, _) in enumerate(fractions)}
    made = []
    for key, members in units.items():
        images, labels, manifest, previous = merge_summaries(s for _, s in members)
        fixed = previous + manifest
        split = min(fixed, key=lambda s: (-fixed[s], order.get(s, len(order)), s)) if fixed else ''
        made.append(Unit(_unit_key(key), images, dict(labels), split))
    placed = place_units(made, fractions, seed)
    return {node: placed[_unit_key(key)] for key, members in units.items() for node, _ in members}


def _unit_key(node):
    kind, name = node
    return f'{kind}:{name:012d}' if kind == 'c' else f'{kind}:{name}'


class _ApplySplits(beam.DoFn):
    """Block ref -> RankGroups.keyed_blocks of its images, each with the split it keeps (an
    earlier build's), or its manifest's, or its unit's, or '' (placed by AssignShards);
    MEMBERS: (cluster, id, key) of its images in a cluster; PREVIOUS: (kept, new, moved, packed
    ids of the earlier images kept)."""

    def __init__(self, store, rank_groups):
        self._store, self._rank_groups = store, rank_groups

    def process(self, ref, clusters, placement, previous):
        placed, members, kept, moved = [], [], [], 0
        for meta in blocks.unpack(self._store.get(ref)):
            split = meta.split
            found = previous.find(meta) if previous else None
            if found:
                previous.check(meta, found[0])
                split = split or found[0]
                kept.append(found[1])
                moved += split != found[0]
            if not split:
                node = node_of(meta, clusters)
                split = placement[node] if node is not None else ''
            if meta.id in clusters.cluster_of:
                members.append((clusters.cluster_of[meta.id], meta.id, meta.key))
            placed.append(meta._replace(split=split) if split != meta.split else meta)
        yield from self._rank_groups.keyed_blocks(placed, self._store)
        if members:
            yield beam.pvalue.TaggedOutput(MEMBERS, members)
        if previous:
            ids = np.array(kept, dtype=np.int64).tobytes()
            counts = (len(kept), len(placed) - len(kept), moved, ids)
            yield beam.pvalue.TaggedOutput(PREVIOUS, counts)


def _clusters(unused, edges, num_images, max_cluster_size):
    return cluster_lib.make_clusters(edges, num_images, max_cluster_size)


class Grouped(typing.NamedTuple):
    """PlaceGroups' outputs."""

    keyed: beam.PCollection  # RankGroups.keyed_blocks, every image with its split or ''
    clusters: beam.PCollection  # one Clusters (none without --near-duplicates)
    members: beam.PCollection  # [(cluster, id, key)] of images in clusters, a list per block
    previous: beam.PCollection  # (kept, new, moved, packed kept earlier ids) per block
    previous_splits: beam.PCollection  # the PreviousSplits (one), or empty


class PlaceGroups(beam.PTransform):
    """Block refs of ImageMeta -> Grouped.

    Args:
        settings: the GroupingSettings (pipelines/core/settings.py).
        rank_groups: the RankGroups that key the output for AssignShards.
        store: the BlockStore that keeps the blocks.
        num_images: the inputs listed (they key the near-duplicate search, and set the
            automatic cluster cap: pipelines/assignment/clusters.py).
        previous: a PCollection of one PreviousSplits (--splits-from), or None.
    """

    def __init__(self, settings, rank_groups, store, num_images, previous=None):
        super().__init__()
        self._settings = settings
        self._rank_groups = rank_groups
        self._store = store
        self._num_images = num_images
        self._previous = previous

    def expand(self, refs):
        settings, root = self._settings, refs.pipeline
        edges = root | 'NoNearDuplicates' >> beam.Create([])
        if settings.near_duplicates:
            edges = refs | 'FindNearDuplicates' >> FindNearDuplicates(
                self._store, settings.distance, self._num_images
            )
        clusters = (
            root
            | 'Once' >> beam.Create([None])
            | 'Clusters'
            >> beam.Map(
                _clusters,
                beam.pvalue.AsList(edges),
                self._num_images,
                settings.max_cluster_size,
            )
        )
        sides = {'clusters': beam.pvalue.AsSingleton(clusters), 'previous': self._previous_side()}
        summarized = refs | 'SummarizeUnits' >> beam.ParDo(
            _SummarizeNodes(self._store, self._rank_groups.multi_label), **sides
        ).with_outputs(LINKS, main='summaries')
        # (node, [images, labels, manifest splits, earlier splits])
        placement = (
            root
            | 'PlaceOnce' >> beam.Create([None])
            | 'PlaceUnits'
            >> beam.Map(
                lambda _, nodes, links: place_nodes(
                    nodes, links, settings.fractions, settings.seed
                ),
                beam.pvalue.AsList(
                    summarized.summaries | 'SumUnits' >> beam.CombinePerKey(merge_summaries)
                ),
                beam.pvalue.AsList(summarized[LINKS]),
            )
        )
        applied = refs | 'ApplySplits' >> beam.ParDo(
            _ApplySplits(self._store, self._rank_groups),
            placement=beam.pvalue.AsSingleton(placement),
            **sides,
        ).with_outputs(MEMBERS, PREVIOUS, main='keyed')
        previous = self._previous
        if previous is None:
            previous = root | 'NoPreviousSplits' >> beam.Create([])
        return Grouped(applied.keyed, clusters, applied[MEMBERS], applied[PREVIOUS], previous)

    def _previous_side(self):
        if self._previous is None:
            return None
        return beam.pvalue.AsSingleton(self._previous)


class _SplitsOfNames(beam.DoFn):
    """((split, shard), block ref) -> ((kind, name), split) of each group and cluster in it."""

    def __init__(self, store):
        self._store = store

    def process(self, placed, clusters):
        (split, _), ref = placed
        found = set()
        for meta in blocks.unpack(self._store.get(ref)):
            if meta.group:
                found.add((GROUP, meta.group))
            cluster = clusters.cluster_of.get(meta.id)
            if cluster is not None:
                found.add((CAPPED if cluster in clusters.capped else CLUSTER, cluster))
        for name in sorted(found, key=repr):
            yield name, split


def _tally(named):
    """((kind, name), splits) -> (kind, split, leaked) per split it is in, and (kind, '', leaked)
    (imageshards/grouping_facts.py's tallies)."""
    (kind, _), splits = named
    splits = set(splits)
    for split in [*sorted(splits), '']:
        yield kind, split, len(splits) > 1


class CountLeaks(beam.PTransform):
    """AssignShards' ((split, shard), block ref) -> [((kind, split, leaked), count)]: how many
    groups and clusters (kind: GROUP, CLUSTER, CAPPED) each split holds (split '': all), and
    how many of them have images in another split too."""

    def __init__(self, store, clusters):
        super().__init__()
        self._store, self._clusters = store, clusters

    def expand(self, placed):
        return (
            placed
            | 'SplitsOfNames'
            >> beam.ParDo(
                _SplitsOfNames(self._store), clusters=beam.pvalue.AsSingleton(self._clusters)
            )
            | 'SplitsOfEachName' >> beam.GroupByKey()
            | 'Tally' >> beam.FlatMap(_tally)
            | 'CountTallies' >> beam.combiners.Count.PerElement()
        )
