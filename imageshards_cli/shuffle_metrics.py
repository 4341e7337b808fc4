"""How well an order of records is shuffled: pure numpy measures for `imageshards report`.

An order is what a training input pipeline delivers, epoch by epoch: each record's `image/id`
(its position in listing order) and its label. A uniformly random order has no trace of the
listing (rank correlation of id and read position near 0, within a few 1/sqrt(n)), puts about
as many distinct labels in each batch as a random draw would (`ideal_distinct_labels`), keeps
the label mix of every stretch of records close to the split's (small window KL divergence),
and is reshuffled between epochs (rank correlation of the epochs' orders near 0).
"""

import math

import numpy as np

WINDOW = 1000  # records per window of the label-mix measure
WINDOW_STRIDE = 100  # windows start every this many records


def rankdata(values):
    """1-based ranks of `values`, ties given the mean of the ranks they span."""
    values = np.asarray(values)
    order = np.argsort(values, kind='stable')
    sorted_values = values[order]
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = np.r_[starts[1:], len(values)]
    mean_rank = (starts + ends + 1) / 2.0  # mean of the 1-based ranks starts+1 .. ends
    ranks = np.empty(len(values))
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def spearman(x, y):
    """Spearman's rank correlation (Pearson's of the tie-averaged ranks); nan if undefined."""
    if len(x) != len(y):
        raise ValueError(f'spearman: {len(x)} values against {len(y)}')
    if len(x) < 2:
        return math.nan
    rx = rankdata(x) - (len(x) + 1) / 2.0
    ry = rankdata(y) - (len(y) + 1) / 2.0
    denominator = math.sqrt(float(np.dot(rx, rx)) * float(np.dot(ry, ry)))
    return float(np.dot(rx, ry) / denominator) if denominator else math.nan


def spearman_id_vs_position(ids):
    """Rank correlation of record ids with the positions they are read at."""
    return spearman(ids, np.arange(len(ids)))


def epoch_order_spearman(first_ids, second_ids):
    """Rank correlation of the positions records take in two epochs (records in both)."""
    _, in_first, in_second = np.intersect1d(first_ids, second_ids, return_indices=True)
    return spearman(in_first, in_second)


def distinct_labels_per_batch(labels, batch_size):
    """Distinct labels in each full batch of consecutive records (a partial tail is left out)."""
    full = len(labels) // batch_size * batch_size
    batches = np.sort(np.reshape(np.asarray(labels)[:full], (-1, batch_size)), axis=1)
    return 1 + np.count_nonzero(batches[:, 1:] != batches[:, :-1], axis=1)


def ideal_distinct_labels(class_counts, batch_size):
    """Expected distinct labels in a batch drawn uniformly without replacement.

    A class of n_c among N records is missing from a batch of b with probability
    C(N - n_c, b) / C(N, b) = prod_{i<b} (N - n_c - i) / (N - i); the expectation is the sum
    over classes of one minus that.
    """
    counts = np.asarray([c for c in class_counts if c > 0], dtype=np.float64)
    total = counts.sum()
    if batch_size > total:
        raise ValueError(f'a batch of {batch_size} is larger than the {int(total)} records')
    steps = np.arange(batch_size)
    # A product of b ratios, in logs so that large batches cannot underflow to 0 too early.
    remaining = (total - steps)[None, :] - counts[:, None]  # N - n_c - i
    with np.errstate(divide='ignore'):
        log_missing = np.log(np.maximum(remaining, 0)).sum(axis=1) - np.log(total - steps).sum()
    return float(np.sum(1.0 - np.exp(log_missing)))


def kl_divergence(counts, reference_counts):
    """KL(P || Q) in nats of the label distributions that `counts` and `reference_counts` give
    (for [..., classes] counts, one divergence per row).

    No smoothing is needed in this direction: a class with p = 0 adds 0 (the limit of p log p),
    and a class that occurs in P has q > 0 when Q is the whole split that P is drawn from (if
    not, the divergence is infinite).
    """
    p = np.asarray(counts, dtype=np.float64)
    q = np.asarray(reference_counts, dtype=np.float64)
    p, q = p / p.sum(axis=-1, keepdims=True), q / q.sum()
    with np.errstate(divide='ignore', invalid='ignore'):
        terms = np.where(p > 0, p * np.log(p / q), 0.0)
    divergence = terms.sum(axis=-1)
    return float(divergence) if divergence.ndim == 0 else divergence


def window_label_kl(labels, class_counts, window=WINDOW, stride=WINDOW_STRIDE):
    """KL(window's label mix || the split's) for windows of `window` consecutive records
    starting every `stride` records; one window of everything when there are fewer records.
    """
    labels = np.asarray(labels)
    num_classes = len(class_counts)
    if len(labels) <= window:
        return kl_divergence(np.bincount(labels, minlength=num_classes)[None, :], class_counts)
    if window % stride:
        raise ValueError(f'window {window} is not a multiple of stride {stride}')
    # Label counts per block of `stride` records, summed over window // stride blocks: memory
    # of (records / stride) x classes, also for a million records of a thousand classes.
    blocks = len(labels) // stride
    flat = np.arange(blocks * stride) // stride * num_classes + labels[: blocks * stride]
    per_block = np.bincount(flat, minlength=blocks * num_classes).reshape(blocks, num_classes)
    cumulative = np.vstack([np.zeros(num_classes, np.int64), np.cumsum(per_block, axis=0)])
    span = window // stride
    windows = cumulative[span:] - cumulative[:-span]
    return kl_divergence(windows, class_counts)


def random_window_label_kl(class_counts, window=WINDOW):
    """About the mean window KL of a uniformly random order: (C - 1) / (2w) times the
    finite-population correction (N - w) / (N - 1), for C classes present and N records."""
    counts = [c for c in class_counts if c > 0]
    total = sum(counts)
    window = min(window, total)
    if total < 2:
        return 0.0
    return (len(counts) - 1) / (2 * window) * (total - window) / (total - 1)


def records_until_all_labels(labels, num_labels):
    """Records read until every one of `num_labels` labels has appeared; None if never."""
    labels = np.asarray(labels)
    _, first = np.unique(labels, return_index=True)
    return int(first.max()) + 1 if len(first) >= num_labels else None


def shard_class_spread(shard_counts):
    """max over shards and classes of |count - the shard's proportional share of the class|.

    `shard_counts` is [shards, classes]; a shard's share of class c is its record count times
    c's fraction of the split.
    """
    counts = np.asarray(shard_counts, dtype=np.float64)
    share = counts.sum(axis=1, keepdims=True) * counts.sum(axis=0, keepdims=True) / counts.sum()
    return float(np.max(np.abs(counts - share)))


def summarize(ids, labels, class_counts, shard_counts, batch_size, window=WINDOW):
    """Every measure of an order: `ids` and `labels` are [epochs, records per epoch]."""
    ids, labels = np.atleast_2d(ids), np.atleast_2d(labels)
    distinct = np.concatenate([distinct_labels_per_batch(e, batch_size) for e in labels])
    window_kl = np.concatenate([window_label_kl(e, class_counts, window) for e in labels])
    present = sum(1 for c in class_counts if c > 0)
    return {
        'records_per_epoch': int(ids.shape[1]),
        'spearman_id_vs_position': spearman_id_vs_position(ids[0]),
        'spearman_bound_for_random_order': 4 / math.sqrt(ids.shape[1]),
        'mean_distinct_labels_per_batch': float(distinct.mean()),
        'min_distinct_labels_per_batch': int(distinct.min()),
        'ideal_distinct_labels_per_batch': ideal_distinct_labels(class_counts, batch_size),
        'max_window_label_kl': float(window_kl.max()),
        'mean_window_label_kl': float(window_kl.mean()),
        'random_window_label_kl': random_window_label_kl(class_counts, window),
        'records_until_all_labels': records_until_all_labels(labels[0], present),
        'epoch_order_spearman': (epoch_order_spearman(ids[0], ids[1]) if len(ids) > 1 else None),
        'shard_class_spread': shard_class_spread(shard_counts),
    }
