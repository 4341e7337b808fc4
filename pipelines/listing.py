"""Listing the inputs of a build: a directory tree, a glob, or a CSV/JSONL manifest.

Listing runs once, in the launching process, through Beam's `FileSystems` (local paths and
`gs://` alike). It fixes every input's `image/id` (its position in listing order: a tree or glob
sorted by relative path, a manifest in row order) and its stable key (the path relative to the
input root), which seeds the shuffle. Problems found here (an empty label, a duplicate row) are
carried to the pipeline as rejections, so every input is accounted for in one place.
"""

import collections
import csv
import dataclasses
import io
import json
import os
import posixpath
import re
import typing

from apache_beam.io.filesystems import FileSystems

from pipelines.options import SPLIT_NAME

IMAGE_EXTENSIONS = frozenset(
    ['.jpg', '.jpeg', '.jpe', '.jfif', '.png', '.gif', '.bmp', '.webp', '.tif', '.tiff']
)
MANIFEST_COLUMNS = ('path', 'label', 'split')
_GLOB_CHARS = re.compile(r'[*?\[]')
_URI_SCHEME = re.compile(r'^[a-zA-Z][a-zA-Z0-9+.-]*://')


class InputEntry(typing.NamedTuple):
    """One input of the build. `reject` holds a reason code when listing already rejected it."""

    id: int
    path: str  # what workers read: an absolute local path or a URI
    key: str  # stable key: the path relative to the input root, seeds the shuffle
    label: str
    split: str = ''  # set only by a manifest's split column
    reject: str = ''
    detail: str = ''


@dataclasses.dataclass
class Listing:
    entries: list  # [InputEntry], in id order
    labels: list  # sorted names of the labels of the entries not rejected here
    skipped: dict  # reason -> number of files that are not inputs (hidden, not an image)
    skipped_examples: list  # a few skipped paths, for the log
    base: (
        str  # what relative keys are relative to: the root, the glob's base, the manifest's folder
    )

    @property
    def num_skipped(self):
        return sum(self.skipped.values())

    def summary(self):
        """What the pipeline needs to know of the listing, without holding every entry."""
        groups = collections.Counter((e.split, e.label) for e in self.entries if not e.reject)
        return ListingSummary(
            self.labels,
            len(self.entries),
            dict(self.skipped),
            self.base,
            max(groups.values(), default=0),
        )


class ListingSummary(typing.NamedTuple):
    labels: list
    num_inputs: int
    skipped: dict
    base: str
    largest_group: int  # images of the most common (manifest split, label)


def source_path(base, key):
    """The path or URI of the input with this stable key (see `InputEntry.key`)."""
    if is_uri(key) or posixpath.isabs(key):
        return key
    return FileSystems.join(base, key)


def is_manifest(spec):
    return spec.lower().endswith(('.csv', '.jsonl'))


def list_inputs(spec):
    """Lists a tree, glob, .csv or .jsonl manifest; raises ValueError when nothing matches."""
    if spec.lower().endswith('.csv'):
        listing = _list_manifest(spec, _read_csv_rows)
    elif spec.lower().endswith('.jsonl'):
        listing = _list_manifest(spec, _read_jsonl_rows)
    elif _GLOB_CHARS.search(spec):
        listing = _list_files(_glob_base(spec), spec, spec)
    else:
        root = _absolute(spec).rstrip('/')
        if not FileSystems.exists(root):
            raise ValueError(f'--input does not exist: {spec}')
        listing = _list_files(root, FileSystems.join(root, '**'), spec)
    if not listing.entries:
        raise ValueError(
            f'--input matched no image files: {spec} '
            f'(skipped {listing.num_skipped}: {dict(listing.skipped)})'
        )
    return listing


def is_uri(path):
    return bool(_URI_SCHEME.match(path))


def _absolute(path):
    return path if is_uri(path) else os.path.abspath(path)


def _glob_base(pattern):
    """The folder above the first wildcard: `data/*/*.jpg` -> `data`."""
    prefix = pattern[: _GLOB_CHARS.search(pattern).start()]
    base = prefix.rsplit('/', 1)[0] if '/' in prefix else '.'
    return _absolute(base).rstrip('/')


def _list_files(root, pattern, spec):
    """Lists a tree or glob under `root`; the class is the first folder below `root`."""
    matched = []
    for result in FileSystems.match([_absolute(pattern)]):
        matched.extend(metadata.path for metadata in result.metadata_list)
    skipped, skipped_examples, candidates = {}, [], []
    for path in matched:
        relative = path[len(root) + 1 :] if path.startswith(root + '/') else path
        parts = relative.split('/')
        if any(part.startswith('.') for part in parts):
            reason = 'hidden'
        elif posixpath.splitext(relative)[1].lower() not in IMAGE_EXTENSIONS:
            reason = 'not_image'
        else:
            candidates.append((relative, path))
            continue
        skipped[reason] = skipped.get(reason, 0) + 1
        if len(skipped_examples) < 20:
            skipped_examples.append(path)
    candidates.sort()
    entries = []
    for relative, path in candidates:
        label = relative.split('/', 1)[0] if '/' in relative else ''
        entry = InputEntry(id=len(entries), path=path, key=relative, label=label)
        if not label:
            entry = entry._replace(
                reject='no_label', detail=f'image is directly under {spec}, not in a class folder'
            )
        entries.append(entry)
    return Listing(entries, _labels(entries), skipped, skipped_examples, root)


def _labels(entries):
    return sorted({entry.label for entry in entries if not entry.reject})


def _read_csv_rows(f, manifest):
    reader = csv.DictReader(io.TextIOWrapper(f, encoding='utf-8-sig', newline=''))
    header = reader.fieldnames or []
    _check_columns(header, manifest)
    for row in reader:
        if None in row:
            yield None, f'row has more fields than the header ({len(header)})'
        elif None in row.values():
            yield None, f'row has fewer fields than the header ({len(header)})'
        else:
            yield row, ''


def _read_jsonl_rows(f, manifest):
    del manifest
    for line in io.TextIOWrapper(f, encoding='utf-8-sig'):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            yield None, f'not valid JSON: {e}'
            continue
        if not isinstance(row, dict):
            yield None, f'expected a JSON object, got {type(row).__name__}'
            continue
        unknown = sorted(set(row) - set(MANIFEST_COLUMNS))
        if unknown:
            yield None, f'unknown keys {unknown}; expected {list(MANIFEST_COLUMNS)}'
            continue
        yield {key: '' if value is None else str(value) for key, value in row.items()}, ''


def _check_columns(header, manifest):
    missing = [column for column in ('path', 'label') if column not in header]
    unknown = [column for column in header if column not in MANIFEST_COLUMNS]
    if missing or unknown:
        raise ValueError(
            f'{manifest}: header must be path,label[,split]; missing {missing}, unknown {unknown}'
        )


def _list_manifest(manifest, read_rows):
    """Lists a manifest in row order; relative paths resolve against the manifest's folder."""
    manifest = _absolute(manifest)
    if not FileSystems.exists(manifest):
        raise ValueError(f'--input manifest does not exist: {manifest}')
    folder = manifest.rsplit('/', 1)[0]
    entries, first_row_of = [], {}
    with FileSystems.open(manifest) as f:
        for row, problem in read_rows(f, manifest):
            entries.append(
                _manifest_entry(len(entries), row, problem, manifest, folder, first_row_of)
            )
    return Listing(entries, _labels(entries), {}, [], folder)


def _manifest_entry(entry_id, row, problem, manifest, folder, first_row_of):
    """One manifest row as an InputEntry; rows that cannot be used carry a reason."""
    row_ref = f'{manifest}#row={entry_id}'  # rows count from 0, after the header
    if row is None:
        return InputEntry(entry_id, row_ref, row_ref, '', reject='malformed_row', detail=problem)
    raw_path = (row.get('path') or '').strip()
    label = (row.get('label') or '').strip()
    split = (row.get('split') or '').strip()
    if not raw_path:
        return InputEntry(
            entry_id, row_ref, row_ref, label, reject='empty_path', detail='the row has no path'
        )
    if is_uri(raw_path) or posixpath.isabs(raw_path):
        key, path = raw_path, raw_path
    else:
        key = posixpath.normpath(raw_path)
        path = FileSystems.join(folder, key)
    entry = InputEntry(entry_id, path, key, label, split)
    if not label:
        return entry._replace(reject='empty_label', detail=f'row {entry_id} has an empty label')
    if split and not SPLIT_NAME.match(split):
        return entry._replace(
            reject='invalid_split', detail=f'split {split!r} is not a usable folder name'
        )
    if path in first_row_of:
        return entry._replace(
            reject='duplicate_row', detail=f'same path as row {first_row_of[path]}'
        )
    first_row_of[path] = entry_id
    return entry


def write_listing(entries, path, chunk_size):
    """Writes entries as JSON lines of `chunk_size` entries each: one line, one work item."""
    with FileSystems.create(path) as f:
        for start in range(0, len(entries), chunk_size):
            chunk = [list(entry) for entry in entries[start : start + chunk_size]]
            f.write(json.dumps(chunk, ensure_ascii=False).encode('utf-8') + b'\n')


def parse_listing_line(line):
    return [InputEntry(*fields) for fields in json.loads(line)]
