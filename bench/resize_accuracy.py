"""Does --resize-shorter-side change what a model learns? `small_cnn` trained on a build as it is
and on the same images built resized, same seed, same epochs, same splits (the split of an image
is a function of the seed and its key, not of its bytes): test accuracy of each.

  digits   scikit-learn's 1,797 real digits (`imageshards sample-data --size 128`), trained at
           32x32; resized build: --resize-shorter-side 37 (32 * 256 / 224, the ImageNet ratio)
  photos   32 classes of 500x375 photo crops (bench/datasets.region_tree: photo x cell of a
           4x4 grid, neighbours overlapping), trained at 64x64; resized build:
           --resize-shorter-side 73 (64 * 256 / 224)

    python -m bench.resize_accuracy digits --seeds 0 1 2
    python -m bench.resize_accuracy photos --count 4000 --epochs 6 --seeds 0 1
"""

import argparse
import json
import logging
import os
import shutil
import statistics

from bench import datasets

SPLITS = 'train=0.8,val=0.1,test=0.1'


def _build(data, out, *flags):
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    if os.path.exists(os.path.join(out, '_SUCCESS')):
        return out
    launcher.run(
        ['--input', data, '--output', out, '--splits', SPLITS, '--num-shards', '4']
        + ['--overwrite', '--seed', '0', *flags]
    )
    return out


def _train(data, job_dir, image_size, epochs, seed):
    from trainer import config as config_lib  # pylint: disable=import-outside-toplevel
    from trainer import train as train_lib  # pylint: disable=import-outside-toplevel

    shutil.rmtree(job_dir, ignore_errors=True)
    flags = ['--data', data, '--job-dir', job_dir, '--image-size', str(image_size)]
    flags += ['--epochs', str(epochs), '--seed', str(seed), '--checkpoint-every', '0']
    return train_lib.train(config_lib.parse_train_args(flags))


def _trees(args):
    if args.what == 'digits':
        from imageshards_cli import sample_data  # pylint: disable=import-outside-toplevel

        tree = os.path.join(args.work_dir, 'digits-128')
        if not os.path.exists(os.path.join(tree, 'nine')):
            sample_data.write_digits(tree, size=128)
        return tree, 32, 37
    tree = os.path.join(args.work_dir, f'regions-{args.count}-500x375')
    datasets.region_tree(tree, args.count)
    return tree, 64, 73


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('what', choices=('digits', 'photos'))
    parser.add_argument('--count', type=int, default=3000)
    parser.add_argument('--epochs', type=int, default=8)
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1])
    parser.add_argument('--work-dir', default=os.path.join(os.path.dirname(__file__), 'out'))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    tree, image_size, side = _trees(args)
    name = os.path.basename(tree)
    builds = {
        'as it is': _build(tree, os.path.join(args.work_dir, f'acc-{name}-original')),
        f'--resize-shorter-side {side}': _build(
            tree,
            os.path.join(args.work_dir, f'acc-{name}-{side}'),
            '--resize-shorter-side',
            str(side),
        ),
    }
    found = {label: [] for label in builds}
    for seed in args.seeds:
        for label, data in builds.items():
            job = os.path.join(args.work_dir, f'acc-job-{name}')
            metrics = _train(data, job, image_size, args.epochs, seed)
            accuracy = metrics.get('test_accuracy', metrics.get('test', {}).get('accuracy'))
            found[label].append(accuracy)
            print(f'  seed {seed}: {label:<28} test accuracy {accuracy}', flush=True)
            print('    ' + json.dumps(metrics, default=str)[:300], flush=True)
    size = f'{image_size}x{image_size}'
    print(f'\n{name}: small_cnn at {size}, {args.epochs} epochs, seeds {args.seeds}')
    for label, values in found.items():
        spread = f' (seeds: {", ".join(f"{v:.3f}" for v in values)})'
        print(f'{label:<28} test accuracy {statistics.mean(values):.3f}{spread}')


if __name__ == '__main__':
    main()
