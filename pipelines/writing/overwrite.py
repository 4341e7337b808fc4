"""The output directory before a build: refused when not empty, or with --overwrite cleared of
an earlier build, by name (`is_own_file`: imageshards/layout.py names the files, the shard
formats their shards)."""

import logging

from imageshards import layout
from imageshards import storage
from imageshards.shard_formats import registry as shard_formats

_LOG = logging.getLogger(__name__)


def prepare_output(output_dir, overwrite, dry_run=False):
    """Refuses a non-empty output directory unless `overwrite`; then removes the earlier build.

    Only what an imageshards build or tool writes is removed, known by its name
    (`is_own_file`): its top-level files (TFDS metadata included), shards, temporary
    folder, re-encoded copies and tf.Transform output, and the tools' `preview.png` and
    `report/` files; then the local folders those leave empty. By name, not by the earlier
    dataset.json, so that what an unfinished or older build left goes too. Anything else is
    left alone. A `dry_run` checks, and removes nothing.
    """
    existing = [
        path
        for path in storage.relative_files(output_dir)
        if not layout.is_lock_file(path)  # this build's own lock
    ]
    if not existing:
        return
    if not overwrite:
        unfinished = all(path.startswith(layout.TEMP_DIR + '/') for path in existing)
        what = f'{len(existing)} files'
        if unfinished:
            what += f' in {layout.TEMP_DIR}/, of a build that did not finish'
        raise FileExistsError(
            f'--output {output_dir} is not empty ({what}); pass --overwrite to replace an '
            f'earlier build there, or choose another directory'
        )
    if dry_run:
        _LOG.info('--dry_run: --overwrite would replace the earlier build in %s', output_dir)
        return
    removed = remove_build(output_dir)
    _LOG.info('--overwrite: removed %d files of an earlier build in %s', removed, output_dir)


def remove_build(output_dir):
    """Removes every file of a build in `output_dir` (`is_own_file`), and the local
    folders that leaves empty; returns how many files that was. Not the lock: the build that
    holds it is the one running now."""
    # First: from here on, no reader (ours or TFDS) may take the directory for a finished build.
    storage.delete(
        [
            storage.join(output_dir, layout.SUCCESS),
            storage.join(output_dir, layout.DATASET_INFO_JSON),
        ]
    )
    ours = [path for path in storage.relative_files(output_dir) if is_own_file(path)]
    removed = storage.delete([storage.join(output_dir, path) for path in ours])
    storage.remove_empty_folders(output_dir, ours)
    return removed


def is_own_file(relative):
    """Whether a file of an output directory (its path relative to it) is one that an
    imageshards build or tool writes there, or a temporary file of theirs: what --overwrite
    removes. Not the lock file (`layout.is_lock_file`), which the build running now holds."""
    top, _, rest = relative.partition('/')
    if not rest:
        name = relative.removesuffix('.tmp')  # write_atomically's temporary name
        return (
            name in layout.OWN_FILES
            or name == layout.PREVIEW_PNG
            or layout.is_tfds_metadata_file(name)
        )
    if top in (layout.TEMP_DIR, layout.REENCODED_DIR, *layout.TRANSFORM_DIRS):
        return True
    return (
        layout.is_tool_output(relative)
        or shard_formats.is_shard_path(relative)
        or shard_formats.is_index_path(relative)
    )


def stray_shards(output_dir, dataset):
    """Files named like shards in the output that the new dataset.json does not list."""
    listed = {shard['path'] for split in dataset['splits'].values() for shard in split['shards']}
    relative = storage.relative_files(output_dir)
    return sorted(
        path for path in relative if shard_formats.is_shard_path(path) and path not in listed
    )
