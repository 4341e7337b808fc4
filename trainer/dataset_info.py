"""What a build's dataset.json says, read the way the trainer reads data: with tf.io.gfile.

The trainer takes shard paths from here, never from a glob, so stray files in the data
directory cannot leak into training. `tf.io.gfile` reads local paths, `gs://` (TensorFlow's
own GCS filesystem) and Vertex AI's Cloud Storage FUSE mounts (`/gcs/<bucket>/...`) alike.
Loading and the rule that a build without `_SUCCESS` is refused are imageshards/dataset_json.py's.
"""

import dataclasses
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


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    data_dir: str
    format: str  # 'examples' or 'paths'
    labels: tuple
    splits: dict  # split -> the split's entry in dataset.json
    counts: dict
    raw: dict  # the whole dataset.json

    @classmethod
    def load(cls, data_dir):
        """The complete build in `data_dir` (FileNotFoundError: none, or not finished)."""
        data_dir = data_dir.rstrip('/')
        raw = dataset_json.load(data_dir, complete=True, files=GFiles)
        return cls(data_dir, raw['format'], tuple(raw['labels']), raw['splits'], raw['counts'], raw)

    @property
    def num_classes(self):
        return len(self.labels)

    @property
    def label_levels(self):
        """{level: names} of a build with label levels (ids are positions); else {}."""
        return {level: tuple(names) for level, names in self.raw.get('label_levels', {}).items()}

    def check_levels(self, levels):
        """Raises ValueError unless the build has every label level of `levels`."""
        unknown = [level for level in levels if level not in self.label_levels]
        if unknown:
            have = ', '.join(self.label_levels) or 'none'
            raise ValueError(
                f'--label-levels {",".join(unknown)}: not label levels of {self.data_dir} '
                f'(it has: {have}); build with label/<level> manifest columns or --label-levels'
            )

    def largest_sides(self):
        """(largest height, largest width) of the analysis split's images; None without an
        analysis (a build made with --no-analyze)."""
        analysis = self.raw.get('analysis')
        if not analysis:
            return None
        return analysis['height']['max'], analysis['width']['max']

    def split(self, name):
        """The split's entry in dataset.json (ValueError: the build has no such split)."""
        return dataset_json.split_entry(self.data_dir, self.splits, name)

    def shard_paths(self, split):
        """The split's shard files, in the build's order."""
        return dataset_json.shard_paths(self.data_dir, self.splits, split, join=posixpath.join)

    def num_records(self, split):
        return self.split(split)['num_records']

    def class_counts(self, split):
        """Records per label id, in label order."""
        counts = self.split(split)['class_counts']
        return [counts.get(name, 0) for name in self.labels]
