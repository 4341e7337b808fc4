"""Finalize: the build's last step, which makes its output what imageshards/layout.py says.

It moves the staged shards (and, where the pipeline wrote it, the tf.Transform output) into
place and writes rejected.jsonl, duplicates.jsonl, dataset.json, the TFDS metadata and, last,
`_SUCCESS`. Every write goes to a temporary name first, so a killed build leaves no file that
looks finished; running it again writes the same files.
"""

import dataclasses
import json

import apache_beam as beam

from imageshards import dataset_facts
from imageshards import dataset_json
from imageshards import layout
from imageshards import lifeline
from imageshards import object_facts
from imageshards import output_lock
from imageshards import storage
from imageshards import tfds_metadata
from imageshards.dataset_json import INDEX_KEY
from pipelines.writing import grouped_output


def _jsonl(rows):
    return b''.join(
        json.dumps(row, ensure_ascii=False, sort_keys=True).encode('utf-8') + b'\n' for row in rows
    )


def _publish_shards(output_dir, shards):
    """Moves staged shards and their index files to their contract names (on gs://, in
    batches); ones already moved (a rerun) stay. What is staged is listed once, not asked of
    each file."""
    staged_dir = storage.join(output_dir, layout.TEMP_DIR, layout.STAGED_SHARDS_DIR)
    staged_now = set(storage.list_files(staged_dir))
    moves, unstaged = [], []
    files = (path for shard in shards for path in (shard['path'], shard.get(INDEX_KEY)) if path)
    for relative in files:
        staged = storage.join(output_dir, layout.staged_shard(relative))
        final = storage.join(output_dir, relative)
        if staged in staged_now:
            moves.append((staged, final))
        else:
            unstaged.append(final)
    for final in unstaged:  # a rerun's: looked up one by one, as only a rerun has them
        if not storage.exists(final):
            raise FileNotFoundError(f'{final} is neither staged nor in place')
    for _, final in moves:
        storage.make_parent(final)
    if moves:
        storage.rename([staged for staged, _ in moves], [final for _, final in moves])


def publish_transform(output_dir, staging, analysis):
    """Moves the staged TFT output into place, file by file (object stores have no folders),
    and records the analysis summary beside it; a rerun after a partial move finishes it.

    A local build with a gs:// output stages it on this machine (TensorFlow writes it, and its
    file system speaks to Cloud Storage only): then the files are copied up and the local
    folder removed.
    """
    moves = []
    for name in layout.TRANSFORM_DIRS:
        prefix = storage.join(staging, name) + '/'
        moves += [
            (path, storage.join(output_dir, name, path[len(prefix) :]))
            for path in storage.list_files(storage.join(staging, name))
            if path.startswith(prefix)
        ]
    final_model = storage.join(output_dir, layout.TRANSFORM_SAVED_MODEL)
    if not moves and not storage.exists(final_model):
        raise FileNotFoundError(f'the tf.Transform output is neither in {staging} nor in place')
    for _, final in moves:
        storage.make_parent(final)
    if moves and storage.scheme(staging) == storage.scheme(output_dir):
        storage.rename([staged for staged, _ in moves], [final for _, final in moves])
    elif moves:
        storage.copy_many(moves)
        storage.delete_tree(staging)
    path = storage.join(output_dir, layout.ANALYSIS_JSON)
    storage.make_parent(path)
    storage.write_atomically(path, json.dumps(analysis, indent=2).encode('utf-8') + b'\n')


def complete(output_dir, build=None):
    """Removes the build's temporary folder and marks the build complete: `_SUCCESS`, last.

    Only while the build's command still runs and the output's lock is still this build's
    (`build`: the token its lock records; imageshards/output_lock.py): a build whose command was
    killed, or that lost its lock to another build, never marks the output finished.
    """
    lifeline.ensure_command_alive(f'writing {layout.SUCCESS}')
    output_lock.ensure_held(output_dir, build=build)
    storage.delete_tree(storage.join(output_dir, layout.TEMP_DIR))
    storage.write_atomically(storage.join(output_dir, layout.SUCCESS), b'')


def _finalize(
    unused_element,
    shards,
    rejections,
    duplicates,
    shard_layout,
    settings,
    analysis,
    analyzed,
    annotations=None,
    **grouped,
):
    """Writes the build's files from its side inputs; yields dataset.json's `counts`."""
    del analyzed  # a side input only so that this step waits for the TFT output
    facts = settings.facts
    if annotations is not None:  # what the pipeline read of a COCO file (coco_join.py)
        facts = dataclasses.replace(
            facts, annotations=object_facts.joined(facts.annotations, annotations)
        )
    output_dir = settings.output_dir
    dropped = sorted(
        (row for row in rejections if object_facts.is_annotation_row(row)),
        key=lambda row: (row['id'], row['annotation']),
    )
    rejections = sorted(
        (row for row in rejections if not object_facts.is_annotation_row(row)),
        key=lambda row: row['id'],
    )
    duplicates = sorted(duplicates, key=lambda row: row['id'])
    if facts.annotations:  # those of no input first (a COCO annotation of an unknown image)
        dropped = facts.annotations['rejected'] + dropped
    summary = dataset_facts.make(
        facts, shards, rejections, duplicates, shard_layout.splits, dropped
    )
    if grouped:
        _write_grouped(settings, summary, **grouped)
    if analysis:
        summary['analysis'] = analysis[0]
        if settings.transform_staging:
            publish_transform(output_dir, settings.transform_staging, analysis[0])
    _publish_shards(output_dir, shards)
    files = {layout.REJECTED_JSONL: _jsonl(rejections)}
    if settings.dedup:
        files[layout.DUPLICATES_JSONL] = _jsonl(duplicates)
    if facts.annotations:
        files[layout.REJECTED_ANNOTATIONS_JSONL] = _jsonl(dropped)
    files[layout.DATASET_JSON] = dataset_json.encode(summary)
    files.update(tfds_metadata.files(summary))  # tfds.builder_from_directory
    # Each complete before it appears; on gs://, all written at once (_SUCCESS, last, below).
    storage.write_files({storage.join(output_dir, name): data for name, data in files.items()})
    if settings.completes:  # else the launcher does, after the tf.Transform output
        complete(output_dir, settings.lock_build)
    yield summary['counts']


def _write_grouped(settings, summary, tallies, clusters, members, previous, previous_counts):
    """Writes near_duplicates.jsonl (--near-duplicates), and adds `grouping` to `summary`."""
    rows = grouped_output.near_duplicate_rows(clusters, members, settings.listing_base)
    if settings.grouping.near_duplicates:
        path = storage.join(settings.output_dir, layout.NEAR_DUPLICATES_JSONL)
        storage.write_atomically(path, _jsonl(rows))
    kept = grouped_output.previous_counts(previous[0], previous_counts) if previous else None
    grouped_output.add_grouping(summary, settings, tallies, clusters, rows, kept)


class Finalize(beam.PTransform):
    """The pipeline's root -> dataset.json's `counts`, once every shard is written.

    Runs once, after every shard is written (it reads them all as side inputs). Where the
    pipeline writes the tf.Transform output (`settings.transform_staging`), it waits for it
    and moves it into place too.

    Args:
        settings: the build's FinishSettings.
        shards: WriteShards' shard entries.
        rejections: ValidateImages' rejected.jsonl lines.
        duplicates: DropDuplicates' duplicates.jsonl lines (empty without --dedup).
        shard_layout: AssignShards' ShardLayout (one element).
        analysis: dataset.json's `analysis` entry (one element; empty without the analysis).
        analyzed: complete once the tf.Transform output is staged (empty where the pipeline
            does not write it).
        grouped: a build with groups, near-duplicates or an earlier build's splits: {tallies:
            CountLeaks' output, clusters: the Clusters (one), members and previous_counts:
            PlaceGroups' MEMBERS and PREVIOUS outputs, previous: the PreviousSplits (one, or
            empty)}; None for any other build.
    """

    def __init__(
        self,
        settings,
        *,
        shards,
        rejections,
        duplicates,
        shard_layout,
        analysis,
        analyzed,
        grouped=None,
        annotations=None,
    ):
        super().__init__()
        self._settings = settings
        self._side_inputs = {
            'shards': beam.pvalue.AsList(shards),
            'rejections': beam.pvalue.AsList(rejections),
            'duplicates': beam.pvalue.AsList(duplicates),
            'shard_layout': beam.pvalue.AsSingleton(shard_layout),
            'analysis': beam.pvalue.AsList(analysis),
            'analyzed': beam.pvalue.AsList(analyzed),
        }
        if annotations is not None:
            self._side_inputs['annotations'] = beam.pvalue.AsList(annotations)
        if grouped:
            self._side_inputs.update(
                tallies=beam.pvalue.AsList(grouped['tallies']),
                clusters=beam.pvalue.AsSingleton(grouped['clusters']),
                members=beam.pvalue.AsList(grouped['members']),
                previous=beam.pvalue.AsList(grouped['previous']),
                previous_counts=beam.pvalue.AsList(grouped['previous_counts']),
            )

    def expand(self, root):
        once = root | 'Once' >> beam.Create([None])
        return once | 'WriteMetadata' >> beam.FlatMap(
            _finalize, settings=self._settings, **self._side_inputs
        )
