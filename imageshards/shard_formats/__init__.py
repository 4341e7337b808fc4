"""Shard files behind one seam: how a build's records go into files and come back.

    shard_format.py  `ShardFormat`: what a format is to the rest of imageshards (write a
                     shard and its index, read records back, name the files); `WrittenShard`
    tfrecord.py      TFRecord shards and their DALI index files (`TFRecordFormat`), and the
                     TFRecord framing, written and checked without TensorFlow
    array_record.py  ArrayRecord shards for random access (Grain, TFDS's `as_data_source`)
    parquet.py       Parquet shards, one row per image (Hugging Face `datasets`, DuckDB)
    parquet_objects.py   a detection record's objects as one nested Parquet column, `objects`
    registry.py      the formats by name (`named`), a build's (`of_build`), shard file names

A build's format is dataset.json's `shard_format` (builds from before it: tfrecord). A new
format is a module with a ShardFormat subclass, named in registry.py's FORMATS. Nothing here
imports the rest of imageshards but its kinds (imageshards/kinds/: a Parquet row's columns
follow the kind's schema): a format writes through the file layer it is handed.
"""
