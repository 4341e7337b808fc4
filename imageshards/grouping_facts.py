"""dataset.json's `grouping`: what keeps a build's images in one split (groups, near-duplicate
clusters, an earlier build's splits) and how well it held, made from counts that the build and
`imageshards verify` take alike.

    grouping: {
      groups: {by, pattern, count, leaked}     a build with groups (a manifest's `group` column:
                                               by "column"; --group-pattern: by "pattern")
      near_duplicates: {hash, distance, max_cluster_size, clusters, images, capped, leaked}
                                               --near-duplicates; the clusters are listed in
                                               near_duplicates.jsonl
      previous: {build, kept, new, removed, moved}   --splits-from: images kept from the earlier
                                               build, new ones, earlier ones gone; moved is 0
      stratification: {label_distribution, labels_missing[, examples_distribution]}
                                               of the splits (imageshards/stratification.py)
    }
    splits.<split>: groups, leaked_groups, clusters, leaked_clusters, label_distribution

A group or cluster is counted in every split that holds one of its images, and is `leaked`
where it has images in more than one. `clusters` and `leaked` count every cluster listed,
capped ones (too large to keep whole: near_duplicates.jsonl marks them) included; a cluster is
never split by the build but where it is capped, an earlier build's splits keep it apart, or a
manifest's split column does. The counts come as tallies: {(kind, split, leaked): count}, kind
one of GROUP, CLUSTER, CAPPED and split '' for the whole build.
"""

import collections

from imageshards import stratification

GROUP, CLUSTER, CAPPED = 'group', 'cluster', 'capped_cluster'
SPLIT_KEYS = ('groups', 'leaked_groups', 'clusters', 'leaked_clusters', 'label_distribution')
# How the near-duplicates' hashes are made and checked (pipelines/validation/perceptual.py,
# pipelines/assignment/alignment.py).
HASH = (
    'dct: the 8x8 lowest frequencies of the image as 32x32 grey (imagededup PHash), of the '
    'whole image and nine 90% windows; pairs checked on aligned 32x32 grey thumbnails'
)


def tallies(splits_of) -> dict:
    """{(kind, split, leaked): count} of {(kind, name): the splits holding its images}."""
    counted = collections.Counter()
    for (kind, _), splits in splits_of.items():
        leaked = len(splits) > 1
        for split in [*splits, '']:
            counted[(kind, split, leaked)] += 1
    return dict(counted)


def _count(counts, kinds, split, leaked=None):
    return sum(
        n
        for (kind, where, was_leaked), n in counts.items()
        if kind in kinds and where == split and (leaked is None or was_leaked == leaked)
    )


def split_entries(counts, splits, groups, near_duplicates) -> dict:
    """{split: its SPLIT_KEYS} (those of the build's kinds) from tallies and dataset.json's
    splits (their num_records and class_counts)."""
    spread = label_distributions(splits)
    found = {}
    for split in splits:
        entry = {}
        if groups:
            entry['groups'] = _count(counts, (GROUP,), split)
            entry['leaked_groups'] = _count(counts, (GROUP,), split, True)
        if near_duplicates:
            entry['clusters'] = _count(counts, (CLUSTER, CAPPED), split)
            entry['leaked_clusters'] = _count(counts, (CLUSTER, CAPPED), split, True)
        entry['label_distribution'] = spread[split]
        found[split] = entry
    return found


def label_distributions(splits) -> dict:
    """{split: the mean over labels of how far its ratio of positive to negative examples is
    from the whole build's} (Sechidis et al.'s label distribution, one part at a time)."""
    total = sum(info['num_records'] for info in splits.values())
    positives = collections.Counter()
    for info in splits.values():
        positives.update(info['class_counts'])
    found = {}
    for split, info in splits.items():
        records, deviations = info['num_records'], []
        for label, whole in sorted(positives.items()):
            if whole >= total or not records:
                continue
            n = info['class_counts'].get(label, 0)
            part = n / (records - n) if n < records else whole / (total - whole)
            deviations.append(abs(part - whole / (total - whole)))
        found[split] = round(sum(deviations) / len(deviations), 8) if deviations else 0.0
    return found


def counted(counts, groups, near_duplicates, cluster_images=0) -> dict:
    """The counts of `grouping.groups` and `grouping.near_duplicates` from tallies."""
    found = {}
    if groups:
        found['groups'] = {
            'count': _count(counts, (GROUP,), ''),
            'leaked': _count(counts, (GROUP,), '', True),
        }
    if near_duplicates:
        found['near_duplicates'] = {
            'clusters': _count(counts, (CLUSTER, CAPPED), ''),
            'images': cluster_images,
            'capped': _count(counts, (CAPPED,), ''),
            'leaked': _count(counts, (CLUSTER, CAPPED), '', True),
        }
    return found


def stratification_of(splits, fractions=None) -> dict:
    """`grouping.stratification`: the measures of the splits, their sizes against `fractions`
    ({split: fraction}; None or a split outside it: no examples_distribution)."""
    parts = [(info['num_records'], info['class_counts']) for info in splits.values()]
    wanted = None
    if fractions and set(splits) <= set(fractions):
        written = sum(records for records, _ in parts)
        wanted = [written * fractions[split] for split in splits]
    return stratification.measures(parts, wanted)


def problems(dataset, counts, cluster_images) -> list:
    """Where dataset.json's `grouping` and its splits' grouping keys disagree with tallies
    taken from the records (and near_duplicates.jsonl), as messages."""
    grouping = dataset['grouping']
    groups, near = 'groups' in grouping, 'near_duplicates' in grouping
    found = []
    for section, values in counted(counts, groups, near, cluster_images).items():
        for key, value in values.items():
            if grouping[section].get(key) != value:
                found.append(
                    f'grouping.{section}.{key} is {grouping[section].get(key)}, but the '
                    f'records give {value}'
                )
    for split, entry in split_entries(counts, dataset['splits'], groups, near).items():
        for key, value in entry.items():
            if dataset['splits'][split].get(key) != value:
                found.append(
                    f'splits.{split}.{key} is {dataset["splits"][split].get(key)}, but the '
                    f'records give {value}'
                )
    return found
