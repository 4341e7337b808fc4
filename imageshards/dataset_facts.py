"""dataset.json made from what a build states about itself, and checked: its structure (what a
reader relies on) and its counts (every input written, rejected or a duplicate; every total the
sum of its parts). Read it with imageshards/dataset_json.py.
"""

import collections
import dataclasses
import datetime

import imageshards
from imageshards import object_facts
from imageshards import stratification
from imageshards.dataset_json import FORMATS_KEY
from imageshards.dataset_json import INDEX_KEY
from imageshards.dataset_json import LEVEL_KEYS
from imageshards.dataset_json import REQUIRED_KEYS
from imageshards.dataset_json import SHARD_KEYS
from imageshards.dataset_json import format_counts
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards.shard_formats import registry as shard_formats


class AccountingError(RuntimeError):
    """Inputs that are neither written, rejected nor counted as duplicates."""


@dataclasses.dataclass(frozen=True)
class BuildFacts:
    """What a build states about itself beside its shards and rejections."""

    kind: object  # the RecordKind of the records (imageshards/kinds/)
    seed: int
    input: str  # the --input as given
    labels: tuple  # names, by id
    label_levels: dict  # {level: names}, in level order; {} without levels
    allow_missing_levels: bool
    inputs: int  # listed inputs
    skipped: dict  # {reason: files} listing skipped as not inputs
    multi_label_levels: tuple = ()  # the levels where some image has several values
    fractions: tuple = ()  # (split, fraction) the build asked for (--splits)
    manifest_splits: dict = dataclasses.field(default_factory=dict)  # split -> images placed
    resize: dict = None  # --resize-shorter-side's setting (settings.ResizeSpec.describe)
    shard_format: str = shard_formats.DEFAULT  # the shards' file format
    # A kind of objects: {'read': annotations found, 'rejected': [those of no input's lines]}
    annotations: dict = dataclasses.field(default_factory=dict)


def make(facts, shards, rejections, duplicates, split_names, dropped=()):
    """The content of dataset.json.

    Args:
        facts: the BuildFacts.
        shards: WriteShards' entries: SHARD_KEYS, INDEX_KEY, `split`, the shard's
            number `index` and `reencoded` (and LEVEL_KEYS with levels).
        rejections, duplicates: the lines of rejected.jsonl and duplicates.jsonl.
        split_names: the splits that received records, in order.
        dropped: a build of objects: the lines of rejected_annotations.jsonl.
    Raises:
        AccountingError: unless every input is written, rejected or a duplicate.
    """
    by_split = collections.defaultdict(list)
    for shard in shards:
        by_split[shard['split']].append(shard)
    levels = facts.label_levels or {}
    indexed = shard_formats.named(facts.shard_format).index_suffix is not None
    shard_keys = _shard_keys(levels, facts.kind.multi_label, indexed)
    if facts.annotations:
        shard_keys += object_facts.SHARD_KEYS
    splits = {}
    for split in split_names:
        entries = sorted(by_split[split], key=lambda shard: shard['index'])
        class_counts = collections.Counter()
        for shard in entries:
            class_counts.update(shard['class_counts'])
        splits[split] = {
            'num_records': sum(shard['num_records'] for shard in entries),
            'num_shards': len(entries),
            'class_counts': {
                label: class_counts[label] for label in facts.labels if class_counts[label]
            },
            FORMATS_KEY: _summed_formats(entries),
            **(_summed_level_counts(entries, levels) if levels else {}),
            'shards': [{key: shard[key] for key in shard_keys} for shard in entries],
        }
        if facts.kind.multi_label:
            splits[split].update(_split_spread(splits[split]))
        if facts.annotations:
            splits[split].update(object_facts.split_entry(entries, facts.labels))
    counts = _counts(facts, splits, shards, rejections, duplicates)
    if facts.annotations:
        counts['annotations'] = object_facts.counts(
            facts.annotations, splits, shards, dropped, rejections, duplicates
        )
    gap = accounting_gap(counts) or object_facts.gap(counts.get('annotations'))
    if gap:
        raise AccountingError(f'{gap}; refusing to mark the build complete')
    return {
        **_summary(facts, splits, counts),
        'counts': counts,
        'splits': splits,
        'features': facts.kind.schema,
        'imageshards_version': imageshards.__version__,
        'created': datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds'),
    }


def _summary(facts, splits, counts):
    """dataset.json's keys before `counts`: the build's settings."""
    summary = {'format': facts.kind.format}
    # Only a build of another kind or shard format says so: a classification build in TFRecord
    # shards writes the dataset.json it did before either existed.
    if facts.kind.name != kinds.DEFAULT:
        summary.update(facts.kind.facts())
    if facts.shard_format != shard_formats.DEFAULT:
        summary['shard_format'] = facts.shard_format
    summary.update(
        {
            'seed': facts.seed,
            'input': facts.input,
            'labels': facts.labels,
        }
    )
    if facts.label_levels:  # only then: a build without levels writes the dataset.json it did
        summary['label_levels'] = facts.label_levels
        summary['allow_missing_levels'] = facts.allow_missing_levels
    if facts.kind.multi_label:  # likewise: only a multi-label build has these
        summary.update(_multi_label_summary(facts, splits, counts))
    if facts.resize:  # and only a resizing build has this
        summary['resize'] = facts.resize
    return summary


MULTI_KEYS = ('unlabeled',)  # of every shard of a multi-label build: records with no label


def _shard_keys(levels, multi_label, indexed):
    """The keys of a shard's entry in dataset.json, in order (INDEX_KEY where the shard format
    writes index files)."""
    keys = (SHARD_KEYS[0], *((INDEX_KEY,) if indexed else ()), *SHARD_KEYS[1:], FORMATS_KEY)
    return keys + (LEVEL_KEYS if levels else ()) + (MULTI_KEYS if multi_label else ())


def _split_spread(entry):
    """A multi-label split's records without a label, mean labels per record, and how evenly
    its shards hold each label (imageshards/stratification.py)."""
    shards = entry['shards']
    records = entry['num_records']
    q, large = divmod(records, len(shards))
    wanted = [q + 1 if index < large else q for index in range(len(shards))]
    parts = [(shard['num_records'], shard['class_counts']) for shard in shards]
    return {
        'unlabeled': sum(shard['unlabeled'] for shard in shards),
        'label_cardinality': round(sum(entry['class_counts'].values()) / max(records, 1), 6),
        'stratification': stratification.measures(parts, wanted),
    }


def _multi_label_summary(facts, splits, counts):
    """dataset.json's keys of a multi-label build: how many labels its records hold, and how
    evenly its splits hold each label (the split sizes measured against --splits where no
    manifest placed images itself)."""
    written = counts['written']
    parts = [(entry['num_records'], entry['class_counts']) for entry in splits.values()]
    wanted = None
    fractions = dict(facts.fractions)
    if not facts.manifest_splits and set(splits) <= set(fractions):
        wanted = [written * fractions[split] for split in splits]
    labels = sum(sum(entry['class_counts'].values()) for entry in splits.values())
    return {
        'multi_label': True,
        'multi_label_levels': list(facts.multi_label_levels),
        'label_cardinality': round(labels / max(written, 1), 6),
        'stratification': stratification.measures(parts, wanted),
    }


def _counts(facts, splits, shards, rejections, duplicates):
    counts = {
        'inputs': facts.inputs,
        'written': sum(split['num_records'] for split in splits.values()),
        'rejected': len(rejections),
        'duplicates': len(duplicates),
        'skipped': sum(facts.skipped.values()),
        'reencoded': sum(shard['reencoded'] for shard in shards),
        'rejected_by_reason': dict(
            sorted(collections.Counter(r['reason'] for r in rejections).items())
        ),
        'skipped_by_reason': dict(sorted(facts.skipped.items())),
    }
    if facts.kind.multi_label:
        counts['unlabeled'] = sum(split['unlabeled'] for split in splits.values())
    if facts.resize:
        counts['resized'] = sum(shard['resized'] for shard in shards)
    return counts


def accounting_gap(counts):
    """Why `counts` break `inputs == written + rejected + duplicates`, or '' if they hold."""
    if counts['inputs'] == counts['written'] + counts['rejected'] + counts['duplicates']:
        return ''
    return (
        'counts do not add up: inputs {inputs} != written {written} + rejected {rejected} + '
        'duplicates {duplicates}'.format(**counts)
    )


def _summed_formats(shards):
    summed = collections.Counter()
    for shard in shards:
        summed.update(shard.get(FORMATS_KEY, {}))
    return format_counts(summed)


def _summed_level_counts(shards, levels):
    """A split's `level_counts` ({level: {name: records}}, names in vocabulary order) and
    `level_missing` ({level: records without a value}), summed over its shards."""
    level_counts, missing = {}, {}
    for level, names in levels.items():
        summed = collections.Counter()
        for shard in shards:
            summed.update(shard['level_counts'][level])
        level_counts[level] = {name: summed[name] for name in names if summed[name]}
        missing[level] = sum(shard['level_missing'][level] for shard in shards)
    return {'level_counts': level_counts, 'level_missing': missing}


def structure_problems(dataset):
    """What a loaded dataset.json lacks for a reader to rely on it, as messages."""
    if not isinstance(dataset, dict) or not isinstance(dataset.get('splits', {}), dict):
        return ['dataset.json is not a build summary (an object with a splits object)']
    splits = list(dataset.get('splits', {}).values())
    objects = {
        'dataset.json': [dataset],
        'counts': [dataset.get('counts', {})],
        'split': splits,
        'shard': [shard for split in splits for shard in split.get('shards', [])],
    }
    found = [
        f'a {name} entry has no {key!r}'
        for name, keys in REQUIRED_KEYS
        for key in keys
        if any(key not in entry for entry in objects[name])
    ]
    if found:
        return found
    if dataset['format'] not in features.FORMATS:
        return [f'unknown format {dataset["format"]!r}; expected one of {features.FORMATS}']
    levels = dataset.get('label_levels') or {}
    if not isinstance(levels, dict):
        return ['label_levels is not an object of level -> names']
    found += [
        f'a {name} entry has no {key!r} (the build has label levels)'
        for name in ('split', 'shard')
        for key in LEVEL_KEYS
        if levels and any(key not in entry for entry in objects[name])
    ]
    try:
        schema = kinds.of_build(dataset).schema
        shard_formats.of_build(dataset)
    except ValueError as e:
        return found + [str(e)]
    if dataset.get('features', schema) != schema:
        found.append(f'features {dataset["features"]} are not the {dataset["format"]} schema')
    return found


def count_problems(dataset):
    """Where dataset.json's numbers disagree with each other, as messages: the accounting,
    `written` and each split's totals against the sums of their parts, label names."""
    counts = dataset['counts']
    found = [accounting_gap(counts)] if accounting_gap(counts) else []
    written = sum(info['num_records'] for info in dataset['splits'].values())
    if counts['written'] != written:
        found.append(f'counts.written is {counts["written"]}, but the splits hold {written}')
    for split, info in dataset['splits'].items():
        found += _split_problems(split, info, set(dataset['labels']))
        for level, names in (dataset.get('label_levels') or {}).items():
            found += _level_problems(split, info, level, set(names), dataset.get('multi_label'))
        if dataset.get('multi_label'):
            found += _differences(f'splits.{split}', info, _split_spread(info))
    if dataset.get('multi_label'):
        unlabeled = sum(info['unlabeled'] for info in dataset['splits'].values())
        found += _differences('counts', counts, {'unlabeled': unlabeled})
    return found + object_facts.count_problems(dataset)


def _differences(where, stated, recomputed):
    """Messages for the keys of `recomputed` whose values `stated` does not hold (a multi-label
    build's cardinality and stratification measures, recomputed from its counts)."""
    return [
        f'{where}.{key} is {stated.get(key)}, but its counts give {value}'
        for key, value in recomputed.items()
        if stated.get(key) != value
    ]


def _split_problems(split, info, labels):
    shards = info['shards']
    summed = collections.Counter()
    for shard in shards:
        summed.update(shard['class_counts'])
    found = []
    checked = [
        ('num_records', sum(shard['num_records'] for shard in shards)),
        ('num_shards', len(shards)),
        ('class_counts', dict(summed)),
    ]
    if FORMATS_KEY in info:  # (builds made before imageshards counted formats have none)
        checked.append((FORMATS_KEY, _summed_formats(shards)))
    for key, value in checked:
        if info[key] != value:
            found.append(f'splits.{split}.{key} is {info[key]}, but its shards add up to {value}')
    unknown = sorted(set(summed) - labels)
    if unknown:
        found.append(f'splits.{split} counts labels that are not in labels: {unknown}')
    return found


def _level_problems(split, info, level, names, multi_label=False):
    """Where a split's counts of one label level disagree with its shards or its records (in a
    multi-label build a record counts once per value, so the counts exceed the records)."""
    shards = info['shards']
    summed, found = collections.Counter(), []
    for shard in shards:
        counts = shard['level_counts'].get(level, {})
        summed.update(counts)
        counted = sum(counts.values()) + shard['level_missing'].get(level, 0)
        if counted < shard['num_records'] if multi_label else counted != shard['num_records']:
            found.append(
                f'shard {shard["path"]}: level {level} counts {counted} records, '
                f'not its {shard["num_records"]}'
            )
    missing = sum(shard['level_missing'].get(level, 0) for shard in shards)
    for key, found_value, value in (
        ('level_counts', info['level_counts'].get(level), dict(summed)),
        ('level_missing', info['level_missing'].get(level), missing),
    ):
        if found_value != value:
            found.append(
                f'splits.{split}.{key}.{level} is {found_value}, but its shards add up to {value}'
            )
    unknown = sorted(set(summed) - names)
    if unknown:
        found.append(f'splits.{split} counts names not in label_levels.{level}: {unknown}')
    return found
