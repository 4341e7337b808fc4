"""A build read the way the trainer reads data: with tf.io.gfile.

The trainer takes shard paths from the build's dataset.json, never from a glob, so stray files
in the data directory cannot leak into training. `tf.io.gfile` reads local paths, `gs://`
(TensorFlow's own GCS filesystem) and Vertex AI's Cloud Storage FUSE mounts (`/gcs/<bucket>/...`)
alike. What a build says and the rule that one without `_SUCCESS` is refused are
imageshards/dataset_json.py's (`Build`); this module gives it tf.io.gfile to read with.
"""

import posixpath

import tensorflow as tf

from imageshards import dataset_json


class GFiles:
    """The file layer dataset_json reads with, over tf.io.gfile."""

    join = staticmethod(posixpath.join)
    exists = staticmethod(tf.io.gfile.exists)

    @staticmethod
    def read(path):
        with tf.io.gfile.GFile(path, 'rb') as f:
            return f.read()


def load(data_dir):
    """The complete build in `data_dir`, a dataset_json.Build (FileNotFoundError: none, or not
    finished)."""
    return dataset_json.Build.load(data_dir, complete=True, files=GFiles)
