"""Writing the output: each record encoded from its metadata and bytes read again and checked,
one TFRecord file per shard with the analysis's measure of its sample (sample.py), the output
folder prepared before and finished last (dataset.json, _SUCCESS). Imports the foundation, the
base (pipelines/core/) and the stages before it (validation/, assignment/)."""
