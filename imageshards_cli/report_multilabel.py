"""`imageshards report` of a multi-label build: its label sets, and how evenly each label spreads
over the shards and over the batches training reads, beside a uniformly random order.

Each record carries several labels, so the single-label figures (one label per read position)
do not apply. Instead, for the trainer's order (`make_dataset(training=True)`, its labels as
multi-hot rows), the write-up's baseline (listing order through a shuffle buffer, its files the
listing cut into pieces) and a uniformly random order of the same records:

    label_cardinality          mean labels per record of the split; records with no label
    top_label_pairs            the label pairs that occur together most often
    label_distribution over    Sechidis et al.'s measure (imageshards/stratification.py) with the
      files / batches          files, or the full batches of the first epoch, as the parts: 0
                               when each holds every label in the split's proportion
    records_until_all_labels   records read in epoch 0 until every label of the split appeared
    spearman_id_vs_position    of the first epoch, as for a single-label build
"""

import collections
import itertools

import numpy as np

from imageshards import stratification
from imageshards_cli import shuffle_metrics

TOP_PAIRS = 10


def measures(hot, ids, files, batch_size):
    """The measures above of one order: `hot` [records, labels] multi-hot rows of its first epoch
    in read order, `ids` their ids, `files` [(records, {label: count})] of its files."""
    full = len(hot) // batch_size * batch_size
    batches = [
        (batch_size, _counts(hot[start : start + batch_size].sum(axis=0)))
        for start in range(0, full, batch_size)
    ]
    present = np.nonzero(hot.sum(axis=0))[0]
    seen = np.maximum.accumulate(hot[:, present] > 0, axis=0).all(axis=1)
    return {
        'label_distribution_over_files': stratification.measures(files)['label_distribution'],
        'label_distribution_over_batches': stratification.measures(batches)['label_distribution'],
        'records_until_all_labels': int(np.argmax(seen)) + 1 if seen.any() else None,
        'spearman_id_vs_position': shuffle_metrics.spearman_id_vs_position(ids),
    }


def _counts(column_sums):
    return {int(label): int(n) for label, n in enumerate(column_sums) if n}


def label_sets(hot, names):
    """The split's label cardinality, records with no label and most frequent label pairs, from
    its records' multi-hot rows."""
    per_record = hot.sum(axis=1)
    pairs = collections.Counter()
    for row in hot:
        pairs.update(itertools.combinations(np.nonzero(row)[0].tolist(), 2))
    return {
        'label_cardinality': round(float(per_record.mean()), 6) if len(hot) else 0.0,
        'unlabeled': int((per_record == 0).sum()),
        'top_label_pairs': [[names[a], names[b], n] for (a, b), n in pairs.most_common(TOP_PAIRS)],
    }


def random_order(hot, ids, seed):
    """A uniformly random order of the same records (seeded): the yardstick."""
    order = np.random.default_rng(seed).permutation(len(ids))
    return hot[order], ids[order]


def file_counts(hot, pieces):
    """[(records, {label: count})] of `hot` cut into `pieces` consecutive files."""
    return [(len(part), _counts(part.sum(axis=0))) for part in np.array_split(hot, pieces)]


def markdown(metrics):
    """report.md of a multi-label build."""
    orders = ('imageshards', 'baseline', 'random')
    lines = [
        f'# Shuffle report: {metrics["build"]}, split {metrics["split"]} (multi-label)',
        '',
        f'{metrics["records"]:,} records, {metrics["label_cardinality"]} labels per record on '
        f'average, {metrics["unlabeled"]:,} with no label; batches of {metrics["batch_size"]}.',
        '',
        '| measure | imageshards | baseline | uniformly random order |',
        '|---|---|---|---|',
    ]
    for key, text in (
        ('label_distribution_over_files', 'label distribution over the files'),
        ('label_distribution_over_batches', 'label distribution over the batches of epoch 0'),
        ('records_until_all_labels', 'records read until every label appeared, epoch 0'),
        ('spearman_id_vs_position', 'Spearman ρ of record id and read position, epoch 0'),
    ):
        cells = ' | '.join(_number(metrics[order][key]) for order in orders)
        lines.append(f'| {text} | {cells} |')
    lines += ['', 'Most frequent label pairs:', '', '| labels | records |', '|---|---|']
    lines += [f'| {a}, {b} | {n:,} |' for a, b, n in metrics['top_label_pairs']]
    lines += ['', __doc__.split('\n\n', 1)[1]]
    return '\n'.join(lines)


def headline(metrics):
    """The lines `imageshards report` prints for a multi-label build."""
    mine, base, rand = metrics['imageshards'], metrics['baseline'], metrics['random']
    key = 'label_distribution_over_batches'
    return [
        f'{metrics["records"]:,} records, {metrics["label_cardinality"]} labels per record, '
        f'{metrics["unlabeled"]:,} with none',
        f'label distribution over batches: {_number(mine[key])} (baseline {_number(base[key])}, '
        f'a random order {_number(rand[key])})',
        f'over files: {_number(mine["label_distribution_over_files"])} (baseline '
        f'{_number(base["label_distribution_over_files"])})',
    ]


def _number(value):
    if value is None:
        return '-'
    if isinstance(value, float):
        return f'{value:.4g}'
    return f'{value:,}'
