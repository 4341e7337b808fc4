"""What the writer measures for the analysis of a split (pipelines/analysis/analyze.py sums it):
for each shard of the analysed split, the counts of its images (sizes, labels) and the pixel
sums of its first `sample_count` records, from the bytes the writer holds.

A shard's records are a stratified random part of the split in a seeded random order
(pipelines/assignment/assign.py), so the first records of each shard, as many from each as the
split's records are spread over them, are a random sample of the split, fixed by the seed.
"""

import collections


def sample_count(num_records: int, num_shards: int, index: int, sample_size: int) -> int:
    """Records measured of shard `index` of a split of `num_records` in `num_shards`: its first
    ones, min(sample_size, num_records) over the split, spread over the shards as the records
    are (the first `num_records % num_shards` shards hold one more: never more than a shard
    holds)."""
    wanted = min(sample_size, num_records)
    return wanted // num_shards + (index < wanted % num_shards)


def add_pixel_sums(accumulator: list, sums) -> list:
    """Adds one image's pixel sums (images.pixel_sums) to `accumulator`, [n] + per channel the
    sums of S1, S2, S1², S2² and S1·S2 (S1, S2: an image's sum of values and of squares)."""
    accumulator[0] += 1
    for c in range(3):
        s1, s2 = sums[c], sums[3 + c]
        for i, value in enumerate((s1, s2, s1 * s1, s2 * s2, s1 * s2)):
            accumulator[1 + 5 * c + i] += value
    return accumulator


def shard_summary(metas, label_counts, pixel_sums) -> dict:
    """What one shard adds to its split's analysis: its images' sizes and labels (`metas`,
    `label_counts` {label id: records}) and its sample's pixel sums (images.pixel_sums each)."""
    accumulator = empty_summary()
    accumulator['images'] = len(metas)
    accumulator['sizes'].update((meta.height, meta.width) for meta in metas)
    accumulator['labels'].update(label_counts)
    for sums in pixel_sums:
        add_pixel_sums(accumulator['pixels'], sums)
    return accumulator


def empty_summary() -> dict:
    """A shard summary of no images: what summaries are added to."""
    return {
        'images': 0,
        'sizes': collections.Counter(),  # (height, width) -> images
        'labels': collections.Counter(),  # label id -> images
        'pixels': [0] * 16,  # add_pixel_sums
    }
