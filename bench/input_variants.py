"""Where make_dataset's ceiling is on this host: variants of the input alone, on all cores.

Each variant's images/s over batches of 128 at 224x224 after a warm-up, in one process:
  make_dataset with --augment standard, none, each of its two ops, deterministic=False, and
  standard plus one op that stays on whole batches (a rotation, brightness, scale);
  minimal: TFRecordDataset -> parse_single_example -> the same crop-decode -> batch (what the
  shuffle, interleave and vectorized parse cost on top of decoding), on all cores and on one
  thread (the per-core decode rate); the same with a full decode and resize.

    python -m bench.input_variants --shards bench/out/shards-20000
"""

import argparse
import os
import time

import tensorflow as tf

from bench.input_throughput import _rate
from imageshards import features
from trainer import dataset_info
from trainer import input_pipeline
from trainer import preprocess

SIZE = (224, 224)
BATCH = 128


def _minimal(info, threads=None, crop=True):
    spec = {features.ENCODED: features.feature_spec(info.format)[features.ENCODED]}

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
    args = parser.parse_args(argv)
    info = dataset_info.load(args.shards)

    def made(**options):
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
        'minimal crop-decode, all cores': lambda: _minimal(info),
        'minimal crop-decode, one thread': lambda: _minimal(info, threads=1),
        'minimal full decode + resize, all cores': lambda: _minimal(info, crop=False),
    }
    print(f'{os.cpu_count()} cores, batch {BATCH}, {SIZE[0]}x{SIZE[1]}', flush=True)
    for name, make in variants.items():
        batches = args.batches // 4 if 'one thread' in name else args.batches
        start = time.perf_counter()
        rate = _rate(make(), batches, warmup=5)
        seconds = time.perf_counter() - start
        print(f'{name:<46}{rate:>8.0f} images/s  ({seconds:.0f} s)', flush=True)


if __name__ == '__main__':
    main()
