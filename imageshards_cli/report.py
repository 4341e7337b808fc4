"""`imageshards report`: how well training really sees a build shuffled, measured and drawn.

Reads (image/id, label) in exactly the order the trainer's input pipeline delivers them: the
same `make_dataset(training=True)` with the same seed, per-epoch reshuffle and options, with
images left undecoded (`decode_images=False`, which changes no order): for an ArrayRecord build,
a new permutation of the whole split each epoch (trainer/random_access.py), whose two epochs'
orders should be as uncorrelated as two random ones. Then does the same for a
baseline in the style of the write-up on shuffle bias: every record of the split in listing
(id) order, one stream through `tf.data`'s `shuffle(buffer, seed)`, its files the listing cut
into as many pieces as the build has shards. The buffer keeps the write-up's proportion, 10,000
of 70,000 records, a seventh of the split (`--baseline-buffer` sets it); a buffer that holds
the whole split would be a full shuffle, and the comparison says so. Training settings
(`--seed`, `--batch-size`, `--shuffle-buffer`, `--cycle-length`) may come from the trainer's
YAML with `--config`. Prints the headline figures and writes into DIR (default OUT/report):

    order.csv      epoch,position,id,label of the training order (epochs counted from 0)
    metrics.json   the measures of imageshards_cli/shuffle_metrics.py, for both orders (and, for a
                   build with label levels, of the trainer's order labelled by each level)
    *.png          id and label against read position, distinct labels per batch against the
                   ideal, and a shard-by-class heatmap, for both orders; for a build with
                   --near-duplicates, its closest pair and its largest cluster
                   (imageshards_cli/report_near_duplicates.py)
    report.md      tables of both sets of measures and the figures side by side

Example:
    imageshards report out/ --epochs 2 --batch-size 20
"""

import dataclasses
import io
import json
import posixpath
import sys
import time

import numpy as np

from imageshards import console
from imageshards import flags
from imageshards import output_lock
from imageshards.lock_holder import being_written_message
from imageshards_cli import report_figures
from imageshards_cli import report_multilabel
from imageshards_cli import report_near_duplicates
from imageshards_cli import report_objects
from imageshards_cli import report_text
from imageshards_cli import shuffle_metrics
from trainer import config as config_lib

# TensorFlow (and the trainer's input pipeline) are imported where used, so that `--help` and
# argument errors come at once.
# pylint: disable=import-outside-toplevel

BASELINE_SHARE = 1 / 7  # the write-up's buffer, 10,000 records (min_after_dequeue) of 70,000


@dataclasses.dataclass(frozen=True)
class Order:
    """Records in the order a pipeline reads them, and the files they were stored in."""

    ids: np.ndarray  # [epochs, records per epoch]
    labels: np.ndarray  # [epochs, records per epoch]
    shard_counts: np.ndarray  # [shards, classes]: records of each class in each file


def training_order(info, split, epochs, batch_size, seed, **options):
    """The order `make_dataset(training=True)` delivers a split's records in, epoch by epoch."""
    from trainer import input_pipeline

    per_epoch = input_pipeline.steps_per_epoch(info, split, batch_size) * batch_size
    if not per_epoch:
        raise ValueError(
            f'split {split!r} has {info.num_records(split)} records, fewer than one batch of '
            f'{batch_size}: lower --batch-size'
        )
    dataset = input_pipeline.make_dataset(
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
    from trainer import input_pipeline

    records = input_pipeline.make_dataset(
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
    import tensorflow as tf

    from trainer import input_pipeline

    records = input_pipeline.make_dataset(
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


def default_baseline_buffer(records):
    """The baseline's shuffle buffer: the write-up's share of the split."""
    return max(1, round(records * BASELINE_SHARE))


def _write(path, data):
    import tensorflow as tf

    with tf.io.gfile.GFile(path, 'wb' if isinstance(data, bytes) else 'w') as f:
        f.write(data)


def report(data_dir, split, out_dir, *, epochs, batch_size, seed, baseline_buffer, **options):
    """Measures and draws both orders into `out_dir`; returns (report.md's path, metrics).

    `baseline_buffer` None: a seventh of the split, the write-up's proportion.
    """
    import tensorflow as tf

    from trainer import dataset_info

    info = dataset_info.load(data_dir)
    records = info.num_records(split)
    baseline_buffer = baseline_buffer or default_baseline_buffer(records)
    if info.multi_label:
        return multilabel_report(info, split, out_dir, batch_size, seed, baseline_buffer, **options)
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
        'shard_format': info.shard_format.name,
        # Training reads a new permutation of the whole split each epoch (no shuffle buffer).
        'random_access': info.shard_format.random_access,
        'input_options': options,
        'baseline_buffer': baseline_buffer,
        'baseline_is_a_full_shuffle': baseline_buffer >= records,
        'read_seconds': round(read_seconds, 3),
        **{name: measure(order, class_counts, batch_size) for name, order in orders.items()},
    }
    levels = level_orders(info, split, orders['imageshards'])
    if levels:
        metrics['label_levels'] = {
            level: measure(order, counts, batch_size) for level, (order, counts) in levels.items()
        }
    tf.io.gfile.makedirs(out_dir)
    near = report_near_duplicates.add(info, out_dir, metrics, _write)
    _write(posixpath.join(out_dir, 'order.csv'), order_csv(orders['imageshards']))
    _write(posixpath.join(out_dir, 'metrics.json'), json.dumps(metrics, indent=2) + '\n')
    for name, order in orders.items():
        for kind, png in report_figures.figures(order, name, info.labels, class_counts, batch_size):
            _write(posixpath.join(out_dir, f'{kind}_{name}.png'), png)
    path = posixpath.join(out_dir, 'report.md')
    _write(path, '\n'.join([report_text.markdown(metrics), *near]))
    return path, metrics


def _epoch_steps(info, split, batch_size):
    """The batches of an epoch as the trainer reads it: a split of fewer batches than it takes
    is read whole, its last batch filled (trainer/small_splits.py)."""
    from trainer import small_splits

    return small_splits.epoch_steps(info, split, batch_size).steps


def multilabel_report(info, split, out_dir, batch_size, seed, baseline_buffer, **options):
    """report() of a multi-label build (imageshards_cli/report_multilabel.py): its first epoch
    in the trainer's order, the baseline's and a random one; returns (report.md, metrics)."""
    import tensorflow as tf

    from trainer import input_pipeline

    steps = _epoch_steps(info, split, batch_size)
    per_epoch = steps * batch_size
    shared = {'info': info, 'decode_images': False}
    started = time.perf_counter()
    trained = input_pipeline.make_dataset(
        info.data_dir, split, batch_size, training=True, seed=seed, batches_per_epoch=steps,
        **shared, **options,
    )  # fmt: skip
    hot, ids = _gather(trained.take(steps))
    read_seconds = time.perf_counter() - started
    records = input_pipeline.make_dataset(info.data_dir, split, 1 << 16, training=False, **shared)
    all_hot, all_ids = _gather(records)
    by_id = np.argsort(all_ids, kind='stable')
    stream = tf.data.Dataset.from_tensor_slices((all_hot[by_id], all_ids[by_id]))
    base_hot, base_ids = _gather(stream.shuffle(baseline_buffer, seed=seed).batch(1 << 16))
    shards = info.split(split)['shards']
    ids_of = {name: i for i, name in enumerate(info.labels)}
    files = [
        (s['num_records'], {ids_of[k]: n for k, n in s['class_counts'].items()}) for s in shards
    ]
    rand_hot, rand_ids = report_multilabel.random_order(all_hot, all_ids, seed)
    metrics = {
        'build': info.data_dir,
        'split': split,
        'records': len(all_ids),
        'batch_size': batch_size,
        'seed': seed,
        'baseline_buffer': baseline_buffer,
        'read_seconds': round(read_seconds, 3),
        **report_multilabel.label_sets(all_hot > 0, info.labels),
    }
    for name, order_hot, order_ids, order_files in (
        ('imageshards', hot, ids, files),
        (
            'baseline',
            base_hot,
            base_ids,
            report_multilabel.file_counts(all_hot[by_id] > 0, len(shards)),
        ),
        ('random', rand_hot, rand_ids, report_multilabel.file_counts(rand_hot > 0, len(shards))),
    ):
        keep = slice(0, per_epoch)
        metrics[name] = report_multilabel.measures(
            order_hot[keep] > 0, order_ids[keep], order_files, batch_size
        )
    tf.io.gfile.makedirs(out_dir)
    near = report_near_duplicates.add(info, out_dir, metrics, _write)
    near += report_objects.add(info.data_dir, out_dir, metrics, _write)  # a detection build's
    _write(posixpath.join(out_dir, 'metrics.json'), json.dumps(metrics, indent=2) + '\n')
    path = posixpath.join(out_dir, 'report.md')
    _write(path, '\n'.join([report_multilabel.markdown(metrics), *near]))
    return path, metrics


def build_arg_parser():
    parser = flags.ArgumentParser(prog='imageshards report', description=__doc__)
    add = parser.add_argument
    add('build', help='output directory of `imageshards build`')
    add('--config', help="the trainer's YAML: its seed, batch size and input settings")
    trainer = config_lib.TrainConfig
    add('--split', default=trainer.train_split, help='the split to read')
    add('--epochs', type=flags.integer(minimum=1), default=2, help='epochs to read')
    add('--batch-size', type=flags.integer(minimum=1), default=20, help='as the trainer batches')
    add('--out', help='directory to write into (default BUILD/report)')
    config_lib.add_trainer_flags(parser, ('--seed', '--shuffle-buffer', '--cycle-length'))
    count = flags.integer(minimum=1)
    add(
        '--baseline-buffer',
        type=count,
        help="the baseline's shuffle buffer in records (default: a seventh of the split, the "
        "write-up's 10,000 of 70,000)",
    )
    add('--verbose', action='store_true', help="also show TensorFlow's own log lines")
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = config_lib.parse_with_trainer_yaml(build_arg_parser(), argv)
    console.configure_logging(args.verbose)
    writing = output_lock.holder(args.build)
    if writing is not None:
        return console.refuse(
            'imageshards report', being_written_message(args.build, writing, 'it')
        )
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
        return console.refuse('imageshards report', e)
    if 'near_duplicates' in metrics:
        print(report_near_duplicates.headline(metrics['near_duplicates']))
    if 'label_cardinality' in metrics:  # a multi-label build
        print('\n'.join(report_multilabel.headline(metrics)))
        print('\n'.join(report_objects.headline(metrics.get('objects', {}))))
        print(f'tables: {path}')
        return 0
    print('\n'.join(report_text.headline(metrics)))
    print(
        f'read {console.plural(metrics["epochs"], "epoch")} of {metrics["split"]} in '
        f'{console.duration(metrics["read_seconds"])}; figures and tables: {path}'
    )
    return 0
