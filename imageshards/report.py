"""`imageshards report`: how well training really sees a build shuffled, measured and drawn.

Reads (image/id, label) in exactly the order the trainer's input pipeline delivers them: the
same `make_dataset(training=True)` with the same seed, per-epoch reshuffle and options, with
images left undecoded (`decode_images=False`, which changes no order). Then does the same for a
baseline in the style of the write-up on shuffle bias: every record of the split in listing
(id) order, one stream through `tf.data`'s `shuffle(10000, seed)`, its files the listing cut
into as many pieces as the build has shards. Writes into DIR (default OUT/report):

    order.csv      epoch,position,id,label of the training order (epochs counted from 0)
    metrics.json   the measures of imageshards/shuffle_metrics.py, for both orders (and, for a
                   build with label levels, of the trainer's order labelled by each level)
    *.png          id and label against read position, distinct labels per batch against the
                   ideal, and a shard-by-class heatmap, for both orders
    report.md      tables of both sets of measures and the figures side by side

Example:
    imageshards report out/ --epochs 2 --batch-size 20
"""

import argparse
import dataclasses
import io
import json
import logging
import posixpath
import sys
import time

import numpy as np
import tensorflow as tf
from matplotlib.figure import Figure

from imageshards import shuffle_metrics
from trainer import input as input_lib
from trainer.dataset_info import DatasetInfo

BASELINE_BUFFER = 10_000  # the write-up's min_after_dequeue
VARIANTS = ('imageshards', 'baseline')


@dataclasses.dataclass(frozen=True)
class Order:
    """Records in the order a pipeline reads them, and the files they were stored in."""

    ids: np.ndarray  # [epochs, records per epoch]
    labels: np.ndarray  # [epochs, records per epoch]
    shard_counts: np.ndarray  # [shards, classes]: records of each class in each file


def training_order(info, split, epochs, batch_size, seed, **options):
    """The order `make_dataset(training=True)` delivers a split's records in, epoch by epoch."""
    per_epoch = input_lib.steps_per_epoch(info, split, batch_size) * batch_size
    if not per_epoch:
        raise ValueError(
            f'split {split!r} has {info.num_records(split)} records, fewer than one batch of '
            f'{batch_size}: lower --batch-size'
        )
    dataset = input_lib.make_dataset(
        info.data_dir,
        split,
        batch_size,
        training=True,
        seed=seed,
        epochs=epochs,
        info=info,
        decode_images=False,
        **options,
    )
    labels, ids = _gather(dataset)
    shape = (epochs, per_epoch)
    return Order(ids.reshape(shape), labels.reshape(shape), _shard_counts(info, split))


def _gather(dataset):
    """All (labels, ids) batches of a dataset, concatenated (rebatched: fewer Python steps)."""
    labels, ids = [], []
    for batch_labels, batch_ids in dataset.unbatch().batch(1 << 16):
        labels.append(batch_labels.numpy())
        ids.append(batch_ids.numpy())
    return np.concatenate(labels), np.concatenate(ids)


def _shard_counts(info, split):
    shards = info.split(split)['shards']
    return np.array([[s['class_counts'].get(name, 0) for name in info.labels] for s in shards])


def level_orders(info, split, order):
    """{level: Order} of `order` labelled by each label level of the build, with its
    [split class counts] and [shards, classes] counts; a missing value (-1) is a class of its
    own, after the level's names, where the split has any."""
    if not info.label_levels:
        return {}
    records = input_lib.make_dataset(
        info.data_dir,
        split,
        1 << 16,
        training=False,
        info=info,
        decode_images=False,
        label_levels=list(info.label_levels),
    )
    batches = list(records)
    ids = np.concatenate([batch_ids.numpy() for _, batch_ids in batches])
    shards, split_info = info.split(split)['shards'], info.split(split)
    found = {}
    for level, names in info.label_levels.items():
        labels = np.concatenate([batch[level].numpy() for batch, _ in batches])
        missing = split_info['level_missing'][level]
        labels[labels < 0] = len(names)  # the class of missing values, counted only if any
        lookup = np.zeros(ids.max() + 1, np.int64)
        lookup[ids] = labels
        columns = list(names)
        counts = [[s['level_counts'][level].get(name, 0) for name in columns] for s in shards]
        if missing:
            counts = [row + [s['level_missing'][level]] for row, s in zip(counts, shards)]
        class_counts = [split_info['level_counts'][level].get(name, 0) for name in columns]
        found[level] = (
            Order(order.ids, lookup[order.ids], np.array(counts)),
            class_counts + ([missing] if missing else []),
        )
    return found


def baseline_order(info, split, epochs, batch_size, buffer, seed):
    """The write-up's setup: every record in listing order, one stream through a shuffle
    buffer of `buffer` records (reshuffled each epoch), full batches of each epoch kept."""
    records = input_lib.make_dataset(
        info.data_dir, split, 1 << 16, training=False, info=info, decode_images=False
    )
    labels, ids = _gather(records)
    by_id = np.argsort(ids, kind='stable')
    ids, labels = ids[by_id], labels[by_id]
    stream = tf.data.Dataset.from_tensor_slices((labels, ids)).shuffle(buffer, seed=seed)
    read_labels, read_ids = _gather(stream.repeat(epochs).batch(1 << 16))
    per_epoch = len(ids) // batch_size * batch_size
    keep = lambda values: values.reshape(epochs, len(ids))[:, :per_epoch]
    # The files a plain writer makes: the listing cut into as many pieces as the build's shards.
    pieces = np.array_split(labels, len(info.split(split)['shards']))
    counts = np.array([np.bincount(piece, minlength=info.num_classes) for piece in pieces])
    return Order(keep(read_ids), keep(read_labels), counts)


def measure(order, class_counts, batch_size, window=shuffle_metrics.WINDOW):
    return shuffle_metrics.summarize(
        order.ids, order.labels, class_counts, order.shard_counts, batch_size, window
    )


def order_csv(order):
    """order.csv's text: epoch,position,id,label per record read."""
    epochs, per_epoch = order.ids.shape
    columns = np.stack(
        [
            np.repeat(np.arange(epochs), per_epoch),
            np.tile(np.arange(per_epoch), epochs),
            order.ids.ravel(),
            order.labels.ravel(),
        ],
        axis=1,
    )
    text = io.StringIO()
    text.write('epoch,position,id,label\n')
    np.savetxt(text, columns, fmt='%d', delimiter=',')
    return text.getvalue()


def _write(path, data):
    with tf.io.gfile.GFile(path, 'wb' if isinstance(data, bytes) else 'w') as f:
        f.write(data)


def report(data_dir, split, out_dir, *, epochs, batch_size, seed, baseline_buffer, **options):
    """Measures and draws both orders into `out_dir`; returns (report.md's path, metrics)."""
    info = DatasetInfo.load(data_dir)
    class_counts = info.class_counts(split)
    started = time.perf_counter()
    orders = {'imageshards': training_order(info, split, epochs, batch_size, seed, **options)}
    read_seconds = time.perf_counter() - started
    orders['baseline'] = baseline_order(info, split, epochs, batch_size, baseline_buffer, seed)
    metrics = {
        'build': data_dir,
        'split': split,
        'labels': list(info.labels),
        'class_counts': class_counts,
        'seed': seed,
        'epochs': epochs,
        'batch_size': batch_size,
        'input_options': options,
        'baseline_buffer': baseline_buffer,
        'read_seconds': round(read_seconds, 3),
        **{name: measure(order, class_counts, batch_size) for name, order in orders.items()},
    }
    levels = level_orders(info, split, orders['imageshards'])
    if levels:
        metrics['label_levels'] = {
            level: measure(order, counts, batch_size) for level, (order, counts) in levels.items()
        }
    tf.io.gfile.makedirs(out_dir)
    _write(posixpath.join(out_dir, 'order.csv'), order_csv(orders['imageshards']))
    _write(posixpath.join(out_dir, 'metrics.json'), json.dumps(metrics, indent=2) + '\n')
    for name, order in orders.items():
        for kind, png in _figures(order, name, info.labels, class_counts, batch_size):
            _write(posixpath.join(out_dir, f'{kind}_{name}.png'), png)
    path = posixpath.join(out_dir, 'report.md')
    _write(path, _markdown(metrics))
    return path, metrics


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
    ax.set_xlabel('label')
    ax.set_ylabel('shard (file)')
    spread = shuffle_metrics.shard_class_spread(counts)
    ax.set_title(f'{title} (max |count − share| {spread:.1f})')
    return figure


def _figures(order, name, labels, class_counts, batch_size):
    """(kind, PNG bytes) of each figure of one order."""
    ids_figure, _ = _against_position(order.ids, 'record id (listing order)', f'{name}: ids')
    labels_figure, ax = _against_position(order.labels, 'label', f'{name}: labels')
    _label_ticks(ax.set_yticks, labels, fontsize='small')
    yield 'ids', _png(ids_figure)
    yield 'labels', _png(labels_figure)
    yield 'distinct', _png(_distinct_figure(order, class_counts, batch_size, f'{name}: batches'))
    yield 'shards', _png(_shard_figure(order.shard_counts, labels, f'{name}: files'))


def _markdown(metrics):
    """report.md: both sets of measures in one table, the figures side by side."""
    mine, base = metrics['imageshards'], metrics['baseline']
    bound = f'within ±{mine["spearman_bound_for_random_order"]:.3f} (4/√n)'
    rows = [
        ('spearman_id_vs_position', 'Spearman ρ of record id and read position, epoch 0', bound),
        ('mean_distinct_labels_per_batch', 'mean distinct labels per batch', None),
        ('min_distinct_labels_per_batch', 'fewest distinct labels in a batch', ''),
        ('max_window_label_kl', 'worst window label KL from the split (nats)', ''),
        ('mean_window_label_kl', 'mean window label KL (nats)', None),
        ('records_until_all_labels', 'records read until every label appeared, epoch 0', ''),
        ('epoch_order_spearman', 'Spearman ρ of the orders of epochs 0 and 1', f'{bound}, *'),
        (
            'shard_class_spread',
            'max \\|count − proportional share\\| in a file',
            'within 1 (balanced)',
        ),
    ]
    random_values = {
        'mean_distinct_labels_per_batch': mine['ideal_distinct_labels_per_batch'],
        'mean_window_label_kl': mine['random_window_label_kl'],
    }
    options = ', '.join(f'{k} {v}' for k, v in metrics['input_options'].items())
    lines = [
        f'# Shuffle report: {metrics["build"]}, split {metrics["split"]}',
        '',
        f"**imageshards**: the trainer's order, `make_dataset(training=True)` with seed "
        f'{metrics["seed"]}, {metrics["epochs"]} epochs of {mine["records_per_epoch"]:,} records '
        f'in batches of {metrics["batch_size"]} ({options}); read in {metrics["read_seconds"]} s.',
        f'**baseline**: the same records in listing (id) order, one stream through `tf.data` '
        f'`shuffle({metrics["baseline_buffer"]}, seed={metrics["seed"]})`, as in the write-up on '
        f'shuffle bias; its files are the listing cut into as many pieces as the build has shards.',
        '',
        '| measure | imageshards | baseline | uniformly random order |',
        '|---|---|---|---|',
    ]
    for key, text, random_text in rows:
        expected = _number(random_values[key]) if random_text is None else random_text
        lines.append(f'| {text} | {_number(mine[key])} | {_number(base[key])} | {expected} |')
    lines += _level_lines(metrics.get('label_levels', {}))
    lines += ['', '| imageshards | baseline |', '|---|---|']
    for kind in ('ids', 'labels', 'distinct', 'shards'):
        cells = (f'![{kind}, {variant}]({kind}_{variant}.png)' for variant in VARIANTS)
        lines.append(f'| {" | ".join(cells)} |')
    lines += ['', _DEFINITIONS.format(w=shuffle_metrics.WINDOW, s=shuffle_metrics.WINDOW_STRIDE)]
    return '\n'.join(lines)


def _level_lines(levels):
    """report.md's table of the trainer's order measured on each label level, if any."""
    if not levels:
        return []
    lines = [
        '',
        "Label levels (the trainer's order labelled by each level; a missing value counts as a "
        'class of its own):',
        '',
        '| level | mean distinct labels per batch | uniformly random order | worst window KL '
        '| mean window KL (random) | max \\|count − share\\| in a file |',
        '|---|---|---|---|---|---|',
    ]
    for level, m in levels.items():
        lines.append(
            f'| {level} | {_number(m["mean_distinct_labels_per_batch"])} '
            f'| {_number(m["ideal_distinct_labels_per_batch"])} '
            f'| {_number(m["max_window_label_kl"])} '
            f'| {_number(m["mean_window_label_kl"])} ({_number(m["random_window_label_kl"])}) '
            f'| {_number(m["shard_class_spread"])} |'
        )
    return lines


def _number(value):
    if value is None:
        return '—'
    if isinstance(value, float):
        return f'{value:.4g}'
    return f'{value:,}'


_DEFINITIONS = """## How the measures are taken

- **Spearman ρ** is the rank correlation (ties get their mean rank). A uniformly random order of
  n records gives ρ about N(0, 1/n), so |ρ| stays within 4/√n.
- **Distinct labels per batch** are counted over the full batches of every epoch. A uniformly
  random order gives Σ_c 1 − C(N − n_c, b) / C(N, b) for batches of b from N records, n_c of
  class c.
- **Window label KL** is KL(P‖Q) in nats, P the labels of {w} consecutive records (windows
  start every {s} records; the whole epoch when it is shorter), Q the split's class counts. It
  needs no smoothing: a label missing from a window adds 0 (p log p → 0), and every label that
  occurs has q > 0. A random window's KL is about (C − 1) / 2w · (N − w) / (N − 1).
- **Epoch order ρ** (*) compares the positions records take in two epochs. imageshards reshuffles
  the shard order and the record buffer each epoch, but a shard's records are stored in one
  order and a record's position follows mostly from when its shard is read, so this ρ behaves
  like that of two random orders of the shards: expect it to stray by about 1/√(shards) from 0,
  more than a uniformly random order's 1/√n.
- **Shard spread** is the largest |count − share| over files and classes, where a file's share of
  a class is its record count times the class's fraction of the split.
"""


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog='imageshards report',
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add('build', help='output directory of `imageshards build`')
    add('--split', default='train', help='the split to read (default train)')
    add('--epochs', type=int, default=2, help='epochs to read (default 2)')
    add('--batch-size', type=int, default=20, help='as the trainer batches (default 20)')
    add('--out', help='directory to write into (default BUILD/report)')
    add('--seed', type=int, default=0, help="the trainer's --seed")
    defaults = input_lib.InputOptions()
    buffer, cycle = defaults.shuffle_buffer, defaults.cycle_length
    add('--shuffle-buffer', type=int, default=buffer, help=f"the trainer's (default {buffer})")
    add('--cycle-length', type=int, default=cycle, help=f"the trainer's (default {cycle})")
    add(
        '--baseline-buffer',
        type=int,
        default=BASELINE_BUFFER,
        help="the baseline's shuffle buffer, records (default 10000, the write-up's)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(message)s')
    if args.epochs < 1 or args.batch_size < 1:
        parser.error('--epochs and --batch-size must be at least 1')
    try:
        path, metrics = report(
            args.build,
            args.split,
            args.out or posixpath.join(args.build.rstrip('/'), 'report'),
            epochs=args.epochs,
            batch_size=args.batch_size,
            seed=args.seed,
            baseline_buffer=args.baseline_buffer,
            shuffle_buffer=args.shuffle_buffer,
            cycle_length=args.cycle_length,
        )
    except (ValueError, FileNotFoundError) as e:
        print(f'imageshards report: {e}', file=sys.stderr)
        return 2
    print(f'read {metrics["epochs"]} epochs of {metrics["split"]} in {metrics["read_seconds"]} s')
    print(path)
    return 0
