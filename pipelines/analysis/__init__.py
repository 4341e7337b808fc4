"""The analysis of a build: the split's statistics, summed from what the writer measured of
each shard (pipelines/writing/sample.py), and its tf.Transform output, written from a graph of
its kind (kept or shipped) or by TFT. Imports the foundation, the base (pipelines/core/) and
writing/.

    analyze.py           AnalyzeShards: dataset.json's `analysis` of the shards' summaries
    tft_pipeline.py      WriteTransformOutput: the tf.Transform output written by TFT (tft_beam)
    graph_cache.py       graphs of earlier builds kept, and those the package ships
                         (transform_graphs/), reused without TensorFlow
"""
