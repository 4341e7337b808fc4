"""Build throughput: `imageshards build` against the write-ups' one-process baseline.

Builds >= 20,000 JPEGs of about 500x375 (cut from scikit-learn's sample photos) with
`imageshards build` in each local mode asked for, and with `bench/baseline_writer.py`
(list, random.shuffle, read bytes, tf.io.TFRecordWriter, no validation), on the same data in
one run with a warm page cache, and prints images/s, the ratio to the baseline and the peak
RSS of each whole process tree. For context it also runs the baseline with a Pillow decode of
each image, the validation imageshards does, in its one process.

    python -m bench.build_throughput --count 20000
    python -m bench.build_throughput --count 200000 --size 64x64 --no-baseline  # memory
    python -m bench.build_throughput --count 20000 --no-baseline --compare-analysis --repeat 3

Builds analyse the train split (tf.Transform) unless `--extra=--no-analyze`; with
`--compare-analysis`, each mode runs both ways, and the overhead of the analysis is printed.
"""

import argparse
import os
import shutil
import statistics
import sys

from bench import datasets
from bench.measure import run_measured

MODES = {
    'in_memory': ['--direct_running_mode=in_memory'],
    'multi_threading': ['--direct_running_mode=multi_threading', '--direct_num_workers=2'],
    'multi_processing': ['--direct_running_mode=multi_processing', '--direct_num_workers=2'],
}


def python_module(name, *args):
    """`python -m name args` with this interpreter."""
    return [sys.executable, '-m', name, *args]


def imageshards_build(data, out, *flags):
    """`imageshards build` of `data` into `out`, as a user types it (the console script is
    `imageshards_cli`)."""
    return python_module(
        'imageshards_cli', 'build', '--input', data, '--output', out, '--overwrite', *flags
    )


def build_command(data, out, mode, *flags):
    """`imageshards build` of `data` into `out` in a local running mode (a key of MODES)."""
    return imageshards_build(data, out, *MODES[mode], *flags)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--count', type=int, default=20_000)
    parser.add_argument('--work-dir', default=os.path.join(os.path.dirname(__file__), 'out'))
    parser.add_argument(
        '--modes', default='multi_processing', help=f'comma-separated, of {sorted(MODES)}'
    )
    parser.add_argument('--extra', default='', help='more flags for imageshards build')
    parser.add_argument('--size', default='500x375', help='image width x height')
    parser.add_argument('--no-baseline', action='store_true', help='build with imageshards only')
    parser.add_argument(
        '--repeat', type=int, default=1, help='runs per contender; the median counts'
    )
    parser.add_argument(
        '--compare-analysis',
        action='store_true',
        help='run every mode with and without --no-analyze, and print the difference',
    )
    args = parser.parse_args(argv)
    size = tuple(int(side) for side in args.size.split('x'))
    data = os.path.join(args.work_dir, f'photos-{args.count}-{args.size}')
    print(f'generating {args.count} JPEGs of {args.size} in {data} ...', flush=True)
    info = datasets.photo_tree(data, args.count, size=size)
    print(
        f'{info["count"]} images, {info["bytes"] / 1e6:.0f} MB '
        f'({info["bytes"] / info["count"] / 1e3:.0f} KB each)',
        flush=True,
    )
    contenders = {}
    if not args.no_baseline:
        contenders['baseline'] = lambda out: python_module('bench.baseline_writer', data, out)
        contenders['baseline + Pillow validation'] = lambda out: python_module(
            'bench.baseline_writer', data, out, '--validate'
        )
    variants = {'': []}
    if args.compare_analysis:
        variants = {' --no-analyze': ['--no-analyze'], ' + analysis': []}
    for mode in args.modes.split(','):
        for suffix, flags in variants.items():
            contenders[mode + suffix] = lambda out, mode=mode, flags=flags: build_command(
                data, out, mode, *flags, *args.extra.split()
            )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
    runs = {name: [] for name in contenders}
    for _ in range(args.repeat):  # interleaved, so that drift in the machine hits all alike
        for name, command in contenders.items():
            out = os.path.join(args.work_dir, 'out-' + name.replace(' ', '_').replace('+', 'plus'))
            shutil.rmtree(out, ignore_errors=True)
            datasets.warm_page_cache(data)
            runs[name].append(run_measured(command(out), env=env)[:2])
            shutil.rmtree(out, ignore_errors=True)
    results = {
        name: (statistics.median(s for s, _ in measured), max(p for _, p in measured))
        for name, measured in runs.items()
    }
    base_rate = args.count / results['baseline'][0] if 'baseline' in results else None
    print(f'\nmedian of {args.repeat} run(s); peak RSS is the largest seen')
    print(f'{"contender":<28}{"seconds":>9}{"images/s":>10}{"vs baseline":>13}{"peak RSS":>11}')
    for name, (seconds, peak) in results.items():
        rate = args.count / seconds
        ratio = f'{rate / base_rate:>12.2f}x' if base_rate else f'{"-":>13}'
        print(f'{name:<28}{seconds:>9.1f}{rate:>10.0f}{ratio}{peak / 2**20:>8.0f} MiB')
    if args.compare_analysis:
        for mode in args.modes.split(','):
            without = results[f'{mode} --no-analyze'][0]
            extra = results[f'{mode} + analysis'][0] / without - 1
            print(f'{mode}: the analysis adds {extra:.1%} to the build time')


if __name__ == '__main__':
    main()
