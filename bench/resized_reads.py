"""--resize-shorter-side end to end: what a build costs and stores, and what an epoch at 224 costs.

  photos   the 500x375 photos (bench/datasets.photo_tree) built as they are and with
           --resize-shorter-side 256, alternated (wall time, peak memory, bytes stored); then
           reading 224x224 batches of 64 on all cores, alternated rounds: make_dataset on the
           resized build against keras.utils.image_dataset_from_directory on the original tree
           (what a user sees per epoch), and make_dataset on the build as it is
  camera   camera-sized JPEGs (bench/datasets.camera_tree) built both ways; then make_dataset
           on each (an epoch's worth of batches per round)
  same     like for like on the resized build's stored bytes: make_dataset; Keras on a tree of
           those very files (written once from the records); DALI's CPU pipeline
           (bench/peer_dali.py) reading the shards through the build's own index files
Images/s and CPU time per image (all threads of this process) per round; medians printed.

    python -m bench.resized_reads photos --count 20000 --rounds 3
    python -m bench.resized_reads camera --count 2000 --rounds 3
    python -m bench.resized_reads same --count 20000 --rounds 4
"""

import argparse
import json
import os
import statistics

from bench import datasets
from bench import peer_dali
from bench.build_throughput import imageshards_build
from bench.input_throughput import rate_and_cpu
from bench.measure import run_measured
from imageshards import dataset_json
from imageshards import records
from imageshards.kinds import features
from imageshards.shard_formats import tfrecord
from trainer.input_options import IMAGENET_CROP_AREA

SIZE = (224, 224)
BATCH = 64
SIDE = 256


def _tree_bytes(root):
    return sum(
        os.path.getsize(os.path.join(folder, name))
        for folder, _, names in os.walk(root)
        for name in names
        if not name.startswith('.')
    )


def _shard_bytes(out):
    dataset = dataset_json.load(out, complete=True)
    return sum(s['num_bytes'] for split in dataset['splits'].values() for s in split['shards'])


def build_both(data, work_dir, name, rounds, shards):
    """Builds `data` as it is and resized, alternated `rounds` times; returns the two outputs."""
    outs = {
        'as it is': os.path.join(work_dir, f'resize-{name}-original'),
        f'--resize-shorter-side {SIDE}': os.path.join(work_dir, f'resize-{name}-{SIDE}'),
    }
    flags = {'as it is': [], f'--resize-shorter-side {SIDE}': ['--resize-shorter-side', str(SIDE)]}
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')
    times = {label: [] for label in outs}
    for round_ in range(rounds):
        for label in list(outs)[round_ % 2 :] + list(outs)[: round_ % 2]:
            datasets.warm_page_cache(data)
            command = imageshards_build(
                data, outs[label], '--num-shards', str(shards), *flags[label]
            )
            seconds, peak, output = run_measured(command, env=env)
            if not os.path.exists(os.path.join(outs[label], '_SUCCESS')):
                raise RuntimeError(output[-3000:])
            times[label].append((seconds, peak))
            print(
                f'  build round {round_ + 1}: {label:<28}{seconds:>7.1f} s '
                f'{peak / 2**20:>6.0f} MiB',
                flush=True,
            )
    tree = _tree_bytes(data)
    print(f'\nbuilds, median of {rounds}; the tree holds {tree / 1e6:,.0f} MB')
    for label, out in outs.items():
        seconds = statistics.median(s for s, _ in times[label])
        stored = _shard_bytes(out)
        print(
            f'{label:<28}{seconds:>7.1f} s {max(p for _, p in times[label]) / 2**20:>6.0f} MiB'
            f'{stored / 1e6:>10,.0f} MB stored ({stored / tree:.2f} of the tree)'
        )
    return outs


def alternate(contenders, rounds, batches, warm=()):
    """Images/s and CPU us/image of each contender, alternated; prints the medians."""
    found = {name: [] for name in contenders}
    names = list(contenders)
    for round_ in range(rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            for folder in warm:
                datasets.warm_page_cache(folder)
            rate, cpu = rate_and_cpu(contenders[name](), batches, warmup=3)
            found[name].append((rate, cpu))
            load = os.getloadavg()[0]
            print(
                f'  round {round_ + 1}: {name:<52}{rate:>7.0f} images/s {cpu:>7.0f} us CPU/image'
                f'  (load {load:.1f})',
                flush=True,
            )
    medians = {name: [statistics.median(v) for v in zip(*values)] for name, values in found.items()}
    first = medians[names[0]]
    print(f'\nmedian of {rounds} round(s), {os.cpu_count()} cores, batch {BATCH}, 224x224')
    for name, (rate, cpu) in medians.items():
        print(
            f'{name:<52}{rate:>7.0f} images/s {cpu:>7.0f} us CPU/image   '
            f'{names[0]}: {first[0] / rate:.2f}x images/s, {cpu / first[1]:.2f}x CPU'
        )
    return medians


def _make_dataset(out):
    from trainer import input_pipeline  # pylint: disable=import-outside-toplevel

    # ImageNet's crop areas, as DALI's image_random_crop cuts (bench/peer_dali.py).
    return lambda: input_pipeline.make_dataset(
        out, 'train', BATCH, training=True, image_size=SIZE, crop_area=IMAGENET_CROP_AREA
    )


def _keras(tree):
    import keras  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    return lambda: (
        keras.utils.image_dataset_from_directory(
            tree, image_size=SIZE, batch_size=BATCH, shuffle=True, seed=0, verbose=False
        )
        .repeat()
        .prefetch(tf.data.AUTOTUNE)
    )


def _dali(out):
    build = dataset_json.Build.load(out)
    shards = build.shard_paths('train')
    indexes = [
        os.path.join(out, shard[dataset_json.INDEX_KEY]) for shard in build.split('train')['shards']
    ]
    return lambda: peer_dali.batches(shards, indexes, BATCH, SIZE)


def stored_tree(out, tree):
    """Writes each record's stored image of the build into `tree`/<label>/<id>.<format> (once)."""
    stamp = os.path.join(tree, '.complete.json')
    if os.path.exists(stamp):
        return tree
    build = dataset_json.Build.load(out)
    for path in build.shard_paths('train'):
        with open(path, 'rb') as f:
            for record in tfrecord.read_records(f, path):
                values = records.example_values(records.parse_example(record))
                label = values[features.LABEL_TEXT][1][0].decode()
                name = f'{values[features.ID][1][0]:08d}.{values[features.FORMAT][1][0].decode()}'
                os.makedirs(os.path.join(tree, label), exist_ok=True)
                with open(os.path.join(tree, label, name), 'wb') as image:
                    image.write(values[features.ENCODED][1][0])
    with open(stamp, 'w', encoding='utf-8') as f:
        json.dump({'from': out}, f)
    return tree


def photos(args):
    data = os.path.join(args.work_dir, f'photos-{args.count}-500x375')
    datasets.photo_tree(data, args.count)
    original, resized = build_both(
        data, args.work_dir, f'photos-{args.count}', args.build_rounds, 16
    ).values()
    alternate(
        {
            f'make_dataset, build --resize-shorter-side {SIDE}': _make_dataset(resized),
            'keras image_dataset_from_directory, original tree': _keras(data),
            'make_dataset, build as it is': _make_dataset(original),
        },
        args.rounds,
        args.batches,
        warm=(data, original, resized),
    )


def camera(args):
    data = os.path.join(args.work_dir, f'camera-{args.count}-3000x2000')
    datasets.camera_tree(data, args.count)
    original, resized = build_both(
        data, args.work_dir, f'camera-{args.count}', args.build_rounds, 16
    ).values()
    alternate(
        {
            f'make_dataset, build --resize-shorter-side {SIDE}': _make_dataset(resized),
            'make_dataset, build as it is': _make_dataset(original),
        },
        args.rounds,
        args.batches,
        warm=(original, resized),
    )


def same(args):
    resized = os.path.join(args.work_dir, f'resize-photos-{args.count}-{SIDE}')
    tree = stored_tree(resized, resized + '-tree')
    contenders = {
        'make_dataset, resized build': _make_dataset(resized),
        'keras image_dataset_from_directory, the same files': _keras(tree),
    }
    if peer_dali.available():
        contenders['dali cpu, resized build + its index files'] = _dali(resized)
    alternate(contenders, args.rounds, args.batches, warm=(resized, tree))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('what', choices=('photos', 'camera', 'same'))
    parser.add_argument('--count', type=int, default=20_000)
    parser.add_argument('--rounds', type=int, default=3, help='reading rounds (medians)')
    parser.add_argument('--build-rounds', type=int, default=1)
    parser.add_argument('--batches', type=int, default=40, help='batches per reading round')
    parser.add_argument('--work-dir', default=os.path.join(os.path.dirname(__file__), 'out'))
    args = parser.parse_args(argv)
    {'photos': photos, 'camera': camera, 'same': same}[args.what](args)


if __name__ == '__main__':
    main()
