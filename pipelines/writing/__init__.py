"""Writing the output: each record encoded from its metadata and bytes read again and checked,
one TFRecord file per shard, the output folder prepared before and finished last (dataset.json,
_SUCCESS). Imports the foundation and the stages before it (inputs/, validation/, assignment/,
analysis/)."""
