"""The shard plan: how many records of every class (or, in a multi-label build, label set) each
split and each of its shards receives, computed once from the counts of (group, label, bucket),
and where each rank of a group goes (`ShardPlan.runs`).

* Splits: each class is divided among the requested splits in proportion
  (pipelines/assignment/splits.py); a manifest's `split` column places its own rows.
* Shards: each split has S shards whose record counts differ by at most one, and each shard's
  count of every class is within one of its proportional share (`class_row`, from a controlled
  rounding: `shard_extras`); a multi-label build's label sets are stratified over the shards
  for every label instead (`splits.shard_counts`), within the limit MAX_STRATIFIED_CELLS.
"""

import array
import bisect
import collections
import dataclasses
import math
import typing

from pipelines.assignment import splits as split_lib
from pipelines.core.settings import BuildConfig

DEFAULT_SHARD_BYTES = BuildConfig.shard_size_mb * 1e6


def shard_extras(class_sizes, num_shards):
    """Plans a controlled rounding of class counts over the shards of one split.

    With N records in S shards, the first `N % S` shards hold one record more. Class c's share of
    shard s is `n_c * size_s / N`; it receives the floor of that, plus one in R_c shards, where
    R_c makes its row sum to n_c. Of those, x_c go to large shards and the rest to small ones,
    dealt round-robin inside each group from running offsets, so that every shard's column sums
    to its size: a rounding within one of proportional that a flow argument shows always exists.

    Returns:
        [(x_c, large_offset_c, small_offset_c)] per class.
    """
    total = sum(class_sizes)
    if total == 0:
        return [(0, 0, 0)] * len(class_sizes)
    q, large = divmod(total, num_shards)
    small = num_shards - large
    floors_large = [n * (q + 1) // total for n in class_sizes]
    floors_small = [n * q // total for n in class_sizes]
    extras = [
        n - large * fl - small * fs for n, fl, fs in zip(class_sizes, floors_large, floors_small)
    ]
    lower = [max(0, extra - small) for extra in extras]
    upper = [min(extra, large) for extra in extras]
    needed = large * (q + 1 - sum(floors_large))  # extras that the large shards must receive
    # Start near each class's fractional share of the large shards, then correct the total.
    targets = [large * ((n * (q + 1)) % total) / total for n in class_sizes]
    x = [min(max(math.floor(t), lo), hi) for t, lo, hi in zip(targets, lower, upper)]
    by_shortfall = sorted(range(len(x)), key=lambda c: (x[c] - targets[c], c))
    _adjust(x, needed - sum(x), by_shortfall, upper, +1)
    _adjust(x, sum(x) - needed, by_shortfall[::-1], lower, -1)
    plan, large_offset, small_offset = [], 0, 0
    for x_c, extra in zip(x, extras):
        plan.append((x_c, large_offset, small_offset))
        large_offset = (large_offset + x_c) % large if large else 0
        small_offset = (small_offset + extra - x_c) % small if small else 0
    return plan


def _adjust(x, amount, order, bounds, step):
    """Moves `amount` units of x by `step`, one per class per pass, in `order`, within `bounds`."""
    while amount > 0:
        for c in order:
            if amount and x[c] != bounds[c]:
                x[c] += step
                amount -= 1


def class_row(n_c, total, num_shards, extras):
    """How many records of a class of `n_c` each shard receives (see `shard_extras`)."""
    x_c, large_offset, small_offset = extras
    q, large = divmod(total, num_shards)
    small = num_shards - large
    row = [n_c * (q + 1 if s < large else q) // total for s in range(num_shards)]
    for j in range(x_c):
        row[(large_offset + j) % large] += 1
    for j in range(n_c - sum(row)):
        row[large + (small_offset + j) % small] += 1
    return row


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """Where every rank goes; computed once from the counts of (group, label, bucket)."""

    splits: tuple  # split names that received records, requested order first
    num_shards: dict  # split -> shard count
    num_records: dict  # split -> record count
    class_counts: dict  # (split, label) -> records
    bucket_offsets: dict  # (group, label, bucket) -> rank of its first image in (group, label)
    shares: dict  # label -> [(split, count)] for images with no manifest split
    explicit: dict  # (split, label) -> images a manifest put in that split
    extras: dict  # (split, label) -> shard_extras() entry
    rows: dict = None  # (split, label set) -> records per shard, in a multi-label build

    def runs(self, group, label, bucket, size):
        """Where the `size` images of a bucket go, by rank: [(split, shard, start, end)], the
        images of ranks start..end-1 in the bucket to that shard. A bucket's ranks follow the
        ranks of its (group, label) (`bucket_offsets`); a manifest's group is its split, else
        the label's ranks go to its `shares` in order, after a manifest's own rows of that split
        and label; a shard of the split takes the ranks its `row_bounds` hold."""
        first = self.bucket_offsets[(group, label, bucket)]
        if group:  # (split, rank in the split's class of the bucket's first image, start, end)
            segments = [(group, first, 0, size)]
        else:
            segments, start = [], 0  # `start`: the class rank where a split's share begins
            for split, count in self.shares[label]:
                lo, hi = max(start, first), min(start + count, first + size)
                if lo < hi:
                    rank = self.explicit.get((split, label), 0) + lo - start
                    segments.append((split, rank, lo - first, hi - first))
                start += count
        runs = []
        for split, rank, start, end in segments:
            bounds = self.row_bounds(split, label)
            while start < end:
                shard = bisect.bisect_right(bounds, rank)
                stop = min(end, start + bounds[shard] - rank)
                runs.append((split, shard, start, stop))
                rank += stop - start
                start = stop
        return runs

    def row_bounds(self, split, label):
        """Cumulative record counts of a class over the shards of a split, for bisect."""
        row = self.rows.get((split, label)) if self.rows else None
        if row is None:
            row = class_row(
                self.class_counts[(split, label)],
                self.num_records[split],
                self.num_shards[split],
                self.extras[(split, label)],
            )
        bounds, running = [], 0
        for count in row:
            running += count
            bounds.append(running)
        return bounds

    @property
    def layout(self):
        """The ShardLayout of this plan."""
        return ShardLayout(self.splits, self.num_shards, self.num_records)


class ShardLayout(typing.NamedTuple):
    """What writing needs of a plan: its splits, their shards and records. A side input of a
    few numbers, where the plan (with a multi-label build's label sets) may be megabytes that
    every bundle reading it would decode."""

    splits: tuple  # split names that received records, requested order first
    num_shards: dict  # split -> shard count
    num_records: dict  # split -> record count

    def shard_keys(self):
        return [(split, shard) for split in self.splits for shard in range(self.num_shards[split])]


# Beyond this many (label set, shard) counts in a split, a multi-label plan spreads each label
# set over the shards as a class (within one record each) instead of stratifying every label:
# the rows would be a side input of that many numbers, and their planning time grows with it
# (docs/scaling.md: 450,000 sets x 64 shards took a minute on one core).
MAX_STRATIFIED_CELLS = 4_000_000


def _shares(labels, unassigned, group_sizes, fractions, fill, multi_label):
    """{label: [(split, count)]}: how the images of each label without a split are divided."""
    names = [name for name, _ in fractions]
    placed = [[group_sizes[(name, label)] for name in names] for label in labels] if fill else None
    fractions = [f for _, f in fractions]
    rows = split_lib.split_counts(labels, unassigned, fractions, placed, multi_label)
    return {label: list(zip(names, row)) for label, row in zip(labels, rows)}


def _group_sizes(counts):
    """({(group, label, bucket): images of the group and label in buckets before it},
    {(group, label): images}, {(group, label): bytes}) of make_plan's `counts`."""
    bucket_offsets, group_sizes, group_bytes = {}, collections.Counter(), collections.Counter()
    for (group, label, bucket), (images, size) in sorted(counts.items()):
        bucket_offsets[(group, label, bucket)] = group_sizes[(group, label)]
        group_sizes[(group, label)] += images
        group_bytes[(group, label)] += size
    return bucket_offsets, group_sizes, group_bytes


def make_plan(
    counts, fractions, num_shards=0, shard_bytes=DEFAULT_SHARD_BYTES, fill=False, multi_label=False
):
    """Builds the ShardPlan.

    Args:
        counts: {(group, label, bucket): (images, bytes)} where group is a manifest's split or ''.
        fractions: (split, fraction) pairs for images without a manifest split.
        num_shards: shards per split; 0 derives it from `shard_bytes`.
        shard_bytes: target image bytes per shard.
        fill: divide the images without a split to bring each class's counts in the splits,
            with those already placed there (groups, an earlier build's), to their shares
            (`splits.fill_split_counts`); else each class's own images in proportion.
        multi_label: labels are label sets (tuples of ids), divided by iterative stratification.
    """
    bucket_offsets, group_sizes, group_bytes = _group_sizes(counts)
    labels = sorted({label for _, label in group_sizes})
    names = [name for name, _ in fractions]
    unassigned = [group_sizes[('', label)] for label in labels]
    shares = _shares(labels, unassigned, group_sizes, fractions, fill, multi_label)
    explicit = {key: images for key, images in group_sizes.items() if key[0] and images}
    class_counts, split_bytes = collections.Counter(explicit), collections.Counter()
    for group, label in explicit:
        split_bytes[group] += group_bytes[(group, label)]
    for label, n in zip(labels, unassigned):
        for split, count in shares[label]:
            class_counts[(split, label)] += count
            if n:
                split_bytes[split] += group_bytes[('', label)] * count / n
    num_records = collections.Counter()
    for (split, _), images in class_counts.items():
        num_records[split] += images
    manifest_only = sorted(set(num_records) - set(names))
    splits = tuple(s for s in names + manifest_only if num_records[s] > 0)
    shard_counts, extras, rows = {}, {}, {}
    for split in splits:
        derived = min(num_records[split], math.ceil(split_bytes[split] / shard_bytes))
        shard_counts[split] = num_shards or max(1, derived)
        sizes = [class_counts.get((split, label), 0) for label in labels]
        if multi_label and len(labels) * shard_counts[split] <= MAX_STRATIFIED_CELLS:
            # Label sets: the shards stratified for every label, as the splits are.
            stratified = split_lib.shard_counts(labels, sizes, shard_counts[split])
            for label, row in zip(labels, stratified):  # one object a row: a smaller side input
                rows[(split, label)] = array.array('q', row)
            continue
        for label, entry in zip(labels, shard_extras(sizes, shard_counts[split])):
            extras[(split, label)] = entry
    return ShardPlan(
        splits,
        shard_counts,
        dict(num_records),
        {key: n for key, n in class_counts.items() if n},
        bucket_offsets,
        shares,
        explicit,
        extras,
        rows or None,
    )
