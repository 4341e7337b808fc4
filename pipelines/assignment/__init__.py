"""Assigning every valid image to a split, a shard and a place in it: a seeded, stratified,
balanced shuffle over image metadata packed in blocks (pipelines/core/blocks.py), never pixels.
Imports the foundation, the base (pipelines/core/) and the stages before it (inputs/,
validation/).

    assign.py      AssignShards: the salted hashes that rank and order images, and the steps
    plan.py        the shard plan: records of every class per split and shard, where ranks go
    splits.py      classes (or label sets, by iterative stratification) divided among splits
    grouping.py    PlaceGroups: the images of a group, of a near-duplicate cluster, of an
                   earlier build, each given one split before AssignShards; CountLeaks
    placement.py   whole groups placed among splits, rare labels first
    neighbours.py  FindNearDuplicates: the pairs of close perceptual hashes, by bands
    alignment.py   whether two images with close window hashes are copies: thumbnails aligned
    clusters.py    near-duplicate clusters: connected components, the huge ones capped
    previous.py    --splits-from: an earlier build's splits, read from its records
"""
