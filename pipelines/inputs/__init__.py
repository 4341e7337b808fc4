"""Listing a build's inputs: a folder tree, a glob or a CSV/JSONL manifest, as untrusted input,
into a listing file of InputEntry lines read back in work items (entries.py holds the types and
the path rules every stage shares). Imports only the foundation (imageshards/)."""
