"""What a build's dataset.json says, read the way the trainer reads data: with tf.io.gfile.

The trainer takes shard paths from here, never from a glob, so stray files in the data
directory cannot leak into training. `tf.io.gfile` reads local paths, `gs://` (TensorFlow's
own GCS filesystem) and Vertex AI's Cloud Storage FUSE mounts (`/gcs/<bucket>/...`) alike.
"""

import dataclasses
import json
import posixpath

import tensorflow as tf

DATASET_JSON = 'dataset.json'
SUCCESS = '_SUCCESS'


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
        data_dir = data_dir.rstrip('/')
        path = posixpath.join(data_dir, DATASET_JSON)
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(
                f'{path} does not exist: --data must be the output directory of '
                f'`imageshards build` (where dataset.json and _SUCCESS are)'
            )
        if not tf.io.gfile.exists(posixpath.join(data_dir, SUCCESS)):
            raise FileNotFoundError(
                f'{data_dir} has no {SUCCESS}: the build there did not finish (or is still '
                f'running); rerun `imageshards build` with --overwrite'
            )
        with tf.io.gfile.GFile(path, 'r') as f:
            raw = json.load(f)
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

    def split(self, name):
        if name not in self.splits:
            raise ValueError(
                f'split {name!r} is not in {self.data_dir}/{DATASET_JSON} '
                f'(splits: {", ".join(self.splits) or "none"})'
            )
        return self.splits[name]

    def shard_paths(self, split):
        """The split's shard files, in the build's order."""
        return [
            posixpath.join(self.data_dir, shard['path']) for shard in self.split(split)['shards']
        ]

    def num_records(self, split):
        return self.split(split)['num_records']

    def class_counts(self, split):
        """Records per label id, in label order."""
        counts = self.split(split)['class_counts']
        return [counts.get(name, 0) for name in self.labels]
