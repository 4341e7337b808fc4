"""Writing the output: each record encoded from its metadata and bytes read again and checked,
one TFRecord file per shard with the analysis's measure of its sample (sample.py), the output
folder prepared before (overwrite.py) and finished last (finalize.py: dataset.json, _SUCCESS);
in the launcher, the output a build owns for its whole life (output_guard.py: its lock, room on
its disk, one line for what stops the build) and what a finished build prints (summary.py).
Imports the foundation, the base (pipelines/core/) and the stages before it (validation/,
assignment/)."""
