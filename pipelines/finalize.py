"""The output directory: refusing to clobber it, and the files written after the shards.

Layout of a build (the contract the trainer and tools read):
    OUT/<split>/<split>-SSSSS-of-NNNNN.tfrecord
    OUT/rejected.jsonl     one object per rejected input: id, path, reason, detail
    OUT/duplicates.jsonl   with --dedup: each dropped input and the one kept instead
    OUT/dataset.json       labels, counts, splits and their shards (path, records, bytes, sha256)
    OUT/dataset_info.json, OUT/features.json, OUT/image.*.labels.txt   the same build described
                           for TensorFlow Datasets (imageshards/tfds_metadata.py)
    OUT/_SUCCESS           written last
    OUT/reencoded/         `paths` builds: lossless copies of images TensorFlow cannot decode as is
    OUT/transform_fn/, OUT/transformed_metadata/, OUT/metadata/   the tf.Transform output
                           (unless --no-analyze), with the analysis also in
                           transform_fn/assets.extra/
"""

import collections
import datetime
import json
import logging
import os
import re

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

import imageshards
from imageshards import features
from imageshards import tfds_metadata

_LOG = logging.getLogger(__name__)

DATASET_JSON = 'dataset.json'
REJECTED_JSONL = 'rejected.jsonl'
DUPLICATES_JSONL = 'duplicates.jsonl'
SUCCESS = '_SUCCESS'
TEMP_DIR = '.imageshards-tmp'
REENCODED_DIR = 'reencoded'
# TFT's standard layout: the graph, its output schema and the raw schema of the records.
TRANSFORM_DIRS = ('transform_fn', 'transformed_metadata', 'metadata')
TRANSFORM_STAGING = 'transform'  # under TEMP_DIR, where WriteTransformOutput writes them
ANALYSIS_JSON = 'transform_fn/assets.extra/analysis.json'
OWN_FILES = (SUCCESS, DATASET_JSON, REJECTED_JSONL, DUPLICATES_JSONL)
_SHARD_NAME = re.compile(r'^([^/]+)/\1-\d{5}-of-\d{5}\.tfrecord$')  # split/split-SSSSS-of-NNNNN
# What the imageshards tools write into a build by default: `preview` its grid, `report` the
# files of imageshards/report.py (order.csv, metrics.json, report.md and its figures).
PREVIEW_PNG = 'preview.png'
REPORT_DIR = 'report'
_REPORT_FILE = re.compile(r'^(order\.csv|metrics\.json|report\.md|[a-z]+_[A-Za-z0-9_.-]+\.png)$')


class AccountingError(RuntimeError):
    """Inputs that are neither written, rejected nor counted as duplicates."""


def join(output_dir, *parts):
    return FileSystems.join(output_dir, *parts)


def _list(directory):
    """Every file below `directory` (recursively); [] if it does not exist.

    Object stores have no folders; the empty objects named `folder/` that consoles and tools
    create to show one are not files, and do not make a directory non-empty.
    """
    results = FileSystems.match([join(directory, '**')])
    return [
        metadata.path
        for result in results
        for metadata in result.metadata_list
        if not metadata.path.endswith('/')
    ]


def _tree(directory):
    """A folder of ours and its files, to delete (a local folder goes last, once empty)."""
    return _list(directory) + [directory]


def _delete(paths):
    """Deletes those of `paths` that exist; returns how many that was."""
    existing = [path for path in paths if FileSystems.exists(path)]
    if existing:
        FileSystems.delete(existing)
    return len(existing)


def delete_if_present(path):
    """Deletes one file of ours if it exists (a listing of a job that never ran)."""
    _delete([path])


def prepare_output(output_dir, overwrite, dry_run=False):
    """Refuses a non-empty output directory unless `overwrite`; then removes the earlier build.

    Only what an imageshards build or tool writes is removed, known by its name (`is_own_file`):
    its top-level files (TFDS metadata included), shards, temporary folder, re-encoded copies
    and tf.Transform output, and the tools' `preview.png` and `report/` files; then the local
    folders those leave empty. By name, not by the earlier dataset.json, so that what an
    unfinished or older build left goes too. Anything else is left alone. A `dry_run` checks,
    and removes nothing.
    """
    existing = _list(output_dir)
    if not existing:
        return
    if not overwrite:
        temp_prefix = join(output_dir, TEMP_DIR) + '/'
        unfinished = all(path.startswith(temp_prefix) for path in existing)
        what = f'{len(existing)} files'
        if unfinished:
            what += f' in {TEMP_DIR}/, of a build that did not finish or is still running'
        raise FileExistsError(
            f'--output {output_dir} is not empty ({what}); pass --overwrite to replace an '
            f'earlier build there, or choose another directory'
        )
    if dry_run:
        _LOG.info('--dry_run: --overwrite would replace the earlier build in %s', output_dir)
        return
    # First: from here on, no reader (ours or TFDS) may take the directory for a finished build.
    _delete([join(output_dir, SUCCESS), join(output_dir, tfds_metadata.DATASET_INFO_JSON)])
    ours = [path for path in relative_files(output_dir) if is_own_file(path)]
    removed = _delete([join(output_dir, path) for path in ours])
    _remove_empty_folders(output_dir, ours)
    _LOG.info('--overwrite: removed %d files of an earlier build in %s', removed, output_dir)


def is_own_file(relative):
    """Whether a file of an output directory (its path relative to it) is one that an
    imageshards build or tool writes there, or a temporary file of theirs."""
    top, _, rest = relative.partition('/')
    if not rest:
        name = relative.removesuffix('.tmp')  # write_atomically's temporary name
        return name in OWN_FILES or name == PREVIEW_PNG or tfds_metadata.is_metadata_file(name)
    if top in (TEMP_DIR, REENCODED_DIR, *TRANSFORM_DIRS):
        return True
    return is_tool_output(relative) or bool(_SHARD_NAME.match(relative))


def is_tool_output(relative):
    """Whether a file of a build is what `imageshards preview` or `report` writes by default."""
    top, _, rest = relative.partition('/')
    return relative == PREVIEW_PNG or (top == REPORT_DIR and bool(_REPORT_FILE.match(rest)))


def relative_files(output_dir):
    """Every file below `output_dir`, as paths relative to it."""
    prefix = output_dir.rstrip('/') + '/'
    return [path[len(prefix) :] for path in _list(output_dir) if path.startswith(prefix)]


def _remove_empty_folders(output_dir, removed):
    """Removes the local folders that held the `removed` files, deepest first, where empty now
    (one that still holds someone else's file stays). Object stores have no folders."""
    if FileSystems.get_scheme(output_dir) not in (None, 'file'):
        return
    folders = set()
    for path in removed:
        parent = os.path.dirname(path)
        while parent:
            folders.add(parent)
            parent = os.path.dirname(parent)
    for folder in sorted(folders, key=lambda name: name.count('/'), reverse=True):
        try:
            os.rmdir(join(output_dir, folder))
        except OSError:  # not empty, or already gone
            pass


def stray_shards(output_dir, dataset):
    """Files named like shards in the output that the new dataset.json does not list."""
    listed = {shard['path'] for split in dataset['splits'].values() for shard in split['shards']}
    relative = relative_files(output_dir)
    return sorted(path for path in relative if _SHARD_NAME.match(path) and path not in listed)


def load_dataset_json(output_dir, missing_ok=False):
    path = join(output_dir, DATASET_JSON)
    if not FileSystems.exists(path):
        if missing_ok:
            return None
        raise FileNotFoundError(f'no {DATASET_JSON} in {output_dir}: not an imageshards build')
    with FileSystems.open(path) as f:
        return json.loads(f.read().decode('utf-8'))


def write_atomically(path, data):
    temporary = f'{path}.tmp'
    with FileSystems.create(temporary) as f:
        f.write(data)
    FileSystems.rename([temporary], [path])


def _jsonl(rows):
    return b''.join(
        json.dumps(row, ensure_ascii=False, sort_keys=True).encode('utf-8') + b'\n' for row in rows
    )


def dataset_summary(context, shards, rejections, duplicates, plan):
    """The content of dataset.json; raises AccountingError unless every input is accounted for."""
    by_split = collections.defaultdict(list)
    for shard in shards:
        by_split[shard['split']].append(shard)
    levels = context.get('label_levels') or {}
    shard_keys = ('path', 'num_records', 'num_bytes', 'sha256', 'class_counts')
    if levels:
        shard_keys += ('level_counts', 'level_missing')
    splits = {}
    for split in plan.splits:
        entries = sorted(by_split[split], key=lambda shard: shard['index'])
        class_counts = collections.Counter()
        for shard in entries:
            class_counts.update(shard['class_counts'])
        splits[split] = {
            'num_records': sum(shard['num_records'] for shard in entries),
            'num_shards': len(entries),
            'class_counts': {
                label: class_counts[label] for label in context['labels'] if class_counts[label]
            },
            **(_summed_level_counts(entries, levels) if levels else {}),
            'shards': [{key: shard[key] for key in shard_keys} for shard in entries],
        }
    written = sum(split['num_records'] for split in splits.values())
    counts = {
        'inputs': context['inputs'],
        'written': written,
        'rejected': len(rejections),
        'duplicates': len(duplicates),
        'skipped': sum(context['skipped'].values()),
        'reencoded': sum(shard['reencoded'] for shard in shards),
        'rejected_by_reason': dict(
            sorted(collections.Counter(r['reason'] for r in rejections).items())
        ),
        'skipped_by_reason': dict(sorted(context['skipped'].items())),
    }
    if counts['inputs'] != written + counts['rejected'] + counts['duplicates']:
        raise AccountingError(
            f'{counts["inputs"]} inputs but {written} written + {counts["rejected"]} rejected + '
            f'{counts["duplicates"]} duplicates; refusing to mark the build complete'
        )
    summary = {
        'format': context['format'],
        'seed': context['seed'],
        'input': context['input'],
        'labels': context['labels'],
    }
    if levels:  # only then: a build without levels writes the dataset.json it always did
        summary['label_levels'] = levels
        summary['allow_missing_levels'] = context['allow_missing_levels']
    return {
        **summary,
        'counts': counts,
        'splits': splits,
        'features': features.record_schema(context['format'], levels),
        'imageshards_version': imageshards.__version__,
        'created': datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds'),
    }


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


def staged_path(output_dir, relative):
    """Where a finished shard waits for Finalize: under the build's temporary folder."""
    return join(output_dir, TEMP_DIR, 'shards', relative)


def make_parent(path):
    """Creates the local folder `path` goes in (object stores have no folders)."""
    parent = path.rsplit('/', 1)[0]
    if FileSystems.get_scheme(path) is None and not FileSystems.exists(parent):
        try:
            FileSystems.mkdirs(parent)
        except OSError:  # another writer created it first
            pass


def _publish_shards(output_dir, shards):
    """Moves staged shards to their contract names; ones already moved (a rerun) stay."""
    moves = []
    for shard in shards:
        staged, final = staged_path(output_dir, shard['path']), join(output_dir, shard['path'])
        if FileSystems.exists(staged):
            moves.append((staged, final))
        elif not FileSystems.exists(final):
            raise FileNotFoundError(f'shard {shard["path"]} is neither staged nor in place')
    for _, final in moves:
        make_parent(final)
    if moves:
        FileSystems.rename([staged for staged, _ in moves], [final for _, final in moves])


def publish_transform(output_dir, staging, analysis):
    """Moves the staged TFT output into place, file by file (object stores have no folders),
    and records the analysis summary beside it; a rerun after a partial move finishes it.

    A local build with a gs:// output stages it on this machine (TensorFlow writes it, and its
    file system speaks to Cloud Storage only): then the files are copied up and the local
    folder removed.
    """
    moves = []
    for name in TRANSFORM_DIRS:
        prefix = join(staging, name) + '/'
        moves += [
            (path, join(output_dir, name, path[len(prefix) :]))
            for path in _list(join(staging, name))
            if path.startswith(prefix)
        ]
    final_model = join(output_dir, TRANSFORM_DIRS[0], 'saved_model.pb')
    if not moves and not FileSystems.exists(final_model):
        raise FileNotFoundError(f'the tf.Transform output is neither in {staging} nor in place')
    for _, final in moves:
        make_parent(final)
    if moves and FileSystems.get_scheme(staging) == FileSystems.get_scheme(output_dir):
        FileSystems.rename([staged for staged, _ in moves], [final for _, final in moves])
    elif moves:
        for staged, final in moves:
            with FileSystems.open(staged, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                data = f.read()
            with FileSystems.create(final, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                f.write(data)
        _delete(_tree(staging))
    path = join(output_dir, ANALYSIS_JSON)
    make_parent(path)
    write_atomically(path, json.dumps(analysis, indent=2).encode('utf-8') + b'\n')


def _finalize(unused_element, shards, rejections, duplicates, plan, context, analysis, analyzed):
    del analyzed  # a side input only so that this step waits for the TFT output
    output_dir = context['output']
    rejections = sorted(rejections, key=lambda row: row['id'])
    duplicates = sorted(duplicates, key=lambda row: row['id'])
    summary = dataset_summary(context, shards, rejections, duplicates, plan)
    if analysis:
        summary['analysis'] = analysis[0]
        if context['analysis_in_pipeline']:
            publish_transform(output_dir, context['transform_staging'], analysis[0])
    _publish_shards(output_dir, shards)
    write_atomically(join(output_dir, REJECTED_JSONL), _jsonl(rejections))
    if context['dedup']:
        write_atomically(join(output_dir, DUPLICATES_JSONL), _jsonl(duplicates))
    write_atomically(
        join(output_dir, DATASET_JSON),
        json.dumps(summary, indent=2, ensure_ascii=False).encode('utf-8') + b'\n',
    )
    for name, data in tfds_metadata.files(summary).items():  # tfds.builder_from_directory
        write_atomically(join(output_dir, name), data)
    if context['complete']:  # else the launcher completes it, after the tf.Transform output
        complete(output_dir)
    yield summary['counts']


def complete(output_dir):
    """Removes the build's temporary folder and marks the build complete: `_SUCCESS`, last."""
    _delete(_tree(join(output_dir, TEMP_DIR)))
    write_atomically(join(output_dir, SUCCESS), b'')


class Finalize(beam.PTransform):
    """Moves the shards into place, writes rejected.jsonl, duplicates.jsonl, dataset.json, the
    TFDS metadata and, last, _SUCCESS.

    Runs once, after every shard is written (it reads them all as side inputs). Running it
    again writes the same files.

    With `analysis` (a PCollection of the dataset.json `analysis` entry, and one that is
    complete once the TFT output is staged), it also moves the TFT output into place.
    """

    def __init__(self, shards, rejections, duplicates, plan, context, analysis):
        super().__init__()
        self._inputs = (shards, rejections, duplicates, plan, *analysis)
        self._context = context

    def expand(self, root):
        shards, rejections, duplicates, plan, analysis, analyzed = self._inputs
        return (
            root
            | 'Once' >> beam.Create([None])
            | 'WriteMetadata'
            >> beam.FlatMap(
                _finalize,
                shards=beam.pvalue.AsList(shards),
                rejections=beam.pvalue.AsList(rejections),
                duplicates=beam.pvalue.AsList(duplicates),
                plan=beam.pvalue.AsSingleton(plan),
                context=self._context,
                analysis=beam.pvalue.AsList(analysis),
                analyzed=beam.pvalue.AsList(analyzed),
            )
        )
