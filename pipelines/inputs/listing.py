"""Listing the inputs of a build: a directory tree, a glob, or a CSV/JSONL manifest.

Listing runs once, in the launching process (a local tree possibly in a process of its own,
started before the launcher imports Beam: pipelines/local/early_listing.py), through Beam's
`FileSystems` for object stores and the OS for local paths; this module imports no Beam. It
fixes every input's `image/id` (its position in listing order: a tree or glob sorted by
relative path, a manifest in row order) and its stable key (the path relative to the input
root), which seeds the shuffle. Problems found here (an empty label, a duplicate row) are
carried to the pipeline as rejections, so every input is accounted for in one place.

Inputs are untrusted (docs/reliability.md):
* Manifests (pipelines/inputs/manifests.py) may only name files below their own folder or below a
  root given with `--allow-root`.
* On local disks, a symlinked file that leads outside the input root (or the allowed roots) is
  rejected, and a symlinked directory is not descended into, unless `--follow-symlinks`.
  Symlinks exist only there, so local trees are walked here rather than by Beam, whose local
  listing silently drops symlinked directories and dangling links.
"""

import array
import itertools
import json
import logging
import os
import re
import stat
import struct
import sys

from imageshards import gcs_objects
from imageshards import storage
from imageshards.file_names import display
from imageshards.storage import absolute
from imageshards.storage import is_uri
from pipelines.inputs import confinement
from pipelines.inputs import manifests
from pipelines.inputs.entries import IMAGE_EXTENSIONS
from pipelines.inputs.entries import USERINFO
from pipelines.inputs.entries import InputEntry
from pipelines.inputs.entries import InputScan
from pipelines.inputs.entries import Listing
from pipelines.inputs.entries import ListingCounts
from pipelines.inputs.entries import inside
from pipelines.inputs.entries import is_manifest
from pipelines.inputs.entries import redact

_LOG = logging.getLogger(__name__)
_GLOB_CHARS = re.compile(r'[*?\[]')


def scan_inputs(spec, allow_roots=(), follow_symlinks=False, label_levels=(), label_separator=None):
    """Starts listing a tree, glob, .csv or .jsonl manifest; returns an InputScan.

    Problems with `spec` itself (credentials, a missing tree or manifest) raise ValueError here;
    the inputs come as the scan's `entries` are consumed.

    Args:
        spec: the --input value.
        allow_roots: folders (local or URIs) that manifest rows may name besides the manifest's.
        follow_symlinks: accept symlinks wherever they lead, and descend symlinked folders.
        label_levels: a tree's label levels, one per folder below the root, coarse to fine; for a
            manifest, the `label/<level>` columns it must have (default: those it has).
        label_separator: what separates the labels of a multi-label CSV cell (None: whitespace).
    """
    if USERINFO.match(spec):
        raise ValueError(f'--input {redact(spec)} carries credentials in its URL; remove them')
    roots = [confinement.normalize_root(root) for root in allow_roots]
    levels = tuple(label_levels)
    if is_manifest(spec):
        return manifests.scan_manifest(spec, roots, follow_symlinks, levels, label_separator)
    if is_glob(spec):
        return _scan_files(_glob_base(spec), absolute(spec), spec, follow_symlinks, levels)
    root = absolute(spec).rstrip('/')
    if not storage.exists(root):
        raise ValueError(f'--input does not exist: {spec}')
    return _scan_files(root, storage.join(root, '**'), spec, follow_symlinks, levels)


def list_inputs(spec, allow_roots=(), follow_symlinks=False, label_levels=(), label_separator=None):
    """Every input of `spec` in memory, as a Listing; raises ValueError when nothing matches.

    For tests and small inputs: a build streams the same entries into its listing file
    (`write_listing_file`) without holding them.
    """
    scan = scan_inputs(spec, allow_roots, follow_symlinks, label_levels, label_separator)
    counts = ListingCounts()
    entries = [counts.add(entry) for entry in scan.entries]
    _check(spec, scan, counts)
    return Listing(
        entries,
        counts.labels,
        dict(scan.skipped),
        scan.skipped_examples,
        scan.base,
        counts.label_levels(scan.levels),
    )


def write_listing_file(scan, path, chunk_size, spec):
    """Streams the scan's entries into the listing file `path`; returns a ListingSummary.

    Raises:
        ValueError: nothing to build (no image files matched `spec`).
    """
    return summarise(spec, scan, write_counted(scan, path, chunk_size))


def write_counted(scan, path, chunk_size):
    """Streams the scan's entries into the listing file `path`; returns their ListingCounts."""
    counts = ListingCounts()
    write_listing((counts.add(entry) for entry in scan.entries), path, chunk_size)
    return counts


def summarise(spec, scan, counts):
    """The ListingSummary of a written listing; raises ValueError where it holds no input."""
    _check(spec, scan, counts)
    return counts.summary(scan)


def _check(spec, scan, counts):
    if not counts.num_inputs:
        raise ValueError(
            f'--input matched no image files: {spec} '
            f'(skipped {sum(scan.skipped.values())}: {dict(scan.skipped)})'
        )
    if counts.rejected:
        rejected = counts.rejected
        _LOG.warning('listing rejected %d inputs: %s', sum(rejected.values()), dict(rejected))


def input_base(spec) -> str:
    """What the keys of an --input are relative to, without listing it: a manifest's folder, a
    glob's fixed folder, a tree's root."""
    if is_manifest(spec):
        return absolute(spec).rsplit('/', 1)[0]
    return _glob_base(spec) if is_glob(spec) else absolute(spec).rstrip('/')


def is_glob(spec):
    """Whether --input is a glob (`data/*/*.jpg`)."""
    return bool(_GLOB_CHARS.search(spec))


def _glob_base(pattern):
    """The folder above the first wildcard: `data/*/*.jpg` -> `data`."""
    prefix = pattern[: _GLOB_CHARS.search(pattern).start()]
    base = prefix.rsplit('/', 1)[0] if '/' in prefix else '.'
    return absolute(base).rstrip('/')


def _scan_files(root, pattern, spec, follow_symlinks, levels=()):
    """Lists a tree or glob under `root`; the class is the first folder below `root` (with
    label levels, the folders of every level: see `tree_labels`)."""
    scan = InputScan(root, iter(()), levels=list(levels))
    scan.entries = _file_entries(root, pattern, spec, follow_symlinks, scan)
    return scan


def tree_labels(relative, levels):
    """(label, {level: value}) of a file at `relative` below a tree's root.

    Without levels, the label is the first folder. With levels, folder i is the value of level
    i (first folder = first level) and the label is the folders of the levels joined by '/'
    (`birds/sparrow`): the finest class, which stays distinct where two families hold a
    species of the same name. A file with fewer folders than levels misses the deeper ones.
    A label is text: a folder whose name is not UTF-8 is the label its name shows, each byte
    that does not decode as \\xNN (`caf\\xe9`; imageshards/file_names.py).
    """
    if not levels:
        first, slash, _ = relative.partition('/')
        return (display(first) if slash else ''), {}
    values = [display(value) for value in relative.split('/')[:-1][: len(levels)]]
    return '/'.join(values), dict(zip(levels, values))


def _file_entries(root, pattern, spec, follow_symlinks, scan):
    """InputEntry of every candidate below `root`, ids in sorted relative path order."""
    for entry_id, (relative, path, problem, detail, size) in enumerate(
        _candidates(root, pattern, follow_symlinks, scan)
    ):
        label, levels = tree_labels(relative, scan.levels)
        entry = InputEntry(entry_id, path, relative, label, levels=levels, size=size)
        if problem:
            entry = entry._replace(reject=problem, detail=detail)
        elif not label:
            entry = entry._replace(
                reject='no_label', detail=f'image is directly under {spec}, not in a class folder'
            )
        yield entry
    if scan.skipped.get('unreadable_dir'):
        _LOG.warning('could not list %d folders below %s', scan.skipped['unreadable_dir'], root)


def _candidates(root, pattern, follow_symlinks, scan):
    """(relative, path, problem, detail, size) of the image files, sorted by relative path
    (size: in bytes, or -1 where the file cannot be read).

    A local tree is walked in that order, one folder's names in memory at a time. An object
    store's listing comes whole (from FileSystems.match; gs://'s from imageshards/gcs_objects.py,
    whose requests are retried and whose failure is one line) and is sorted here.
    """
    # pylint: disable=import-outside-toplevel
    if root.startswith('gs://'):
        found = [(path, '', '', size) for path, size in gcs_objects.match(pattern)]
        return iter(sorted(_classify(root, found, scan)))
    if is_uri(root):
        from apache_beam.io.filesystems import FileSystems

        found = [
            (metadata.path, '', '', metadata.size_in_bytes)
            for result in FileSystems.match([pattern])
            for metadata in result.metadata_list
        ]
        return iter(sorted(_classify(root, found, scan)))
    if os.path.isdir(root):
        found = _walk_sorted(root, follow_symlinks)
        if pattern != storage.join(root, '**'):  # a glob: only what it matches
            from apache_beam.io.filesystem import FileSystem

            matches = re.compile(FileSystem.translate_pattern(pattern)).match
            found = (item for item in found if item[1] in _NOT_FILES or matches(item[0]))
        return _classify(root, found, scan)
    return iter(())  # a glob whose folder does not exist, or a file given as a tree


def _classify(root, found, scan):
    """Counts what is not an input in `scan.skipped`; yields the rest, in the order found."""
    prefix = root + '/'
    for path, problem, detail, size in found:
        relative = path[len(prefix) :] if path.startswith(prefix) else path
        if relative.startswith('.') or '/.' in relative:
            scan.skip('hidden', display(path))
        elif problem in _NOT_FILES:
            scan.skip(problem, display(path))
        elif _extension(relative) not in IMAGE_EXTENSIONS:
            scan.skip('not_image', display(path))
        else:  # a name that is not UTF-8 is kept as Python lists it (imageshards/file_names.py)
            yield relative, path, problem, detail, size


def _extension(relative):
    """posixpath.splitext(relative)[1].lower(), at a third of its cost."""
    name = relative.rpartition('/')[2].lstrip('.')  # leading dots start no extension
    dot = name.rfind('.')
    return name[dot:].lower() if dot > 0 else ''


# Problems of the walk that are not inputs at all, counted as skipped.
_NOT_FILES = frozenset(['symlinked_dir', 'symlink_loop', 'unreadable_dir'])


def _walk_sorted(root, follow_symlinks):
    """Yields (path, problem, detail, size) for every file below local `root`, in sorted order.

    Files come in the order of their relative paths (as `file_names.display` shows them, as
    sorted strings compare), so that listing can stream: each folder's entries are sorted, a
    folder's name followed by '/' (a folder `a` holds `a/x`, which sorts after a file `a-b` and
    before a file `a0`). What is not walked (unreadable, symlinked or looping folders) comes in
    no set order. `problem` is '' for a regular file (or a symlink to one) that may be read; a
    reason code from `_NOT_FILES` for what is not a file; else the reason to reject the file.
    `size` is the file's (a symlink's target's) in bytes, -1 where unknown.
    """
    real_root = os.path.realpath(root)
    visited = {real_root}  # real folders walked through links: a loop ends there
    pending = [iter([(root, 'folder', -1)])]
    while pending:
        child = next(pending[-1], None)
        if child is None:
            pending.pop()
            continue
        path, kind, size = child
        if kind == 'link':
            target = os.path.realpath(path)
            if target in visited:
                yield path, 'symlink_loop', f'{display(target)} is listed already', -1
                continue
            visited.add(target)
        if kind in ('folder', 'link'):
            try:
                pending.append(iter(_sorted_children(path, follow_symlinks)))
            except OSError as e:
                yield path, 'unreadable_dir', f'{type(e).__name__}: {e}', -1
        elif kind == 'file':
            yield path, '', '', size
        elif kind == 'special':
            yield path, *_NOT_REGULAR, -1
        else:
            yield path, *_symlink_problem(path, real_root, follow_symlinks)


def _sorted_children(folder, follow_symlinks):
    """[(path, kind, size)] of a folder's entries in the order `_walk_sorted` yields them.

    kind: 'folder' and 'link' (a symlinked folder to follow) are walked; 'file' (its size: one
    lstat), 'special' (a FIFO, socket or device) and 'symlink' (any other link) are not.
    """
    children = []
    with os.scandir(folder) as scan:
        for child in scan:
            size = -1
            if child.is_dir(follow_symlinks=False):
                kind = 'folder'
            elif child.is_symlink():
                kind = 'link' if follow_symlinks and os.path.isdir(child.path) else 'symlink'
            elif child.is_file(follow_symlinks=False):
                kind, size = 'file', child.stat(follow_symlinks=False).st_size
            else:
                kind = 'special'
            walked = kind in ('folder', 'link')
            name = display(child.name) + ('/' if walked else '')
            children.append((name, child.path, kind, size))
    children.sort(key=_name)
    return [child[1:] for child in children]


_NOT_REGULAR = ('not_a_regular_file', 'a FIFO, socket or device, not a file')


def _name(child):
    return child[0]


def _symlink_problem(path, real_root, follow_symlinks):
    """(problem, detail, size) of a symlink in a local tree that is not followed as a folder."""
    target = os.path.realpath(path)
    try:
        found = os.stat(target)
    except OSError as e:
        return 'broken_symlink', f'links to {display(target)}: {type(e).__name__}', -1
    if stat.S_ISDIR(found.st_mode):
        return 'symlinked_dir', '', -1
    if not follow_symlinks and not inside(target, real_root):
        return (
            'symlink_outside_root',
            (f'links to {display(target)}, outside {real_root}; pass --follow-symlinks to read it'),
            found.st_size,
        )
    if not stat.S_ISREG(found.st_mode):
        return 'not_a_regular_file', f'links to {display(target)}, not a regular file', -1
    return '', '', found.st_size


def write_listing(entries, path, chunk_size):
    """Writes entries as JSON lines of `chunk_size` entries each: one line, one work item.

    `entries` may be any iterable; it is consumed once. The byte offset of every line (and the
    end of the file) goes to `index_path(path)` as big-endian uint64s, so that the pipeline
    moves work items as byte ranges instead of holding the lines.
    """
    offsets = array.array('Q', [0])
    with storage.create(path) as f:
        for chunk in _batched(entries, chunk_size):
            line = json.dumps([entry.to_json() for entry in chunk], ensure_ascii=False)
            data = line.encode('utf-8') + b'\n'
            f.write(data)
            offsets.append(offsets[-1] + len(data))
    if sys.byteorder == 'little':
        offsets.byteswap()
    with storage.create(index_path(path)) as f:
        f.write(offsets.tobytes())


def _batched(items, size):
    items = iter(items)
    while chunk := list(itertools.islice(items, size)):
        yield chunk


def index_path(listing_path):
    """The file holding the byte offsets of a listing file's lines."""
    return listing_path + '.index'


def work_items(listing_path):
    """(start, end) byte ranges of the lines of a listing file, from its index."""
    with storage.open_read(index_path(listing_path)) as f:
        data = f.read()
    offsets = [value for (value,) in struct.iter_unpack('>Q', data)]
    return list(zip(offsets, offsets[1:]))


def read_work_item(listing_path, item):
    """The InputEntry of one work item: a (start, end) byte range of a listing file."""
    start, end = item
    return parse_listing_line(storage.read_range(listing_path, start, end))


def parse_listing_line(line):
    return [InputEntry.from_json(fields) for fields in json.loads(line)]


def copy_listing(source, destination):
    """Copies a listing file and its index (local or gs://, either way)."""
    storage.copy_many([(source, destination), (index_path(source), index_path(destination))])
