"""Where make_dataset's ceiling is on this host: variants of the input alone, on all cores.

Each variant's images/s over batches of 128 at 224x224 after a warm-up, in one process:
  make_dataset with --augment standard, none, each of its two ops, deterministic=False, and
  standard plus one op that stays on whole batches (a rotation, brightness, scale);
  the crops' DCT-scaled decode forced on and off (by default make_dataset turns it on where
  the build holds images at least twice 224x224);
  minimal: TFRecordDataset -> parse_single_example -> the same crop-decode -> batch (what the
  shuffle, interleave and vectorized parse cost on top of decoding), on all cores and on one
  thread (the per-core decode rate); the same with a full decode and resize.
With --rounds N the chosen variants (--only: names containing any of its comma-separated
words) are measured N times, alternated, and their medians printed.

    python -m bench.input_variants --shards bench/out/shards-20000
    python -m bench.input_variants --shards SHARDS --only dct_scaling --rounds 5
"""

import argparse
import os
import statistics
import time

import tensorflow as tf

from bench.input_throughput import rate_and_cpu
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from trainer import dataset_info
from trainer import input_pipeline
from trainer import preprocess
from trainer.input_options import IMAGENET_CROP_AREA

SIZE = (224, 224)
BATCH = 128


def _minimal(info, threads=None, crop=True):
    spec = {features.ENCODED: kinds.Classification(info.format).feature_spec()[features.ENCODED]}

    def one(record):
        encoded = tf.io.parse_single_example(record, spec)[features.ENCODED]
        if crop:
            return preprocess.for_training(encoded, SIZE, tf.constant([1, 2], tf.int64))
        return tf.image.resize(tf.io.decode_jpeg(encoded, channels=3), SIZE)

    files = info.shard_paths('train')
    dataset = tf.data.TFRecordDataset(files, num_parallel_reads=len(files)).repeat()
    dataset = dataset.map(one, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH).prefetch(2)
    if threads:
        options = tf.data.Options()
        options.threading.private_threadpool_size = threads
        options.threading.max_intra_op_parallelism = 1
        dataset = dataset.with_options(options)
    return dataset


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--shards', required=True, help='an imageshards build of JPEGs')
    parser.add_argument('--batches', type=int, default=60)
    parser.add_argument('--only', default='', help='variants whose names contain these words')
    parser.add_argument('--rounds', type=int, default=1, help='alternated rounds (medians)')
    args = parser.parse_args(argv)
    info = dataset_info.load(args.shards)

    def made(**options):
        options.setdefault('crop_area', IMAGENET_CROP_AREA)  # as bench/RESULTS.md measured
        return lambda: input_pipeline.make_dataset(
            args.shards, 'train', BATCH, training=True, image_size=SIZE, info=info, **options
        )

    variants = {
        'make_dataset, augment standard': made(augment='standard'),
        'make_dataset, no augmentation': made(augment=None),
        'make_dataset, flip_horizontal': made(augment='flip_horizontal'),
        'make_dataset, erasing_probability=0.25': made(augment='erasing_probability=0.25'),
        'make_dataset, standard, deterministic=False': made(
            augment='standard', deterministic=False
        ),
        # Ops that stay on whole batches (trainer/augment.py `split`).
        **{
            f'make_dataset, {spec}': made(augment=spec)
            for spec in (
                'standard,rotation_degrees=10',
                'standard,brightness_delta=0.1',
                'standard,scale_range=1.1:1.4',
            )
        },
        'make_dataset, dct_scaling on': made(dct_scaling=True),
        'make_dataset, dct_scaling off': made(dct_scaling=False),
        'minimal crop-decode, all cores': lambda: _minimal(info),
        'minimal crop-decode, one thread': lambda: _minimal(info, threads=1),
        'minimal full decode + resize, all cores': lambda: _minimal(info, crop=False),
    }
    if args.only:
        words = args.only.split(',')
        variants = {name: make for name, make in variants.items() if any(w in name for w in words)}
    print(f'{os.cpu_count()} cores, batch {BATCH}, {SIZE[0]}x{SIZE[1]}', flush=True)
    rates = {name: [] for name in variants}
    for round_ in range(args.rounds):
        names = list(variants) if round_ % 2 == 0 else list(variants)[::-1]
        for name in names:
            batches = args.batches // 4 if 'one thread' in name else args.batches
            start = time.perf_counter()
            rate, cpu = rate_and_cpu(variants[name](), batches)
            rates[name].append((rate, cpu))
            seconds = time.perf_counter() - start
            print(f'{name:<46}{rate:>8.0f} images/s {cpu:>7.0f} us CPU/image ({seconds:.0f} s)')
    if args.rounds > 1:
        print(f'\nmedians of {args.rounds} rounds')
        for name, values in rates.items():
            rate, cpu = (statistics.median(v) for v in zip(*values))
            each = ', '.join(f'{r:.0f}/{c:.0f}' for r, c in values)
            print(f'{name:<46}{rate:>8.0f} images/s {cpu:>7.0f} us CPU/image ({each})')


if __name__ == '__main__':
    main()
