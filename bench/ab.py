"""One change, before and after: `imageshards build` from two checkouts, alternated, same tree.

The peers bench compares tools within one run; this compares two versions of this one, which
drift alone cannot tell apart in figures taken an hour apart. Each side runs from its own
checkout with its own interpreter (a fresh clone's `.venv`, made by the README's first command),
the image pages warmed before each build, the tf.Transform graph cache shared. Wall time, and
CPU seconds of each build's whole process tree (bench/measure.py) with their ratio per round.

    git clone -q . /tmp/before && (cd /tmp/before && git checkout -q HEAD~1 && \\
        python3 -m venv .venv && .venv/bin/pip install -q -e .)
    python -m bench.ab /tmp/before --data bench/out/photos-200000-64x64 --rounds 6
    python -m bench.ab /tmp/before --data bench/out/photos-20000-500x375 --no-analyze
"""

import argparse
import os
import shutil
import statistics
import sys

from bench import datasets
from bench.measure import measure

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('before', help='the other checkout (with its .venv)')
    parser.add_argument('--data', required=True, help='an image tree (bench.datasets)')
    parser.add_argument('--rounds', type=int, default=6)
    parser.add_argument('--work-dir', default=os.path.join(HERE, 'bench', 'out'))
    args, flags = parser.parse_known_args(argv)  # the rest: flags for imageshards build
    flags = [flag for flag in flags if flag != '--']
    sides = {
        'before': os.path.abspath(args.before),
        'after': HERE,
    }
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL='2',
        IMAGESHARDS_CACHE_DIR=os.path.join(args.work_dir, 'transform-cache'),
    )
    data = os.path.abspath(args.data)
    seconds = {name: [] for name in sides}
    cpu = {name: [] for name in sides}
    for round_ in range(args.rounds):
        for name in list(sides) if round_ % 2 == 0 else list(sides)[::-1]:
            out = os.path.join(args.work_dir, f'ab-{name}')
            shutil.rmtree(out, ignore_errors=True)
            datasets.warm_page_cache(data)
            python = os.path.join(sides[name], '.venv', 'bin', 'python')
            command = [python, '-m', _command_module(sides[name]), 'build', '--input', data]
            command += ['--output', out, '--num-shards', '16', '--seed', '0', *flags]
            measured = measure(command, env=env, cwd=sides[name])
            seconds[name].append(measured.seconds)
            cpu[name].append(measured.cpu)
            print(
                f'  round {round_ + 1}: {name:<7}{measured.seconds:>7.1f} s '
                f'{measured.cpu:>7.1f} s CPU {measured.peak / 2**20:>7.0f} MiB',
                flush=True,
            )
            shutil.rmtree(out, ignore_errors=True)
    for name, values in seconds.items():
        each = ', '.join(f'{value:.1f}' for value in values)
        print(f'{name:<7} median {statistics.median(values):.2f} s  ({each})')
        print(f'{"":<7} CPU median {statistics.median(cpu[name]):.2f} s')
    # Each round's pair ran back to back: their ratio is what holds under a shared machine's load.
    ratios = [after / before for after, before in zip(cpu['after'], cpu['before'])]
    print(
        f'CPU after/before, median of the rounds: {statistics.median(ratios):.3f} '
        f'({min(ratios):.3f}-{max(ratios):.3f})'
    )


def _command_module(checkout):
    """The `imageshards` command's module in a checkout: imageshards_cli, or in a checkout from
    before the command had a package of its own, the foundation's `cli` subpackage."""
    own_package = os.path.isdir(os.path.join(checkout, 'imageshards_cli'))
    return 'imageshards_cli' if own_package else 'imageshards.cli'


if __name__ == '__main__':
    sys.exit(main())
