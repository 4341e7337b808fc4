"""Evaluation passes beside training: validation and test data, the test split's metrics, and a
multi-label model's per-class decision thresholds (trainer/thresholds.py), chosen on the
validation split and measured on both splits."""

import logging

import numpy as np
import tensorflow as tf

from trainer import input_pipeline
from trainer import thresholds as thresholds_lib

_LOG = logging.getLogger(__name__)


def dataset(config, info, strategy, split=None) -> tf.distribute.DistributedDataset | None:
    """The validation split's (or `split`'s) one ordered pass: all of it on every worker, in
    the same batches; None where the build has no such split.

    Split among workers, their pipelines could hold different numbers of batches: Keras would
    run as many steps as each one's own, and the one with more would wait for the others'
    collectives forever (tf.distribute's empty batches for a worker already done do not get
    through the model's convolutions on the CPU either). Every worker evaluating everything
    costs validation time, and its metrics, averaged over workers, stay exact.
    """
    split = split or config.val_split
    if split not in info.splits:
        if split == config.val_split:
            _LOG.info('no %r split in the build: training without validation', split)
        return None
    return strategy.distribute_datasets_from_function(
        lambda input_context: input_pipeline.make_dataset(
            config.data,
            split,
            input_context.get_per_replica_batch_size(config.batch_size),
            training=False,
            image_size=config.image_size,
            info=info,
            label_levels=config.label_levels,
            options=config.input,
            skip_bad_images=False,  # an evaluation counts every record, or fails
        )
    )


def test_metrics(model, config, info, strategy) -> dict:
    """{test_loss, test_accuracy, ...} of one pass over the test split, if the build has one."""
    test = dataset(config, info, strategy, config.test_split)
    if test is None or config.test_split in (config.train_split, config.val_split):
        return {}
    results = model.evaluate(test, verbose=0, return_dict=True)
    return {f'test_{key}': float(value) for key, value in results.items()}


def multi_label_thresholds(model, config, info, heads) -> tuple:
    """Per-class thresholds of the model's multi-label heads, and F1 at them.

    Returns:
        ({head: float32 [C]}, {head: {'thresholds': {class: t}, 'val_micro_f1_at_thresholds':
        ..., 'test_macro_f1_at_thresholds': ...}}), for each multi-label head ('' for the
        primary label) of `heads` (trainer/heads.py). Thresholds are 0.5 without a validation
        split.
    """
    multi = [name for name, head in heads.items() if head.multi_label]
    if not multi:
        return {}, {}
    splits = {'val': config.val_split, 'test': config.test_split}
    splits = {key: split for key, split in splits.items() if split in info.splits}
    if config.test_split in (config.train_split, config.val_split):
        splits.pop('test', None)
    passes = {key: _scores(model, config, info, split, multi) for key, split in splits.items()}
    chosen, reports = {}, {}
    for name in multi:
        if 'val' in passes:
            chosen[name] = thresholds_lib.choose(*passes['val'][name])
        else:
            _LOG.info('no %r split: multi-label thresholds stay at 0.5', config.val_split)
            chosen[name] = np.full(heads[name].num_classes, thresholds_lib.DEFAULT, np.float32)
        report = {'thresholds': dict(zip(heads[name].classes, map(float, chosen[name])))}
        for key, by_head in passes.items():
            for metric, value in thresholds_lib.f1(*by_head[name], chosen[name]).items():
                report[f'{key}_{metric}_at_thresholds'] = value
        reports[name] = report
    return chosen, reports


def _scores(model, config, info, split, names):
    """{head: (scores [N, C], multi-hot labels [N, C])} of one ordered pass over `split`."""
    data = input_pipeline.make_dataset(
        config.data,
        split,
        config.batch_size,
        training=False,
        image_size=config.image_size,
        info=info,
        label_levels=config.label_levels,
        options=config.input,
        skip_bad_images=False,
    )
    scores, labels = {name: [] for name in names}, {name: [] for name in names}
    for images, batch_labels in data:
        predicted = model.predict_on_batch(images)
        for name in names:
            scores[name].append(np.asarray(predicted[name] if name else predicted))
            labels[name].append(np.asarray(batch_labels[name] if name else batch_labels))
    return {name: (np.concatenate(scores[name]), np.concatenate(labels[name])) for name in names}
