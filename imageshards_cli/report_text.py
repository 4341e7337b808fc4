"""The words of `imageshards report`: report.md, and the headline figures it prints."""

from imageshards_cli import shuffle_metrics

VARIANTS = ('imageshards', 'baseline')


def markdown(metrics):
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
    lines = [
        f'# Shuffle report: {metrics["build"]}, split {metrics["split"]}',
        '',
        f"**imageshards**: the trainer's order, `make_dataset(training=True)` with seed "
        f'{metrics["seed"]}, {metrics["epochs"]} epochs of {mine["records_per_epoch"]:,} records '
        f'in batches of {metrics["batch_size"]} ({_how_read(metrics)}); read in '
        f'{metrics["read_seconds"]} s.',
        f'**baseline**: the same records in listing (id) order, one stream through `tf.data` '
        f'`shuffle({metrics["baseline_buffer"]}, seed={metrics["seed"]})`, as in the write-up on '
        f'shuffle bias; its files are the listing cut into as many pieces as the build has shards.',
        *(
            ['', f'**Note**: {full_shuffle_note(metrics)}']
            if metrics['baseline_is_a_full_shuffle']
            else []
        ),
        '',
        '| measure | imageshards | baseline | uniformly random order |',
        '|---|---|---|---|',
    ]
    for key, text, random_text in rows:
        expected = number(random_values[key]) if random_text is None else random_text
        lines.append(f'| {text} | {number(mine[key])} | {number(base[key])} | {expected} |')
    lines += _level_lines(metrics.get('label_levels', {}))
    lines += ['', '| imageshards | baseline |', '|---|---|']
    for kind in ('ids', 'labels', 'distinct', 'shards'):
        cells = (f'![{kind}, {variant}]({kind}_{variant}.png)' for variant in VARIANTS)
        lines.append(f'| {" | ".join(cells)} |')
    epochs_note = _PERMUTED_EPOCHS if metrics.get('random_access') else _SHARD_EPOCHS
    definitions = _DEFINITIONS.format(
        w=shuffle_metrics.WINDOW, s=shuffle_metrics.WINDOW_STRIDE, epochs=epochs_note
    )
    lines += ['', definitions]
    return '\n'.join(lines)


def _how_read(metrics):
    """How training read the build: its input options, or a random-access build's permutation."""
    if metrics.get('random_access'):
        return (
            f'{metrics["shard_format"]} shards: a new permutation of the whole split each epoch, '
            f'no shuffle buffer'
        )
    return ', '.join(f'{k} {v}' for k, v in metrics['input_options'].items())


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
            f'| {level} | {number(m["mean_distinct_labels_per_batch"])} '
            f'| {number(m["ideal_distinct_labels_per_batch"])} '
            f'| {number(m["max_window_label_kl"])} '
            f'| {number(m["mean_window_label_kl"])} ({number(m["random_window_label_kl"])}) '
            f'| {number(m["shard_class_spread"])} |'
        )
    return lines


def number(value):
    """A measure in report.md and the headlines: 4 significant digits, counts in full, '—'
    where there is none."""
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
- **Epoch order ρ** (*) compares the positions records take in two epochs. {epochs}
- **Shard spread** is the largest |count − share| over files and classes, where a file's share of
  a class is its record count times the class's fraction of the split.
"""


_SHARD_EPOCHS = """imageshards reshuffles
  the shard order and the record buffer each epoch, but a shard's records are stored in one
  order and a record's position follows mostly from when its shard is read, so this ρ behaves
  like that of two random orders of the shards: expect it to stray by about 1/√(shards) from 0,
  more than a uniformly random order's 1/√n."""
_PERMUTED_EPOCHS = """On a random-access build
  (ArrayRecord) every epoch is a new permutation of the whole split, drawn from the seed and the
  epoch, so this ρ is that of two uniformly random orders: within 4/√n of 0."""


def full_shuffle_note(metrics):
    return (
        f"the baseline's buffer of {metrics['baseline_buffer']:,} records holds the whole split "
        f'of {metrics["imageshards"]["records_per_epoch"]:,}: it is a full shuffle, as good as '
        f'any, and the comparison says nothing here (pass a smaller --baseline-buffer)'
    )


def headline(metrics):
    """The lines `imageshards report` prints: the figures that tell the two orders apart."""
    mine, base = metrics['imageshards'], metrics['baseline']
    rows = [
        ('Spearman rho, id vs read position', 'spearman_id_vs_position', '~0'),
        (
            f'distinct labels per batch of {metrics["batch_size"]}',
            'mean_distinct_labels_per_batch',
            number(mine['ideal_distinct_labels_per_batch']),
        ),
        ('worst window label KL (nats)', 'max_window_label_kl', '~0'),
        ('Spearman rho, epoch 0 vs 1 positions', 'epoch_order_spearman', '~0'),
        ('max |count - share| in a file', 'shard_class_spread', '<= 1'),
    ]
    lines = [f'{"":<36} {"imageshards":>12} {"baseline":>12} {"random":>8}']
    lines += [
        f'{text:<36} {number(mine[key]):>12} {number(base[key]):>12} {ideal:>8}'
        for text, key, ideal in rows
    ]
    if metrics['baseline_is_a_full_shuffle']:
        lines.append(f'note: {full_shuffle_note(metrics)}')
    return lines
