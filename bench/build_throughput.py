"""Build throughput: `imageshards build` against the write-ups' one-process baseline.

Builds >= 20,000 JPEGs of about 500x375 (cut from scikit-learn's sample photos) with
`imageshards build` in each local mode asked for, and with `bench/baseline_writer.py`
(list, random.shuffle, read bytes, tf.io.TFRecordWriter, no validation), on the same data in
one run with a warm page cache, and prints images/s, the ratio to the baseline and the peak
RSS of each whole process tree.

    python -m bench.build_throughput --count 20000
    python -m bench.build_throughput --count 200000 --size 64x64 --no-baseline  # memory
"""

import argparse
import os
import shutil
import sys

from bench import datasets
from bench.measure import run_measured

MODES = {
    'in_memory': ['--direct_running_mode=in_memory'],
    'multi_threading': ['--direct_running_mode=multi_threading', '--direct_num_workers=2'],
    'multi_processing': ['--direct_running_mode=multi_processing', '--direct_num_workers=2'],
}


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
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
    results = {}
    if not args.no_baseline:
        datasets.warm_page_cache(data)
        out = os.path.join(args.work_dir, 'baseline-out')
        shutil.rmtree(out, ignore_errors=True)
        results['baseline'] = run_measured(
            [sys.executable, '-m', 'bench.baseline_writer', data, out], env=env
        )[:2]
        shutil.rmtree(out, ignore_errors=True)
    for mode in args.modes.split(','):
        out = os.path.join(args.work_dir, f'build-{mode}')
        datasets.warm_page_cache(data)
        command = [
            sys.executable,
            '-m',
            'pipelines.build',
            '--input',
            data,
            '--output',
            out,
            '--overwrite',
            *MODES[mode],
            *args.extra.split(),
        ]
        results[mode] = run_measured(command, env=env)[:2]
        shutil.rmtree(out, ignore_errors=True)
    base_rate = args.count / results['baseline'][0] if 'baseline' in results else None
    print(f'\n{"contender":<28}{"seconds":>9}{"images/s":>10}{"vs baseline":>13}{"peak RSS":>11}')
    for name, (seconds, peak) in results.items():
        rate = args.count / seconds
        ratio = f'{rate / base_rate:>12.2f}x' if base_rate else f'{"-":>13}'
        print(f'{name:<28}{seconds:>9.1f}{rate:>10.0f}{ratio}{peak / 2**20:>8.0f} MiB')


if __name__ == '__main__':
    main()
