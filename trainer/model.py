"""The models the trainer can build: a small CNN for fast runs, or any keras.applications model.

All take uint8 images (what the input pipeline and the serving signature deliver) and end in a
float32 softmax (a multi-label head: float32 sigmoids), so that mixed precision
(`mixed_float16`) keeps the output and the loss in full precision. The small CNN normalizes its
input with the build's tf.Transform graph (trainer/tft_output.py) or, without one, scales it to
[0, 1]. A keras.applications backbone gets the preprocessing its own module defines
(`preprocess_input`: ResNet's caffe-style mean subtraction, MobileNet's [-1, 1], nothing for
EfficientNet and ConvNeXt, which rescale inside), the input its trained weights expect
(`--init-from imagenet`, trainer/warm_start.py); it is built with `weights=None`, nothing is
downloaded here.

Every layer with weights has a name of its own that does not depend on what else the process
built (Keras numbers unnamed layers per process): trainer/warm_start.py copies weights by name.
The head of a label is a Dense layer named `logits` (`<level>_logits` per label level).
"""

import keras
import tensorflow as tf

from trainer import tft_output
from trainer.config import SMALL_CNN
from trainer.heads import MULTI_LABEL_OUTPUT
from trainer.heads import Head

_EXAMPLES = ('small_cnn', 'resnet50', 'efficientnet_b0', 'MobileNetV3Small', 'ConvNeXtTiny')
LOGITS = 'logits'


def applications() -> dict:
    """{name folded (lower case, no underscores): keras.applications constructor name}."""
    return {_folded(name): name for name in dir(keras.applications) if name[:1].isupper()}


def _folded(name):
    return name.replace('_', '').lower()


def application_name(name) -> str:
    """The keras.applications constructor `name` means (resnet50 -> ResNet50), or ValueError."""
    found = applications().get(_folded(name))
    if found is None:
        examples = ', '.join(_EXAMPLES)
        raise ValueError(
            f'--model {name}: not small_cnn nor a keras.applications model ({examples}, ...: '
            f'see keras.io/api/applications)'
        )
    return found


def is_head(layer_name) -> bool:
    """Whether the layer `layer_name` is the Dense layer of a head (its weights belong to its
    classes)."""
    return layer_name == LOGITS or layer_name.endswith(f'_{LOGITS}')


def build_model(
    name, num_classes, image_size, dropout=0.2, heads=None, transform_output=None
) -> keras.Model:
    """A Keras model `name` for images of `image_size` (height, width) and `num_classes`.

    With `heads` ({level: trainer/heads.py Head, or a number of classes}), the model has one
    head per label level on the shared backbone, and its output is a dict {level:
    probabilities}; `num_classes` is then unused. `{'': Head}` is the primary label's head (one
    softmax, or with `multi_label` an output `scores` of one sigmoid per class). With
    `transform_output` (a tft.TFTransformOutput of the build), the small CNN's pixels are
    normalized by its graph (zero mean, unit variance per channel over the train split).
    """
    inputs = keras.Input((*image_size, 3), dtype='uint8', name='image')
    if name == SMALL_CNN:
        features = _small_cnn(_scaled(inputs, transform_output))
    else:
        features = _application(application_name(name), inputs, image_size)
    if dropout:
        features = keras.layers.Dropout(dropout, name='dropout')(features)
    heads = {
        level: head if isinstance(head, Head) else Head(tuple(range(head)))
        for level, head in (heads or {}).items()
    }
    primary = heads.pop('', None)
    if primary and primary.multi_label:
        scores = _head(features, primary.num_classes, LOGITS, MULTI_LABEL_OUTPUT, 'sigmoid')
        return keras.Model(inputs, scores, name=name)
    if heads:
        return keras.Model(inputs, _level_outputs(features, heads), name=name)
    num_classes = primary.num_classes if primary else num_classes
    return keras.Model(inputs, _head(features, num_classes, LOGITS, 'probabilities'), name=name)


def _scaled(inputs, transform_output):
    if transform_output is None:
        return keras.layers.Rescaling(1 / 255, name='scale')(inputs)  # uint8 -> [0, 1] floats
    folder = tft_output.data_dir(transform_output)
    return tft_output.TransformPixels(folder, name='normalize')(inputs)


def _application(constructor, inputs, image_size):
    """The pooled features of keras.applications' `constructor` over its own preprocessing."""
    try:
        backbone = getattr(keras.applications, constructor)(
            include_top=False, weights=None, input_shape=(*image_size, 3), pooling='avg'
        )
    except ValueError as e:
        raise ValueError(f'--model {constructor}: {str(e).splitlines()[0]}') from e
    return backbone(ApplicationPreprocessing(constructor, name='preprocess')(inputs))


@keras.saving.register_keras_serializable(package='imageshards')
class ApplicationPreprocessing(keras.layers.Layer):
    """uint8 images -> what the keras.applications model `constructor` takes: float32 pixels
    through its module's `preprocess_input`."""

    def __init__(self, constructor, **kwargs):
        kwargs.update(dtype='float32', trainable=False)
        super().__init__(**kwargs)
        self.constructor = constructor
        module = getattr(keras.applications, constructor).__module__.rsplit('.', 1)[-1]
        self._preprocess = getattr(keras.applications, module).preprocess_input

    def call(self, images):
        return self._preprocess(tf.cast(images, tf.float32))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), 'constructor': self.constructor}


def _level_outputs(features, heads):
    """{level: probabilities}: a head of its own per level, or a derived level's sums."""
    outputs = {}
    for level, head in heads.items():
        if not head.source:
            activation = 'sigmoid' if head.multi_label else 'softmax'
            name = f'{level}_{LOGITS}'
            outputs[level] = _head(features, head.num_classes, name, level, activation)
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
        kwargs['dtype'] = 'float32'
        super().__init__(**kwargs)
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
    for block, filters in enumerate((32, 64, 128), start=1):
        conv = keras.layers.Conv2D(
            filters, 3, padding='same', use_bias=False, name=f'block{block}_conv'
        )
        x = conv(x)
        # Momentum 0.9: the moving statistics settle within the few hundred steps of a short
        # run (Keras' 0.99 needs thousands, and evaluation is poor until then).
        x = keras.layers.BatchNormalization(momentum=0.9, name=f'block{block}_bn')(x)
        x = keras.layers.ReLU(name=f'block{block}_relu')(x)
        x = keras.layers.MaxPooling2D(name=f'block{block}_pool')(x)
    return keras.layers.GlobalAveragePooling2D(name='pool')(x)
