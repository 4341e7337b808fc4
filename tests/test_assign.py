"""The seeded, stratified split and shard assignment: pure functions and the Beam step."""

import bisect
import collections
import hashlib
import random

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from pipelines.assignment import assign
from pipelines.assignment import plan as plan_lib
from pipelines.assignment import splits as split_lib
from pipelines.core import blocks
from pipelines.core.blocks import ImageMeta
from pipelines.core.settings import AssignSettings
from pipelines.local import spill as spill_lib

from beam_helpers import collect
from beam_helpers import new_test_pipeline


def _meta(i, label, split=''):
    return ImageMeta(
        id=i,
        key=f'k/{i:05d}.jpg',
        label=label,
        split=split,
        format='jpeg',
        height=8,
        width=8,
        channels=3,
        sha256=bytes(32),
        num_bytes=100 + i,
        source_sha256=b'',
        source_crc32c=0,
        reencoded=False,
    )


def test_shuffle_hash_depends_on_seed_purpose_and_key_only():
    assert assign.shuffle_hash(0, 'rank', 'a') == assign.shuffle_hash(0, 'rank', 'a')
    values = {
        assign.shuffle_hash(s, p, k) for s in (0, 1) for p in ('rank', 'order') for k in ('a', 'b')
    }
    assert len(values) == 8
    assert all(0 <= v < 2**64 for v in values)


def test_shuffle_hash_is_the_salted_sha256_of_the_key():
    for seed, purpose, key in ((0, 'rank', 'a'), (42, 'order', 'cat/0001.jpg'), (7, 'rank', 'é')):
        digest = hashlib.sha256(f'{seed}\x00{purpose}\x00{key}'.encode()).digest()
        assert assign.shuffle_hash(seed, purpose, key) == int.from_bytes(digest[:8], 'big')
        key_bytes = key.encode()
        assert assign.key_bytes_hash(seed, purpose, key_bytes) == int.from_bytes(digest[:8], 'big')
    # A record's place in its shard: the order salt's hash, then the key.
    meta = _meta(3, 0)._replace(key='cat/0001.jpg')
    order = assign.shuffle_hash(42, assign.ORDER_SALT, meta.key)
    assert assign.order_key(42, meta) == (order, meta.key)


def _place(plan, group, label, bucket, rank_in_bucket):
    """(split, rank within the split's class) of one image: what ShardPlan.runs does for a run."""
    rank = plan.bucket_offsets[(group, label, bucket)] + rank_in_bucket
    if group:
        return group, rank
    for split, count in plan.shares[label]:
        if rank < count:  # a manifest's own rows of this split and class rank first
            return split, plan.explicit.get((split, label), 0) + rank
        rank -= count
    raise AssertionError(f'rank {rank} beyond the images of label {label}')


@pytest.mark.parametrize('trial', range(60))
def test_runs_of_ranks_place_each_image_as_one_at_a_time(trial):
    rng = random.Random(trial)
    counts = {}
    for label in range(rng.randint(1, 4)):
        for bucket in range(rng.randint(1, 3)):
            counts[('', label, bucket)] = (rng.randint(0, 40), 1000)
        if rng.random() < 0.4:
            counts[('test', label, 0)] = (rng.randint(1, 9), 100)
    fractions = [('train', 0.7), ('val', 0.2), ('extra', 0.1)][: rng.randint(1, 3)]
    total = sum(f for _, f in fractions)
    fractions = [(name, f / total) for name, f in fractions]
    plan = plan_lib.make_plan(counts, fractions, num_shards=rng.randint(1, 7))
    for (group, label, bucket), (size, _) in counts.items():
        expected = []
        for rank_in_bucket in range(size):
            split, rank = _place(plan, group, label, bucket, rank_in_bucket)
            shard = bisect.bisect_right(plan.row_bounds(split, label), rank)
            expected.append((split, shard))
        runs = plan.runs(group, label, bucket, size)
        placed = [(split, shard) for split, shard, start, end in runs for _ in range(start, end)]
        assert placed == expected
        assert all(start < end for _, _, start, end in runs)


@pytest.mark.parametrize('trial', range(300))
def test_split_counts_are_stratified_and_proportional(trial):
    rng = random.Random(trial)
    raw = [rng.random() for _ in range(rng.randint(1, 4))]
    fractions = [value / sum(raw) for value in raw]
    sizes = [rng.randint(0, 60) for _ in range(rng.randint(1, 25))]
    rows = split_lib.stratified_split_counts(sizes, fractions)
    for size, row in zip(sizes, rows):
        assert sum(row) == size
        assert all(abs(count - size * f) <= 1 for count, f in zip(row, fractions))
    totals = [sum(row[s] for row in rows) for s in range(len(fractions))]
    assert all(abs(total - sum(sizes) * f) <= 1.5 for total, f in zip(totals, fractions))


def test_split_counts_balance_ties_across_classes():
    rows = split_lib.stratified_split_counts([5] * 10, [0.8, 0.1, 0.1])
    totals = [sum(column) for column in zip(*rows)]
    assert totals == [40, 5, 5]


@pytest.mark.parametrize('trial', range(500))
def test_shard_rows_are_balanced_and_within_one_of_proportional(trial):
    rng = random.Random(trial)
    num_shards = rng.randint(1, 16)
    sizes = [rng.randint(0, rng.choice([3, 15, 80])) for _ in range(rng.randint(1, 8))]
    total = sum(sizes)
    if not total:
        return
    extras = plan_lib.shard_extras(sizes, num_shards)
    rows = [plan_lib.class_row(n, total, num_shards, e) for n, e in zip(sizes, extras)]
    columns = [sum(row[s] for row in rows) for s in range(num_shards)]
    assert max(columns) - min(columns) <= 1
    for size, row in zip(sizes, rows):
        assert sum(row) == size and min(row) >= 0
        for shard, count in enumerate(row):
            assert abs(count - size * columns[shard] / total) <= 1


def test_bucket_bits_keep_groups_small():
    assert assign.bucket_bits_for(10) == 0
    assert assign.bucket_bits_for(50_000) == 0
    assert assign.bucket_bits_for(50_001) == 1
    assert assign.bucket_bits_for(1_000_000) == 5  # 2**5 buckets of ~31k


def test_plan_puts_manifest_splits_first_and_apportions_the_rest():
    counts = {('', 0, 0): (10, 1000), ('', 1, 0): (5, 500), ('test', 1, 0): (2, 200)}
    plan = plan_lib.make_plan(counts, [('train', 0.8), ('val', 0.2)], num_shards=2)
    assert plan.splits == ('train', 'val', 'test')
    assert plan.num_records == {'train': 12, 'val': 3, 'test': 2}
    assert plan.class_counts == {
        ('train', 0): 8,
        ('val', 0): 2,
        ('train', 1): 4,
        ('val', 1): 1,
        ('test', 1): 2,
    }
    assert plan.num_shards == {'train': 2, 'val': 2, 'test': 2}
    # Ranks of a label's unassigned images go to train first, then val, each split's shards
    # taking runs of them; a manifest's rows stay in their split, and rank first there.
    assert plan.runs('', 0, 0, 10) == [
        ('train', 0, 0, 4),
        ('train', 1, 4, 8),
        ('val', 0, 8, 9),
        ('val', 1, 9, 10),
    ]
    assert plan.runs('test', 1, 0, 2) == [('test', 0, 0, 1), ('test', 1, 1, 2)]


def test_plan_derives_shard_counts_from_bytes():
    counts = {('', 0, 0): (100, 1_000_000)}
    assert plan_lib.make_plan(counts, [('train', 1.0)], shard_bytes=300_000).num_shards == {
        'train': 4
    }
    assert plan_lib.make_plan(counts, [('train', 1.0)], shard_bytes=1e9).num_shards == {'train': 1}
    tiny = {('', 0, 0): (2, 1_000_000)}
    assert plan_lib.make_plan(tiny, [('train', 1.0)], shard_bytes=1).num_shards == {'train': 2}


def test_assign_shards_places_the_lowest_ranked_images_in_the_first_shard():
    metas = [_meta(i, 0) for i in range(4)]
    by_rank = sorted(metas, key=lambda m: assign.shuffle_hash(0, 'rank', m.key))
    expected = [(('train', 0), m.id) for m in by_rank[:2]] + [
        (('train', 1), m.id) for m in by_rank[2:]
    ]
    with new_test_pipeline() as p:
        assigned = (
            p
            | beam.Create([blocks.pack(metas[:3]), blocks.pack(metas[3:])])
            | assign.AssignShards(
                AssignSettings(0, (('train', 1.0),), num_shards=2, shard_bytes=1e9),
                assign.RankGroups(0, 0),
            )
        )
        ids = assigned.placed | beam.FlatMap(
            lambda kv: [(kv[0], m.id) for m in blocks.unpack(kv[1])]
        )
        assert_that(ids, equal_to(expected))


def _placements(tmp_path, chunks, fractions, num_shards, bucket_bits, spill=False):
    """Runs AssignShards and returns {image id: (split, shard)}.

    With `spill`, the blocks go through files under tmp_path, as on the local runner.
    """
    store = spill_lib.SpillingStore(str(tmp_path / 'blocks')) if spill else blocks.BlockStore()

    def build(p):
        assigned = (
            p
            | beam.Create([blocks.pack(chunk) for chunk in chunks])
            | assign.AssignShards(
                AssignSettings(0, tuple(fractions), num_shards=num_shards, shard_bytes=1e9),
                assign.RankGroups(0, bucket_bits),
                store,
            )
        )
        return assigned.placed | beam.FlatMap(
            lambda kv: [(m.id, kv[0]) for m in store.metas([kv[1]])]
        )

    pairs = collect(build, tmp_path)
    return {image_id: tuple(place) for image_id, place in pairs}


def test_assign_shards_is_stratified_balanced_and_independent_of_chunking_and_buckets(tmp_path):
    rng = random.Random(5)
    metas = [_meta(i, rng.choice([0, 0, 0, 1, 2])) for i in range(300)]
    fractions = [('train', 0.7), ('val', 0.2), ('test', 0.1)]
    one_chunk = _placements(tmp_path, [metas], fractions, 4, bucket_bits=0)
    many_chunks = _placements(
        tmp_path, [metas[i : i + 7] for i in range(0, 300, 7)], fractions, 4, bucket_bits=3
    )
    assert one_chunk == many_chunks
    spilled = _placements(tmp_path, [metas[:100], metas[100:]], fractions, 4, 2, spill=True)
    assert spilled == one_chunk
    assert sorted(one_chunk) == list(range(300))
    label_of = {m.id: m.label for m in metas}
    per_label = collections.Counter(label_of.values())
    split_counts = collections.Counter((split, label_of[i]) for i, (split, _) in one_chunk.items())
    for split, fraction in fractions:
        for label, n in per_label.items():
            assert abs(split_counts[(split, label)] - n * fraction) <= 1
    for split, _ in fractions:
        shard_sizes = collections.Counter(shard for s, shard in one_chunk.values() if s == split)
        assert len(shard_sizes) == 4
        assert max(shard_sizes.values()) - min(shard_sizes.values()) <= 1
        split_total = sum(shard_sizes.values())
        for label in per_label:
            in_split = split_counts[(split, label)]
            for shard, size in shard_sizes.items():
                count = sum(
                    1
                    for i, place in one_chunk.items()
                    if place == (split, shard) and label_of[i] == label
                )
                assert abs(count - in_split * size / split_total) <= 1


def test_manifest_splits_win(tmp_path):
    metas = [_meta(i, 0, split='holdout' if i < 5 else '') for i in range(20)]
    placed = _placements(tmp_path, [metas], [('train', 1.0)], 1, 0)
    assert {i for i, (split, _) in placed.items() if split == 'holdout'} == set(range(5))
    assert all(split == 'train' for i, (split, _) in placed.items() if i >= 5)
