"""Listing a build's inputs, as untrusted input: a folder tree, a glob or a CSV/JSONL manifest
into a listing file of InputEntry lines, read back in work items. Imports the foundation and
the base (pipelines/core/) only.

    entries.py      what listing produces (InputEntry, ListingCounts) and the rules of paths
    listing.py      the listing of a tree, a glob or a manifest, its file and its work items
    manifests.py    a CSV or JSONL manifest read in row order, labels and levels checked
    vertex.py       Vertex AI's image classification import files, read as they are
    confinement.py  where a manifest row's path may lead (its folder, --allow-root)
"""
