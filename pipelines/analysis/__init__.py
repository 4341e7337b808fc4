"""The analysis of a build: the split's statistics measured as its shards are written, and its
tf.Transform output, written from a graph of its kind (kept or shipped: graph_cache.py, the
graphs in transform_graphs/) or by TFT. Imports the foundation and the build's options only."""
