"""Reading, for bench/peers.py: images/s at 224x224 from imageshards and from its peers.

Contenders, each delivering batches of 64 images of 224x224 with their labels, on all cores:
  make_dataset   the trainer's input pipeline on an imageshards build (training=True: per-epoch
                 shard shuffle, interleave, record shuffle, random-resized crop cut while
                 decoding), and the same with `--augment standard` on top (a flip
                 and random erasing, which the peers do not do)
  keras          keras.utils.image_dataset_from_directory on the image tree (shuffled, resized)
  tfds           TFDS as_dataset(shuffle_files=True) of its own build, resized in parallel
  tfds on ours   the same reader on the imageshards build, through builder_from_directory (when
                 the build carries TFDS metadata)
  dali cpu       NVIDIA DALI's CPU pipeline on the imageshards build, through its index files
                 (bench/peer_dali.py; with the `dali` extra installed)
Rounds alternate the contenders; the median of the rounds counts. `--only` picks contenders
(names containing any of its comma-separated words).
"""

import os
import statistics
import subprocess
import sys

import tensorflow as tf

from bench import datasets
from bench import peer_dali
from bench.input_throughput import rate_and_cpu
from imageshards import layout
from trainer.input_options import IMAGENET_CROP_AREA

SIZE = (224, 224)
BATCH = 64
AUTOTUNE = tf.data.AUTOTUNE


def _built(args, data, tfds=True):
    """(imageshards build, TFDS build's version folder) of the tree, made once (TFDS's only
    with `tfds`)."""
    suffix = '' if args.size == '500x375' else f'-{args.size}'  # the names of earlier runs
    ours = os.path.join(args.work_dir, f'read-imageshards-{args.count}{suffix}')
    theirs = os.path.join(args.work_dir, f'read-tfds-{args.count}{suffix}')
    if not os.path.exists(os.path.join(ours, layout.SUCCESS)):
        subprocess.run(
            [sys.executable, '-m', 'imageshards_cli', 'build', '--input', data, '--output', ours]
            + ['--overwrite', '--num-shards', '16'],
            check=True,
        )
    version = os.path.join(theirs, 'image_tree', '1.0.0')
    if tfds and not os.path.exists(os.path.join(version, 'dataset_info.json')):
        subprocess.run(
            [sys.executable, '-m', 'bench.peer_tfds', data, theirs, '--num-shards', '16'],
            check=True,
        )
    return ours, version


def _tfds(directory, image_key='image', label_key='label'):
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

    builder = tfds.builder_from_directory(directory)

    def resize(example):
        return tf.image.resize(example[image_key], SIZE), example[label_key]

    return (
        builder.as_dataset(split='train', shuffle_files=True)
        .map(resize, num_parallel_calls=AUTOTUNE)
        .shuffle(1000)
        .batch(BATCH)
        .repeat()
        .prefetch(AUTOTUNE)
    )


def _dali(ours, work_dir):
    """DALI's batches of the build's train split, through the build's own index files (a build
    made before imageshards wrote them gets them from DALI's tfrecord2idx first, once)."""
    from trainer import dataset_info  # pylint: disable=import-outside-toplevel

    info = dataset_info.load(ours)
    shards = info.shard_paths('train')
    entries = info.split('train')['shards']
    if all('index_file' in entry for entry in entries):
        indexes = [os.path.join(ours, entry['index_file']) for entry in entries]
    else:
        folder = os.path.join(work_dir, os.path.basename(ours) + '-idx')
        indexes = peer_dali.index_files(shards, folder)
    return peer_dali.batches(shards, indexes, BATCH, SIZE)


def contenders(data, ours, theirs, work_dir):
    # pylint: disable=import-outside-toplevel
    import keras

    from trainer import input_pipeline

    found = {
        # The same work as the peers below: shuffled images, cut and resized to 224x224.
        # ImageNet's crop areas, as DALI's image_random_crop cuts (bench/peer_dali.py).
        'make_dataset': lambda: input_pipeline.make_dataset(
            ours, 'train', BATCH, training=True, image_size=SIZE, crop_area=IMAGENET_CROP_AREA
        ),
        # The trainer's `--augment standard` on top: a flip and random erasing.
        'make_dataset, standard augmentation': lambda: input_pipeline.make_dataset(
            ours,
            'train',
            BATCH,
            training=True,
            image_size=SIZE,
            augment='standard',
            crop_area=IMAGENET_CROP_AREA,
        ),
        'keras image_dataset_from_directory': lambda: (
            keras.utils.image_dataset_from_directory(
                data, image_size=SIZE, batch_size=BATCH, shuffle=True, seed=0, verbose=False
            )
            .repeat()
            .prefetch(AUTOTUNE)
        ),
        'tfds as_dataset + resize': lambda: _tfds(theirs),
    }
    if peer_dali.available():
        found['dali cpu, imageshards build + its index files'] = lambda: _dali(ours, work_dir)
    if os.path.exists(os.path.join(ours, 'dataset_info.json')):
        found['tfds as_dataset + resize, imageshards build'] = lambda: _tfds(
            ours, 'image/encoded', 'image/class/label'
        )
    return found


def main(args):
    data = os.path.join(args.work_dir, f'photos-{args.count}-{args.size}')
    datasets.photo_tree(data, args.count, size=tuple(int(side) for side in args.size.split('x')))
    words = [word for word in args.only.split(',') if word]
    ours, theirs = _built(args, data, tfds=not words or any('tfds' in w for w in words))
    found = contenders(data, ours, theirs, args.work_dir)
    found = {
        name: make for name, make in found.items() if not words or any(w in name for w in words)
    }
    rates = {name: [] for name in found}
    names = list(found)
    for round_ in range(args.repeat):
        # A different order each round: no contender always follows the same one.
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            for folder in (data, ours, theirs):  # each contender's input warm, the images or
                datasets.warm_page_cache(folder)  # the shards
            rate, cpu = rate_and_cpu(found[name](), args.batches, warmup=3)
            rates[name].append((rate, cpu))
            print(f'  round {round_ + 1}: {name:<48}{rate:>7.0f} images/s {cpu:>6.0f} us CPU/image')
    # CPU time per image (all of this process's threads) says what each contender costs even on
    # a machine under load, where images/s depend on what else runs.
    medians = {name: [statistics.median(v) for v in zip(*values)] for name, values in rates.items()}
    print(f'\nmedian of {args.repeat} round(s), {os.cpu_count()} cores, batch {BATCH}, 224x224')
    ours = medians.get('make_dataset')
    for name, (rate, cpu) in medians.items():
        versus = (
            f'make_dataset: {ours[0] / rate:.2f}x images/s, {cpu / ours[1]:.2f}x CPU'
            if ours
            else ''
        )
        print(f'{name:<48}{rate:>7.0f} images/s {cpu:>6.0f} us CPU/image   {versus}')
