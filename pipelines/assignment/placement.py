"""Placing whole groups among splits: every image of a unit (a group, a near-duplicate cluster,
or several of them joined by shared images) goes to one split, and the splits keep each label's
share as well as whole units allow.

Units are placed as iterative stratification places examples (pipelines/assignment/splits.py),
with sizes: those a manifest or an earlier build puts in a split first; then the others, rare
labels first (a unit holding a label few images have is placed while every split still wants
that label), larger units before smaller ones, ties in a seeded order; each to the split where
it brings the counts closest to their targets. Then units move between splits, the largest
first, while a move brings them closer (a few passes at most). The targets are the units' own
totals divided by --splits; the images of no unit are divided afterwards, class by class, to
bring each split's label mix back to its targets (pipelines/assignment/plan.py), so the units
need to be as well divided among themselves as they can be, no more.

"Closest" is the sum over splits and labels of (count - target)^2 / (the label's images in
units), plus the same of each split's size: a label's relative error weighs the same whatever
the label's size, so rare labels count. Deterministic from the seed and the units' keys: the
same splits on every runner. Its state is a count per (split, label); its work a few passes
over the units, each costing a step per label a unit holds and split.
"""

import collections
import typing

from pipelines.assignment.assign import shuffle_hash

GROUP_SALT = 'group'
_PASSES = 4


class Unit(typing.NamedTuple):
    """Images that go to one split together."""

    key: str  # stable: what orders ties (a group's name, a cluster's first image)
    size: int  # images
    labels: dict  # label id -> images with it (each label of a multi-label image counts)
    fixed: str = ''  # the split a manifest or an earlier build puts it in; '' to place


class _Counts:
    """Counts per (split, label) and per split, and how far they are from their targets."""

    def __init__(self, units, fractions):
        self.splits = [name for name, _ in fractions]
        totals = collections.Counter()
        for unit in units:
            totals.update(unit.labels)
        size = sum(unit.size for unit in units)
        self.weight = {label: 1 / max(n, 1) for label, n in totals.items()}
        self.size_weight = 1 / max(size, 1)
        self.target = {
            split: {label: n * fraction for label, n in totals.items()}
            for split, fraction in fractions
        }
        self.target_size = {split: size * fraction for split, fraction in fractions}
        self.count = {split: collections.Counter() for split in self.splits}
        self.size = dict.fromkeys(self.splits, 0)

    def change(self, unit, split, sign=1):
        """How much placing (sign 1) or removing (-1) `unit` in `split` changes the error."""
        count, target = self.count[split], self.target[split]
        found = 0.0
        for label, n in unit.labels.items():
            gap = count[label] - target[label]
            found += (2 * sign * n * gap + n * n) * self.weight[label]
        gap = self.size[split] - self.target_size[split]
        return found + (2 * sign * unit.size * gap + unit.size**2) * self.size_weight

    def add(self, unit, split, sign=1):
        if split not in self.count:  # a manifest's own split, outside --splits
            return
        counter = self.count[split]
        for label, n in unit.labels.items():
            counter[label] += sign * n
        self.size[split] += sign * unit.size

    def best(self, unit):
        """The split where `unit` brings the counts closest to their targets (ties: the split
        that wants the most images, then the first)."""
        return min(
            self.splits,
            key=lambda s: (self.change(unit, s), self.size[s] - self.target_size[s]),
        )


def place_units(units, fractions, seed=0) -> dict:
    """{unit key: split} for every unit.

    Args:
        units: the Units (their keys distinct).
        fractions: (split, fraction) pairs of --splits.
        seed: the build's seed, which orders ties.
    """
    counts = _Counts(units, fractions)
    placed = {}
    for unit in units:
        if unit.fixed:
            placed[unit.key] = unit.fixed
            counts.add(unit, unit.fixed)
    rarity = collections.Counter()
    for unit in units:
        rarity.update(unit.labels)
    free = [unit for unit in units if not unit.fixed]
    free.sort(
        key=lambda unit: (
            min((rarity[label] for label in unit.labels), default=float('inf')),
            -unit.size,
            shuffle_hash(seed, GROUP_SALT, unit.key),
        )
    )
    for unit in free:
        split = counts.best(unit)
        placed[unit.key] = split
        counts.add(unit, split)
    _improve(counts, placed, sorted(free, key=lambda unit: -unit.size))
    return placed


def _improve(counts, placed, units):
    """Moves units to the split that brings the counts closest, while one does (at most
    _PASSES passes over them)."""
    for _ in range(_PASSES):
        moved = False
        for unit in units:
            here = placed[unit.key]
            leaving = counts.change(unit, here, sign=-1)  # what taking it out changes
            counts.add(unit, here, sign=-1)
            split = counts.best(unit)
            if split != here and counts.change(unit, split) + leaving < -1e-9:
                placed[unit.key] = here = split
                moved = True
            counts.add(unit, here)
        if not moved:
            return
