"""Splits you can trust, measured on bench/trusted_data.py's dataset (real-content images,
groups of skewed sizes, planted near-duplicates).

    python -m bench.trusted_splits pairs DATA   near-duplicate pairs found, per distance, by our
                                                hash and by imagededup's PHash; time per image
    python -m bench.trusted_splits splits DATA  LD and leaks: a plain build, a build with groups
                                                and --near-duplicates, StratifiedGroupKFold
    python -m bench.trusted_splits grow DATA    80% then 100% with --splits-from: moved, LD
                                                (--grow-by groups: the new 20% are new groups)
    python -m bench.trusted_splits search N     CPU per pair of the banded search's compare
                                                step, over N random hashes (DATA is N here)
    python -m bench.trusted_splits build DATA   the build with and without --near-duplicates,
                                                alternated (whole commands, CPU and wall)

imagededup is not a dependency of the project: it requires torch and torchvision, which pip
takes as CUDA builds of several GB. To compare with it, install a CPU torch first
(`pip install torch --index-url https://download.pytorch.org/whl/cpu`), then
`pip install --no-deps imagededup PyWavelets`; without it, `pairs` prints our hash alone.

Pairs are counted pair by pair: a planted pair is found where its hashes are within the distance;
a found pair is false where its images are not of one planted cluster (bench/trusted_data.py
draws distinct images so that no other pair is a near-duplicate).
"""

import argparse
import collections
import csv
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

from bench import trusted_data
from imageshards import stratification
from pipelines.validation import perceptual

SPLITS = 'train=0.6,val=0.2,test=0.2'


def _truth(data):
    with open(os.path.join(data, 'truth.json'), encoding='utf-8') as f:
        truth = json.load(f)
    with open(os.path.join(data, 'manifest.csv'), encoding='utf-8') as f:
        rows = list(csv.DictReader(f))
    return truth, rows


def _pairs_within(paths, hashes, distance):
    """Every pair of paths whose hashes are within `distance` (all pairs compared)."""
    values = np.array(hashes, dtype=np.uint64)
    apart = np.bitwise_count(values[:, None] ^ values[None, :])
    i, j = np.nonzero(np.triu(apart <= distance, 1))
    return {tuple(sorted((paths[a], paths[b]))) for a, b in zip(i.tolist(), j.tolist())}


def _imagededup_phash():
    """imagededup's PHash class, or None where imagededup is not installed. Where its CNN half
    cannot load (a torchvision that does not match torch), its hashing module is imported with
    an empty `imagededup.utils` package in place of the one whose __init__ imports the CNN
    models: PHash's own code runs unchanged."""
    # pylint: disable=import-outside-toplevel
    try:
        from imagededup.methods import PHash

        return PHash
    except ImportError:
        return None
    except RuntimeError:
        import importlib
        import types

        import imagededup

        utils = types.ModuleType('imagededup.utils')
        utils.__path__ = [os.path.join(os.path.dirname(imagededup.__file__), 'utils')]
        sys.modules['imagededup.utils'] = utils
        for name in [n for n in sys.modules if n.startswith('imagededup.methods')]:
            del sys.modules[name]
        methods = types.ModuleType('imagededup.methods')
        methods.__path__ = [os.path.join(os.path.dirname(imagededup.__file__), 'methods')]
        sys.modules['imagededup.methods'] = methods
        return importlib.import_module('imagededup.methods.hashing').PHash


def _imagededup_hashes(data, paths):
    """imagededup's PHash at its defaults, as 64-bit ints, and its CPU seconds per image (or
    None where imagededup is not installed)."""
    phash = _imagededup_phash()
    if phash is None:
        return None, None
    method = phash(verbose=False)
    started = time.process_time()
    found = [method.encode_image(image_file=os.path.join(data, path)) for path in paths]
    seconds = (time.process_time() - started) / len(paths)
    return [int(text, 16) for text in found], seconds


def pairs(data):
    truth, rows = _truth(data)
    paths = [row['path'] for row in rows]
    planted = trusted_data.truth_pairs(truth)
    contents = [open(os.path.join(data, p), 'rb').read() for p in paths]  # noqa: SIM115
    started = time.process_time()
    signatures = [perceptual.perceptual_hash(content) for content in contents]
    ours = [perceptual.whole_hash(signature) for signature in signatures]
    ours_seconds = (time.process_time() - started) / len(paths)
    theirs, theirs_seconds = _imagededup_hashes(data, paths)
    print(f'{len(paths)} images, {len(planted)} planted pairs')
    print(f'hash CPU per image (files read beforehand): ours {ours_seconds * 1e3:.2f} ms', end='')
    if theirs_seconds:
        print(f', imagededup PHash {theirs_seconds * 1e3:.2f} ms (reads its file)', end='')
    print()
    named = [('ours', ours)] + ([('imagededup', theirs)] if theirs else [])
    print('distance | ' + ' | '.join(f'{n} recall, precision, false' for n, _ in named))
    for distance in range(4, 15):
        cells = []
        for _, hashes in named:
            found = _pairs_within(paths, hashes, distance)
            right = len(found & planted)
            precision = right / len(found) if found else 1.0
            cells.append(f'{right / len(planted):.4f}, {precision:.4f}, {len(found) - right}')
        print(f'{distance} | ' + ' | '.join(cells))
    _by_kind(truth, dict(zip(paths, ours)))
    _joined(paths, planted, signatures)
    if theirs:
        same = sum(a == b for a, b in zip(ours, theirs))
        apart = [perceptual.hamming(a, b) for a, b in zip(ours, theirs)]
        print(
            f'ours = imagededup on {same} of {len(paths)}; bits apart median '
            f'{statistics.median(apart)}, max {max(apart)}'
        )


def _joined(paths, planted, signatures):
    """Prints what the build's search (windows met, thumbnails verified) joins: the planted
    pairs in one component, and the pairs it joins that are not planted."""
    from scipy.sparse import csgraph  # pylint: disable=import-outside-toplevel

    from bench import near_duplicate_crops  # pylint: disable=import-outside-toplevel

    paired, seconds, _ = near_duplicate_crops.banded_pairs(signatures)
    _, component = csgraph.connected_components(paired, directed=False)
    index = {path: i for i, path in enumerate(paths)}
    whole = sum(component[index[a]] == component[index[b]] for a, b in planted)
    i, j = np.nonzero(np.triu(paired, 1))
    false = sum(tuple(sorted((paths[a], paths[b]))) not in planted for a, b in zip(i, j))
    print(
        f'the build (windows and thumbnails, distance 10): planted pairs in one cluster '
        f'{whole}/{len(planted)}, pairs joined not planted {false}, search CPU '
        f'{seconds * 1e3:.2f} ms per image'
    )


def search_cost(count):
    """Nanoseconds per pair compared of `neighbours.close_pairs` over `count` random distinct
    64-bit hashes (one bucket, every pair compared): what docs/scaling.md scales to 100M."""
    from pipelines.assignment import neighbours  # pylint: disable=import-outside-toplevel

    hashes = np.unique(np.random.default_rng(0).integers(0, 2**63, count, dtype=np.int64))
    hashes = hashes.astype(np.uint64)
    ids = np.arange(len(hashes), dtype=np.int64)
    times = []
    for _ in range(3):
        started = time.process_time()
        neighbours.close_pairs(hashes, ids, 10)
        times.append(time.process_time() - started)
    pairs_compared = len(hashes) * (len(hashes) - 1) / 2
    print(
        f'close_pairs over {len(hashes)} distinct hashes: CPU {min(times):.2f} s (best of 3), '
        f'{min(times) / pairs_compared * 1e9:.2f} ns a pair'
    )


def _by_kind(truth, hash_of):
    """Prints our recall of the pairs (original, copy) by the kind of copy, at 8 and 10 bits."""
    apart = collections.defaultdict(list)
    for original, *copies in truth['clusters']:
        for copy in copies:
            distance = perceptual.hamming(hash_of[original], hash_of[copy])
            apart[truth['kinds'][copy]].append(distance)
    for kind, found in sorted(apart.items()):
        shares = [sum(d <= bits for d in found) / len(found) for bits in (8, 10)]
        print(
            f'{kind} ({len(found)} copies): within 8 bits {shares[0]:.3f}, 10 bits {shares[1]:.3f}'
        )


def _build(args, out):
    """Runs `imageshards build` (the whole command); returns (dataset.json, CPU s, wall s)."""
    command = [sys.executable, '-m', 'pipelines.build', *args, '--output', out, '--overwrite']
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    with open(os.path.join(out, 'dataset.json'), encoding='utf-8') as f:
        return json.load(f), cpu, wall


def _split_of_paths(out, data):
    """{manifest path: split} of a build's records."""
    from imageshards import file_names  # pylint: disable=import-outside-toplevel
    from imageshards import records  # pylint: disable=import-outside-toplevel
    from imageshards.kinds import features  # pylint: disable=import-outside-toplevel
    from imageshards.shard_formats import registry as shard_formats  # pylint: disable=import-outside-toplevel

    with open(os.path.join(out, 'dataset.json'), encoding='utf-8') as f:
        dataset = json.load(f)
    base = os.path.abspath(data) + '/'
    found = {}
    for split, info in dataset['splits'].items():
        for shard in info['shards']:
            path = os.path.join(out, shard['path'])
            for _, record in records.shard_records(path, shard_formats.of_build(dataset)):
                values = records.example_values(records.parse_example(record))
                name = file_names.from_bytes(values[features.FILENAME][1][0])
                found[name[len(base) :]] = split
    return found


def _measures(split_of, rows, truth):
    """(LD, groups across splits, planted clusters across splits) of a split per path."""
    parts = collections.defaultdict(collections.Counter)
    groups = collections.defaultdict(set)
    for row in rows:
        split = split_of[row['path']]
        parts[split][row['label']] += 1
        if row['group']:
            groups[row['group']].add(split)
    spread = stratification.measures([(sum(c.values()), c) for c in parts.values()])
    clusters = [{split_of[p] for p in members if p in split_of} for members in truth['clusters']]
    leaked_groups = sum(len(s) > 1 for s in groups.values())
    return spread['label_distribution'], leaked_groups, sum(len(s) > 1 for s in clusters)


def _sgkf(rows, seed):
    """{path: split} by scikit-learn's StratifiedGroupKFold: five folds of the groups (an image
    without one alone), one the test split, one val, three train."""
    from sklearn.model_selection import StratifiedGroupKFold  # pylint: disable=import-outside-toplevel

    labels = [row['label'] for row in rows]
    groups = [row['group'] or f'alone:{row["path"]}' for row in rows]
    folds = StratifiedGroupKFold(n_splits=5, shuffle=True, random_state=seed)
    split_of = {}
    for fold, (_, held) in enumerate(folds.split(np.zeros(len(rows)), labels, groups)):
        for index in held:
            split_of[rows[index]['path']] = {0: 'test', 1: 'val'}.get(fold, 'train')
    return split_of


def splits(data, work):
    truth, rows = _truth(data)
    manifest = os.path.join(data, 'manifest.csv')
    print('contender | LD | groups across splits | planted clusters across splits')
    for name, extra in (('plain build', []), ('groups + near-duplicates', ['--near-duplicates'])):
        plain = name == 'plain build'
        inputs = _plain_manifest(data, work) if plain else manifest
        out = os.path.join(work, name.split()[0])
        _build(['--input', inputs, '--splits', SPLITS, '--no-analyze', *extra], out)
        split_of = _split_of_paths(out, data)
        print(f'{name} | ' + ' | '.join(f'{m:.4g}' for m in _measures(split_of, rows, truth)))
    for seed in range(3):
        found = _measures(_sgkf(rows, seed), rows, truth)
        print(f'StratifiedGroupKFold seed {seed} | ' + ' | '.join(f'{m:.4g}' for m in found))


def _plain_manifest(data, work, keep=None):
    """A manifest beside DATA's (its images must be below it) of all its images without their
    groups, or of those in `keep` with them."""
    del work
    _, rows = _truth(data)
    path = os.path.join(data, f'manifest-{"plain" if keep is None else len(keep)}.csv')
    with open(path, 'w', newline='', encoding='utf-8') as f:
        writer = csv.writer(f)
        writer.writerow(['path', 'label'] + ([] if keep is None else ['group']))
        for row in rows:
            if keep is None:
                writer.writerow([row['path'], row['label']])
            elif row['path'] in keep:
                writer.writerow([row['path'], row['label'], row['group']])
    return path


def _hashed(rows, seed):
    """{path: split} the way stable splits are often made by hand: a hash of the group (an
    image without one alone) against the fractions 0.6/0.2/0.2. Nothing ever moves, and
    nothing balances the labels."""
    split_of = {}
    for row in rows:
        digest = hashlib.sha256(f'{seed}:{row["group"] or row["path"]}'.encode()).digest()
        where = int.from_bytes(digest[:8], 'big') / 2**64
        split_of[row['path']] = 'train' if where < 0.6 else 'val' if where < 0.8 else 'test'
    return split_of


def grow(data, work, by='images'):
    """v1 of a random 80% of the images (`by='images'`) or of the groups (`by='groups'`: what
    arrives later is new patients, new sessions; an image without a group is its own), v2 of all
    of them with --splits-from v1, and a fresh build of all of them."""
    truth, rows = _truth(data)
    rng = np.random.default_rng(1)
    if by == 'images':
        first = {row['path'] for row in rows if rng.random() < 0.8}
    else:
        units = sorted({row['group'] or row['path'] for row in rows})
        kept = {unit for unit in units if rng.random() < 0.8}
        first = {row['path'] for row in rows if (row['group'] or row['path']) in kept}
    everything = {row['path'] for row in rows}
    v1 = os.path.join(work, 'v1')
    flags = ['--splits', SPLITS, '--no-analyze', '--near-duplicates']
    _build(['--input', _plain_manifest(data, work, first), *flags], v1)
    v2 = os.path.join(work, 'v2')
    dataset, _, _ = _build(
        ['--input', _plain_manifest(data, work, everything), *flags, '--splits-from', v1], v2
    )
    fresh = os.path.join(work, 'fresh')
    _build(['--input', _plain_manifest(data, work, everything), *flags], fresh)
    before, after = _split_of_paths(v1, data), _split_of_paths(v2, data)
    moved = sum(before[p] != after[p] for p in before)
    rebuilt = _split_of_paths(fresh, data)
    moved_fresh = sum(before[p] != rebuilt[p] for p in before)
    earlier_groups = {row['group'] for row in rows if row['path'] in first and row['group']}
    new = [row for row in rows if row['path'] not in first]
    bound = sum(row['group'] in earlier_groups for row in new)
    print(f'new images: {len(new)}, {bound} of them in groups v1 already placed')
    print(
        f'v1 {len(before)} images, v2 {len(after)}; moved {moved}; '
        f'dataset.json: {dataset["grouping"]["previous"]}'
    )
    runs = (('v1', v1), ('v2 --splits-from v1', v2), ('fresh build of v2', fresh))
    for name, out in runs:
        included = [row for row in rows if name != 'v1' or row['path'] in first]
        ld, groups, clusters = _measures(_split_of_paths(out, data), included, truth)
        print(
            f'{name}: LD {ld:.4g}, groups across splits {groups}, clusters across splits {clusters}'
        )
    print(f"the fresh build would move {moved_fresh} of v1's {len(before)} images")
    hashed = [_measures(_hashed(rows, seed), rows, truth) for seed in range(5)]
    print(
        'a hash of the group, seeds 0-4 (never moves): LD '
        + ', '.join(f'{ld:.4g}' for ld, _, _ in hashed)
        + '; clusters across splits '
        + ', '.join(str(clusters) for _, _, clusters in hashed)
    )


def build_times(data, work, rounds):
    manifest = os.path.join(data, 'manifest.csv')
    base = ['--input', manifest, '--splits', SPLITS]
    runs = {'without': [], 'with --near-duplicates': []}
    _build(base, os.path.join(work, 'warm'))
    for _ in range(rounds):
        for name, extra in (('without', []), ('with --near-duplicates', ['--near-duplicates'])):
            _, cpu, wall = _build([*base, *extra], os.path.join(work, 'timed'))
            runs[name].append((cpu, wall))
    ratios = [w[0] / o[0] for o, w in zip(runs['without'], runs['with --near-duplicates'])]
    walls = [w[1] / o[1] for o, w in zip(runs['without'], runs['with --near-duplicates'])]
    for name, found in runs.items():
        print(
            f'{name}: CPU '
            + ', '.join(f'{c:.1f}' for c, _ in found)
            + ' s; wall '
            + ', '.join(f'{w:.1f}' for _, w in found)
            + ' s'
        )
    print(
        f'with/without, pair by pair: CPU median {statistics.median(ratios):.3f} '
        f'({min(ratios):.3f}-{max(ratios):.3f}), wall median {statistics.median(walls):.3f}'
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('what', choices=('pairs', 'splits', 'grow', 'build', 'search'))
    parser.add_argument('data')
    parser.add_argument('--work', default='/tmp/trusted_splits')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--grow-by', choices=('images', 'groups'), default='images')
    args = parser.parse_args(argv)
    if args.what == 'pairs':
        pairs(args.data)
    elif args.what == 'search':
        search_cost(int(args.data))
    elif args.what == 'splits':
        splits(args.data, args.work)
    elif args.what == 'grow':
        grow(args.data, args.work, args.grow_by)
    else:
        build_times(args.data, args.work, args.rounds)


if __name__ == '__main__':
    main()
