"""Near-duplicate clusters: the connected components of the pairs FindNearDuplicates found
(pipelines/assignment/neighbours.py), byte copies included, each named by its first image's id.

The pairs are joined closest first (Kruskal's order: distance, then ids), so that the pairs a
cluster lists are a minimum spanning forest of what was found, the same on every runner. A
cluster of more images than the cap (`--max-cluster-size`; by default 1% of the images, at least
16) is capped: blank or uniform images share one hash, and chains of small differences can join
thousands; kept whole, such a cluster would swallow a split. A capped cluster is reported in
near_duplicates.jsonl and counted, but its images are placed as if it did not exist (by their
groups, or one by one), so its leaks are counted too.
"""

import typing

import numpy as np

from pipelines.assignment.neighbours import edges_of

MIN_CAP = 16
CAP_SHARE = 0.01


def cap_for(num_images, max_cluster_size=0) -> int:
    """The most images a cluster may hold and be kept in one split."""
    return max_cluster_size or max(MIN_CAP, int(num_images * CAP_SHARE))


class Clusters(typing.NamedTuple):
    """The near-duplicate clusters of a build (only images in one are named)."""

    cluster_of: dict  # image id -> its cluster's id (the least id of its images)
    sizes: dict  # cluster id -> images
    capped: frozenset  # ids of clusters larger than `cap`, not kept in one split
    pairs: dict  # cluster id -> [(a, b, distance)]: the pairs that join it
    cap: int

    def kept(self, image_id) -> int:
        """The cluster an image's split follows, or -1 (none, or a capped one)."""
        cluster = self.cluster_of.get(image_id, -1)
        return -1 if cluster in self.capped else cluster


def make_clusters(packed_edges, num_images, max_cluster_size=0) -> Clusters:
    """The Clusters of FindNearDuplicates' output (`packed_edges`: its elements)."""
    edges = np.concatenate([edges_of(packed) for packed in packed_edges] or [edges_of(b'')])
    edges = edges[np.lexsort((edges['b'], edges['a'], edges['distance']))]
    parent, joined = {}, []
    for a, b, distance in edges.tolist():
        root_a, root_b = root(parent, a), root(parent, b)
        if root_a != root_b:
            parent[max(root_a, root_b)] = min(root_a, root_b)
            joined.append((min(a, b), max(a, b), distance))
    cluster_of = {image: root(parent, image) for image in parent}
    sizes, pairs = {}, {}
    for cluster in cluster_of.values():
        sizes[cluster] = sizes.get(cluster, 0) + 1
    for a, b, distance in joined:
        pairs.setdefault(cluster_of[a], []).append((a, b, distance))
    cap = cap_for(num_images, max_cluster_size)
    capped = frozenset(cluster for cluster, size in sizes.items() if size > cap)
    return Clusters(cluster_of, sizes, capped, pairs, cap)


def root(parent, node):
    """The root of `node` in a union-find forest `parent` (dict), halving the path; a node
    not seen yet is its own. Joined by making the larger root point at the smaller, the root
    is the least node of a component."""
    parent.setdefault(node, node)
    while parent[node] != node:
        parent[node] = parent[parent[node]]
        node = parent[node]
    return node
