"""A multi-label build against a single-label build of the same images, side by side.

The same photo tree (bench/datasets.py) is listed by two manifests: one with a `labels` column
of skewed label sets (bench/multilabel_split.py draws them: 50 labels, some images with none),
one with a `label` column (each image's rarest label, or `none`). Each contender builds in
alternating order, its tf.Transform graph kept from a first, untimed build of its kind; the
median of the rounds counts. Also `--no-analyze`.

    python -m bench.multilabel_build [--count 20000] [--repeat 3]
"""

import argparse
import os
import shutil
import statistics

from bench import datasets
from bench.build_throughput import imageshards_build
from bench.measure import run_measured
from bench.multilabel_split import skewed_label_sets

LABELS = 50


def manifests(data, count, work_dir):
    """(multi-label manifest, single-label manifest) over the photo tree `data`."""
    paths = sorted(
        os.path.relpath(os.path.join(folder, name), work_dir)
        for folder, _, names in os.walk(data)
        for name in names
        if name.endswith('.jpg')
    )[:count]
    sets = skewed_label_sets(len(paths), LABELS, seed=0)
    multi = os.path.join(work_dir, f'multilabel-{count}.csv')
    single = os.path.join(work_dir, f'singlelabel-{count}.csv')
    with open(multi, 'w', encoding='utf-8') as f:
        f.write('path,labels\n')
        f.writelines(f'{p},{" ".join(f"tag{i:02d}" for i in s)}\n' for p, s in zip(paths, sets))
    with open(single, 'w', encoding='utf-8') as f:
        f.write('path,label\n')  # the rarest tag (highest number): one class per image
        f.writelines(f'{p},{f"tag{max(s):02d}" if s else "none"}\n' for p, s in zip(paths, sets))
    return multi, single


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--count', type=int, default=20_000)
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--work-dir', default='bench/out')
    args = parser.parse_args(argv)
    data = os.path.join(args.work_dir, f'photos-{args.count}-500x375')
    info = datasets.photo_tree(data, args.count)
    multi, single = manifests(data, args.count, args.work_dir)
    cache = os.path.join(args.work_dir, 'transform-cache')
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', IMAGESHARDS_CACHE_DIR=cache)
    shards = ['--num-shards', '16', '--splits', 'train=0.8,val=0.1,test=0.1']
    contenders = {
        'single-label': lambda out: imageshards_build(single, out, *shards),
        'multi-label': lambda out: imageshards_build(multi, out, *shards),
        'single-label --no-analyze': lambda out: imageshards_build(
            single, out, *shards, '--no-analyze'
        ),
        'multi-label --no-analyze': lambda out: imageshards_build(
            multi, out, *shards, '--no-analyze'
        ),
    }
    out = os.path.join(args.work_dir, 'multilabel-build')
    for name in ('single-label', 'multi-label'):  # each kind's graph, written once, untimed
        shutil.rmtree(out, ignore_errors=True)
        run_measured(contenders[name](out), env=env)
    print(f'{info["count"]} photos, {info["bytes"] / 1e6:.0f} MB, {os.cpu_count()} cores')
    runs = {name: [] for name in contenders}
    names = list(contenders)
    for round_ in range(args.repeat):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            shutil.rmtree(out, ignore_errors=True)
            datasets.warm_page_cache(data)
            seconds, peak = run_measured(contenders[name](out), env=env)[:2]
            runs[name].append(seconds)
            print(f'  round {round_ + 1}: {name:<28}{seconds:>7.2f} s {peak / 2**20:>7.0f} MiB')
    shutil.rmtree(out, ignore_errors=True)
    for name, seconds in runs.items():
        median = statistics.median(seconds)
        print(f'{name:<28} median {median:6.2f} s  {median / args.count * 1e6:6.0f} us/image')


if __name__ == '__main__':
    main()
