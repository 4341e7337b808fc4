"""The analysis of a build: the split's statistics, summed from what the writer measured of
each shard (pipelines/writing/sample.py), and its tf.Transform output, written from a graph of
its kind (kept or shipped: graph_cache.py, the graphs in transform_graphs/) or by TFT. Imports
the foundation, the base (pipelines/core/) and writing/."""
