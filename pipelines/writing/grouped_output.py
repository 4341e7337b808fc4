"""What Finalize writes of a build with groups, --near-duplicates or --splits-from:
near_duplicates.jsonl, and dataset.json's `grouping` with each split's grouping keys
(imageshards/grouping_facts.py).

near_duplicates.jsonl has a line per cluster, in the order of their ids (the least image id of
each): {"cluster", "size", "capped", "images": [{"id", "path"}], "pairs": [[id, id, bits]]},
the pairs those that join the cluster, closest first (a spanning forest of the pairs found:
pipelines/assignment/clusters.py), each pair's hashes `bits` apart.
"""

import collections

import numpy as np

from imageshards import file_names
from imageshards import grouping_facts
from imageshards.dataset_json import GROUPING
from pipelines.core.sources import source_path


def near_duplicate_rows(clusters, members, input_base) -> list:
    """The lines of near_duplicates.jsonl, as dicts.

    Args:
        clusters: the build's Clusters.
        members: PlaceGroups' MEMBERS output: lists of (cluster, image id, key).
        input_base: what keys are relative to.
    """
    images = collections.defaultdict(list)
    for found in members:
        for cluster, image_id, key in found:
            images[cluster].append((image_id, key))
    rows = []
    for cluster in sorted(images):
        rows.append(
            {
                'cluster': cluster,
                'size': clusters.sizes[cluster],
                'capped': cluster in clusters.capped,
                'images': [
                    {'id': image_id, **file_names.to_json(source_path(input_base, key))}
                    for image_id, key in sorted(images[cluster])
                ],
                'pairs': [list(pair) for pair in clusters.pairs.get(cluster, ())],
            }
        )
    return rows


def previous_counts(previous, counts) -> dict:
    """`grouping.previous`: the earlier build, and its images kept, new, removed and moved.

    Args:
        previous: the PreviousSplits of --splits-from.
        counts: PlaceGroups' PREVIOUS output: (kept, new, moved, packed earlier ids kept).
    """
    kept = new = moved = 0
    seen = np.zeros(max(previous.inputs, 1), dtype=bool)
    for block_kept, block_new, block_moved, ids in counts:
        kept, new, moved = kept + block_kept, new + block_new, moved + block_moved
        seen[np.frombuffer(ids, dtype=np.int64)] = True
    removed = previous.records - int(np.count_nonzero(seen[previous.ids]))
    return {'build': previous.build, 'kept': kept, 'new': new, 'removed': removed, 'moved': moved}


def add_grouping(summary, finishing, tallies, clusters, rows, previous=None):
    """Adds `grouping` to dataset.json's content `summary`, and each split's grouping keys.

    Args:
        finishing: the build's FinishSettings.
        tallies: CountLeaks' [((kind, split, leaked), count)].
        clusters: the build's Clusters.
        rows: near_duplicates.jsonl's lines (near_duplicate_rows).
        previous: `grouping.previous` (previous_counts), with --splits-from.
    """
    settings = finishing.grouping
    counts = dict(tallies)
    images = sum(row['size'] for row in rows)
    found = grouping_facts.counted(counts, settings.groups, settings.near_duplicates, images)
    grouping = {}
    if settings.groups:
        by, pattern = list(finishing.grouped_by), finishing.group_pattern
        grouping['groups'] = {'by': by, 'pattern': pattern, **found['groups']}
    if settings.near_duplicates:
        grouping['near_duplicates'] = {
            'hash': grouping_facts.HASH,
            'distance': settings.distance,
            'max_cluster_size': clusters.cap,
            **found['near_duplicates'],
        }
    if previous is not None:
        grouping['previous'] = previous
    fractions = finishing.fractions and dict(finishing.fractions)
    grouping['stratification'] = grouping_facts.stratification_of(summary['splits'], fractions)
    summary[GROUPING] = grouping
    entries = grouping_facts.split_entries(
        counts, summary['splits'], settings.groups, settings.near_duplicates
    )
    for split, entry in entries.items():
        info = summary['splits'][split]
        shards = info.pop('shards')
        info.update(entry, shards=shards)  # the shards last, as in every split
