"""dataset.json: what a build says about itself - made, written, loaded and checked here.

Keys (those of `REQUIRED_KEYS` always; `label_levels` ... with label levels; `analysis` unless
built with --no-analyze):
    format, seed, input, labels            `labels[i]` is the name of label id i
    label_levels, allow_missing_levels     {level: names}; ids are positions
    counts                                 inputs == written + rejected + duplicates, skipped,
                                           reencoded, rejected_by_reason, skipped_by_reason
    splits                                 {split: num_records, num_shards, class_counts,
                                           [level_counts, level_missing,] shards: [{path,
                                           num_records, num_bytes, sha256, class_counts, ...}]}
    features                               the records' schema (imageshards/features.py)
    analysis                               the analysis split's statistics
    imageshards_version, created
Readers take shard paths from here, never from a glob.

A build is complete once `_SUCCESS` exists beside dataset.json (it is written last).
`load(..., complete=True)` is how the trainer and the tools that read like it (report, preview)
load a build: an unfinished one is refused. The build itself (before its last step), `inspect`
and `verify` (which reports a missing `_SUCCESS`) read what is there.

Files are read through `files`: this package's storage (Beam's FileSystems) by default, or any
object with the same `join`, `exists` and `read` (the trainer passes tf.io.gfile's).
"""

import collections
import dataclasses
import datetime
import json

import imageshards
from imageshards import features
from imageshards import layout
from imageshards import storage

REQUIRED_KEYS = (
    ('dataset.json', ('format', 'labels', 'counts', 'splits')),
    ('counts', ('inputs', 'written', 'rejected', 'duplicates')),
    ('split', ('num_records', 'num_shards', 'class_counts', 'shards')),
    ('shard', ('path', 'num_records', 'num_bytes', 'sha256', 'class_counts')),
)
SHARD_KEYS = REQUIRED_KEYS[3][1]
LEVEL_KEYS = ('level_counts', 'level_missing')  # of every split and shard, with label levels


class NotABuildError(FileNotFoundError):
    """A folder without dataset.json."""


class IncompleteBuildError(FileNotFoundError):
    """A build without _SUCCESS: it did not finish, or is still running."""


class AccountingError(RuntimeError):
    """Inputs that are neither written, rejected nor counted as duplicates."""


def is_build(output_dir, files=storage):
    """Whether `output_dir` is a build's output directory (it holds a dataset.json)."""
    return files.exists(files.join(output_dir.rstrip('/'), layout.DATASET_JSON))


def is_complete(output_dir, files=storage):
    """Whether the build in `output_dir` finished: its `_SUCCESS` exists."""
    return files.exists(files.join(output_dir.rstrip('/'), layout.SUCCESS))


def load(output_dir, *, complete, files=storage):
    """The dataset.json of the build in `output_dir`, as a dict.

    Args:
        complete: refuse a build that did not finish (no `_SUCCESS`).
        files: the file layer to read with (see the module's docstring).
    Raises:
        NotABuildError: there is no dataset.json.
        IncompleteBuildError: `complete`, and there is no `_SUCCESS`.
    """
    output_dir = output_dir.rstrip('/')
    path = files.join(output_dir, layout.DATASET_JSON)
    if not files.exists(path):
        raise NotABuildError(
            f'no {layout.DATASET_JSON} in {output_dir}: not the output directory of '
            f'`imageshards build` (where {layout.DATASET_JSON} and {layout.SUCCESS} are)'
        )
    if complete and not is_complete(output_dir, files):
        raise IncompleteBuildError(
            f'{output_dir} has no {layout.SUCCESS}: the build there did not finish (or is still '
            f'running); rerun `imageshards build` with --overwrite'
        )
    return json.loads(files.read(path).decode('utf-8'))


def encode(dataset):
    """The bytes of dataset.json (byte-identical for the same build, but for `created`)."""
    return json.dumps(dataset, indent=2, ensure_ascii=False).encode('utf-8') + b'\n'


def split_entry(output_dir, splits, split):
    """The entry of `split` in dataset.json's `splits`; ValueError, naming them, if none."""
    if split not in splits:
        raise ValueError(
            f'split {split!r} is not in {output_dir}/{layout.DATASET_JSON} '
            f'(splits: {", ".join(splits) or "none"})'
        )
    return splits[split]


def shard_paths(output_dir, splits, split, join=storage.join):
    """The full paths of a split's shards, in the build's order (ValueError: no such split).

    Args:
        splits: dataset.json's `splits`.
    """
    entry = split_entry(output_dir, splits, split)
    return [join(output_dir, shard['path']) for shard in entry['shards']]


@dataclasses.dataclass(frozen=True)
class BuildFacts:
    """What a build states about itself beside its shards and rejections."""

    format: str
    seed: int
    input: str  # the --input as given
    labels: tuple  # names, by id
    label_levels: dict  # {level: names}, in level order; {} without levels
    allow_missing_levels: bool
    inputs: int  # listed inputs
    skipped: dict  # {reason: files} listing skipped as not inputs


def make(facts, shards, rejections, duplicates, split_names):
    """The content of dataset.json.

    Args:
        facts: the BuildFacts.
        shards: WriteShards' entries, with `split`, `index` and `reencoded` besides SHARD_KEYS
            (and LEVEL_KEYS with levels).
        rejections, duplicates: the lines of rejected.jsonl and duplicates.jsonl.
        split_names: the splits that received records, in order.
    Raises:
        AccountingError: unless every input is written, rejected or a duplicate.
    """
    by_split = collections.defaultdict(list)
    for shard in shards:
        by_split[shard['split']].append(shard)
    levels = facts.label_levels or {}
    shard_keys = SHARD_KEYS + (LEVEL_KEYS if levels else ())
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
            **(_summed_level_counts(entries, levels) if levels else {}),
            'shards': [{key: shard[key] for key in shard_keys} for shard in entries],
        }
    counts = _counts(facts, splits, shards, rejections, duplicates)
    gap = accounting_gap(counts)
    if gap:
        raise AccountingError(f'{gap}; refusing to mark the build complete')
    summary = {
        'format': facts.format,
        'seed': facts.seed,
        'input': facts.input,
        'labels': facts.labels,
    }
    if levels:  # only then: a build without levels writes the dataset.json it always did
        summary['label_levels'] = levels
        summary['allow_missing_levels'] = facts.allow_missing_levels
    return {
        **summary,
        'counts': counts,
        'splits': splits,
        'features': features.record_schema(facts.format, levels),
        'imageshards_version': imageshards.__version__,
        'created': datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds'),
    }


def _counts(facts, splits, shards, rejections, duplicates):
    return {
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


def accounting_gap(counts):
    """Why `counts` break `inputs == written + rejected + duplicates`, or '' if they hold."""
    if counts['inputs'] == counts['written'] + counts['rejected'] + counts['duplicates']:
        return ''
    return (
        'counts do not add up: inputs {inputs} != written {written} + rejected {rejected} + '
        'duplicates {duplicates}'.format(**counts)
    )


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
    schema = features.record_schema(dataset['format'], levels)
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
            found += _level_problems(split, info, level, set(names))
    return found


def _split_problems(split, info, labels):
    shards = info['shards']
    summed = collections.Counter()
    for shard in shards:
        summed.update(shard['class_counts'])
    found = []
    for key, value in (
        ('num_records', sum(shard['num_records'] for shard in shards)),
        ('num_shards', len(shards)),
        ('class_counts', dict(summed)),
    ):
        if info[key] != value:
            found.append(f'splits.{split}.{key} is {info[key]}, but its shards add up to {value}')
    unknown = sorted(set(summed) - labels)
    if unknown:
        found.append(f'splits.{split} counts labels that are not in labels: {unknown}')
    return found


def _level_problems(split, info, level, names):
    """Where a split's counts of one label level disagree with its shards or its records."""
    shards = info['shards']
    summed, found = collections.Counter(), []
    for shard in shards:
        counts = shard['level_counts'].get(level, {})
        summed.update(counts)
        counted = sum(counts.values()) + shard['level_missing'].get(level, 0)
        if counted != shard['num_records']:
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
