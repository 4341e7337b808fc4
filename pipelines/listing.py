"""Listing the inputs of a build: a directory tree, a glob, or a CSV/JSONL manifest.

Listing runs once, in the launching process, through Beam's `FileSystems` (local paths and
`gs://` alike). It fixes every input's `image/id` (its position in listing order: a tree or glob
sorted by relative path, a manifest in row order) and its stable key (the path relative to the
input root), which seeds the shuffle. Problems found here (an empty label, a duplicate row) are
carried to the pipeline as rejections, so every input is accounted for in one place.

Inputs are untrusted (docs/reliability.md):
* Manifests (pipelines/manifests.py) may only name files below their own folder or below a
  root given with `--allow-root`.
* On local disks, a symlinked file that leads outside the input root (or the allowed roots) is
  rejected, and a symlinked directory is not descended into, unless `--follow-symlinks`.
  Symlinks exist only there, so local trees are walked here rather than by Beam, whose local
  listing silently drops symlinked directories and dangling links.
"""

import collections
import json
import logging
import os
import posixpath
import re
import stat

from apache_beam.io.filesystem import FileSystem
from apache_beam.io.filesystems import FileSystems

from pipelines import manifests
from pipelines.inputs import IMAGE_EXTENSIONS
from pipelines.inputs import USERINFO
from pipelines.inputs import InputEntry
from pipelines.inputs import Listing
from pipelines.inputs import absolute
from pipelines.inputs import inside
from pipelines.inputs import is_manifest
from pipelines.inputs import is_uri
from pipelines.inputs import labels_of
from pipelines.inputs import printable
from pipelines.inputs import redact

_LOG = logging.getLogger(__name__)
_GLOB_CHARS = re.compile(r'[*?\[]')


def list_inputs(spec, allow_roots=(), follow_symlinks=False):
    """Lists a tree, glob, .csv or .jsonl manifest; raises ValueError when nothing matches.

    Args:
        spec: the --input value.
        allow_roots: folders (local or URIs) that manifest rows may name besides the manifest's.
        follow_symlinks: accept symlinks wherever they lead, and descend symlinked folders.
    """
    if USERINFO.match(spec):
        raise ValueError(f'--input {redact(spec)} carries credentials in its URL; remove them')
    roots = [manifests.normalize_root(root) for root in allow_roots]
    if is_manifest(spec):
        listing = manifests.list_manifest(spec, roots, follow_symlinks)
    elif _GLOB_CHARS.search(spec):
        listing = _list_files(_glob_base(spec), absolute(spec), spec, follow_symlinks)
    else:
        root = absolute(spec).rstrip('/')
        if not FileSystems.exists(root):
            raise ValueError(f'--input does not exist: {spec}')
        listing = _list_files(root, FileSystems.join(root, '**'), spec, follow_symlinks)
    if not listing.entries:
        raise ValueError(
            f'--input matched no image files: {spec} '
            f'(skipped {listing.num_skipped}: {dict(listing.skipped)})'
        )
    rejected = collections.Counter(entry.reject for entry in listing.entries if entry.reject)
    if rejected:
        _LOG.warning('listing rejected %d inputs: %s', sum(rejected.values()), dict(rejected))
    return listing


def _glob_base(pattern):
    """The folder above the first wildcard: `data/*/*.jpg` -> `data`."""
    prefix = pattern[: _GLOB_CHARS.search(pattern).start()]
    base = prefix.rsplit('/', 1)[0] if '/' in prefix else '.'
    return absolute(base).rstrip('/')


def _list_files(root, pattern, spec, follow_symlinks):
    """Lists a tree or glob under `root`; the class is the first folder below `root`."""
    if is_uri(root):
        found = [
            (metadata.path, '', '')
            for result in FileSystems.match([pattern])
            for metadata in result.metadata_list
        ]
    elif os.path.isdir(root):
        matches = re.compile(FileSystem.translate_pattern(pattern)).match
        found = [
            (path, problem, detail)
            for path, problem, detail in _walk_local(root, follow_symlinks)
            if problem in _NOT_FILES or matches(path)
        ]
    else:
        found = []  # a glob whose folder does not exist, or a file given as a tree
    skipped, skipped_examples, candidates = collections.Counter(), [], []
    for path, problem, detail in found:
        relative = path[len(root) + 1 :] if path.startswith(root + '/') else path
        if any(part.startswith('.') for part in relative.split('/')):
            reason = 'hidden'
        elif problem in _NOT_FILES:
            reason = problem
        elif posixpath.splitext(relative)[1].lower() not in IMAGE_EXTENSIONS:
            reason = 'not_image'
        else:
            if not problem and printable(path) != path:
                problem, detail = 'invalid_file_name', 'the name is not valid UTF-8; rename it'
            candidates.append((printable(relative), printable(path), problem, detail))
            continue
        skipped[reason] += 1
        if len(skipped_examples) < 20:
            skipped_examples.append(printable(path))
    if skipped.get('unreadable_dir'):
        _LOG.warning('could not list %d folders below %s', skipped['unreadable_dir'], root)
    candidates.sort()
    entries = []
    for relative, path, problem, detail in candidates:
        label = relative.split('/', 1)[0] if '/' in relative else ''
        entry = InputEntry(id=len(entries), path=path, key=relative, label=label)
        if problem:
            entry = entry._replace(reject=problem, detail=detail)
        elif not label:
            entry = entry._replace(
                reject='no_label', detail=f'image is directly under {spec}, not in a class folder'
            )
        entries.append(entry)
    return Listing(entries, labels_of(entries), dict(skipped), skipped_examples, root)


# Problems of the walk that are not inputs at all, counted as skipped.
_NOT_FILES = frozenset(['symlinked_dir', 'symlink_loop', 'unreadable_dir'])


def _walk_local(root, follow_symlinks):
    """Yields (path, problem, detail) for every file below local `root`, in no set order.

    `problem` is '' for a regular file (or a symlink to one) that may be read; a reason code
    from `_NOT_FILES` for what is not a file; else the reason to reject the file.
    """
    real_root = os.path.realpath(root)
    visited = {real_root}  # real folders walked through links: a loop ends there
    folders = [root]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as scan:
                children = list(scan)
        except OSError as e:
            yield folder, 'unreadable_dir', f'{type(e).__name__}: {e}'
            continue
        for child in children:
            if child.is_dir(follow_symlinks=False):
                folders.append(child.path)
            elif not child.is_symlink():
                regular = child.is_file(follow_symlinks=False)
                yield child.path, *(('', '') if regular else _NOT_REGULAR)
            elif follow_symlinks and os.path.isdir(child.path):
                target = os.path.realpath(child.path)
                if target in visited:
                    yield child.path, 'symlink_loop', f'{target} is listed already'
                else:
                    visited.add(target)
                    folders.append(child.path)
            else:
                yield child.path, *_symlink_problem(child.path, real_root, follow_symlinks)


_NOT_REGULAR = ('not_a_regular_file', 'a FIFO, socket or device, not a file')


def _symlink_problem(path, real_root, follow_symlinks):
    """(problem, detail) of a symlink in a local tree that is not followed as a folder."""
    target = os.path.realpath(path)
    try:
        mode = os.stat(target).st_mode
    except OSError as e:
        return 'broken_symlink', f'links to {printable(target)}: {type(e).__name__}'
    if stat.S_ISDIR(mode):
        return 'symlinked_dir', ''
    if not follow_symlinks and not inside(target, real_root):
        return 'symlink_outside_root', (
            f'links to {printable(target)}, outside {real_root}; pass --follow-symlinks to read it'
        )
    if not stat.S_ISREG(mode):
        return 'not_a_regular_file', f'links to {printable(target)}, not a regular file'
    return '', ''


def write_listing(entries, path, chunk_size):
    """Writes entries as JSON lines of `chunk_size` entries each: one line, one work item."""
    with FileSystems.create(path) as f:
        for start in range(0, len(entries), chunk_size):
            chunk = [list(entry) for entry in entries[start : start + chunk_size]]
            f.write(json.dumps(chunk, ensure_ascii=False).encode('utf-8') + b'\n')


def parse_listing_line(line):
    return [InputEntry(*fields) for fields in json.loads(line)]
