"""The models the trainer can build: a small CNN for fast runs, ResNet-50 and EfficientNet-B0.

All take uint8 images (what the input pipeline and the serving signature deliver), normalize
them on the accelerator with the build's tf.Transform graph (trainer/transform.py) or, without
one, scale them to [0, 1], and end in a float32 softmax (a multi-label head: float32 sigmoids),
so that mixed precision (`mixed_float16`) keeps the output and the loss in full precision. The
keras.applications models are built with `weights=None`: nothing is downloaded.
"""

import keras
import tensorflow as tf

from trainer import transform
from trainer.config import MODELS
from trainer.heads import MULTI_LABEL_OUTPUT
from trainer.heads import Head


def build_model(name, num_classes, image_size, dropout=0.2, heads=None, transform_output=None):
    """A Keras model `name` for images of `image_size` (height, width) and `num_classes`.

    With `heads` ({level: trainer/heads.py Head, or a number of classes}), the model has one
    head per label level on the shared backbone, and its output is a dict {level:
    probabilities}; `num_classes` is then unused. `{'': Head}` is the primary label's head (one
    softmax, or with `multi_label` an output `scores` of one sigmoid per class). With
    `transform_output` (a tft.TFTransformOutput of the build), pixels are normalized by its
    graph (zero mean, unit variance per channel over the train split); EfficientNet keeps its
    own normalization of 0..255 input.
    """
    inputs = keras.Input((*image_size, 3), dtype='uint8', name='image')
    if transform_output is not None:
        scaled = transform.TransformPixels(transform.data_dir(transform_output), name='normalize')(
            inputs
        )
    else:
        scaled = keras.layers.Rescaling(1 / 255, name='scale')(inputs)  # uint8 -> [0, 1] floats
    if name == 'small_cnn':
        features = _small_cnn(scaled)
    elif name == 'resnet50':
        backbone = keras.applications.ResNet50(
            include_top=False, weights=None, input_shape=(*image_size, 3), pooling='avg'
        )
        features = backbone(scaled)
    elif name == 'efficientnet_b0':
        # EfficientNet rescales 0..255 input itself.
        backbone = keras.applications.EfficientNetB0(
            include_top=False, weights=None, input_shape=(*image_size, 3), pooling='avg'
        )
        features = backbone(keras.layers.Rescaling(1.0, name='to_float')(inputs))
    else:
        raise ValueError(f'--model {name!r}: expected one of {", ".join(MODELS)}')
    if dropout:
        features = keras.layers.Dropout(dropout)(features)
    heads = {
        level: head if isinstance(head, Head) else Head(tuple(range(head)))
        for level, head in (heads or {}).items()
    }
    primary = heads.pop('', None)
    if primary and primary.multi_label:
        scores = _head(features, primary.num_classes, 'logits', MULTI_LABEL_OUTPUT, 'sigmoid')
        return keras.Model(inputs, scores, name=name)
    if heads:
        return keras.Model(inputs, _level_outputs(features, heads), name=name)
    num_classes = primary.num_classes if primary else num_classes
    return keras.Model(inputs, _head(features, num_classes, 'logits', 'probabilities'), name=name)


def _level_outputs(features, heads):
    """{level: probabilities}: a head of its own per level, or a derived level's sums."""
    outputs = {}
    for level, head in heads.items():
        if not head.source:
            activation = 'sigmoid' if head.multi_label else 'softmax'
            outputs[level] = _head(features, head.num_classes, f'{level}_logits', level, activation)
    for level, head in heads.items():
        if head.source:
            outputs[level] = SumOver(head.parents, head.num_classes, name=level)(
                outputs[head.source]
            )
    return {level: outputs[level] for level in heads}


def _head(features, num_classes, logits_name, name, activation='softmax'):
    logits = keras.layers.Dense(num_classes, name=logits_name)(features)
    return keras.layers.Activation(activation, dtype='float32', name=name)(logits)


class SumOver(keras.layers.Layer):
    """A coarse level's probabilities from a finer level's: each coarse class's is the sum of
    those of the finer classes it holds (`parents[f]`: the coarse class of finer class f)."""

    def __init__(self, parents, num_classes, **kwargs):
        super().__init__(dtype='float32', **kwargs)
        self.parents = [int(parent) for parent in parents]
        self.num_classes = int(num_classes)

    def call(self, probabilities):
        membership = tf.one_hot(self.parents, self.num_classes, dtype=probabilities.dtype)
        return tf.matmul(probabilities, membership)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.num_classes)

    def get_config(self):
        return {**super().get_config(), 'parents': self.parents, 'num_classes': self.num_classes}


def _small_cnn(inputs):
    x = inputs
    for filters in (32, 64, 128):
        x = keras.layers.Conv2D(filters, 3, padding='same', use_bias=False)(x)
        # Momentum 0.9: the moving statistics settle within the few hundred steps of a short
        # run (Keras' 0.99 needs thousands, and evaluation is poor until then).
        x = keras.layers.BatchNormalization(momentum=0.9)(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    return keras.layers.GlobalAveragePooling2D()(x)
