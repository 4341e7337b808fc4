"""How far the placement of whole groups is from what a search for the lowest LD itself finds,
for a dataset that grows by new groups (bench/trusted_splits.py grow --grow-by groups).

    python -m bench.placement_bound DATA --v1 V1_OUTPUT

DATA is bench/trusted_data.py's dataset; V1_OUTPUT the build of its first 80% of groups that
`trusted_splits grow --grow-by groups` made (the same random choice is made again here). Units
are the manifest's groups (an image without one alone); near-duplicate clusters are left out,
so the figures bound what the placement does with groups alone. v1's units keep their
splits; the new ones are placed by `placement.place_units`, then moved one at a time (with
--swaps, also swapped in pairs) to whichever split lowers a score: LD itself
(stratification.measures), or LD plus the mean of how far each split's share of the images is
from its fraction, times a weight. What it prints: each result's LD and split sizes, so that the
trade between the label mix and the split sizes can be read.
"""

import argparse
import collections
import itertools

import numpy as np

from bench import trusted_splits
from imageshards import stratification
from pipelines.assignment import placement

FRACTIONS = (('train', 0.6), ('val', 0.2), ('test', 0.2))


def _parts(assign, labels):
    parts = {split: collections.Counter() for split, _ in FRACTIONS}
    for unit, split in assign.items():
        parts[split].update(labels[unit])
    return parts


def _ld(assign, labels):
    parts = _parts(assign, labels).values()
    return stratification.measures([(sum(c.values()), c) for c in parts])['label_distribution']


def _sizes(assign, labels):
    return {split: sum(c.values()) for split, c in _parts(assign, labels).items()}


def _score(assign, labels, weight):
    sizes = _sizes(assign, labels)
    total = sum(sizes.values())
    off = sum(abs(sizes[split] / total - f) for split, f in FRACTIONS) / len(FRACTIONS)
    return _ld(assign, labels) + weight * off


def _moves(assign, free, labels, weight):
    """Moves single units while one lowers the score (every pass over all of them)."""
    best = _score(assign, labels, weight)
    improved = True
    while improved:
        improved = False
        for unit in free:
            for split, _ in FRACTIONS:
                here = assign[unit]
                if split == here:
                    continue
                assign[unit] = split
                value = _score(assign, labels, weight)
                if value < best - 1e-15:
                    best, improved = value, True
                else:
                    assign[unit] = here
    return assign


def _swaps(assign, free, labels, weight):
    """Single moves, then pair swaps of new units in different splits, while either lowers the
    score (pairs: quadratic in the new units; fine for this bench's ~90)."""
    best, improved = None, True
    while improved:
        assign = _moves(assign, free, labels, weight)
        best, improved = _score(assign, labels, weight), False
        for a, b in itertools.combinations(free, 2):
            if assign[a] == assign[b]:
                continue
            assign[a], assign[b] = assign[b], assign[a]
            value = _score(assign, labels, weight)
            if value < best - 1e-15:
                best, improved = value, True
            else:
                assign[a], assign[b] = assign[b], assign[a]
    return assign


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('data')
    parser.add_argument('--v1', required=True)
    parser.add_argument('--weights', type=float, nargs='+', default=[0.0, 0.1, 0.3, 1.0])
    parser.add_argument('--swaps', type=float, default=1.0, help='the weight for moves and swaps')
    args = parser.parse_args(argv)
    _, rows = trusted_splits._truth(args.data)  # pylint: disable=protected-access
    rng = np.random.default_rng(1)  # trusted_splits.grow's choice of v1's groups
    units = sorted({row['group'] or row['path'] for row in rows})
    kept = {unit for unit in units if rng.random() < 0.8}
    labels = collections.defaultdict(collections.Counter)
    for row in rows:
        labels[row['group'] or row['path']][row['label']] += 1
    v1 = trusted_splits._split_of_paths(args.v1, args.data)  # pylint: disable=protected-access
    fixed = {row['group'] or row['path']: v1[row['path']] for row in rows if row['path'] in v1}
    assert set(fixed) == kept, 'V1_OUTPUT is not the build of the first 80% of the groups'
    made = [
        placement.Unit(unit, sum(labels[unit].values()), dict(labels[unit]), fixed.get(unit, ''))
        for unit in units
    ]
    placed = placement.place_units(made, list(FRACTIONS), seed=0)
    free = [unit for unit in units if unit not in fixed]
    print(f'{len(fixed)} units kept from v1, {len(free)} new')
    print(f'place_units: LD {_ld(placed, labels):.4g}, sizes {_sizes(placed, labels)}')
    for weight in args.weights:
        found = _moves(dict(placed), free, labels, weight)
        print(
            f'moves scored by LD + {weight} x size error: LD {_ld(found, labels):.4g}, '
            f'sizes {_sizes(found, labels)}'
        )
    if args.swaps:
        found = _swaps(dict(placed), free, labels, args.swaps)
        print(
            f'moves and swaps scored by LD + {args.swaps} x size error: '
            f'LD {_ld(found, labels):.4g}, sizes {_sizes(found, labels)}'
        )


if __name__ == '__main__':
    main()
