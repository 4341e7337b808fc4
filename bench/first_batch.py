"""Time to the first training batch on a build with many shards.

Builds (or reuses, under bench/out/) the 64x64 photo tree into `--num-shards` shards, then, in
a fresh process for each run (TensorFlow imported before the clock starts), times
`dataset_info.load`, `make_dataset(..., training=True)` and the first batch out of it; prints the
median over the runs.

    python -m bench.first_batch                   # 100,000 images in 1,024 shards
    python -m bench.first_batch --count 20000 --num-shards 2048 --runs 5
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

from bench import datasets
from bench.build_throughput import build_command
from imageshards import layout

_CHILD = r"""
import json, sys, time
import tensorflow as tf
from trainer import input_pipeline
from trainer import dataset_info
data, batch_size, image_size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
start = time.perf_counter()
info = dataset_info.load(data)
loaded = time.perf_counter()
dataset = input_pipeline.make_dataset(
    data, 'train', batch_size, training=True, image_size=(image_size, image_size), info=info,
    augment='standard', seed=1, crop_area=(0.08, 1.0),  # ImageNet's crops, as measured before
)
made = time.perf_counter()
images, labels = next(iter(dataset))
first = time.perf_counter()
images, labels = next(iter(dataset.skip(20)))
print(json.dumps({
    'load': loaded - start, 'make': made - loaded, 'first': first - made,
    'total': first - start, 'shape': list(images.shape), 'later': time.perf_counter() - first,
}))
"""


def _build(data, out, num_shards):
    stamp = os.path.join(out, layout.SUCCESS)
    if os.path.exists(stamp):
        with open(os.path.join(out, layout.DATASET_JSON), encoding='utf-8') as f:
            if json.load(f)['splits']['train']['num_shards'] == num_shards:
                return
    command = build_command(data, out, 'multi_processing', '--num-shards', str(num_shards))
    subprocess.run(command, check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2'))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--count', type=int, default=100_000)
    parser.add_argument('--num-shards', type=int, default=1024)
    parser.add_argument('--batch-size', type=int, default=64)
    parser.add_argument('--image-size', type=int, default=224)
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--work-dir', default=os.path.join(os.path.dirname(__file__), 'out'))
    args = parser.parse_args(argv)
    data = os.path.join(args.work_dir, f'photos-{args.count}-64x64')
    datasets.photo_tree(data, args.count, size=(64, 64))
    out = os.path.join(args.work_dir, f'shards-{args.count}-x{args.num_shards}')
    _build(data, out, args.num_shards)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
    runs = []
    for _ in range(args.runs):
        command = [sys.executable, '-c', _CHILD, out, str(args.batch_size), str(args.image_size)]
        result = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
        runs.append(json.loads(result.stdout.strip().splitlines()[-1]))
        print(runs[-1], flush=True)
    median = {key: statistics.median(run[key] for run in runs) for key in ('load', 'make', 'first')}
    print(
        f'{args.num_shards} shards, {args.count:,} images, batch {args.batch_size}: '
        f'dataset_info.load {median["load"]:.2f} s, make_dataset {median["make"]:.2f} s, '
        f'first batch {median["first"]:.2f} s (median of {args.runs})'
    )


if __name__ == '__main__':
    main()
