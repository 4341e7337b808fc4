"""Assigning every valid image to a split and a shard: a seeded, stratified, balanced shuffle.

Randomness is a pure function of (seed, the image's stable key): a salted SHA-256 ranks the
images of each class, so retries, runners and worker counts cannot change the result.

* Splits: each class is divided among the requested splits in proportion (every class's count
  within one image of its share), the lowest-ranked images going to the first split. A manifest's
  `split` column overrides this for its rows. In a multi-label build the "class" of an image is
  its label set, and the sets are divided by iterative stratification, rare labels first
  (pipelines/assignment/splits.py).
* Shards: each split has S shards whose record counts differ by at most one, and each shard's
  count of every class is within one of its proportional share (`ShardPlan.class_row`). Which
  images of a class go to which shard follows their rank, so it is uniformly random.
* Order within a shard: a second salted hash, so it is a uniformly random permutation.

Only metadata moves, in blocks (pipelines/assignment/blocks.py): `(group, label, bucket)` groups of
them, where the bucket (top bits of the rank hash) bounds the size of one group on a large class,
then one block per (group, shard) for the writer.
"""

import bisect
import collections
import dataclasses
import functools
import hashlib
import math
import typing

import apache_beam as beam

from imageshards import file_names
from pipelines.assignment import blocks
from pipelines.assignment import splits as split_lib
from pipelines.options import BuildConfig

_RANK = 'rank'
DEFAULT_SHARD_BYTES = BuildConfig.shard_size_mb * 1e6
_ORDER = 'order'


def shuffle_hash(seed, purpose, key):
    """A 64-bit value uniform over keys, fixed by (seed, purpose, key): the first 8 bytes of
    the SHA-256 of f'{seed}\\0{purpose}\\0{key}', the key as its file name's bytes (UTF-8 for a
    name that is UTF-8: imageshards/file_names.py)."""
    digest = _salted(seed, purpose).copy()
    digest.update(file_names.to_bytes(key))
    return int.from_bytes(digest.digest()[:8], 'big')


@functools.lru_cache(maxsize=16)
def _salted(seed, purpose):
    """A SHA-256 that has hashed the salt, copied for each key (a third cheaper per image)."""
    return hashlib.sha256(f'{seed}\x00{purpose}\x00'.encode())


def order_key(seed, meta):
    """Sort key of a record inside its shard."""
    return shuffle_hash(seed, _ORDER, meta.key), meta.key


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
        if self.rows:
            row = self.rows[(split, label)]
        else:
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

    def shard_keys(self):
        return [(split, shard) for split in self.splits for shard in range(self.num_shards[split])]


def make_plan(counts, fractions, num_shards=0, shard_bytes=DEFAULT_SHARD_BYTES):
    """Builds the ShardPlan.

    Args:
        counts: {(group, label, bucket): (images, bytes)} where group is a manifest's split or ''.
        fractions: (split, fraction) pairs for images without a manifest split.
        num_shards: shards per split; 0 derives it from `shard_bytes`.
        shard_bytes: target image bytes per shard.
    """
    bucket_offsets, group_sizes, group_bytes = {}, collections.Counter(), collections.Counter()
    for (group, label, bucket), (images, size) in sorted(counts.items()):
        bucket_offsets[(group, label, bucket)] = group_sizes[(group, label)]
        group_sizes[(group, label)] += images
        group_bytes[(group, label)] += size
    labels = sorted({label for _, label in group_sizes})
    names = [name for name, _ in fractions]
    unassigned = [group_sizes[('', label)] for label in labels]
    rows = split_lib.split_counts(labels, unassigned, [fraction for _, fraction in fractions])
    shares = {label: list(zip(names, row)) for label, row in zip(labels, rows)}
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
    multi_label = any(isinstance(label, tuple) for label in labels)
    for split in splits:
        derived = min(num_records[split], math.ceil(split_bytes[split] / shard_bytes))
        shard_counts[split] = num_shards or max(1, derived)
        sizes = [class_counts.get((split, label), 0) for label in labels]
        if multi_label:  # label sets: shards stratified for every label, as the splits are
            for label, row in zip(
                labels, split_lib.shard_counts(labels, sizes, shard_counts[split])
            ):
                rows[(split, label)] = tuple(row)
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


def bucket_bits_for(largest_class, target=50_000):
    """Bits of the rank hash that split one class's images into groups of about `target`."""
    return max(0, math.ceil(math.log2(largest_class / target))) if largest_class > target else 0


def _rank_hash(seed, meta):
    return shuffle_hash(seed, _RANK, meta.key)


class RankGroups(typing.NamedTuple):
    """How images are grouped for ranking: by (group, label, bucket)."""

    seed: int
    bucket_bits: int  # bucket_bits_for

    def keyed_blocks(self, metas, store):
        """((group, label, bucket), (block ref of its images there, images, bytes)) per group
        of `metas`, the blocks put in `store`: AssignShards' input."""
        groups = collections.defaultdict(list)
        bits = self.bucket_bits
        for meta in metas:
            bucket = _rank_hash(self.seed, meta) >> (64 - bits) if bits else 0
            groups[(meta.split, meta.label, bucket)].append(meta)
        refs = store.put('by-group', [blocks.pack(metas) for metas in groups.values()])
        for (key, metas), group_ref in zip(groups.items(), refs):
            yield key, (group_ref, len(metas), sum(meta.num_bytes for meta in metas))


class _KeyByRankGroup(beam.DoFn):
    """Block ref -> RankGroups.keyed_blocks of its images."""

    def __init__(self, groups, store):
        self._groups, self._store = groups, store

    def process(self, ref):
        yield from self._groups.keyed_blocks(blocks.unpack(self._store.get(ref)), self._store)


def _count(keyed):
    key, (_, images, size) = keyed
    return key, (images, size)


def _sum_pairs(pairs):
    images = size = 0
    for a, b in pairs:
        images += a
        size += b
    return images, size


class _PlaceInShards(beam.DoFn):
    """((group, label, bucket), [(block ref, images, bytes)]) -> ((split, shard), block ref) per
    shard."""

    def __init__(self, seed, store):
        self._seed, self._store = seed, store

    def process(self, grouped, plan):
        (group, label, bucket), counted = grouped
        metas = self._store.metas(ref for ref, _, _ in counted)
        ranked = sorted(metas, key=lambda meta: (_rank_hash(self._seed, meta), meta.key))
        by_shard = collections.defaultdict(list)
        for split, shard, start, end in plan.runs(group, label, bucket, len(ranked)):
            by_shard[(split, shard)] += ranked[start:end]
        refs = self._store.put('placed', [blocks.pack(metas) for metas in by_shard.values()])
        yield from zip(by_shard, refs)


class Assigned(typing.NamedTuple):
    """AssignShards' outputs."""

    placed: beam.PCollection  # ((split, shard), block ref)
    plan: beam.PCollection  # the ShardPlan, one element


class AssignShards(beam.PTransform):
    """Block refs of ImageMeta, or RankGroups.keyed_blocks of them (`keyed`) -> Assigned:
    ((split, shard), block ref), and the ShardPlan.

    Args:
        seed: the build's seed.
        fractions: (split, fraction) pairs for images without a manifest split.
        num_shards: shards per split; 0 derives it from `shard_bytes`.
        shard_bytes: target image bytes per shard.
        bucket_bits: bits of the rank hash that cut a large class into groups (bucket_bits_for).
        store: the BlockStore that keeps the blocks (default: inline).
        keyed: whether the input is keyed already (RankGroups(seed, bucket_bits)'s blocks).
    """

    def __init__(
        self,
        seed,
        fractions,
        *,
        num_shards=0,
        shard_bytes=DEFAULT_SHARD_BYTES,
        bucket_bits=0,
        store=None,
        keyed=False,
    ):
        super().__init__()
        self._seed = seed
        self._fractions = tuple(fractions)
        self._num_shards = num_shards
        self._shard_bytes = shard_bytes
        self._bucket_bits = bucket_bits
        self._store = store or blocks.BlockStore()
        self._keyed = keyed

    def expand(self, refs):
        keyed = refs
        if not self._keyed:
            keyed = refs | 'KeyByRankGroup' >> beam.ParDo(
                _KeyByRankGroup(RankGroups(self._seed, self._bucket_bits), self._store)
            )
        # ((group, label, bucket), (block ref, images, bytes))
        plan = (
            keyed
            | 'CountGroups' >> beam.Map(_count)
            | 'SumCounts' >> beam.CombinePerKey(_sum_pairs)
            | 'CollectCounts' >> beam.combiners.ToDict()
            | 'MakePlan'
            >> beam.Map(make_plan, self._fractions, self._num_shards, self._shard_bytes)
        )
        placed = (
            keyed
            | 'GroupByRankGroup' >> beam.GroupByKey()
            | 'PlaceInShards'
            >> beam.ParDo(
                _PlaceInShards(self._seed, self._store), plan=beam.pvalue.AsSingleton(plan)
            )
        )
        # ((split, shard), block ref)
        return Assigned(placed, plan)
