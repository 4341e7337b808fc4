"""What a finished build says: its counters, its accounting, its splits, and the files beside
it that look like shards of no build."""

import logging

from imageshards import console
from imageshards import layout
from pipelines.core import counters
from pipelines.writing import overwrite

_LOG = logging.getLogger(__name__)


def report(result, dataset, output_dir, seconds):
    """Prints what a finished build did; warns of stray shards beside it."""
    totals = counters.totals(result)
    lines = [f'imageshards build: {output_dir} in {console.duration(seconds)}']
    lines += [f'  counter {name:<28} {value:>12,}' for name, value in sorted(totals.items())]
    counts = dataset['counts']
    lines.append(
        '  inputs {inputs:,} = written {written:,} + rejected {rejected:,} + duplicates '
        '{duplicates:,}; skipped {skipped:,} non-image files'.format(**counts)
    )
    for split, info in dataset['splits'].items():
        records, shards = info['num_records'], info['num_shards']
        lines.append(
            f'  {split}: {console.plural(records, "record")} in {console.plural(shards, "shard")}'
        )
    if counts['rejected']:
        lines.append(
            f'  rejected by reason: {counts["rejected_by_reason"]} (see {layout.REJECTED_JSONL})'
        )
    print('\n'.join(lines))
    not_kept = counts.get('annotations', {}).get('masks_not_kept')
    if not_kept:  # said by the worker that read them too, where its log may not be seen
        _LOG.warning(
            '%s read with a mask that this build does not keep (their boxes are kept: '
            'counts.annotations.masks_not_kept); build again with --masks to keep them',
            console.plural(not_kept, 'annotation'),
        )
    strays = overwrite.stray_shards(output_dir, dataset)
    if strays:
        _LOG.warning(
            "%d files in %s look like shards but are not in this build's "
            'dataset.json (left alone): %s',
            len(strays),
            output_dir,
            strays[:10],
        )
