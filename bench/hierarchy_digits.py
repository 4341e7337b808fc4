"""Two nested label levels on real digits: parity (odd, even) and the digit itself.

Builds scikit-learn's 1,797 digits from a manifest with `label/parity` and `label/digit`
columns (train 0.8, val 0.1, test 0.1), trains `small_cnn` on both levels with
`--hierarchy off` (an independent softmax head per level) and `--hierarchy auto` (parity
derived from the digit: trainer/hierarchy.py), and measures what the served model answers on
the val and test splits' raw bytes: each level's accuracy, the parity the digit answer implies,
and how often the two answers contradict each other. For the independent heads it also shows
the parity the summed digit probabilities would give.

    python -m bench.hierarchy_digits [--epochs 8] [--image-size 28] [--seeds 0 1 2]
        [--out /tmp/hierarchy_digits]
"""

import argparse
import logging
import os
import shutil

import numpy as np

from imageshards import dataset_json
from imageshards import features
from imageshards import records

_LOG = logging.getLogger('bench.hierarchy_digits')
DIGITS = ('zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine')


def parity(digit):
    return 'even' if DIGITS.index(digit) % 2 == 0 else 'odd'


def make_build(out):
    """The digits, a manifest of them with parity and digit levels, and their build."""
    from imageshards_cli import sample_data  # pylint: disable=import-outside-toplevel
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    tree = os.path.join(out, 'digits')
    sample_data.write_digits(tree)
    rows = ['path,label,label/parity,label/digit']
    for digit in DIGITS:
        for name in sorted(os.listdir(os.path.join(tree, digit))):
            rows.append(f'digits/{digit}/{name},{digit},{parity(digit)},{digit}')
    manifest = os.path.join(out, 'digits.csv')
    with open(manifest, 'w', encoding='utf-8') as f:
        f.write('\n'.join(rows) + '\n')
    data = os.path.join(out, 'build')
    launcher.run(
        ['--input', manifest, '--output', data, '--splits', 'train=0.8,val=0.1,test=0.1']
        + ['--direct_running_mode=in_memory']
    )
    return data


def _split_records(data, split):
    """[(encoded bytes, parity name, digit name)] of a split's records."""
    found = []
    for path in dataset_json.Build.load(data).shard_paths(split):
        with open(path, 'rb') as f:
            for _, record in records.framed_records(f, path):
                values = records.example_values(records.parse_example(record))
                encoded, parity_name, digit = (
                    values[key][1][0]
                    for key in (
                        features.ENCODED,
                        features.level_text('parity'),
                        features.level_text('digit'),
                    )
                )
                found.append((encoded, parity_name.decode(), digit.decode()))
    return found


def served_answers(model_dir, examples):
    """What the SavedModel answers for `examples`' bytes: measures of agreement and accuracy."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    serve = tf.saved_model.load(model_dir).signatures['serving_default']
    outputs = serve(image_bytes=tf.constant([encoded for encoded, _, _ in examples]))
    digit = [name.decode() for name in outputs['digit/top_class'].numpy()]
    served_parity = [name.decode() for name in outputs['parity/top_class'].numpy()]
    probabilities = outputs['digit/probabilities'].numpy()
    names = [name.decode() for name in outputs['digit/class_names'].numpy()[0]]
    parity_names = [n.decode() for n in outputs['parity/class_names'].numpy()[0]]
    odd = np.array([parity(name) == 'odd' for name in names])
    summed = np.where(probabilities[:, odd].sum(axis=1) > 0.5, 'odd', 'even')
    truth_parity = np.array([p for _, p, _ in examples])
    truth_digit = np.array([d for _, _, d in examples])
    implied = np.array([parity(d) for d in digit])
    return {
        'digit_accuracy': float(np.mean(np.array(digit) == truth_digit)),
        'parity_accuracy': float(np.mean(np.array(served_parity) == truth_parity)),
        'parity_implied_by_digit': float(np.mean(implied == truth_parity)),
        'parity_of_summed_digit_probabilities': float(np.mean(summed == truth_parity)),
        'contradictions': float(np.mean(implied != np.array(served_parity))),
        'parity_classes': parity_names,
    }


def train(data, job_dir, hierarchy, args, seed):
    from trainer import config as config_lib  # pylint: disable=import-outside-toplevel
    from trainer import train as train_lib  # pylint: disable=import-outside-toplevel

    shutil.rmtree(job_dir, ignore_errors=True)
    flags = ['--data', data, '--job-dir', job_dir, '--image-size', str(args.image_size)]
    flags += ['--epochs', str(args.epochs), '--seed', str(seed), '--checkpoint-every', '0']
    flags += ['--label-levels', 'parity,digit', '--hierarchy', hierarchy]
    config = config_lib.parse_train_args(flags)
    return config, train_lib.train(config)


def main(argv=None):
    parser = argparse.ArgumentParser(prog='python -m bench.hierarchy_digits', description=__doc__)
    parser.add_argument('--epochs', type=int, default=8)
    parser.add_argument('--image-size', type=int, default=28)
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--out', default='/tmp/hierarchy_digits')
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(message)s', datefmt='%H:%M:%S')
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    data = make_build(args.out)
    held_out = _split_records(data, 'val') + _split_records(data, 'test')
    rows = []
    for seed in args.seeds:
        for hierarchy in ('off', 'auto'):
            config, _ = train(data, os.path.join(args.out, 'job'), hierarchy, args, seed)
            found = served_answers(config.resolved_model_dir, held_out)
            _LOG.info('seed %d, --hierarchy %s: %s', seed, hierarchy, found)
            rows.append((seed, hierarchy, found))
    print(f'{len(held_out)} val+test images, served answers')
    print(
        '| seed | --hierarchy | digit | parity | parity implied by digit | parity of summed '
        'digit probabilities | contradictions |'
    )
    print('|---|---|---:|---:|---:|---:|---:|')
    for seed, hierarchy, found in rows:
        print(
            f'| {seed} | {hierarchy} | {found["digit_accuracy"]:.3f} | '
            f'{found["parity_accuracy"]:.3f} | {found["parity_implied_by_digit"]:.3f} | '
            f'{found["parity_of_summed_digit_probabilities"]:.3f} | '
            f'{found["contradictions"]:.3f} |'
        )
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
