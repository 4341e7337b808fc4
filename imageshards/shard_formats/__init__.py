"""Shard files behind one seam: how a build's records go into files and come back.

    shard_format.py  `ShardFormat`: what a format is to the rest of imageshards (write a
                     shard and its index, read records back, name the files); `WrittenShard`
    tfrecord.py      TFRecord shards and their DALI index files (`TFRecordFormat`), and the
                     TFRecord framing, written and checked without TensorFlow
    registry.py      the formats by name (`named`), a build's (`of_build`), shard file names

A build's format is dataset.json's `shard_format` (builds from before it: tfrecord). A new
format is a module with a ShardFormat subclass, named in registry.py's FORMATS. Nothing here
imports the rest of imageshards: a format writes through the file layer it is handed.
"""
