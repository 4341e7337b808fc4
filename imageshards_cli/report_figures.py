"""The figures of `imageshards report`: matplotlib's Figure without pyplot (no global state, no
display needed), rendered to PNG bytes."""

import io

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from imageshards_cli import shuffle_metrics


def _figure(height=4.0):
    # matplotlib's Figure without pyplot: no global state, no display needed (Agg canvas).
    figure = Figure(figsize=(6.4, height), dpi=100, layout='constrained')
    return figure, figure.subplots()


def _png(figure):
    buffer = io.BytesIO()
    figure.savefig(buffer, format='png')
    return buffer.getvalue()


def _label_ticks(set_ticks, labels, **options):
    if len(labels) <= 20:  # names while they stay readable
        set_ticks(range(len(labels)), labels, **options)


def _against_position(values, ylabel, title):
    """The write-up's plot: one dot per record, its id or label against its read position."""
    figure, ax = _figure()
    epochs, per_epoch = values.shape
    ax.plot(np.arange(values.size), values.ravel(), '.', markersize=1.5, alpha=0.4)
    for epoch in range(1, epochs):
        ax.axvline(epoch * per_epoch, color='0.3', linestyle='--', linewidth=0.8)
    ax.set_xlim(0, values.size)
    ax.set_xlabel('read position (dashed: epoch boundaries)')
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return figure, ax


def _distinct_figure(order, class_counts, batch_size, title):
    per_batch = np.concatenate(
        [shuffle_metrics.distinct_labels_per_batch(e, batch_size) for e in order.labels]
    )
    ideal = shuffle_metrics.ideal_distinct_labels(class_counts, batch_size)
    figure, ax = _figure()
    ax.plot(per_batch, '.', markersize=2, alpha=0.3, label='each batch')
    span = max(1, min(50, len(per_batch) // 20))
    running = np.convolve(per_batch, np.ones(span) / span, mode='valid')
    ax.plot(np.arange(len(running)) + span // 2, running, label=f'mean of {span} batches')
    ax.axhline(ideal, color='tab:red', label=f'uniformly random order: {ideal:.2f}')
    epochs, per_epoch = order.labels.shape
    for epoch in range(1, epochs):
        ax.axvline(epoch * per_epoch // batch_size, color='0.3', linestyle='--', linewidth=0.8)
    ceiling = min(batch_size, sum(1 for c in class_counts if c > 0))
    ax.set_ylim(0, ceiling + 0.5)
    ax.set_xlabel('batch, in read order')
    ax.set_ylabel(f'distinct labels in a batch of {batch_size}')
    ax.set_title(title)
    ax.legend(loc='lower right', fontsize='small')
    return figure


def _shard_figure(counts, labels, title):
    """Shards x classes, coloured by count / proportional share (white: exactly balanced)."""
    share = counts.sum(axis=1, keepdims=True) * counts.sum(axis=0, keepdims=True) / counts.sum()
    ratio = np.divide(counts, share, out=np.ones(share.shape), where=share > 0)
    shards, classes = counts.shape
    figure, ax = _figure(height=min(max(3.0, 0.16 * shards + 1.5), 8.0))
    image = ax.imshow(ratio, cmap='RdBu_r', vmin=0, vmax=2, aspect='auto', interpolation='nearest')
    figure.colorbar(image, ax=ax, label='count / proportional share')
    if shards <= 40 and classes <= 20:
        for (row, column), count in np.ndenumerate(counts):
            colour = 'white' if abs(ratio[row, column] - 1) > 0.5 else 'black'
            ax.text(column, row, str(count), ha='center', va='center', fontsize=5, color=colour)
    _label_ticks(ax.set_xticks, labels, rotation=45, ha='right', fontsize='small')
    # Whole shard and label numbers only (matplotlib would put -0.4..0.4 around a single one).
    if shards <= 20:
        ax.set_yticks(range(shards))
    else:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if len(labels) > 20:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel('label')
    ax.set_ylabel('shard (file)')
    spread = shuffle_metrics.shard_class_spread(counts)
    ax.set_title(f'{title} (max |count − share| {spread:.1f})')
    return figure


def figures(order, name, labels, class_counts, batch_size):
    """(kind, PNG bytes) of each figure of one order."""
    ids_figure, _ = _against_position(order.ids, 'record id (listing order)', f'{name}: ids')
    labels_figure, ax = _against_position(order.labels, 'label', f'{name}: labels')
    _label_ticks(ax.set_yticks, labels, fontsize='small')
    yield 'ids', _png(ids_figure)
    yield 'labels', _png(labels_figure)
    yield 'distinct', _png(_distinct_figure(order, class_counts, batch_size, f'{name}: batches'))
    yield 'shards', _png(_shard_figure(order.shard_counts, labels, f'{name}: files'))
