"""Assigning every valid image to a split, a shard and a place in it: a seeded, stratified,
balanced shuffle over image metadata packed in blocks (pipelines/core/blocks.py), never pixels.
Imports the foundation and the base (pipelines/core/) only."""
