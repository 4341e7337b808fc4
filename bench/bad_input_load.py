"""Bad inputs under load: exact accounting at 100,000 images, and two builds at once.

Makes (or reuses) `bench/datasets.py`'s tree of 64x64 JPEGs, then a copy of it (hard links)
where 5% of the images are broken in several ways and a few non-image and hidden files lie
about. It builds that tree alone, checks that every input is written or rejected with the reason
it was broken with, then runs two builds of it at once into different directories and checks
that both are byte-identical to the solo build. Prints wall times and peak RSS.

    python -m bench.bad_input_load --count 100000
"""

import argparse
import collections
import functools
import hashlib
import io
import json
import os
import shutil
import sys
import threading
import time

from PIL import Image

from bench import datasets
from bench.measure import run_measured
from imageshards import layout

BROKEN_EVERY = 20  # 5%: the inputs whose index is 7 modulo this


@functools.cache
def _bomb():
    """A 12000x12000 1-bit PNG: a few KB that declare 144M pixels (over --max-pixels)."""
    buffer = io.BytesIO()
    Image.new('1', (12_000, 12_000)).save(buffer, format='PNG')
    return buffer.getvalue()


# How a good JPEG is broken -> (its bytes made from the good ones, the reason a build gives).
BREAKAGES = {
    'cut_in_half': (lambda data: data[: len(data) // 2], 'truncated'),
    'no_end_marker': (lambda data: data[:-2], 'truncated'),
    'zero_bytes': (lambda data: b'', 'empty_file'),
    'html_error_page': (
        lambda data: b'<!doctype html><title>403 Forbidden</title>\n',
        'not_an_image',
    ),
    'heic_from_a_phone': (lambda data: b'\0\0\0\x18ftypheic' + data[12:], 'unsupported_format'),
    'decompression_bomb': (lambda data: _bomb(), 'decompression_bomb'),
}


def broken_tree(photos, root, count):
    """Hard-links `photos` into `root`, breaking every BROKEN_EVERY-th image; returns
    {relative path: reason} of the broken ones (reused when `root` was made for `count`)."""
    stamp = root.rstrip('/') + '.complete.json'  # beside the tree: in it, it would be listed
    if os.path.exists(stamp):
        with open(stamp, encoding='utf-8') as f:
            done = json.load(f)
        if done['count'] == count:
            return done['broken']
    broken, kinds = {}, sorted(BREAKAGES)
    for folder, _, names in os.walk(photos):
        for name in sorted(n for n in names if n.endswith('.jpg')):
            source = os.path.join(folder, name)
            relative = os.path.relpath(source, photos)
            target = os.path.join(root, relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.exists(target):
                os.remove(target)
            index = int(name.split('.')[0])
            if index % BROKEN_EVERY != 7:
                os.link(source, target)
                continue
            kind = kinds[(index // BROKEN_EVERY) % len(kinds)]
            make, reason = BREAKAGES[kind]
            with open(source, 'rb') as f:
                data = make(f.read())
            with open(target, 'wb') as f:
                f.write(data)
            broken[relative] = reason
    for extra in ('class_000/notes.txt', 'class_001/.DS_Store', '.cache/thumb.jpg'):
        os.makedirs(os.path.dirname(os.path.join(root, extra)), exist_ok=True)
        with open(os.path.join(root, extra), 'wb') as f:
            f.write(b'not an input\n')
    with open(stamp, 'w', encoding='utf-8') as f:
        json.dump({'count': count, 'broken': broken}, f)
    return broken


def _command(tree, out):
    return [
        sys.executable,
        '-m',
        'imageshards_cli',
        'build',
        '--input',
        tree,
        '--output',
        out,
        '--overwrite',
        '--splits',
        'train=0.9,val=0.1',
        '--num-shards',
        '8',
    ]


def _fingerprint(out):
    """What two builds of the same input must share: shard bytes, rejections, dataset.json."""
    with open(os.path.join(out, layout.DATASET_JSON), encoding='utf-8') as f:
        dataset = json.load(f)
    shards = {}
    for split in dataset['splits'].values():
        for shard in split['shards']:
            with open(os.path.join(out, shard['path']), 'rb') as f:
                shards[shard['path']] = hashlib.sha256(f.read()).hexdigest()
    with open(os.path.join(out, layout.REJECTED_JSONL), 'rb') as f:
        rejected = hashlib.sha256(f.read()).hexdigest()
    dataset.pop('created')
    return dataset, shards, rejected


def check_accounting(out, tree, broken, count):
    """Raises AssertionError unless every input is written or rejected for its breakage."""
    with open(os.path.join(out, layout.DATASET_JSON), encoding='utf-8') as f:
        counts = json.load(f)['counts']
    assert counts['inputs'] == count, counts
    assert counts['written'] == count - len(broken) and counts['duplicates'] == 0, counts
    assert counts['rejected'] == len(broken), counts
    expected = dict(sorted(collections.Counter(broken.values()).items()))
    assert counts['rejected_by_reason'] == expected, (counts['rejected_by_reason'], expected)
    assert counts['skipped_by_reason'] == {'hidden': 2, 'not_image': 1}, counts
    with open(os.path.join(out, layout.REJECTED_JSONL), encoding='utf-8') as f:
        rows = [json.loads(line) for line in f]
    assert {os.path.relpath(row['path'], tree): row['reason'] for row in rows} == broken
    return counts


def _run_together(commands):
    """Starts every command at once; returns [(seconds, peak RSS)] and the wall time of all."""
    results = [None] * len(commands)

    def one(i):
        results[i] = run_measured(commands[i], env=_ENV)[:2]

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(commands))]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if None in results:
        raise RuntimeError('a concurrent build failed (see its output above)')
    return results, time.perf_counter() - start


_ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--count', type=int, default=100_000)
    parser.add_argument('--work-dir', default=os.path.join(os.path.dirname(__file__), 'out'))
    args = parser.parse_args(argv)
    photos = os.path.join(args.work_dir, f'photos-{args.count}-64x64')
    print(f'generating {args.count} JPEGs of 64x64 in {photos} ...', flush=True)
    datasets.photo_tree(photos, args.count, size=(64, 64))
    tree = os.path.join(args.work_dir, f'bad-inputs-{args.count}')
    broken = broken_tree(photos, tree, args.count)
    print(
        f'{len(broken)} of {args.count} inputs broken: '
        f'{dict(sorted(collections.Counter(broken.values()).items()))}',
        flush=True,
    )
    datasets.warm_page_cache(tree)
    solo = os.path.join(args.work_dir, 'bad-inputs-solo')
    seconds, peak, _ = run_measured(_command(tree, solo), env=_ENV)
    counts = check_accounting(solo, tree, broken, args.count)
    print(
        f'solo build: {seconds:.1f} s ({args.count / seconds:,.0f} inputs/s), peak RSS '
        f'{peak / 2**20:,.0f} MiB; inputs {counts["inputs"]:,} = written {counts["written"]:,} '
        f'+ rejected {counts["rejected"]:,} + duplicates {counts["duplicates"]:,}: exact',
        flush=True,
    )
    outs = [os.path.join(args.work_dir, f'bad-inputs-concurrent-{name}') for name in 'ab']
    results, wall = _run_together([_command(tree, out) for out in outs])
    reference = _fingerprint(solo)
    for out, (seconds, peak) in zip(outs, results):
        check_accounting(out, tree, broken, args.count)
        identical = _fingerprint(out) == reference
        print(
            f'concurrent build {os.path.basename(out)}: {seconds:.1f} s, peak RSS '
            f'{peak / 2**20:,.0f} MiB, byte-identical to the solo build: {identical}'
        )
        assert identical, f'{out} differs from the solo build {solo}'
    print(f'two concurrent builds: {wall:.1f} s wall for both')
    for out in [solo, *outs]:
        shutil.rmtree(out)


if __name__ == '__main__':
    main()
