"""The TFDS builder of bench/peer_tfds.py: labeled images from ROOT/<class>/<image>."""

import os

import tensorflow_datasets as tfds


class ImageTree(tfds.core.GeneratorBasedBuilder):
    """Labeled images from ROOT/<class>/<image>."""

    VERSION = tfds.core.Version('1.0.0')

    def __init__(self, *, root, labels, **kwargs):
        self._root, self._labels = root, labels
        super().__init__(**kwargs)

    def _info(self):
        return self.dataset_info_from_configs(
            features=tfds.features.FeaturesDict(
                {
                    'image': tfds.features.Image(),
                    'label': tfds.features.ClassLabel(names=self._labels),
                }
            ),
            supervised_keys=('image', 'label'),
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # local files only
        return {'train': self._generate_examples(self._root)}

    def _generate_examples(self, root):
        for label in self._labels:
            folder = os.path.join(root, label)
            for name in sorted(os.listdir(folder)):
                yield f'{label}/{name}', {'image': os.path.join(folder, name), 'label': label}
