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

Only metadata moves, in blocks (pipelines/core/blocks.py): `(group, label, bucket)` groups of
them, where the bucket (top bits of the rank hash) bounds the size of one group on a large class,
then one block per (group, shard) for the writer.
"""

import collections
import functools
import hashlib
import math
import typing

import apache_beam as beam

from imageshards import file_names
from pipelines.assignment import plan as plan_lib
from pipelines.core import blocks

# The salts of shuffle_hash, one per purpose: an image's rank in its class, and its place in its
# shard. Changing one changes every build's bytes.
RANK_SALT = 'rank'
ORDER_SALT = 'order'


def shuffle_hash(seed, purpose, key):
    """A 64-bit value uniform over keys, fixed by (seed, purpose, key): the first 8 bytes of
    the SHA-256 of f'{seed}\\0{purpose}\\0{key}', the key as its file name's bytes (UTF-8 for a
    name that is UTF-8: imageshards/file_names.py)."""
    return key_bytes_hash(seed, purpose, file_names.to_bytes(key))


def key_bytes_hash(seed, purpose, key):
    """shuffle_hash of the key whose file name's bytes are `key`."""
    digest = _salted(seed, purpose).copy()
    digest.update(key)
    return int.from_bytes(digest.digest()[:8], 'big')


@functools.lru_cache(maxsize=16)
def _salted(seed, purpose):
    """A SHA-256 that has hashed the salt, copied for each key (a third cheaper per image)."""
    return hashlib.sha256(f'{seed}\x00{purpose}\x00'.encode())


def order_key(seed, meta):
    """Sort key of a record inside its shard: shuffle_hash(seed, ORDER_SALT, meta.key), then
    the key."""
    return key_bytes_hash(seed, ORDER_SALT, file_names.to_bytes(meta.key)), meta.key


def bucket_bits_for(largest_class, target=50_000):
    """Bits of the rank hash that split one class's images into groups of about `target`."""
    return max(0, math.ceil(math.log2(largest_class / target))) if largest_class > target else 0


def _rank_hash(seed, meta):
    return shuffle_hash(seed, RANK_SALT, meta.key)


def rank_class(label, multi_label=False):
    """What an image is shuffled and ranked with: its label; where its label is a set of ids
    (`multi_label`) the first of them (-1: none), so that a step moves a group per label, not
    one per label set (of which a build may have thousands). The plan still counts each set
    apart."""
    if multi_label:
        return label[0] if label else -1
    return label


class RankGroups(typing.NamedTuple):
    """How images are grouped for ranking: by (group, rank_class(label), bucket)."""

    seed: int
    bucket_bits: int  # bucket_bits_for
    multi_label: bool = False  # an image's label is a set of ids (the build's kind says)

    def keyed_blocks(self, metas, store):
        """((group, rank class, bucket), (block ref of its images there, images, bytes)) per
        group of `metas`, the blocks put in `store`: AssignShards' input. A multi-label group's
        value also holds ((label set, images, bytes), ...) of the sets in it."""
        groups = collections.defaultdict(list)
        bits, multi_label = self.bucket_bits, self.multi_label
        for meta in metas:
            bucket = _rank_hash(self.seed, meta) >> (64 - bits) if bits else 0
            groups[(meta.split, rank_class(meta.label, multi_label), bucket)].append(meta)
        refs = store.put('by-group', [blocks.pack(metas) for metas in groups.values()])
        for (key, metas), group_ref in zip(groups.items(), refs):
            value = (group_ref, len(metas), sum(meta.num_bytes for meta in metas))
            if multi_label:
                value += (_label_set_counts(metas),)
            yield key, value


def _label_set_counts(metas):
    counts = collections.defaultdict(lambda: [0, 0])
    for meta in metas:
        counts[meta.label][0] += 1
        counts[meta.label][1] += meta.num_bytes
    return tuple((labels, images, size) for labels, (images, size) in counts.items())


class _KeyByRankGroup(beam.DoFn):
    """Block ref -> RankGroups.keyed_blocks of its images."""

    def __init__(self, groups, store):
        self._groups, self._store = groups, store

    def process(self, ref):
        yield from self._groups.keyed_blocks(blocks.unpack(self._store.get(ref)), self._store)


def _counts(keyed):
    """((group, label, bucket), (images, bytes)) of a keyed block: per label set in a
    multi-label build."""
    key, (_, images, size, *sets) = keyed
    if not sets:
        yield key, (images, size)
        return
    group, _, bucket = key
    for labels, n, set_size in sets[0]:
        yield (group, labels, bucket), (n, set_size)


def _sum_pairs(pairs):
    images = size = 0
    for a, b in pairs:
        images += a
        size += b
    return images, size


class _PlaceInShards(beam.DoFn):
    """((group, rank class, bucket), [(block ref, images, bytes[, label sets])]) -> ((split,
    shard), block ref) per shard."""

    def __init__(self, seed, store):
        self._seed, self._store = seed, store

    def process(self, grouped, plan):
        (group, _, bucket), counted = grouped
        # Images are ranked and regrouped as they are packed (blocks.split), never unpacked:
        # [(rank, the key's bytes, the packed image)] per label; in a multi-label build, per set.
        by_label = collections.defaultdict(list)
        seed = self._seed
        for value in counted:
            for key, label, packed in blocks.split(self._store.get(value[0])):
                by_label[label].append((key_bytes_hash(seed, RANK_SALT, key), key, packed))
        by_shard = collections.defaultdict(list)
        for label, ranked in by_label.items():
            ranked.sort()  # by rank, ties (a 64-bit collision) by the key's bytes
            for split, shard, start, end in plan.runs(group, label, bucket, len(ranked)):
                by_shard[(split, shard)] += (image[2] for image in ranked[start:end])
        refs = self._store.put('placed', [b''.join(packed) for packed in by_shard.values()])
        yield from zip(by_shard, refs)


class Assigned(typing.NamedTuple):
    """AssignShards' outputs."""

    placed: beam.PCollection  # ((split, shard), block ref)
    plan: beam.PCollection  # the ShardPlan, one element
    layout: beam.PCollection  # its ShardLayout, one element


class AssignShards(beam.PTransform):
    """Block refs of ImageMeta, or RankGroups.keyed_blocks of them (`keyed`) -> Assigned:
    ((split, shard), block ref), the ShardPlan and its ShardLayout.

    Args:
        settings: the build's AssignSettings (pipelines/core/settings.py).
        rank_groups: the RankGroups that key the images (or keyed them: `keyed`).
        store: the BlockStore that keeps the blocks (default: inline).
        keyed: whether the input is keyed already (`rank_groups`' blocks).
        fill: the images without a split fill what the placed ones leave of each class's
            shares (plan.make_plan's `fill`: a build with groups or an earlier build's splits).
    """

    def __init__(self, settings, rank_groups, store=None, *, keyed=False, fill=False):
        super().__init__()
        self._settings = settings
        self._rank_groups = rank_groups
        self._store = store or blocks.BlockStore()
        self._keyed = keyed
        self._fill = fill

    def expand(self, refs):
        settings, keyed = self._settings, refs
        if not self._keyed:
            keyed = refs | 'KeyByRankGroup' >> beam.ParDo(
                _KeyByRankGroup(self._rank_groups, self._store)
            )
        # ((group, label, bucket), (block ref, images, bytes))
        plan = (
            keyed
            | 'CountGroups' >> beam.FlatMap(_counts)
            | 'SumCounts' >> beam.CombinePerKey(_sum_pairs)
            | 'CollectCounts' >> beam.combiners.ToDict()
            | 'MakePlan'
            >> beam.Map(
                plan_lib.make_plan,
                settings.fractions,
                settings.num_shards,
                settings.shard_bytes,
                self._fill,
                self._rank_groups.multi_label,
            )
        )
        placed = (
            keyed
            | 'GroupByRankGroup' >> beam.GroupByKey()
            | 'PlaceInShards'
            >> beam.ParDo(
                _PlaceInShards(settings.seed, self._store), plan=beam.pvalue.AsSingleton(plan)
            )
        )
        # ((split, shard), block ref)
        return Assigned(placed, plan, plan | 'ShardLayout' >> beam.Map(lambda p: p.layout))
