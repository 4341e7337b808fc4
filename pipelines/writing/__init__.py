"""Writing the output, and owning it: records encoded from their metadata and bytes read again
and checked, one shard file per shard (the build's shard format), the output prepared before
and finished last; in the launcher, the output's lock and what a finished build prints.
Imports the foundation, the base (pipelines/core/) and the stages before it (validation/,
assignment/).

    write.py         WriteShards: one shard file (and its index file) per shard
    encode.py        from an ImageMeta to its record, its bytes read again and checked
    tally.py         what a shard holds, counted as it is written: its dataset.json entry
    sample.py        what the writer measures of each shard for the analysis
    finalize.py      Finalize: shards moved into place, dataset.json, _SUCCESS last
    grouped_output.py  near_duplicates.jsonl and dataset.json's `grouping`, for Finalize
    overwrite.py     the output before a build: refused when not empty, or cleared of one
    output_guard.py  the output a build owns: its lock, room on its disk, one line for what
                     stops the build
    summary.py       what a finished build prints
"""
