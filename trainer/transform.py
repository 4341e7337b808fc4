"""The build's tf.Transform output in the trainer: pixel normalization and the label vocabulary.

`OUT/transform_fn/` holds the graph of `imageshards/transform.py`'s preprocessing_fn with the
train split's statistics in it. The model applies it to its uint8 input (`TransformPixels`),
so the exported SavedModel carries the same graph and a served image gets exactly the
normalization it was trained with. Without it (a `--no-analyze` build), models scale pixels
to [0, 1], and the trainer says so once.
"""

import logging
import posixpath

import keras
import tensorflow as tf

from imageshards import transform as transform_lib

_LOG = logging.getLogger(__name__)


def load(info):
    """The build's `tft.TFTransformOutput`, or None (logged) where it has none.

    Raises:
        ValueError: its label vocabulary is not dataset.json's `labels` (ids would differ).
    """
    if not tf.io.gfile.exists(posixpath.join(info.data_dir, 'transform_fn', 'saved_model.pb')):
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


def class_names(output):
    """Label names by id, from the transform's vocabulary."""
    return [
        name.decode('utf-8') if isinstance(name, bytes) else name
        for name in output.vocabulary_by_name(transform_lib.LABEL_VOCABULARY)
    ]


@keras.saving.register_keras_serializable(package='imageshards')
class TransformPixels(keras.layers.Layer):
    """uint8 images [N, H, W, 3] -> float32 pixels normalized by the tf.Transform graph.

    The transform works on one pixel per instance: images are reshaped to [N*H*W, 3] pixels
    and back. The TFT layer is an attribute, so the model (and its export) tracks the loaded
    transform graph and its assets.
    """

    def __init__(self, transform_output, **kwargs):
        super().__init__(trainable=False, **kwargs)
        self._tft_layer = transform_output.transform_features_layer()

    def call(self, images):
        shape = tf.shape(images)
        pixels = tf.reshape(tf.cast(images, tf.float32), [-1, transform_lib.CHANNELS])
        normalized = self._tft_layer({transform_lib.PIXEL: pixels})[transform_lib.PIXEL_NORMALIZED]
        return tf.reshape(normalized, shape)

    def compute_output_shape(self, input_shape):
        return input_shape
