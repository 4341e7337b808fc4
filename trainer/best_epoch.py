"""The best epoch is what a run gives: the weights of the epoch with the best validation metric.

At each epoch's end `BestEpoch` compares the epoch's validation metric (`--select-by`) with the
best so far and, where it is better (strictly: the earliest of equals), copies the model's
weights into variables of its own. Those variables, the best epoch, its metric and its logs are
part of every checkpoint (`state`), so a resumed run knows the best epoch of the run before it
and picks the one an uninterrupted run would. At the end, the trainer puts the best weights
back into the model (`restore_best`), evaluates the test split with them and exports them.

The best weights are held by name (each weight's path, e.g. `conv1_conv/kernel`), so that
`--init-from` can read them from a job's checkpoint without building its model
(trainer/warm_start.py). Without a validation split, every epoch counts as better: the last
one is kept.
"""

import json
import math

import keras
import tensorflow as tf

# --select-by -> (the metric of a head, whether lower is better, which heads have it)
MEASURES = {
    'loss': ('loss', True, None),
    'accuracy': ('accuracy', False, False),  # softmax heads
    'micro_f1': ('micro_f1', False, True),  # multi-label heads
}
STATE = 'best'  # its name in the checkpoints (`best/weights/...`)


def monitored(select_by, heads) -> list:
    """The validation logs' keys whose mean `select_by` picks by (`val_loss`, `val_accuracy`,
    `val_family_accuracy`, ...); ValueError where no head has that metric."""
    metric, _, multi_label = MEASURES[select_by]
    if multi_label is None:
        return ['val_loss']
    names = [name for name, head in heads.items() if head.multi_label == multi_label]
    if not names:
        kind = 'multi-label' if multi_label else 'softmax (single-label)'
        raise ValueError(
            f'--select-by {select_by}: this model has no {kind} head to measure it on; '
            f'choose loss or {"accuracy" if multi_label else "micro_f1"}'
        )
    return [f'val_{name}_{metric}' if name else f'val_{metric}' for name in names]


def weight_keys(model) -> list:
    """A name per weight of `model`: its path, made unique where two share one."""
    keys = []
    for weight in model.weights:
        key = weight.path
        while key in keys:
            key += '#'
        keys.append(key)
    return keys


class BestEpoch(keras.callbacks.Callback):
    """Keeps the best epoch's weights (see the module docstring).

    Args:
        model: the model trained.
        keys: the validation logs' keys whose mean is compared (`monitored`), or () to keep
            the last epoch (no validation split).
        lower_is_better: for a loss.
        strategy: the tf.distribute strategy the model's weights live in: their copies do
            too (call this outside its scope: the epoch, value and logs are plain variables).
    """

    def __init__(self, model, keys, lower_is_better, strategy=None):
        super().__init__()
        self.keys = list(keys)
        self._lower = lower_is_better
        with (strategy or tf.distribute.get_strategy()).scope():
            self._pairs = [
                (tf.Variable(weight, trainable=False), weight)
                for weight in model.weights  # the same order as weight_keys
            ]
        with tf.device('/cpu:0'):
            self.epoch = tf.Variable(-1, dtype=tf.int64, trainable=False)  # -1: none yet
            self.value = tf.Variable(math.nan, dtype=tf.float64, trainable=False)
            self.logs = tf.Variable('{}', dtype=tf.string, trainable=False)
            self.last_logs = tf.Variable('{}', dtype=tf.string, trainable=False)
        self.state = tf.train.Checkpoint(
            weights=dict(zip(weight_keys(model), (best for best, _ in self._pairs))),
            epoch=self.epoch,
            value=self.value,
            logs=self.logs,
            last_logs=self.last_logs,
        )

    @property
    def selected_by(self) -> str:
        if not self.keys:
            return 'the last epoch (no validation split)'
        return ' + '.join(self.keys) if len(self.keys) > 1 else self.keys[0]

    def _better(self, value):
        best = float(self.value.numpy())
        if not self.keys or int(self.epoch.numpy()) < 0 or math.isnan(best):
            return True
        return value < best if self._lower else value > best

    def on_epoch_end(self, epoch, logs=None):
        logs = {key: float(value) for key, value in (logs or {}).items()}
        self.last_logs.assign(json.dumps({'epoch': epoch + 1, **logs}))
        value = sum(logs[key] for key in self.keys) / len(self.keys) if self.keys else 0.0
        if not self._better(value):
            return
        for best, weight in self._pairs:
            best.assign(weight.value)
        self.epoch.assign(epoch)
        self.value.assign(value)
        self.logs.assign(json.dumps(logs))

    def restore_best(self) -> None:
        """Puts the best epoch's weights back into the model (nothing before any epoch)."""
        if int(self.epoch.numpy()) < 0:
            return
        for best, weight in self._pairs:
            weight.assign(best.value())

    def metrics(self) -> dict:
        """The best epoch's logs, `best_epoch` (counted from 1), `selected_by` and
        `last_epoch` (the last epoch's logs)."""
        if int(self.epoch.numpy()) < 0:
            return {}
        return {
            **json.loads(self.logs.numpy().decode('utf-8')),
            'best_epoch': int(self.epoch.numpy()) + 1,
            'selected_by': self.selected_by,
            'last_epoch': json.loads(self.last_logs.numpy().decode('utf-8')),
        }


def make(model, select_by, heads, has_validation, strategy) -> BestEpoch:
    """The BestEpoch of `model` for `--select-by` (ValueError: no head has that metric)."""
    keys = monitored(select_by, heads)
    return BestEpoch(model, keys if has_validation else (), MEASURES[select_by][1], strategy)
