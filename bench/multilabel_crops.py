"""Random-resized crops against multi-label truth: F1 of small_cnn trained with each crop range.

A crop that cuts a labelled object out of the image keeps the label on an image that no longer
shows it. On images of small shapes at random places (bench/shapes.py; each shape a label),
trains `small_cnn` with the same seed, data and epochs for each `--crop-area` range (1,1 is no
crop) and prints the test split's micro and macro F1, at 0.5 and at the per-class thresholds
chosen on the validation split, with evaluation's central crop (0.875 of each side, what
serving does) and with the whole image.

    python -m bench.multilabel_crops [--train 2000] [--epochs 8] [--size 64]
        [--crops '0.08,1 0.5,1 0.8,1 1,1'] [--seed 0] [--out /tmp/multilabel_crops]

The build is made by `imageshards build` from a `labels` manifest (bench/labelled_build.py).
"""

import argparse
import json
import logging
import os
import shutil

import numpy as np

from bench import labelled_build
from bench import shapes

_LOG = logging.getLogger('bench.multilabel_crops')


def make_build(out, train, size, seed):
    """The shapes build: `train` training images, a quarter of that each for val and test."""
    held_out = train // 4
    splits = ['train'] * train + ['val'] * held_out + ['test'] * held_out
    images, labels = shapes.dataset(len(splits), size, start=seed * 1_000_000)
    return labelled_build.write(out, images, labels, splits, num_shards=4)


def _restored(config, info):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from trainer import heads  # pylint: disable=import-outside-toplevel
    from trainer.model import build_model  # pylint: disable=import-outside-toplevel

    model = build_model(config.model, 0, config.image_size, heads=heads.model_heads(info, ()))
    checkpoint = tf.train.Checkpoint(model=model)
    checkpoint.restore(tf.train.latest_checkpoint(config.resolved_checkpoint_dir)).expect_partial()
    return model


def whole_image_f1(config, info):
    """Test F1 at thresholds chosen on val, both evaluated on whole images (no central crop)."""
    from trainer import input_pipeline  # pylint: disable=import-outside-toplevel
    from trainer import thresholds  # pylint: disable=import-outside-toplevel

    model = _restored(config, info)
    passes = {}
    for split in ('val', 'test'):
        data = input_pipeline.make_dataset(
            config.data, split, 128, training=False, image_size=config.image_size, eval_crop=1.0
        )
        pairs = [(model.predict_on_batch(x), y.numpy()) for x, y in data]
        passes[split] = (
            np.concatenate([s for s, _ in pairs]),
            np.concatenate([y for _, y in pairs]),
        )
    at_half = thresholds.f1(*passes['test'], np.full(info.num_classes, 0.5))
    tuned = thresholds.f1(*passes['test'], thresholds.choose(*passes['val']))
    return {
        'whole_micro_f1': at_half['micro_f1'],
        'whole_macro_f1': at_half['macro_f1'],
        'whole_micro_f1_at_thresholds': tuned['micro_f1'],
        'whole_macro_f1_at_thresholds': tuned['macro_f1'],
    }


def run_arm(data, job_dir, crop, args):
    from trainer import config as config_lib  # pylint: disable=import-outside-toplevel
    from trainer import dataset_info  # pylint: disable=import-outside-toplevel
    from trainer import train as train_lib  # pylint: disable=import-outside-toplevel

    shutil.rmtree(job_dir, ignore_errors=True)
    flags = ['--data', data, '--job-dir', job_dir, '--image-size', str(args.size)]
    flags += ['--epochs', str(args.epochs), '--batch-size', '32', '--seed', str(args.seed)]
    flags += ['--crop-area', crop, '--eval-crop', '0.875', '--checkpoint-every', '0']
    config = config_lib.parse_train_args(flags)
    metrics = train_lib.train(config)
    found = {key: metrics[key] for key in _SHOWN if key in metrics}
    found.update(whole_image_f1(config, dataset_info.load(data)))
    return found


_SHOWN = (
    'test_micro_f1',
    'test_macro_f1',
    'test_micro_f1_at_thresholds',
    'test_macro_f1_at_thresholds',
    'test_pr_auc',
)
_COLUMNS = (
    ('test_micro_f1', 'micro@0.5'),
    ('test_macro_f1', 'macro@0.5'),
    ('test_micro_f1_at_thresholds', 'micro@thr'),
    ('test_macro_f1_at_thresholds', 'macro@thr'),
    ('test_pr_auc', 'PR-AUC'),
    ('whole_micro_f1_at_thresholds', 'whole micro@thr'),
    ('whole_macro_f1_at_thresholds', 'whole macro@thr'),
)


def table(results):
    lines = ['| --crop-area | ' + ' | '.join(name for _, name in _COLUMNS) + ' |']
    lines.append('|---|' + '---:|' * len(_COLUMNS))
    for crop, found in results.items():
        cells = ' | '.join(f'{found[key]:.3f}' for key, _ in _COLUMNS)
        lines.append(f'| {crop} | {cells} |')
    return '\n'.join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m bench.multilabel_crops', description=__doc__)
    parser.add_argument('--train', type=int, default=2000, help='training images')
    parser.add_argument('--epochs', type=int, default=8)
    parser.add_argument('--size', type=int, default=64, help='image side, pixels')
    parser.add_argument('--crops', default='0.08,1 0.5,1 0.8,1 1,1', help='crop ranges to try')
    parser.add_argument('--seed', type=int, default=0, help='of the images and of training')
    parser.add_argument('--out', default='/tmp/multilabel_crops')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(message)s', datefmt='%H:%M:%S')
    data = os.path.join(args.out, 'build')
    shutil.rmtree(data, ignore_errors=True)
    make_build(data, args.train, args.size, args.seed)
    results = {}
    for crop in args.crops.split():
        results[crop] = run_arm(data, os.path.join(args.out, 'job'), crop, args)
        _LOG.info('%s: %s', crop, json.dumps(results[crop]))
    print(table(results))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
