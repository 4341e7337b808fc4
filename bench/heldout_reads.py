"""The classification reader against Keras' image_dataset_from_directory on held-out photos.

`bench.peers read` measures reading on bench/datasets.py's photo tree. This one makes photos of
another generator: 20,000 windows of scikit-image's photographs (bench/crop_data.py's list) of
about 500x375, in 4 classes, as a tree and as a 16-shard build, and times, alternated, 3,000
images after 3 warm-up batches of 64 at 224x224:

    make_dataset          training=True, augment='none', the default crop areas (0.5-1 of the
                          image below 1.28M images)
    make_dataset, ImageNet crop   the same with crop_area 0.08-1 (what `bench.peers read` uses)
    keras                 image_dataset_from_directory(shuffle=True), repeated, prefetched

`--noise S` adds Gaussian noise of deviation S to every photo before it is saved (quality 92):
files about twice as large, whose decoding is mostly entropy decoding, which a reader that cuts
its crop while decoding cannot skip.

    python -m bench.heldout_reads [--count 20000] [--noise 0] [--rounds 3]
"""

import argparse
import multiprocessing
import os
import statistics
import subprocess
import sys

import numpy as np
from PIL import Image

from bench import crop_data
from bench.input_throughput import rate_and_cpu

BATCH, SIZE, CLASSES = 64, (224, 224), 4
_PHOTOS = []


def _load():
    _PHOTOS.extend(crop_data.photographs())


def _make(job):
    tree, index, noise = job
    rng = np.random.default_rng(index)
    which = int(rng.integers(len(_PHOTOS)))
    photo = _PHOTOS[which]
    width = int(photo.size[0] * rng.uniform(0.4, 0.9))
    height = min(int(width * 0.75), photo.size[1])
    left = int(rng.integers(0, photo.size[0] - width + 1))
    top = int(rng.integers(0, photo.size[1] - height + 1))
    size = (int(rng.integers(470, 530)), int(rng.integers(350, 400)))
    image = photo.crop((left, top, left + width, top + height)).resize(size)
    quality = int(rng.integers(80, 95))
    if noise:
        pixels = np.asarray(image, np.float32) + rng.normal(0, noise, (size[1], size[0], 3))
        image, quality = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)), 92
    image.save(os.path.join(tree, f'class{which % CLASSES}', f'{index}.jpg'), quality=quality)


def make(root, count, noise):
    """The tree and its build under `root` (made once)."""
    tree, build = os.path.join(root, 'tree'), os.path.join(root, 'build')
    if not os.path.exists(os.path.join(tree, '.complete')):
        for label in range(CLASSES):
            os.makedirs(os.path.join(tree, f'class{label}'), exist_ok=True)
        with multiprocessing.Pool(initializer=_load) as pool:
            pool.map(_make, [(tree, i, noise) for i in range(count)], chunksize=200)
        open(os.path.join(tree, '.complete'), 'w').close()
    if not os.path.exists(os.path.join(build, 'dataset.json')):
        command = ['imageshards_cli', 'build', '--input', tree, '--output', build]
        command += ['--num-shards', '16', '--seed', '0', '--overwrite']
        subprocess.run([sys.executable, '-m', *command], check=True)
    return tree, build


def contenders(tree, build):
    # pylint: disable=import-outside-toplevel
    import keras
    import tensorflow as tf

    from trainer import input_pipeline
    from trainer.input_options import IMAGENET_CROP_AREA

    ours = dict(training=True, image_size=SIZE, augment='none')
    return {
        'make_dataset': lambda: input_pipeline.make_dataset(build, 'train', BATCH, **ours),
        'make_dataset, ImageNet crop': lambda: input_pipeline.make_dataset(
            build, 'train', BATCH, crop_area=IMAGENET_CROP_AREA, **ours
        ),
        'keras': lambda: (
            keras.utils.image_dataset_from_directory(
                tree, image_size=SIZE, batch_size=BATCH, shuffle=True, seed=0, verbose=False
            )
            .repeat()
            .prefetch(tf.data.AUTOTUNE)
        ),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--count', type=int, default=20_000)
    parser.add_argument('--noise', type=float, default=0.0)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--images', type=int, default=3_000, help='timed, after 3 batches')
    parser.add_argument('--work-dir', default=os.path.join(os.path.dirname(__file__), 'out'))
    args = parser.parse_args(argv)
    root = os.path.join(args.work_dir, f'heldout-{args.count}-noise{args.noise:g}')
    tree, build = make(root, args.count, args.noise)
    found = contenders(tree, build)
    rates = {name: [] for name in found}
    names = list(found)
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            rate, cpu = rate_and_cpu(found[name](), -(-args.images // BATCH), warmup=3)
            rates[name].append(rate)
            print(f'  round {round_ + 1}: {name:<30}{rate:>7.0f} images/s {cpu:>6.0f} us CPU/image')
    keras_rate = statistics.median(rates['keras'])
    print(f'\nmedian of {args.rounds} rounds, batch {BATCH}, 224x224')
    for name, values in rates.items():
        rate = statistics.median(values)
        print(f'{name:<30}{rate:>7.0f} images/s   {rate / keras_rate:.2f}x keras')


if __name__ == '__main__':
    main()
