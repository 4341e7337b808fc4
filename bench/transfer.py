"""The training recipe, measured on data made here: --init-from against random weights, the
recipe against the trainer's fixed-rate Adam of before, and the best epoch against the last.

Data (bench/datasets.region_tree: 32 classes of 500x375 photo crops, class = photo x cell of a
4x4 grid; no downloads), each built train/val/test:
  source   16 of the classes (every other cell of each photo), `--source-per-class` images
           each: the model that `--init-from` starts from is trained on it with the recipe
  few      the 16 others (the cells between), `--per-class` images each, 30% of them for
           training (so 12 of 40): classes the source never saw, few images each
  photos   all 32 classes, `--per-class` images each (80% for training)
  digits   scikit-learn's 1,797 digits (`imageshards sample-data`), 80% for training
Every contender trains the same model for the same epochs with the same seeds:
  recipe     the trainer's defaults: AdamW, warm-up then cosine, label smoothing, weight
             decay, the best epoch by validation loss kept
  before     the trainer before the recipe: Adam at a fixed 1e-3, no warm-up, no smoothing,
             no weight decay, the last epoch kept (its `last epoch` figure)
  init-from  (few) the recipe started from the source model: frozen epochs, then all of it
Each run prints the test accuracy of the epoch kept and of the last epoch, which epoch was
kept, and its training seconds; the summary gives means over seeds.

    python -m bench.transfer few --seeds 0 1 2
    python -m bench.transfer photos --seeds 0 1
    python -m bench.transfer digits --seeds 0 1 2
    python -m bench.transfer few --set fine_tune_learning_rate=1e-3 --vary frozen_epochs=0,1,3
"""

import argparse
import logging
import os
import shutil
import statistics

import numpy as np

from bench import datasets

# Every other cell of both photos: the few-image classes are the cells beside the source's.
SOURCE_CLASSES = range(0, 32, 2)
FEW_CLASSES = range(1, 32, 2)
BEFORE = [
    '--learning-rate',
    '1e-3',
    '--lr-schedule',
    'constant',
    '--warmup-epochs',
    '0',
    '--weight-decay',
    '0',
    '--label-smoothing',
    '0',
]


def _manifest(tree, classes, per_class, path):
    """A CSV manifest of the first `per_class` images of each of `classes` in `tree`."""
    rows = ['path,label']
    for label in classes:
        folder = f'class_{label:03d}'
        names = sorted(os.listdir(os.path.join(tree, folder)))[:per_class]
        rows += [f'{os.path.join(tree, folder, name)},{folder}' for name in names]
    with open(path, 'w', encoding='utf-8') as f:
        f.write('\n'.join(rows) + '\n')
    return path


def build(source, out, splits):
    """Builds `source` into `out` (4 shards, seed 0) unless a build is there already."""
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    if not os.path.exists(os.path.join(out, '_SUCCESS')):
        launcher.run(
            ['--input', source, '--output', out, '--splits', splits, '--num-shards', '4']
            + ['--overwrite', '--seed', '0', '--direct_running_mode=in_memory']
        )
    return out


def builds(args):
    """{name: build directory} of the data `args.what` needs."""
    work = args.work_dir
    if args.what == 'digits':
        from imageshards_cli import sample_data  # pylint: disable=import-outside-toplevel

        tree = os.path.join(work, 'digits-32')
        if not os.path.exists(os.path.join(tree, 'nine')):
            sample_data.write_digits(tree)
        return {'digits': build(tree, os.path.join(work, 'transfer-digits'), SPLITS['digits'])}
    tree = os.path.join(work, f'regions-{32 * args.source_per_class}-500x375')
    datasets.region_tree(tree, 32 * args.source_per_class)
    found = {}
    for name, classes, per_class in (
        ('source', SOURCE_CLASSES, args.source_per_class),
        ('few', FEW_CLASSES, args.per_class),
        ('photos', range(32), args.per_class),
    ):
        if name in (args.what, 'source' if args.what == 'few' else None):
            manifest = _manifest(tree, classes, per_class, os.path.join(work, f'{name}.csv'))
            out = os.path.join(work, f'transfer-{name}-{per_class}')
            found[name] = build(manifest, out, SPLITS[name])
    return found


SPLITS = {
    'source': 'train=0.8,val=0.1,test=0.1',
    'few': 'train=0.3,val=0.2,test=0.5',
    'photos': 'train=0.8,val=0.1,test=0.1',
    'digits': 'train=0.8,val=0.1,test=0.1',
}


def train(data, job_dir, flags):
    """(metrics.json's values, test accuracy of the last epoch) of one run."""
    import keras  # pylint: disable=import-outside-toplevel

    from trainer import config as config_lib  # pylint: disable=import-outside-toplevel
    from trainer import train as train_lib  # pylint: disable=import-outside-toplevel

    shutil.rmtree(job_dir, ignore_errors=True)
    keras.backend.clear_session()
    config = config_lib.parse_train_args(['--data', data, '--job-dir', job_dir, *flags])
    metrics = train_lib.train(config)
    return metrics, last_epoch_accuracy(config)


def last_epoch_accuracy(config):
    """Test accuracy of the model of a finished job's newest checkpoint (its last epoch)."""
    # pylint: disable=import-outside-toplevel
    import tensorflow as tf

    from trainer import dataset_info
    from trainer import heads as heads_lib
    from trainer import input_pipeline
    from trainer import tft_output
    from trainer.model import build_model

    info = dataset_info.load(config.data)
    normalize = tft_output.load(info) if config.model == 'small_cnn' else None
    model = build_model(
        config.model,
        info.num_classes,
        config.image_size,
        heads=heads_lib.model_heads(info, ()),
        transform_output=normalize,
    )
    latest = tf.train.latest_checkpoint(config.resolved_checkpoint_dir)
    tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    data = input_pipeline.make_dataset(
        config.data, 'test', 256, training=False, image_size=config.image_size, info=info
    )
    hits = [np.argmax(model(x, training=False), axis=1) == y.numpy() for x, y in data]
    return float(np.concatenate(hits).mean())


def contenders(args, found):
    """{name: (build, flags)} of the runs to compare."""
    size = ['--image-size', str(args.image_size), '--epochs', str(args.epochs)]
    common = ['--model', args.model, '--batch-size', str(args.batch_size), *size]
    common += ['--checkpoint-every', '0']
    for item in args.set:  # settings of every contender
        name, value = item.split('=', 1)
        common += [f'--{name.replace("_", "-")}', value]
    data = found[args.what]
    runs = {'recipe': (data, common), 'before': (data, common + BEFORE)}
    if args.what == 'few':
        runs['init-from'] = (data, common + ['--init-from', source_job(args, found)])
    return runs


def source_job(args, found):
    """The job directory of the model trained on the source classes (trained once)."""
    job = os.path.join(args.work_dir, f'transfer-source-job-{args.model}-{args.image_size}')
    if not os.path.exists(os.path.join(job, 'metrics.json')):
        flags = ['--model', args.model, '--image-size', str(args.image_size)]
        flags += ['--epochs', str(args.source_epochs), '--batch-size', str(args.batch_size)]
        metrics, _ = train(found['source'], job, flags + ['--checkpoint-every', '0'])
        print(f'source model: test accuracy {metrics.get("test_accuracy"):.3f}', flush=True)
    return job


def variations(args, runs):
    """`runs`, and with --vary the contender `--vary-run` once per value of each setting."""
    if not args.vary:
        return runs
    data, flags = runs[args.vary_run]
    found = dict(runs)
    for item in args.vary:
        name, values = item.split('=', 1)
        for value in values.split(','):
            found[f'{name}={value}'] = (data, flags + [f'--{name.replace("_", "-")}', value])
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('what', choices=('few', 'photos', 'digits'))
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1])
    parser.add_argument('--model', default='small_cnn')
    parser.add_argument('--image-size', type=int, default=64)
    parser.add_argument('--epochs', type=int, default=10)
    parser.add_argument('--batch-size', type=int, default=32)
    parser.add_argument('--per-class', type=int, default=40, help='few and photos')
    parser.add_argument('--source-per-class', type=int, default=150)
    parser.add_argument('--source-epochs', type=int, default=10)
    parser.add_argument('--set', nargs='*', default=[], help='setting=value ... for every run')
    parser.add_argument('--vary', nargs='*', default=[], help='setting=v1,v2 ...')
    parser.add_argument('--vary-run', default='', help='default: init-from (few), else recipe')
    parser.add_argument('--work-dir', default=os.path.join(os.path.dirname(__file__), 'out'))
    args = parser.parse_args(argv)
    args.vary_run = args.vary_run or ('init-from' if args.what == 'few' else 'recipe')
    logging.basicConfig(level=logging.WARNING)
    os.makedirs(args.work_dir, exist_ok=True)
    runs = variations(args, contenders(args, builds(args)))
    results = {name: [] for name in runs}
    job = os.path.join(args.work_dir, 'transfer-job')
    for seed in args.seeds:
        for name, (data, flags) in runs.items():
            metrics, last = train(data, job, flags + ['--seed', str(seed)])
            row = (metrics['test_accuracy'], last, metrics['best_epoch'], metrics['train_seconds'])
            results[name].append(row)
            print(
                f'  seed {seed}: {name:<34} test accuracy {row[0]:.3f} (epoch {row[2]} kept), '
                f'last epoch {row[1]:.3f}, {row[3]:.0f} s',
                flush=True,
            )
    print(
        f'\n{args.what}: {args.model} at {args.image_size} px, {args.epochs} epochs, seeds '
        f'{args.seeds}; means'
    )
    for name, rows in results.items():
        kept, last, _, seconds = (statistics.mean(column) for column in zip(*rows))
        print(
            f'{name:<36} test accuracy {kept:.3f} (kept epoch), {last:.3f} (last epoch); '
            f'{seconds:.0f} s'
        )


if __name__ == '__main__':
    main()
