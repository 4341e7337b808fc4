"""The build's tf.Transform output in the trainer: pixel normalization and the label vocabulary.

`OUT/transform_fn/` holds the graph of `imageshards/tft_preprocessing.py`'s preprocessing_fn
with the train split's statistics in it. The model normalizes its uint8 input with the graph's
constants (`TransformPixels`), so the exported SavedModel carries the same graph and a served
image gets exactly the normalization it was trained with. Without it (a `--no-analyze` build),
models scale pixels to [0, 1], and the trainer says so once.
"""

import logging
import posixpath

import keras
import tensorflow as tf

from imageshards import layout
from imageshards import tft_assets
from imageshards.kinds import features

_LOG = logging.getLogger(__name__)


def load(info):
    """The build's `tft.TFTransformOutput`, or None (logged) where it has none.

    Raises:
        ValueError: its label vocabulary is not dataset.json's `labels` (ids would differ).
    """
    if not tf.io.gfile.exists(posixpath.join(info.data_dir, layout.TRANSFORM_SAVED_MODEL)):
        _LOG.info(
            'no transform_fn in %s (built with --no-analyze): pixels are scaled to [0, 1] '
            'instead of normalized with the train split statistics',
            info.data_dir,
        )
        return None
    import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel

    output = tft.TFTransformOutput(info.data_dir)
    vocabulary = class_names(output)
    if tuple(vocabulary) != tuple(info.labels):
        raise ValueError(
            f'{info.data_dir}: the label vocabulary of transform_fn ({vocabulary[:5]}...) is not '
            f'the labels of dataset.json ({list(info.labels[:5])}...); rebuild with --overwrite'
        )
    _LOG.info('normalizing pixels with the tf.Transform output in %s', info.data_dir)
    return output


def data_dir(output):
    """The build folder a `tft.TFTransformOutput` was loaded from."""
    return posixpath.dirname(output.transform_savedmodel_dir.rstrip('/'))


def class_names(output):
    """Label names by id, from the transform's vocabulary."""
    return [
        name.decode('utf-8') if isinstance(name, bytes) else name
        for name in output.vocabulary_by_name(tft_assets.LABEL_VOCABULARY)
    ]


@keras.saving.register_keras_serializable(package='imageshards')
class TransformPixels(keras.layers.Layer):
    """uint8 images [N, H, W, 3] -> float32 pixels normalized by the tf.Transform graph.

    The trainer cuts and resizes its own crops, so it takes the graph's `pixel_mean` and
    `pixel_std` outputs (asking for them alone: no record is decoded) and applies them to its
    batch, every step: the TFT layer is an attribute, so the model and its export track the
    transform graph and its assets. The configuration is the build's folder, from which a
    model saved in the `.keras` format loads the graph again.
    """

    def __init__(self, data_dir, **kwargs):
        kwargs['trainable'] = False
        super().__init__(**kwargs)
        import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel

        self.data_dir = data_dir
        output = tft.TFTransformOutput(data_dir)
        self._tft_layer = output.transform_features_layer()
        spec = output.raw_feature_spec()[features.LABEL]
        self._multi_label = isinstance(spec, tf.io.VarLenFeature)

    def call(self, images):
        constants = self._tft_layer({features.LABEL: self._one_label()})
        shape = [1, 1, 1, tft_assets.CHANNELS]
        mean = tf.reshape(constants[tft_assets.PIXEL_MEAN], shape)
        std = tf.reshape(constants[tft_assets.PIXEL_STD], shape)
        return (tf.cast(images, tf.float32) - mean) / std

    def _one_label(self):
        """A batch of one label, what the graph's constants are computed from: an id, or in a
        multi-label build an empty list of them."""
        if self._multi_label:
            return tf.SparseTensor(tf.zeros([0, 2], tf.int64), tf.zeros([0], tf.int64), [1, 0])
        return tf.zeros([1], tf.int64)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), 'data_dir': self.data_dir}
