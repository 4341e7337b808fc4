"""Input throughput: images/s that the trainer's tf.data pipeline delivers, on all cores.

On >= 20,000 JPEGs of about 500x375 (cut from scikit-learn's sample photos) built into shards
with `imageshards build`, in one run:
  make_dataset  make_dataset(training=True, image_size=(224, 224), augment='standard')
  decode-only   the ceiling: tf.io.decode_jpeg of the same bytes (held in memory), in parallel
  write-up      the original write-up's approach: decode and resize in tf.data, then
                py_function + joblib around Keras' random_rotation/shift/zoom on each batch
  naive         TFRecordDataset(files).map(parse_single_example + decode + resize), unbatched
Targets: make_dataset >= 1.0x decode-only, >= 5x write-up.

    python -m bench.input_throughput --count 20000
"""

import argparse
import os
import subprocess
import sys
import time

import numpy as np
import tensorflow as tf

from bench import datasets
from imageshards import features
from imageshards import layout
from trainer import dataset_info
from trainer import input_pipeline
from trainer.input_options import IMAGENET_CROP_AREA

SIZE = (224, 224)
AUTOTUNE = tf.data.AUTOTUNE


def _shards(work_dir, count):
    data = datasets.photo_tree(os.path.join(work_dir, f'photos-{count}-500x375'), count)
    out = os.path.join(work_dir, f'shards-{count}')
    if not os.path.exists(os.path.join(out, layout.SUCCESS)):
        subprocess.run(
            [
                sys.executable,
                '-m',
                'imageshards_cli',
                'build',
                '--input',
                os.path.join(work_dir, f'photos-{count}-500x375'),
                '--output',
                out,
                '--overwrite',
                '--num-shards',
                '32',
            ],
            check=True,
        )
    return out, data


def _rate(dataset, batches, warmup=3):
    """Images/s over `batches` batches after `warmup` (which fill buffers and trace)."""
    iterator = iter(dataset)
    for _ in range(warmup):
        next(iterator)
    start, images = time.perf_counter(), 0
    for _ in range(batches):
        first = next(iterator)
        images += len(first[0] if isinstance(first, tuple) else first)  # a tensor or DALI's list
    return images / (time.perf_counter() - start)


def rate_and_cpu(dataset, batches, warmup=5):
    """(images/s, CPU us per image of this process: every core's share) over `batches` batches
    after `warmup`; the CPU time says what each image costs even on a machine under load."""
    iterator = iter(dataset)
    for _ in range(warmup):
        next(iterator)
    wall, cpu, images = time.perf_counter(), time.process_time(), 0
    for _ in range(batches):
        images += len(next(iterator)[0])
    cpu = time.process_time() - cpu
    return images / (time.perf_counter() - wall), cpu / images * 1e6


def _parse_single(record):
    parsed = tf.io.parse_single_example(record, features.feature_spec(features.EXAMPLES))
    return parsed[features.ENCODED], parsed[features.LABEL]


def _decode_resize(encoded, label):
    image = tf.image.resize(tf.io.decode_jpeg(encoded, channels=3), SIZE) / 255.0
    return image, label


def naive(files, batch):
    return tf.data.TFRecordDataset(files).map(_parse_single).map(_decode_resize).batch(batch)


def decode_only(files, batch, keep=4000):
    encoded = [e.numpy() for e, _ in tf.data.TFRecordDataset(files).map(_parse_single).take(keep)]
    return (
        tf.data.Dataset.from_tensor_slices(encoded)
        .repeat()
        .map(lambda e: tf.io.decode_jpeg(e, channels=3), num_parallel_calls=AUTOTUNE)
        .batch(batch, drop_remainder=False)
        .prefetch(AUTOTUNE)
    )


def write_up(files, batch):
    """The German write-up's recipe: Keras' legacy image functions, joblib across a batch."""
    from joblib import Parallel  # pylint: disable=import-outside-toplevel
    from joblib import delayed  # pylint: disable=import-outside-toplevel
    from tf_keras.preprocessing import image as keras_image  # pylint: disable=import-outside-toplevel

    def one(picture):
        picture = keras_image.random_rotation(picture, 10, 0, 1, 2)
        picture = keras_image.random_shift(picture, 0.1, 0.1, 0, 1, 2)
        picture = keras_image.random_zoom(picture, (0.9, 1.1), 0, 1, 2)
        return picture[:, ::-1] if np.random.rand() < 0.5 else picture

    def augment(images):
        return np.asarray(
            Parallel(n_jobs=-1)(delayed(one)(p) for p in images.numpy()), dtype=np.float32
        )

    def tf_augment(images, labels):
        out = tf.py_function(augment, [images], tf.float32)
        out.set_shape(images.shape)
        return out, labels

    return (
        tf.data.TFRecordDataset(files)
        .shuffle(10_000)
        .map(_parse_single)
        .map(_decode_resize, num_parallel_calls=AUTOTUNE)
        .batch(batch)
        .map(tf_augment)
        .prefetch(AUTOTUNE)
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--count', type=int, default=20_000)
    parser.add_argument('--batch', type=int, default=64)
    parser.add_argument('--batches', type=int, default=60, help='measured batches per contender')
    parser.add_argument('--work-dir', default=os.path.join(os.path.dirname(__file__), 'out'))
    parser.add_argument('--only', default='', help='comma-separated contenders to run')
    args = parser.parse_args(argv)
    out, info_data = _shards(args.work_dir, args.count)
    info = dataset_info.load(out)
    files = info.shard_paths('train')
    print(
        f'{info.num_records("train")} records in {len(files)} shards '
        f'({info_data["bytes"] / info_data["count"] / 1e3:.0f} KB per JPEG), '
        f'{os.cpu_count()} cores, batch {args.batch}',
        flush=True,
    )
    contenders = {
        'make_dataset': lambda: input_pipeline.make_dataset(
            out,
            'train',
            args.batch,
            training=True,
            image_size=SIZE,
            augment='standard',
            info=info,
            crop_area=IMAGENET_CROP_AREA,  # as the figures in bench/RESULTS.md were measured
        ),
        'decode-only': lambda: decode_only(files, args.batch),
        'write-up': lambda: write_up(files, args.batch),
        'naive': lambda: naive(files, args.batch),
    }
    wanted = args.only.split(',') if args.only else list(contenders)
    rates = {}
    for name in wanted:
        rates[name] = _rate(contenders[name](), args.batches)
        print(f'{name:<14}{rates[name]:>9.0f} images/s', flush=True)
    if 'make_dataset' in rates:
        for name in ('decode-only', 'write-up', 'naive'):
            if name in rates:
                print(f'make_dataset / {name}: {rates["make_dataset"] / rates[name]:.2f}x')


if __name__ == '__main__':
    main()
