"""Scale on one machine: 100,000 and 1,000,000 small JPEGs through `imageshards build`.

Generates (or reuses, under bench/out/) label-sorted trees of 64x64 JPEGs (a few KB each) cut
from scikit-learn's sample photos, builds each with `imageshards build` in the local mode(s)
asked for, with a warm page cache, and prints wall time, images/s, the peak RSS of the whole
process tree (and of each process), and how the peak at the largest count compares with the
peak at the smallest. Targets on a 2-core machine: 1,000,000 images in at most 15 minutes,
peak RSS at most 3 GB, and at most 1.5x the peak at 100,000.

    python -m bench.scale                                   # 100,000 and 1,000,000
    python -m bench.scale --counts 100000 --modes in_memory,multi_processing
"""

import argparse
import os
import shutil

from bench import datasets
from bench.build_throughput import MODES
from bench.build_throughput import build_command
from bench.measure import measure

TARGET_SECONDS = 15 * 60
TARGET_PEAK = 3e9
TARGET_RATIO = 1.5


def _describe(measured):
    roles = {}
    for role, peak in measured.process_peaks:
        if peak > 50 * 2**20:  # helpers of the runner (a few MiB) are not worth a column
            roles.setdefault(role, []).append(f'{peak / 2**20:.0f}')
    return '; '.join(f'{role} {"+".join(peaks)}' for role, peaks in roles.items())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--counts', default='100000,1000000', help='comma-separated image counts')
    parser.add_argument(
        '--modes', default='multi_processing', help=f'comma-separated, of {sorted(MODES)}'
    )
    parser.add_argument('--extra', default='', help='more flags for imageshards build')
    parser.add_argument('--work-dir', default=os.path.join(os.path.dirname(__file__), 'out'))
    parser.add_argument('--keep-output', action='store_true', help='leave the last build in place')
    args = parser.parse_args(argv)
    counts = [int(count) for count in args.counts.split(',')]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
    trees = {}
    for count in counts:
        trees[count] = os.path.join(args.work_dir, f'photos-{count}-64x64')
        print(f'generating {count:,} JPEGs of 64x64 in {trees[count]} ...', flush=True)
        info = datasets.photo_tree(trees[count], count, size=(64, 64))
        print(f'  {info["bytes"] / 1e6:,.0f} MB ({info["bytes"] / count / 1e3:.1f} KB each)')
    results = {}
    for mode in args.modes.split(','):
        for count in counts:
            out = os.path.join(args.work_dir, f'scale-out-{count}')
            shutil.rmtree(out, ignore_errors=True)
            datasets.warm_page_cache(trees[count])
            print(f'building {count:,} images, {mode} ...', flush=True)
            command = build_command(trees[count], out, mode, *args.extra.split())
            results[(mode, count)] = measured = measure(command, env=env)
            print(f'  {measured.seconds:.1f} s, peak {measured.peak / 2**20:,.0f} MiB', flush=True)
            if not args.keep_output:
                shutil.rmtree(out, ignore_errors=True)
    _print_table(results, counts)


def _print_table(results, counts):
    print(f'\n{"mode":<18}{"images":>11}{"seconds":>9}{"images/s":>10}{"peak RSS":>11}{"ratio":>7}')
    for (mode, count), measured in results.items():
        smallest = results[(mode, counts[0])].peak
        print(
            f'{mode:<18}{count:>11,}{measured.seconds:>9.1f}{count / measured.seconds:>10,.0f}'
            f'{measured.peak / 2**20:>7,.0f} MiB{measured.peak / smallest:>6.2f}x'
            f'   ({_describe(measured)} MiB)'
        )
    for (mode, count), measured in results.items():
        if count != counts[-1]:
            continue
        ratio = measured.peak / results[(mode, counts[0])].peak
        verdicts = [
            f'time {"met" if measured.seconds <= TARGET_SECONDS else "MISSED"}',
            f'peak {"met" if measured.peak <= TARGET_PEAK else "MISSED"}',
            f'ratio {"met" if ratio <= TARGET_RATIO else "MISSED"}',
        ]
        print(f'{mode} at {count:,}: ' + ', '.join(verdicts))


if __name__ == '__main__':
    main()
