"""Listing the inputs of a build: a directory tree, a glob, or a CSV/JSONL manifest; other
forms (archives, arrays, TFRecord files) through pipelines/inputs/forms.py.

Listing runs once, in the launching process (a local tree possibly in a process of its own,
started before the launcher imports Beam: pipelines/local/early_listing.py), through Beam's
`FileSystems` for object stores and the OS for local paths; this module imports no Beam
(archives on an object store are indexed by the build's workers first, and listed from their
indexes: pipelines/inputs/archive_index.py). It fixes every input's `image/id` (its position in
listing order: a tree or glob sorted by relative path, a manifest in row order) and its stable
key (the path relative to the input root), which seeds the shuffle. Problems found here (an
empty label, a duplicate row) are carried to the pipeline as rejections, so every input is
accounted for in one place.

Inputs are untrusted (docs/reliability.md):
* Manifests (pipelines/inputs/manifests.py) may only name files below their own folder or below a
  root given with `--allow-root`.
* On local disks, a symlinked file that leads outside the input root (or the allowed roots) is
  rejected, and a symlinked directory is not descended into, unless `--follow-symlinks`
  (pipelines/inputs/tree_walk.py walks a local tree).
"""

import array
import importlib
import json
import logging
import os
import re
import struct
import sys

from imageshards import gcs_objects
from imageshards import storage
from imageshards.file_names import display
from imageshards.storage import absolute
from imageshards.storage import is_uri
from pipelines.core import sources
from pipelines.core.settings import COCO
from pipelines.core.settings import OBJECT_FORMS
from pipelines.core.settings import InputSettings
from pipelines.inputs import forms
from pipelines.inputs import manifests
from pipelines.inputs import object_archives
from pipelines.inputs import tree_walk
from pipelines.inputs import vertex_objects
from pipelines.inputs.entries import GLOB_CHARS
from pipelines.inputs.entries import IMAGE_EXTENSIONS
from pipelines.inputs.entries import USERINFO
from pipelines.inputs.entries import InputEntry
from pipelines.inputs.entries import InputScan
from pipelines.inputs.entries import Listing
from pipelines.inputs.entries import ListingCounts
from pipelines.inputs.entries import extension
from pipelines.inputs.entries import is_glob
from pipelines.inputs.entries import is_manifest
from pipelines.inputs.entries import redact
from pipelines.inputs.entries import tree_labels
from pipelines.inputs.tree_walk import NOT_FILES

_LOG = logging.getLogger(__name__)


def scan_inputs(spec, inputs=None, index_archives=None):
    """Starts listing a tree, glob, .csv or .jsonl manifest, or inputs of another form
    (pipelines/inputs/forms.py); returns an InputScan.

    Problems with `spec` itself (credentials, a missing tree or manifest) raise ValueError here;
    the inputs come as the scan's `entries` are consumed.

    Args:
        spec: the --input value.
        inputs: the InputSettings (pipelines/core/settings.py): how --input is read, its form,
            label levels and columns, where its rows may lead.
        index_archives: where archives are the inputs, what gives each one's members
            (pipelines/inputs/archive_inputs.py, `archive_entries`); None: this process reads
            them.
    """
    if USERINFO.match(spec):
        raise ValueError(f'--input {redact(spec)} carries credentials in its URL; remove them')
    inputs = inputs or InputSettings()
    levels = tuple(inputs.label_levels)
    detected = forms.detect(spec, inputs.form, inputs.labels_file)
    if inputs.masks is not None and detected.form != COCO:  # other sets say it themselves
        flag = '--masks' if inputs.masks else '--no-masks'
        raise ValueError(f'{flag} is for a COCO file; --input {spec} is {detected.form}')
    if detected.form == forms.MANIFEST:
        if vertex_objects.is_detection_file(absolute(spec)):
            return vertex_objects.scan(spec, inputs)
        return manifests.scan_manifest(spec, inputs)
    if detected.form in OBJECT_FORMS and object_archives.is_archived(detected, inputs):
        return object_archives.scan(spec, detected, inputs, index_archives)
    if detected.form in OBJECT_FORMS:  # pipelines/inputs/coco.py, voc.py, yolo.py
        return importlib.import_module(f'pipelines.inputs.{detected.form}').scan(spec, inputs)
    if detected.form != forms.TREE:
        scan = InputScan(detected.base, iter(()), levels=list(levels), form=detected.form)
        scan.entries = forms.container_entries(detected, scan, inputs, index_archives)
        return scan
    labeling = forms.tree_labeling(inputs)
    follow = inputs.follow_symlinks
    if is_glob(spec):
        base = _glob_base(spec)
        return _scan_files(base, absolute(spec), spec, follow, levels, labeling)
    root = absolute(spec).rstrip('/')
    if not storage.exists(root):
        raise ValueError(f'--input does not exist: {spec}')
    return _scan_files(root, storage.join(root, '**'), spec, follow, levels, labeling)


def list_inputs(spec, inputs=None, **settings):
    """Every input of `spec` in memory, as a Listing, in id order; raises ValueError when
    nothing matches. `inputs` is the InputSettings, or `settings` its fields.

    For tests and small inputs: a build streams the same entries into its listing file
    (`write_listing_file`) without holding them.
    """
    scan = scan_inputs(spec, inputs or InputSettings(**settings))
    counts = ListingCounts()
    entries = sorted((counts.add(entry) for entry in scan.entries), key=lambda e: e.id)
    _check(spec, scan, counts)
    return Listing(
        entries,
        counts.labels,
        dict(scan.skipped),
        scan.skipped_examples,
        scan.base,
        counts.label_levels(scan.levels),
    )


def write_listing_file(scan, path, chunk_size, spec, max_image_bytes=None):
    """Streams the scan's entries into the listing file `path`; returns a ListingSummary.
    Inputs above `max_image_bytes` are not counted in its bytes (validation rejects them unread).

    Raises:
        ValueError: nothing to build (no image files matched `spec`).
    """
    return summarise(spec, scan, write_counted(scan, path, chunk_size, max_image_bytes))


def write_counted(scan, path, chunk_size, max_image_bytes=None):
    """Streams the scan's entries into the listing file `path`; returns their ListingCounts."""
    counts = ListingCounts(max_image_bytes)
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


def _glob_base(pattern):
    """The folder above the first wildcard: `data/*/*.jpg` -> `data`."""
    prefix = pattern[: GLOB_CHARS.search(pattern).start()]
    base = prefix.rsplit('/', 1)[0] if '/' in prefix else '.'
    return absolute(base).rstrip('/')


def _scan_files(root, pattern, spec, follow_symlinks, levels=(), labeling=None):
    """Lists a tree or glob under `root`; the class is the first folder below `root` (with
    label levels, the folders of every level: see `tree_labels`), or (`labeling`) a labels
    file's."""
    scan = InputScan(root, iter(()), levels=list(levels))
    scan.entries = _file_entries(root, pattern, spec, follow_symlinks, scan)
    if labeling:
        scan.entries = labeling.relabeled(scan.entries, scan)
    return scan


def _file_entries(root, pattern, spec, follow_symlinks, scan):
    """InputEntry of every candidate below `root`, ids in sorted relative path order."""
    for entry_id, (relative, path, problem, detail, size) in enumerate(
        _candidates(root, pattern, follow_symlinks, scan)
    ):
        label, levels = tree_labels(relative, scan.levels)
        # Positional: keywords cost a namedtuple a third more, per file.
        entry = InputEntry(entry_id, path, relative, label, '', '', '', levels, size)
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
        found = tree_walk.walk_sorted(root, follow_symlinks)
        if pattern != storage.join(root, '**'):  # a glob: only what it matches
            from apache_beam.io.filesystem import FileSystem

            matches = re.compile(FileSystem.translate_pattern(pattern)).match
            found = (item for item in found if item[1] in NOT_FILES or matches(item[0]))
        return _classify(root, found, scan)
    return iter(())  # a glob whose folder does not exist, or a file given as a tree


def _classify(root, found, scan):
    """Counts what is not an input in `scan.skipped`; yields the rest, in the order found."""
    prefix = root + '/'
    for path, problem, detail, size in found:
        relative = path[len(prefix) :] if path.startswith(prefix) else path
        if relative.startswith('.') or '/.' in relative:
            scan.skip('hidden', display(path))
        elif problem in NOT_FILES:
            scan.skip(problem, display(path))
        elif extension(relative) not in IMAGE_EXTENSIONS:
            scan.skip('not_image', display(path))
        else:  # a name that is not UTF-8 is kept as Python lists it (imageshards/file_names.py)
            yield relative, path, problem, detail, size


def write_listing(entries, path, chunk_size):
    """Writes entries as JSON lines of `chunk_size` entries each: one line, one work item (the
    entries of a sequential source: as many lines as they fill, one work item).

    `entries` may be any iterable; it is consumed once. The byte offset of every line (and the
    end of the file) goes to `index_path(path)` as big-endian uint64s, so that the pipeline
    moves work items as byte ranges instead of holding the lines; the top bit of a line's
    offset says that it continues the work item of the line before it.
    """
    offsets = array.array('Q', [0])
    with storage.create(path) as f:
        for chunk, continues in _chunks(entries, chunk_size):
            line = json.dumps([entry.to_json() for entry in chunk], ensure_ascii=False)
            data = line.encode('utf-8') + b'\n'
            f.write(data)
            if continues:
                offsets[-1] |= _CONTINUES
            offsets.append((offsets[-1] & ~_CONTINUES) + len(data))
    if sys.byteorder == 'little':
        offsets.byteswap()
    with storage.create(index_path(path)) as f:
        f.write(offsets.tobytes())


_CONTINUES = 1 << 63
READ_PIECE = 1 << 23  # bytes of a listing file read in one request


def _chunks(entries, size):
    """(chunk of at most `size` entries, whether it continues the previous one's work item):
    a chunk holds the entries of one sequential stream or of none (sources.stream_of), and a
    stream's chunks are one work item."""
    chunk, stream, previous = [], None, None
    for entry in entries:
        entry_stream = sources.stream_of(entry.source) if entry.source else None
        if chunk and (len(chunk) == size or entry_stream != stream):
            yield chunk, stream is not None and stream == previous
            chunk, previous = [], stream
        chunk.append(entry)
        stream = entry_stream
    if chunk:
        yield chunk, stream is not None and stream == previous


def index_path(listing_path):
    """The file holding the byte offsets of a listing file's lines."""
    return listing_path + '.index'


def work_items(listing_path):
    """(start, end) byte ranges of the work items of a listing file (a line, or the lines of
    a sequential source), from its index."""
    with storage.open_read(index_path(listing_path)) as f:
        data = f.read()
    items = []
    offsets = [value for (value,) in struct.iter_unpack('>Q', data)]
    for start, end in zip(offsets, offsets[1:]):
        if start & _CONTINUES and items:
            items[-1] = (items[-1][0], end)
        else:
            items.append((start & ~_CONTINUES, end))
    return items


def read_work_item(listing_path, item):
    """The InputEntry of one work item: a (start, end) byte range of a listing file."""
    return [entry for entries in read_work_item_lines(listing_path, item) for entry in entries]


def read_work_item_lines(listing_path, item):
    """The InputEntry of each line of a work item, a line at a time."""
    start, end = item
    pending = b''
    while start < end:  # in requests of READ_PIECE bytes: a stream's item may be long
        piece = storage.read_range(listing_path, start, min(end, start + READ_PIECE))
        if not piece:
            break
        start += len(piece)
        *lines, pending = (pending + piece).split(b'\n')
        for line in lines:
            yield parse_listing_line(line + b'\n')
    if pending:
        yield parse_listing_line(pending)


def parse_listing_line(line):
    return [InputEntry.from_json(fields) for fields in json.loads(line)]


def copy_listing(source, destination):
    """Copies a listing file and its index (local or gs://, either way)."""
    storage.copy_many([(source, destination), (index_path(source), index_path(destination))])
