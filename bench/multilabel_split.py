"""How well a multi-label build's splits and shards keep every label's share, against the
in-memory multi-label splitter people use (`iterative-stratification`'s
MultilabelStratifiedShuffleSplit) and a random split, on the same skewed label sets.

The build's own plan runs here exactly as AssignShards runs it (plan_lib.make_plan over the counts
of each label set, then each set's images in their seeded rank order), without Beam and without
images: the splits depend on the label sets and keys only. Measures: imageshards/stratification.py
(Sechidis et al.'s label distribution and examples distribution, and the label/split pairs left
with no example).

    python -m bench.multilabel_split [--images 20000] [--labels 50] [--seeds 5]
"""

import argparse
import collections
import statistics
import time

import numpy as np

from imageshards import stratification
from pipelines.assignment import assign
from pipelines.assignment import plan as plan_lib

FRACTIONS = (('train', 0.8), ('val', 0.1), ('test', 0.1))


def skewed_label_sets(images, labels, seed):
    """Label sets of `images` images: label i on a share of about 0.35 / (i + 1)^1.1 of them
    (the commonest on a third, the rarest on a few dozen), each odd label also on 30% of the
    images of the even one before it (labels that go together), some images with none."""
    rng = np.random.default_rng(seed)
    frequency = 0.35 / (np.arange(1, labels + 1) ** 1.1)
    has = rng.random((images, labels)) < frequency
    for i in range(0, labels - 1, 2):
        has[has[:, i] & (rng.random(images) < 0.3), i + 1] = True
    return [tuple(int(i) for i in np.nonzero(row)[0]) for row in has]


def ours(label_sets, seed, num_shards):
    """(split of each image, (split, shard) of each image) as a build assigns them."""
    keys = [f'images/{i:08d}.jpg' for i in range(len(label_sets))]
    counts = collections.Counter(label_sets)
    plan = plan_lib.make_plan(
        {('', labels, 0): (n, n) for labels, n in counts.items()},
        FRACTIONS,
        num_shards,
        multi_label=True,
    )
    members = collections.defaultdict(list)
    for i, (labels, key) in enumerate(zip(label_sets, keys)):
        members[labels].append((assign.shuffle_hash(seed, assign.RANK_SALT, key), key, i))
    split_of, shard_of = [None] * len(keys), [None] * len(keys)
    for labels, ranked in members.items():
        ranked.sort()
        for split, shard, start, end in plan.runs('', labels, 0, len(ranked)):
            for _, _, i in ranked[start:end]:
                split_of[i], shard_of[i] = split, (split, shard)
    return split_of, shard_of


def iterstrat_split(label_sets, labels, seed):
    """The same fractions by MultilabelStratifiedShuffleSplit: test+val off train, then halved."""
    from iterstrat.ml_stratifiers import MultilabelStratifiedShuffleSplit  # noqa: PLC0415

    y = np.zeros((len(label_sets), labels), dtype=np.int8)
    for i, ids in enumerate(label_sets):
        y[i, list(ids)] = 1
    first = MultilabelStratifiedShuffleSplit(n_splits=1, test_size=0.2, random_state=seed)
    train, rest = next(first.split(np.zeros(len(y)), y))
    second = MultilabelStratifiedShuffleSplit(n_splits=1, test_size=0.5, random_state=seed)
    val, test = next(second.split(np.zeros(len(rest)), y[rest]))
    split_of = np.empty(len(y), dtype=object)
    split_of[train], split_of[rest[val]], split_of[rest[test]] = 'train', 'val', 'test'
    return list(split_of)


def random_split(label_sets, seed):
    rng = np.random.default_rng(seed + 1000)
    n = len(label_sets)
    order = rng.permutation(n)
    split_of = [None] * n
    bounds = np.cumsum([round(n * f) for _, f in FRACTIONS])
    for position, i in enumerate(order):
        split_of[i] = FRACTIONS[int(np.searchsorted(bounds, position, side='right'))][0]
    return split_of


def measured(label_sets, part_of, parts, wanted):
    counts = {part: [0, collections.Counter()] for part in parts}
    for labels, part in zip(label_sets, part_of):
        counts[part][0] += 1
        counts[part][1].update(labels)
    return stratification.measures([tuple(counts[p]) for p in parts], wanted)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--images', type=int, default=20_000)
    parser.add_argument('--labels', type=int, default=50)
    parser.add_argument('--seeds', type=int, default=5)
    parser.add_argument('--shards', type=int, default=16, help='shards of the train split')
    args = parser.parse_args(argv)
    names = [name for name, _ in FRACTIONS]
    results = collections.defaultdict(list)
    for seed in range(args.seeds):
        sets = skewed_label_sets(args.images, args.labels, seed)
        wanted = [args.images * f for _, f in FRACTIONS]
        started = time.perf_counter()
        split_of, shard_of = ours(sets, seed, args.shards)
        results['imageshards seconds'].append(time.perf_counter() - started)
        started = time.perf_counter()
        theirs = iterstrat_split(sets, args.labels, seed)
        results['iterstrat seconds'].append(time.perf_counter() - started)
        for name, assigned in (
            ('imageshards', split_of),
            ('iterstrat', theirs),
            ('random', random_split(sets, seed)),
        ):
            for key, value in measured(sets, assigned, names, wanted).items():
                results[f'{name} {key}'].append(value)
        train = [(s, p) for s, p in zip(sets, shard_of) if p[0] == 'train']
        shards = sorted({p for _, p in train})
        per_shard = [len(train) / len(shards)] * len(shards)
        rng = np.random.default_rng(seed)
        shuffled = [shards[i % len(shards)] for i in rng.permutation(len(train))]
        for name, assigned in (('shards', [p for _, p in train]), ('random shards', shuffled)):
            found = measured([s for s, _ in train], assigned, shards, per_shard)
            for key, value in found.items():
                results[f'{name} {key}'].append(value)
    print(
        f'{args.images:,} images, {args.labels} labels, {args.seeds} label draws; splits '
        f'{",".join(f"{n}={f}" for n, f in FRACTIONS)}; train in {args.shards} shards'
    )
    for key, values in results.items():
        print(
            f'  {key:<40} median {statistics.median(values):10.6f}   '
            f'min {min(values):10.6f}  max {max(values):10.6f}'
        )


if __name__ == '__main__':
    main()
