"""The model's outputs ("heads"), their losses and metrics.

A single-label build trains one softmax over its labels, as always. With `--label-levels`, one
head per level on a shared backbone. A multi-label build's label (and each level where an image
may hold several values, dataset.json `multi_label_levels`) is a head of one sigmoid per class,
trained with binary cross-entropy and measured by micro and macro F1 at 0.5 and the mean over
classes of the area under the precision-recall curve (`micro_f1`, `macro_f1`, `pr_auc`); a
level with at most one value per image keeps a softmax head.

A softmax head's loss is the cross-entropy with smoothed labels (`--label-smoothing`), each
class weighted as `--class-weights` says. A missing label (-1: `--allow-missing-levels`, or an
empty single-valued level of a multi-label build) adds nothing to its head's loss or accuracy:
the loss is the mean over the batch's known labels of that level, and the accuracy counts
known labels only.

A level whose classes each hold whole classes of a finer trained level (trainer/hierarchy.py)
is derived from that level: its probabilities are the finer ones summed, so it has no weights
of its own and its loss trains the finer head.
"""

import dataclasses

import keras
import tensorflow as tf

MULTI_LABEL_OUTPUT = 'scores'  # the output of a multi-label build's model without levels


@dataclasses.dataclass(frozen=True)
class Head:
    """One output of the model.

    Attributes:
        classes: class names, by id.
        multi_label: one sigmoid per class (else one softmax over them).
        source: derived from this finer level's probabilities (trainer/hierarchy.py).
        parents: with `source`, the class here of each class of `source`.
    """

    classes: tuple
    multi_label: bool = False
    source: str = ''
    parents: tuple = ()

    @property
    def num_classes(self):
        return len(self.classes)


def model_heads(info, levels, derived=None) -> dict:
    """{level: Head} of the build's label levels `levels` (in that order), or {'': Head} of its
    primary label without levels.

    Args:
        derived: {coarse level: (finer level, parents)} (trainer/hierarchy.py).
    """
    if not levels:
        return {'': Head(info.labels, multi_label=info.multi_label)}
    info.check_levels(levels)
    multi = set(info.multi_label_levels) if info.multi_label else set()
    heads = {}
    for level in levels:
        source, parents = (derived or {}).get(level, ('', ()))
        heads[level] = Head(info.label_levels[level], level in multi, source, tuple(parents))
    return heads


class SparseCrossentropy(keras.losses.Loss):
    """Cross-entropy of a softmax head against class ids: smoothed, weighted, -1 left out.

    With `label_smoothing` s, the target of an image of class c is 1 - s + s/C for c and s/C
    for each other class (Inception's regularizer; Model Garden's `label_smoothing`). With
    `class_weights` ([C]), each image's loss is multiplied by its class's weight, as Keras'
    `class_weight` does. A label -1 (missing) adds nothing: Keras' mean over the batch is the
    mean over its known labels.
    """

    def __init__(self, label_smoothing=0.0, class_weights=None, name='crossentropy'):
        super().__init__(name=name)
        self.label_smoothing = float(label_smoothing)
        self.class_weights = None if class_weights is None else [float(w) for w in class_weights]

    def call(self, y_true, y_pred):
        y_true = tf.reshape(tf.cast(y_true, tf.int64), [-1])
        ids = tf.maximum(y_true, 0)
        target = tf.one_hot(ids, tf.shape(y_pred)[-1], dtype=y_pred.dtype)
        losses = keras.losses.categorical_crossentropy(
            target, y_pred, label_smoothing=self.label_smoothing
        )
        known = tf.cast(y_true >= 0, y_pred.dtype)
        weights = known
        if self.class_weights is not None:
            weights *= tf.gather(tf.constant(self.class_weights, y_pred.dtype), ids)
        scale = tf.cast(tf.size(known), y_pred.dtype) / tf.maximum(tf.reduce_sum(known), 1.0)
        return losses * weights * scale

    def get_config(self):
        return {
            **super().get_config(),
            'label_smoothing': self.label_smoothing,
            'class_weights': self.class_weights,
        }


def balanced_weights(counts) -> list:
    """Per class, total / (classes x its count): scikit-learn's `balanced` class weights (0 for
    a class without images, which no batch holds)."""
    total, classes = sum(counts), len(counts)
    return [total / (classes * count) if count else 0.0 for count in counts]


class MaskedAccuracy(keras.metrics.Mean):
    """Sparse categorical accuracy over the examples whose label is not -1."""

    def __init__(self, name='accuracy', **kwargs):
        super().__init__(name=name, **kwargs)

    def update_state(self, y_true, y_pred, sample_weight=None):
        del sample_weight
        y_true = tf.reshape(tf.cast(y_true, tf.int64), [-1])
        correct = tf.cast(tf.argmax(y_pred, axis=-1) == y_true, self.dtype)
        return super().update_state(correct, sample_weight=tf.cast(y_true >= 0, self.dtype))


def multi_label_metrics(num_classes) -> list:
    """Micro and macro F1 at 0.5 (a class without positives or predictions counts as F1 0 in
    the macro mean, as in Keras and scikit-learn), and the mean PR-AUC over classes."""
    return [
        keras.metrics.F1Score(average='micro', threshold=0.5, name='micro_f1'),
        keras.metrics.F1Score(average='macro', threshold=0.5, name='macro_f1'),
        keras.metrics.AUC(curve='PR', multi_label=True, num_labels=num_classes, name='pr_auc'),
    ]


def _loss_and_metrics(head, masked, label_smoothing, class_weights):
    if head.multi_label:
        return 'binary_crossentropy', multi_label_metrics(head.num_classes)
    loss = SparseCrossentropy(label_smoothing, class_weights)
    return loss, [MaskedAccuracy()] if masked else ['accuracy']


def compile_args(heads, label_smoothing=0.0, class_weights=None) -> dict:
    """The loss and metrics arguments of `Model.compile` for `heads` (model_heads).

    Args:
        label_smoothing: of the softmax heads (a multi-label head has none).
        class_weights: {head: [weight per class]} of softmax heads to weight.
    """
    weights = class_weights or {}
    if '' in heads:
        pair = _loss_and_metrics(heads[''], False, label_smoothing, weights.get(''))
        return {'loss': pair[0], 'metrics': pair[1]}
    pairs = {
        level: _loss_and_metrics(head, True, label_smoothing, weights.get(level))
        for level, head in heads.items()
    }
    return {
        'loss': {level: loss for level, (loss, _) in pairs.items()},
        'metrics': {level: metrics for level, (_, metrics) in pairs.items()},
    }


METRICS = ('accuracy', 'loss', 'micro_f1', 'macro_f1', 'pr_auc')


def level_metrics(history, levels) -> dict:
    """{level: {metric: value}} from the flat Keras history and test metrics
    (`family_accuracy`, `val_family_loss`, `test_tags_micro_f1`, ...)."""
    per_level = {}
    for level in levels:
        found = {}
        for prefix in ('', 'val_', 'test_'):
            for metric in METRICS:
                key = f'{prefix}{level}_{metric}'
                if key in history:
                    found[f'{prefix}{metric}'] = float(history[key])
        per_level[level] = found
    return per_level


def class_weights(info, split, heads, mode) -> dict | None:
    """{head: [weight per class]} of the softmax heads with `mode` (--class-weights) balanced,
    from the class counts of the build's training `split`; None with `none`."""
    if mode == 'none':
        return None
    entry = info.split(split)
    counts = {
        level: (
            info.class_counts(split)
            if not level
            else [entry['level_counts'][level].get(name, 0) for name in head.classes]
        )
        for level, head in heads.items()
        if not head.multi_label and not head.source
    }
    if not counts:
        raise ValueError(
            '--class-weights balanced weights the classes of softmax heads; this model has '
            'multi-label heads only: leave it out'
        )
    return {level: balanced_weights(found) for level, found in counts.items()}
