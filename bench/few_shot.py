"""Few images, every image: the trainer on 15 training images against a plain Keras script.

Data: scikit-learn's digits (`imageshards sample-data`, 32x32), built with `imageshards build`
from manifests:
  source   digits 0-4, all of their images (train 0.8, val 0.1, test 0.1): the trainer trains
           `small_cnn` on them once, the model the others start from
  few      digits 5-9, classes the source never saw: `--train-per-class` images each for
           training (3: 15 in all), `--val-per-class` each for validation, the rest for the
           test (a manifest `split` column, so the counts are exact)
Contenders on the few set, each for `--epochs` epochs at `--batch-size`, per seed:
  init-from  the trainer, `--init-from` the source job (its defaults otherwise)
  scratch    the trainer from random weights
  plain      a plain Keras script: the same model (trainer/model.py's small_cnn over the few
             build's normalization), every layer but the head copied from the source model, a
             new head, Adam at Keras' default rate, model.fit on numpy arrays of all the
             training images each epoch (shuffled), the last epoch measured. Its images are the
             trainer's evaluation images (make_dataset, central crop, the same size), for
             training and test alike: no augmentation
Prints each run's test accuracy (and for the trainer its steps per epoch and the epoch kept),
then the means over seeds. Figures: bench/RESULTS.md, "Few images, every image".

    python -m bench.few_shot --seeds 0 1 2 3 4
    python -m bench.few_shot --seeds 0 1 2 --set warmup_epochs=3 --only init-from scratch
"""

import argparse
import logging
import os
import statistics

import numpy as np

from bench import transfer

SOURCE_DIGITS = ('zero', 'one', 'two', 'three', 'four')
FEW_DIGITS = ('five', 'six', 'seven', 'eight', 'nine')
CONTENDERS = ('init-from', 'scratch', 'plain')


def _digit_files(tree, digit):
    folder = os.path.join(tree, digit)
    return [os.path.join(folder, name) for name in sorted(os.listdir(folder))]


def _write_manifest(path, rows, header='path,label'):
    with open(path, 'w', encoding='utf-8') as f:
        f.write('\n'.join([header, *(','.join(row) for row in rows)]) + '\n')
    return path


def builds(args, data_seed):
    """(source build, few build) directories, made once under `args.work_dir`; `data_seed`
    picks the few set's training and validation images."""
    from imageshards_cli import sample_data  # pylint: disable=import-outside-toplevel

    tree = os.path.join(args.work_dir, 'digits-32')
    if not os.path.exists(os.path.join(tree, 'nine')):
        sample_data.write_digits(tree)
    source_rows = [(path, digit) for digit in SOURCE_DIGITS for path in _digit_files(tree, digit)]
    source = _write_manifest(os.path.join(args.work_dir, 'few-shot-source.csv'), source_rows)
    rng = np.random.default_rng(data_seed)
    few_rows = []
    for digit in FEW_DIGITS:
        files = list(rng.permutation(_digit_files(tree, digit)))
        cut = args.train_per_class + args.val_per_class
        few_rows += [(path, digit, 'train') for path in files[: args.train_per_class]]
        few_rows += [(path, digit, 'val') for path in files[args.train_per_class : cut]]
        few_rows += [(path, digit, 'test') for path in files[cut:]]
    name = f'{args.train_per_class}-{args.val_per_class}-{data_seed}'
    few = _write_manifest(
        os.path.join(args.work_dir, f'few-shot-few-{name}.csv'), few_rows, 'path,label,split'
    )
    return (
        transfer.build(
            source, os.path.join(args.work_dir, 'few-shot-source'), transfer.SPLITS['source']
        ),
        transfer.build(few, os.path.join(args.work_dir, f'few-shot-few-{name}'), 'train=1'),
    )


def source_job(args, source):
    """The job directory of `small_cnn` trained on the source digits (trained once)."""
    job = os.path.join(args.work_dir, f'few-shot-source-job-{args.image_size}')
    if not os.path.exists(os.path.join(job, 'metrics.json')):
        flags = ['--image-size', str(args.image_size), '--epochs', str(args.source_epochs)]
        flags += ['--batch-size', '32', '--checkpoint-every', '0']
        metrics, _ = transfer.train(source, job, flags)
        print(f'source model: test accuracy {metrics["test_accuracy"]:.3f}', flush=True)
    return job


def trainer_run(args, few, seed, init_from):
    """(test accuracy, steps per epoch, epoch kept) of the trainer on the few build."""
    flags = ['--image-size', str(args.image_size), '--epochs', str(args.epochs)]
    flags += ['--batch-size', str(args.batch_size), '--checkpoint-every', '0', '--seed', str(seed)]
    flags += ['--init-from', init_from] if init_from else []
    for item in args.set:
        name, value = item.split('=', 1)
        flags += [f'--{name.replace("_", "-")}', value]
    metrics, _ = transfer.train(few, os.path.join(args.work_dir, 'few-shot-job'), flags)
    return metrics['test_accuracy'], metrics['steps_per_epoch'], metrics['best_epoch']


def _arrays(data, split, image_size, info):
    """(uint8 images, labels) of a split as the trainer evaluates them (central crops)."""
    from trainer import input_pipeline  # pylint: disable=import-outside-toplevel

    batches = input_pipeline.make_dataset(
        data, split, 256, training=False, image_size=image_size, info=info
    )
    images, labels = zip(*((x.numpy(), y.numpy()) for x, y in batches))
    return np.concatenate(images), np.concatenate(labels)


def plain_run(args, few, seed, source):
    """Test accuracy of the plain Keras script (the module docstring's `plain`)."""
    # pylint: disable=import-outside-toplevel
    import keras

    from trainer import dataset_info
    from trainer import tft_output
    from trainer import warm_start
    from trainer.model import build_model
    from trainer.model import is_head

    keras.backend.clear_session()
    keras.utils.set_random_seed(seed + 1)
    size = (args.image_size, args.image_size)
    info = dataset_info.load(few)
    model = build_model('small_cnn', info.num_classes, size, transform_output=tft_output.load(info))
    weights, _ = warm_start.read(source, 'small_cnn', size)
    for layer in model.layers:
        if layer.weights and not is_head(layer.name):
            layer.set_weights([weights[weight.path] for weight in layer.weights])
    model.compile(
        optimizer=keras.optimizers.Adam(),
        loss='sparse_categorical_crossentropy',
        metrics=['accuracy'],
    )
    x, y = _arrays(few, 'train', size, info)
    model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, shuffle=True, verbose=0)
    x, y = _arrays(few, 'test', size, info)
    return float(model.evaluate(x, y, batch_size=256, verbose=0, return_dict=True)['accuracy'])


def run_all(args):
    """{contender: {data seed: [test accuracy per seed]}}, each run printed as it ends."""
    results = {name: {} for name in args.only}
    for data_seed in args.data_seeds:
        source, few = builds(args, data_seed)
        job = source_job(args, source)
        for seed in args.seeds:
            for name in args.only:
                if name == 'plain':
                    accuracy, detail = plain_run(args, few, seed, job), ''
                else:
                    init_from = job if name == 'init-from' else ''
                    accuracy, steps, kept = trainer_run(args, few, seed, init_from)
                    detail = f' ({steps} steps an epoch, epoch {kept} kept)'
                results[name].setdefault(data_seed, []).append(accuracy)
                print(
                    f'  data {data_seed} seed {seed}: {name:<10} test accuracy '
                    f'{accuracy:.3f}{detail}',
                    flush=True,
                )
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2, 3, 4])
    parser.add_argument('--epochs', type=int, default=30)
    parser.add_argument('--batch-size', type=int, default=8)
    parser.add_argument('--image-size', type=int, default=32)
    parser.add_argument('--train-per-class', type=int, default=3)
    parser.add_argument('--val-per-class', type=int, default=10)
    parser.add_argument(
        '--data-seeds', type=int, nargs='+', default=[0, 1], help='a few set each: its images'
    )
    parser.add_argument('--source-epochs', type=int, default=10)
    parser.add_argument('--set', nargs='*', default=[], help='setting=value ... (trainer runs)')
    parser.add_argument('--only', nargs='*', choices=CONTENDERS, default=list(CONTENDERS))
    parser.add_argument('--work-dir', default=os.path.join(os.path.dirname(__file__), 'out'))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.makedirs(args.work_dir, exist_ok=True)
    results = run_all(args)
    print(
        f'\nfew: {args.train_per_class} training images per class, small_cnn at '
        f'{args.image_size} px, {args.epochs} epochs at batch {args.batch_size}, seeds '
        f'{args.seeds}, data seeds {args.data_seeds}; test accuracy, means'
    )
    print(f'{"":<10} ' + ' '.join(f'data {seed:<3}' for seed in args.data_seeds) + '  all')
    for name, per_data in results.items():
        means = [statistics.mean(per_data[seed]) for seed in args.data_seeds]
        everything = [accuracy for seed in args.data_seeds for accuracy in per_data[seed]]
        print(
            f'{name:<10} '
            + ' '.join(f'{mean:<8.3f}' for mean in means)
            + f' {statistics.mean(everything):.3f}',
            flush=True,
        )


if __name__ == '__main__':
    main()
