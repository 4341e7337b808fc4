"""The trainer's per-epoch global shuffle of an ArrayRecord build, against its TFRecord reader and
Grain, on the same images.

One image tree (bench/datasets.photo_tree: --count JPEGs of --size in 10 label-sorted classes),
built twice with the same seed and 16 shards, as TFRecord and as ArrayRecord (`imageshards build
--shard-format`, analysis on: the trainer reads the images' sizes from it). Then, in one process
on all cores, contenders alternated round by round (each one's build warm in the page cache
first), images/s and CPU per image (this process and its child processes) over --batches batches
of 64 images of 224x224 after a warm-up; the median of the rounds counts:

  tfrecord make_dataset      the trainer on the TFRecord build: per-epoch shard shuffle,
                             interleave, shuffle buffer, random-resized crop cut while decoding
  array_record make_dataset  the trainer on the ArrayRecord build: each epoch a new permutation of
                             the whole split read in parallel (trainer/random_access.py), then
                             the same steps
  grain MapDataset           Grain over the ArrayRecord build: its shuffle, then Pillow's decode
                             and crop in its read threads (bench/peer_grain.py)
  grain DataLoader           the same operations in --grain-workers processes (0: left out)
  records only, ...          both make_dataset paths with nothing decoded (labels and ids): what
                             reading costs, the random-access path's Python work included

Also the random-access reader alone (SplitReader.read over an epoch's keys in chunks of
READ_CHUNK, one thread, no tf.data): the Python work per record. Then the shuffle quality of two
epochs of each build's training order and of Grain's shuffle (the measures of `imageshards
report`, imageshards_cli/shuffle_metrics.py): distinct labels per batch of 64 against a uniformly
random order's, Spearman rho of image id and read position, and of the positions records take in
epochs 0 and 1 (a uniformly random order: within 4/sqrt(n) of 0).

    python -m bench.epoch_shuffle --count 20000 --repeat 4
    python -m bench.epoch_shuffle --count 1000 --repeat 1 --batches 5   # that it runs
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import psutil

from bench import datasets
from bench import peer_grain
from imageshards import layout
from imageshards_cli import report
from trainer import dataset_info
from trainer import input_pipeline
from trainer import random_access
from trainer.input_options import IMAGENET_CROP_AREA

SIZE = (224, 224)
BATCH = 64
SHARDS = 16
FORMATS = ('tfrecord', 'array_record')


def built(data, work_dir, count, size):
    """{format: build of the tree in that format}, each made once."""
    found = {}
    for shard_format in FORMATS:
        out = os.path.join(work_dir, f'epoch-shuffle-{shard_format}-{count}-{size}')
        if not os.path.exists(os.path.join(out, layout.SUCCESS)):
            command = [sys.executable, '-m', 'imageshards_cli', 'build', '--input', data]
            command += ['--output', out, '--overwrite', '--num-shards', str(SHARDS)]
            subprocess.run(command + ['--seed', '0', '--shard-format', shard_format], check=True)
        found[shard_format] = out
    return found


def contenders(builds, args):
    """{name: (build to warm, a function making the batches)}."""

    def trainer(shard_format, **options):
        return lambda: input_pipeline.make_dataset(
            builds[shard_format], 'train', BATCH, training=True, image_size=SIZE, **options
        )

    found = {}
    for shard_format in FORMATS:
        made = trainer(shard_format, crop_area=IMAGENET_CROP_AREA)
        found[f'{shard_format} make_dataset'] = (builds[shard_format], made)
    paths = dataset_info.load(builds['array_record']).shard_paths('train')
    grain_threads = f'grain MapDataset, Pillow, {args.grain_threads} threads'
    found[grain_threads] = (
        builds['array_record'],
        lambda: peer_grain.map_dataset(paths, BATCH, threads=args.grain_threads),
    )
    if args.grain_workers:
        found[f'grain DataLoader, Pillow, {args.grain_workers} processes'] = (
            builds['array_record'],
            lambda: peer_grain.data_loader(paths, BATCH, args.grain_workers),
        )
    for shard_format in FORMATS:
        made = trainer(shard_format, decode_images=False)
        found[f'records only, {shard_format} make_dataset'] = (builds[shard_format], made)
    return found


def _cpu_seconds():
    """User + system seconds of this process and its live child processes."""
    processes = [psutil.Process()]
    processes += processes[0].children(recursive=True)
    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def rate_and_cpu(batches, count, warmup=3):
    """(images/s, CPU us per image) over `count` batches of an iterable after `warmup`."""
    iterator = iter(batches)
    for _ in range(warmup):
        next(iterator)
    wall, cpu, images = time.perf_counter(), _cpu_seconds(), 0
    for _ in range(count):
        images += len(next(iterator)[0])
    cpu = _cpu_seconds() - cpu
    rate = images / (time.perf_counter() - wall)
    del iterator  # a DataLoader's worker processes end with it
    return rate, cpu / images * 1e6


def run_rounds(found, args):
    """{name: [(images/s, CPU us per image)] per round}, contenders alternated."""
    rates = {name: [] for name in found}
    names = list(found)
    for round_ in range(args.repeat):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            build, make = found[name]
            datasets.warm_page_cache(build)
            rate, cpu = rate_and_cpu(make(), args.batches)
            rates[name].append((rate, cpu))
            print(f'  round {round_ + 1}: {name:<48}{rate:>7.0f} images/s {cpu:>6.0f} us CPU/image')
    return rates


def print_rates(rates, args):
    medians = {name: [statistics.median(v) for v in zip(*runs)] for name, runs in rates.items()}
    print(f'\nmedian of {args.repeat} round(s), {os.cpu_count()} cores, batch {BATCH}, 224x224')
    ours = medians['tfrecord make_dataset']
    for name, (rate, cpu) in medians.items():
        versus = f'{rate / ours[0]:.2f}x images/s, {cpu / ours[1]:.2f}x CPU of tfrecord'
        print(f'{name:<48}{rate:>7.0f} images/s {cpu:>6.0f} us CPU/image   {versus}')


def reader_cost(build, seed=0):
    """(records/s, us per record) of the random-access reader alone: one epoch's keys read in
    chunks of READ_CHUNK in one thread (the Python work and the reads, no tf.data)."""
    reader = random_access.SplitReader.of_split(dataset_info.load(build), 'train')
    keys = reader.worker_order(seed, 0)
    datasets.warm_page_cache(build)
    start = time.perf_counter()
    for first in range(0, len(keys), random_access.READ_CHUNK):
        reader.read(keys[first : first + random_access.READ_CHUNK])
    seconds = time.perf_counter() - start
    return len(keys) / seconds, seconds / len(keys) * 1e6


def quality(builds, epochs=2, seed=0):
    """{name: shuffle measures} of `epochs` epochs of each build's training order and Grain's."""
    info = dataset_info.load(builds['array_record'])
    counts = info.class_counts('train')
    orders = {
        f'{shard_format} make_dataset': report.training_order(
            dataset_info.load(builds[shard_format]), 'train', epochs, BATCH, seed
        )
        for shard_format in FORMATS
    }
    ids, labels = peer_grain.order(info.shard_paths('train'), epochs, seed)
    shard_counts = orders['array_record make_dataset'].shard_counts  # the files Grain reads
    orders['grain MapDataset shuffle'] = report.Order(ids, labels, shard_counts)
    return {name: report.measure(order, counts, BATCH) for name, order in orders.items()}


def print_quality(measured):
    first = next(iter(measured.values()))
    print(
        f'\nshuffle quality, 2 epochs of {first["records_per_epoch"]:,} records, batches of {BATCH}'
        f' (a uniformly random order: {first["ideal_distinct_labels_per_batch"]:.2f} labels per '
        f'batch, |rho| within {first["spearman_bound_for_random_order"]:.3f})'
    )
    print(f'{"order":<32}{"labels/batch":>14}{"fewest":>8}{"rho id-pos":>12}{"rho e0-e1":>11}')
    for name, m in measured.items():
        print(
            f'{name:<32}{m["mean_distinct_labels_per_batch"]:>14.2f}'
            f'{m["min_distinct_labels_per_batch"]:>8}{m["spearman_id_vs_position"]:>12.4f}'
            f'{m["epoch_order_spearman"]:>11.4f}'
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--count', type=int, default=20_000)
    parser.add_argument('--size', default='500x375', help='image width x height')
    parser.add_argument('--repeat', type=int, default=3, help='rounds; the median counts')
    parser.add_argument('--batches', type=int, default=40, help='batches per measurement')
    parser.add_argument('--grain-threads', type=int, default=16, help="Grain's read threads")
    parser.add_argument(
        '--grain-workers', type=int, default=0, help="processes of Grain's DataLoader (0: none)"
    )
    parser.add_argument('--work-dir', default=os.path.join(os.path.dirname(__file__), 'out'))
    args = parser.parse_args(argv)
    data = os.path.join(args.work_dir, f'photos-{args.count}-{args.size}')
    datasets.photo_tree(data, args.count, size=tuple(int(s) for s in args.size.split('x')))
    builds = built(data, args.work_dir, args.count, args.size)
    print_rates(run_rounds(contenders(builds, args), args), args)
    rate, cost = reader_cost(builds['array_record'])
    print(
        f'\nrandom-access reader alone, one thread: {rate:,.0f} records/s, {cost:.1f} us per '
        f'record (chunks of {random_access.READ_CHUNK})'
    )
    print_quality(quality(builds))


if __name__ == '__main__':
    main()
