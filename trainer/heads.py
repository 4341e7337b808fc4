"""Training on several label levels: one softmax head per level, missing labels masked out.

A build with label levels (`label/<level>` manifest columns, or a tree's nested folders) stores
an id per level, -1 where an image has no value (`--allow-missing-levels`). `--label-levels`
trains one head per named level on a shared backbone. A missing label adds nothing to its
head's loss or accuracy: the loss is the mean over the batch's known labels of that level, and
the accuracy counts known labels only.
"""

import keras
import tensorflow as tf


def masked_sparse_categorical_crossentropy(y_true, y_pred):
    """Per-example cross-entropy, 0 where the label is -1, scaled so that Keras' mean over the
    batch is the mean over the known labels."""
    y_true = tf.reshape(tf.cast(y_true, tf.int64), [-1])
    known = tf.cast(y_true >= 0, y_pred.dtype)
    losses = keras.losses.sparse_categorical_crossentropy(tf.maximum(y_true, 0), y_pred)
    scale = tf.cast(tf.size(known), y_pred.dtype) / tf.maximum(tf.reduce_sum(known), 1.0)
    return losses * known * scale


class MaskedAccuracy(keras.metrics.Mean):
    """Sparse categorical accuracy over the examples whose label is not -1."""

    def __init__(self, name='accuracy', **kwargs):
        super().__init__(name=name, **kwargs)

    def update_state(self, y_true, y_pred, sample_weight=None):
        del sample_weight
        y_true = tf.reshape(tf.cast(y_true, tf.int64), [-1])
        correct = tf.cast(tf.argmax(y_pred, axis=-1) == y_true, self.dtype)
        return super().update_state(correct, sample_weight=tf.cast(y_true >= 0, self.dtype))


def level_heads(info, levels):
    """{level: number of classes} of the build's label levels `levels`, in that order."""
    info.check_levels(levels)
    return {level: len(info.label_levels[level]) for level in levels}


def compile_args(heads):
    """The loss and metrics arguments of `Model.compile`: per head with `heads`, else the
    single-label ones."""
    if not heads:
        return {'loss': 'sparse_categorical_crossentropy', 'metrics': ['accuracy']}
    return {
        'loss': {level: masked_sparse_categorical_crossentropy for level in heads},
        'metrics': {level: [MaskedAccuracy()] for level in heads},
    }


def level_metrics(history, levels):
    """{level: {metric: value}} from the flat Keras history (`family_accuracy`,
    `val_family_loss`, ...)."""
    per_level = {}
    for level in levels:
        found = {}
        for prefix in ('', 'val_'):
            for metric in ('accuracy', 'loss'):
                key = f'{prefix}{level}_{metric}'
                if key in history:
                    found[f'{prefix}{metric}'] = float(history[key])
        per_level[level] = found
    return per_level
