"""Assigning every valid image to a split, a shard and a place in it: a seeded, stratified,
balanced shuffle over image metadata packed in blocks (pipelines/core/blocks.py), never pixels.
Imports the foundation and the base (pipelines/core/) only.

    assign.py  AssignShards: the salted hashes that rank and order images, and the steps
    plan.py    the shard plan: records of every class per split and shard, and where ranks go
    splits.py  classes (or label sets, by iterative stratification) divided among splits
"""
