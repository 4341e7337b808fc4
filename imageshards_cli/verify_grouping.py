"""What `imageshards verify` checks of a build with groups, --near-duplicates or --splits-from:
dataset.json's `grouping` and each split's grouping keys (imageshards/grouping_facts.py),
recomputed from the records (each one's image/group, image/id and split) and
near_duplicates.jsonl (each cluster's images and the pairs that join it)."""

import collections
import json

from imageshards import grouping_facts
from imageshards import layout
from imageshards import storage
from imageshards.dataset_json import GROUPING


class GroupingCheck:
    """Takes each record's group and cluster as verify reads it; `finish` says what disagrees.

    Args:
        output_dir: the build.
        dataset: its dataset.json.
        problems: verify's problems (`add(where, message)`).
    """

    def __init__(self, output_dir, dataset, problems):
        self._dataset = dataset
        self._problems = problems
        self._where = storage.join(output_dir, layout.DATASET_JSON)
        self.active = GROUPING in dataset
        self._splits_of = collections.defaultdict(set)  # (kind, name) -> splits of its images
        self._cluster_of = {}  # image id -> (kind, cluster)
        self._images = 0
        grouping = dataset.get(GROUPING) or {}
        if 'near_duplicates' in grouping:
            self._read_clusters(storage.join(output_dir, layout.NEAR_DUPLICATES_JSONL))

    def _read_clusters(self, path):
        """Learns the clusters of near_duplicates.jsonl, checking each line's shape."""
        if not storage.exists(path):
            self._problems.add(path, 'missing, but the build found near-duplicates')
            return
        distance = self._dataset[GROUPING]['near_duplicates']['distance']
        for number, line in enumerate(storage.read(path).splitlines(), 1):
            try:
                row = json.loads(line)
                ids = [image['id'] for image in row['images']]
                kind = grouping_facts.CAPPED if row['capped'] else grouping_facts.CLUSTER
                pairs = [tuple(pair) for pair in row['pairs']]
            except (ValueError, KeyError, TypeError) as e:
                self._problems.add(path, f'line {number} is not a cluster: {e}')
                continue
            problem = _cluster_problem(row, ids, pairs, distance)
            if problem:
                self._problems.add(path, f'line {number} (cluster {row.get("cluster")}): {problem}')
            self._images += len(ids)
            for image_id in ids:
                self._cluster_of[image_id] = (kind, row['cluster'])

    def note(self, split, checked):
        """Takes one record's group and cluster (a verify_records.Checked)."""
        if checked.group:
            self._splits_of[(grouping_facts.GROUP, checked.group)].add(split)
        cluster = self._cluster_of.get(checked.record_id)
        if cluster is not None:
            self._splits_of[cluster].add(split)

    def finish(self):
        """Adds a problem for each grouping count of dataset.json the records do not give."""
        if not self.active:
            return
        counts = grouping_facts.tallies(self._splits_of)
        for message in grouping_facts.problems(self._dataset, counts, self._images):
            self._problems.add(self._where, message)
        stated = self._dataset[GROUPING].get('stratification', {})
        recomputed = grouping_facts.stratification_of(self._dataset['splits'])
        for key, value in recomputed.items():
            if stated.get(key) != value:
                self._problems.add(
                    self._where,
                    f'grouping.stratification.{key} is {stated.get(key)}, but the splits give '
                    f'{value}',
                )


def _cluster_problem(row, ids, pairs, distance):
    """What is wrong with one line of near_duplicates.jsonl ('' if nothing)."""
    if row.get('size') != len(ids) or len(set(ids)) != len(ids) or len(ids) < 2:
        return f'size {row.get("size")} but {len(ids)} distinct images'
    if row['cluster'] != min(ids):
        return f'named {row["cluster"]}, not by its least image id {min(ids)}'
    members = set(ids)
    if len(pairs) != len(ids) - 1:
        return f'{len(pairs)} pairs cannot join its {len(ids)} images'
    parent = {image_id: image_id for image_id in ids}
    for a, b, bits in pairs:
        if a not in members or b not in members or not 0 <= bits <= distance:
            return f'pair {[a, b, bits]} is not two of its images within {distance} bits'
        parent[_root(parent, a)] = _root(parent, b)
    if len({_root(parent, image_id) for image_id in ids}) != 1:
        return 'its pairs do not join all its images'
    return ''


def _root(parent, node):
    while parent[node] != node:
        node = parent[node]
    return node
