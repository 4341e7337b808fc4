"""The labels the trainer reads from a build's records: class ids, or multi-hot vectors.

A single-label build stores one id per record (`image/class/label`, and one per label level,
-1 where missing); the trainer yields them as int64 ids, as it always did. A multi-label build
(dataset.json `"multi_label": true`) stores each as a sorted list of ids, parsed as a
`VarLenFeature` (a SparseTensor per parsed batch), and the trainer yields:
    the primary label        a multi-hot float32 vector [C] (all zeros: an image without labels)
    a multi-label level      (dataset.json `multi_label_levels`) likewise, [C_level]
    any other level          its id, -1 where the list is empty (missing), as in a
                             single-label build: such a level trains a softmax head
All of it is made per parsed batch, vectorized, before the batch is split into records.
"""

import tensorflow as tf

from imageshards.kinds import features


class LabelReader:
    """What of a build's records makes the labels, and how they become the trainer's labels.

    Args:
        info: the build (trainer/dataset_info.load).
        levels: the label levels to yield (a dict {level: labels}) instead of the primary label.
    """

    def __init__(self, info, levels=()):
        self.levels = tuple(levels)
        self.multi_label = info.multi_label
        self._kind = info.kind
        multi_levels = set(info.multi_label_levels)
        # {label key: number of classes for a multi-hot vector, or 0 for ids}
        if self.levels:
            self._keys = {
                features.level_label(level): (
                    len(info.label_levels[level])
                    if self.multi_label and level in multi_levels
                    else 0
                )
                for level in self.levels
            }
        else:
            self._keys = {features.LABEL: info.num_classes if self.multi_label else 0}

    def spec(self):
        """{key: feature} of the label features, for tf.io.parse_example."""
        return self._kind.feature_spec(self._keys)

    def is_multi_hot(self, level=None):
        """Whether the primary label (or `level`) is yielded as a multi-hot vector."""
        key = features.level_label(level) if level else features.LABEL
        return bool(self._keys[key])

    def labels(self, parsed):
        """A parsed batch's labels: [batch] ids or [batch, C] multi-hot, or a dict of them by
        level."""
        values = {key: self._convert(parsed[key], size) for key, size in self._keys.items()}
        if not self.levels:
            return values[features.LABEL]
        return {level: values[features.level_label(level)] for level in self.levels}

    def _convert(self, value, size):
        if not isinstance(value, tf.SparseTensor):
            return value  # a single-label build's ids
        if size:
            return multi_hot(value, size)
        return first_or_missing(value)


def multi_hot(ids, num_classes):
    """A SparseTensor [batch, n] of class ids -> float32 [batch, num_classes], 1 where listed."""
    # The ids are positions in the new last dimension; a repeated id counts once.
    return tf.cast(tf.sparse.to_indicator(ids, num_classes), tf.float32)


def first_or_missing(ids):
    """A SparseTensor [batch, n] of at most one id per row -> int64 [batch], -1 where empty."""
    dense = tf.sparse.to_dense(ids, default_value=features.MISSING_LEVEL)
    # A batch in which every row is empty has no column at all: add one of -1.
    missing = tf.fill([tf.shape(dense)[0], 1], tf.constant(features.MISSING_LEVEL, tf.int64))
    return tf.concat([dense, missing], axis=1)[:, 0]
