"""imageshards against the tools a user would pick instead, on the same images, in one run.

Building (`build`, the default): one image tree (JPEGs cut from scikit-learn's sample photos,
stored label-sorted in 10 class folders), the images' page cache warm (or, with `--cache cold`,
dropped before each build: a first pass over data larger than memory), 16 shards for everyone,
contenders alternated round by round so that the machine's drift hits all alike:
  tfds           TensorFlow Datasets' GeneratorBasedBuilder (bench/peer_tfds.py)
  hf             Hugging Face datasets: imagefolder -> shuffle -> save_to_disk (bench/peer_hf.py)
  imageshards    `imageshards build` as a user runs it (analysis on), on a fresh machine as
                 after earlier builds: its tf.Transform graph is one the package ships for the
                 default kinds (pipelines/analysis/graph_cache.py)
  new kind       the same with an empty cache and the shipped graph ignored: TFT writes the
                 graph, as for the first build of a kind the package does not ship (each round)
  --no-analyze   `imageshards build --no-analyze`
  naive          list, random.shuffle, tf.io.TFRecordWriter, no validation (--naive)
With `--formats`, the shard formats instead: `imageshards build` in each `--shard-format`
(tfrecord, array_record, parquet) against TFDS's ArrayRecord writer (the same builder,
`file_format='array_record'`) and Hugging Face's `Dataset.to_parquet` after its shuffle.
Wall time, CPU seconds (user + system of every process, what Dataflow bills) and peak RSS of
each contender's whole process tree (launcher and workers). The CPU ratio to TFDS is taken
round by round (each round's contenders ran back to back), then its median is printed: under a
shared machine's load that pairing is the figure to quote.

Reading (`read`): images/s delivered at 224x224 in batches of 64, in one process, contenders
alternated: the trainer's `make_dataset(training=True)` on an imageshards build,
`keras.utils.image_dataset_from_directory` on the tree, and TFDS `as_dataset` + resize on the
TFDS build (and on the imageshards build, through `tfds.builder_from_directory`, where the build
carries TFDS metadata), and NVIDIA DALI's CPU pipeline on the imageshards build where the `dali`
extra is installed (bench/peer_dali.py).

    python -m bench.peers --count 20000                      # 500x375 photos (47 KB)
    python -m bench.peers --count 200000 --size 64x64 --no-hf
    python -m bench.peers --count 200000 --size 64x64 --no-hf --cache cold
    python -m bench.peers --count 20000 --formats
    python -m bench.peers read --count 20000
    python -m bench.peers read --count 20000 --only make_dataset,keras,dali --repeat 4
"""

import argparse
import os
import shutil
import statistics

from bench import datasets
from bench.build_throughput import imageshards_build
from bench.build_throughput import python_module
from bench.measure import measure
from pipelines.analysis import graph_cache

SHARDS = 16


def build_contenders(data, args):
    """{name: out -> command}."""
    shards = ['--num-shards', str(SHARDS)]
    ours = [*shards, '--seed', '0']
    contenders = {
        'tfds': lambda out: python_module('bench.peer_tfds', data, out, *shards),
        'hf': lambda out: python_module('bench.peer_hf', data, out, *shards),
        'imageshards': lambda out: imageshards_build(data, out, *ours),
        'imageshards, new kind': lambda out: imageshards_build(data, out, *ours),
        'imageshards --no-analyze': lambda out: imageshards_build(data, out, '--no-analyze', *ours),
        'naive': lambda out: python_module('bench.baseline_writer', data, out),
    }
    if args.formats:
        contenders = format_contenders(data, shards, ours)
    if args.no_hf:
        contenders.pop('hf', None)
    if not args.naive:
        contenders.pop('naive', None)
    if args.only:
        contenders = {name: contenders[name] for name in args.only.split(',')}
    return contenders


def format_contenders(data, shards, ours):
    """{name: out -> command} of the shard formats (--formats): ours in each, and the peers'
    ArrayRecord and Parquet writers."""
    contenders = {
        'tfds': lambda out: python_module('bench.peer_tfds', data, out, *shards),
        'tfds array_record': lambda out: python_module(
            'bench.peer_tfds', data, out, *shards, '--file-format', 'array_record'
        ),
        'hf to_parquet': lambda out: python_module(
            'bench.peer_hf', data, out, *shards, '--parquet'
        ),
    }
    for fmt in ('tfrecord', 'array_record', 'parquet'):
        flags = [*ours, '--shard-format', fmt]
        contenders[f'imageshards {fmt}'] = lambda out, flags=flags: imageshards_build(
            data, out, *flags
        )
    return contenders


def run_builds(args):
    size = tuple(int(side) for side in args.size.split('x'))
    data = os.path.join(args.work_dir, f'photos-{args.count}-{args.size}')
    print(f'generating {args.count} JPEGs of {args.size} in {data} ...', flush=True)
    info = datasets.photo_tree(data, args.count, size=size)
    print(
        f'{info["count"]} images, {info["bytes"] / 1e6:.0f} MB '
        f'({info["bytes"] / info["count"] / 1e3:.1f} KB each), {os.cpu_count()} cores',
        flush=True,
    )
    contenders = build_contenders(data, args)
    cache = os.path.join(args.work_dir, 'transform-cache')
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', IMAGESHARDS_CACHE_DIR=cache)
    runs = {name: [] for name in contenders}
    names = list(contenders)
    for round_ in range(args.repeat):
        # A different order each round: no contender always follows the same one.
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            command = contenders[name]
            out = os.path.join(args.work_dir, 'peer-' + ''.join(filter(str.isalnum, name)))
            shutil.rmtree(out, ignore_errors=True)
            if args.cache == 'cold':
                datasets.evict_page_cache(data)
            else:
                datasets.warm_page_cache(data)
            first = os.path.join(args.work_dir, 'transform-cache-empty')
            shutil.rmtree(first, ignore_errors=True)
            own_env = env
            if 'new kind' in name:
                own_env = dict(env, IMAGESHARDS_CACHE_DIR=first)
                own_env[graph_cache.PACKAGED_ENV] = '0'
            measured = measure(command(out), env=own_env)
            runs[name].append((measured.seconds, measured.peak, measured.cpu))
            print(
                f'  round {round_ + 1}: {name:<26}{measured.seconds:>7.1f} s '
                f'{measured.cpu:>7.1f} s CPU {measured.peak / 2**20:>7.0f} MiB',
                flush=True,
            )
            if not args.keep:
                shutil.rmtree(out, ignore_errors=True)
    _print_builds(runs, args.count)


def _print_builds(runs, count):
    """Medians of the rounds; `vs tfds`: TFDS's seconds over the contender's (higher is faster);
    `CPU/tfds`: the contender's CPU seconds over TFDS's in the same round, median (lower is
    cheaper), with its range."""
    tfds = runs.get('tfds')
    print(f'\nmedian of {len(next(iter(runs.values())))} round(s); peak RSS is the largest seen')
    print(
        f'{"contender":<26}{"seconds":>9}{"images/s":>10}{"vs tfds":>9}'
        f'{"CPU s":>8}{"us/image":>10}{"CPU/tfds":>10}{"(range)":>14}{"peak RSS":>11}'
    )
    for name, measured in runs.items():
        seconds = statistics.median(s for s, _, _ in measured)
        cpu = statistics.median(c for _, _, c in measured)
        peak = max(p for _, p, _ in measured)
        speed = cost = spread = '-'
        if tfds:
            speed = f'{statistics.median(s for s, _, _ in tfds) / seconds:.2f}x'
            ratios = [ours[2] / theirs[2] for ours, theirs in zip(measured, tfds)]
            cost = f'{statistics.median(ratios):.3f}'
            spread = f'{min(ratios):.2f}-{max(ratios):.2f}'
        print(
            f'{name:<26}{seconds:>9.1f}{count / seconds:>10.0f}{speed:>9}{cpu:>8.1f}'
            f'{cpu / count * 1e6:>10.0f}{cost:>10}{spread:>14}{peak / 2**20:>7.0f} MiB'
        )


def run_reads(args):
    # pylint: disable=import-outside-toplevel
    from bench import peer_reads

    peer_reads.main(args)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('what', nargs='?', choices=('build', 'read'), default='build')
    parser.add_argument('--count', type=int, default=20_000)
    parser.add_argument('--size', default='500x375', help='image width x height')
    parser.add_argument('--repeat', type=int, default=3, help='rounds; the median counts')
    parser.add_argument('--work-dir', default=os.path.join(os.path.dirname(__file__), 'out'))
    parser.add_argument(
        '--only', default='', help='comma-separated contenders (read: words in their names)'
    )
    parser.add_argument('--no-hf', action='store_true', help='leave out Hugging Face datasets')
    parser.add_argument('--naive', action='store_true', help='add the naive one-process writer')
    parser.add_argument(
        '--formats', action='store_true', help='the shard formats against their peers instead'
    )
    parser.add_argument(
        '--cache',
        choices=('warm', 'cold'),
        default='warm',
        help="the images' pages before each build: read once (warm) or dropped (cold)",
    )
    parser.add_argument('--keep', action='store_true', help='keep the outputs (for `read`)')
    parser.add_argument('--batches', type=int, default=60, help='read: batches per measurement')
    args = parser.parse_args(argv)
    if args.what == 'read':
        run_reads(args)
    else:
        run_builds(args)


if __name__ == '__main__':
    main()
