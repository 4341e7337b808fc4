"""Listing a CSV or JSONL manifest (`path,label[,split]`), in row order, as untrusted input.

Columns (CSV) or keys (JSONL) named `label/<level>` carry label levels beside `label`; their
values may be empty here (the pipeline rejects or keeps an image missing one, see
`--allow-missing-levels`).

Relative paths resolve against the manifest's folder. A row may only name a file below that
folder or below a root given with `--allow-root`: `..` escapes, absolute paths and URIs
elsewhere, URL schemes Beam cannot read, NUL bytes and URLs carrying credentials are rejected
with a reason (credentials redacted), as are local symlinks leading outside those roots unless
`--follow-symlinks`. Rows that cannot be read (malformed, empty label, duplicate) are rejected
with a reason too, so every row is accounted for.
"""

import csv
import functools
import io
import json
import os
import posixpath
import stat

from imageshards import features
from imageshards import layout
from imageshards import storage
from imageshards.storage import absolute
from imageshards.storage import is_uri
from pipelines.inputs.entries import MANIFEST_COLUMNS
from pipelines.inputs.entries import USERINFO
from pipelines.inputs.entries import InputEntry
from pipelines.inputs.entries import InputScan
from pipelines.inputs.entries import inside
from pipelines.inputs.entries import is_utf8
from pipelines.inputs.entries import printable
from pipelines.inputs.entries import redact

LEVEL_COLUMN = 'label/'  # prefix of a label level's column: label/<level>


def scan_manifest(spec, roots, follow_symlinks, levels=()):
    """Starts listing a .csv or .jsonl manifest; `roots` are the normalized --allow-root folders.

    Returns an InputScan whose entries are read from the manifest row by row.

    Args:
        levels: the label levels the manifest must have (--label-levels); by default those of
            its `label/<level>` columns (CSV) or keys (JSONL, in order of first appearance).
    """
    read_rows = _read_csv_rows if spec.lower().endswith('.csv') else _read_jsonl_rows
    manifest = absolute(spec)
    if not storage.exists(manifest):
        raise ValueError(f'--input manifest does not exist: {manifest}')
    folder = manifest.rsplit('/', 1)[0]
    confinement = _Confinement(folder, roots, follow_symlinks)
    scan = InputScan(folder, iter(()), levels=list(levels))
    columns = _LevelColumns(levels, scan.levels)
    scan.entries = _manifest_entries(manifest, read_rows, confinement, columns)
    return scan


class _LevelColumns:
    """The label levels of a manifest: those declared, or those its columns or keys name."""

    def __init__(self, declared, levels):
        self._declared = tuple(declared)
        self.levels = levels  # the scan's list, which undeclared JSONL levels are added to

    def check_header(self, header, manifest):
        """Raises ValueError for unusable, repeated, missing or undeclared level columns."""
        found = [column[len(LEVEL_COLUMN) :] for column in header if self.is_level(column)]
        for level in found:
            features.check_level_name(level, f'{manifest}: column {LEVEL_COLUMN}{level}')
        repeated = sorted({column for column in header if header.count(column) > 1})
        if repeated:
            raise ValueError(f'{manifest}: columns {repeated} appear more than once')
        if self._declared:
            missing = [level for level in self._declared if level not in found]
            extra = [level for level in found if level not in self._declared]
            if missing or extra:
                raise ValueError(
                    f'{manifest}: --label-levels {",".join(self._declared)} does not match its '
                    f'columns: missing {[LEVEL_COLUMN + m for m in missing]}, not declared '
                    f'{[LEVEL_COLUMN + e for e in extra]}'
                )
        else:
            self.levels.extend(found)

    @staticmethod
    def is_level(key):
        return key.startswith(LEVEL_COLUMN)

    def key_problem(self, key):
        """Why a JSONL key `label/<level>` cannot be used ('' if it can); learns new levels."""
        level = key[len(LEVEL_COLUMN) :]
        if not features.LEVEL_NAME.match(level):
            return f'{key!r} does not name a usable label level'
        if level not in self.levels:
            if self._declared:
                return f'{key!r} is not one of --label-levels {",".join(self._declared)}'
            self.levels.append(level)
        return ''

    def values(self, row):
        """{level: value} of a row ('' where it has none)."""
        return {level: (row.get(LEVEL_COLUMN + level) or '').strip() for level in self.levels}


def _read_csv_rows(f, manifest, columns):
    text = io.TextIOWrapper(f, encoding='utf-8-sig', errors='surrogateescape', newline='')
    reader = csv.DictReader(text)
    header = reader.fieldnames or []
    _check_columns(header, manifest)
    columns.check_header(header, manifest)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:  # e.g. a field over the csv module's size limit
            yield None, f'unreadable CSV row: {e}', reader.line_num
            continue
        # The file's line where the row ends: its line, but for quoted line breaks.
        line = reader.line_num
        if None in row:
            yield None, f'row has more fields than the header ({len(header)})', line
        elif None in row.values():
            yield None, f'row has fewer fields than the header ({len(header)})', line
        elif not all(is_utf8(value) for value in row.values()):
            yield None, 'row is not valid UTF-8', line
        else:
            yield row, '', line


def _read_jsonl_rows(f, manifest, columns):
    del manifest
    for number, raw in enumerate(f, start=1):
        if raw.strip():  # blank lines are no rows
            yield *_jsonl_row(raw, columns), number


def _jsonl_row(raw, columns):
    """(row, '') of a usable JSONL line, or (None, what is wrong with it)."""
    try:
        line = raw.decode('utf-8-sig')
    except UnicodeDecodeError as e:
        return None, f'line is not valid UTF-8: {e}'
    try:
        row = json.loads(line)
    except (ValueError, RecursionError) as e:
        return None, f'not valid JSON: {type(e).__name__}: {e}'
    if not isinstance(row, dict):
        return None, f'expected a JSON object, got {type(row).__name__}'
    unknown = sorted(
        key for key in row if key not in MANIFEST_COLUMNS and not columns.is_level(key)
    )
    if unknown:
        return None, f'unknown keys {unknown}; expected {list(MANIFEST_COLUMNS)}, label/<level>'
    nested = sorted(key for key, value in row.items() if isinstance(value, (dict, list)))
    if nested:
        return None, f'{nested} must be strings, not JSON objects or arrays'
    level_problems = [columns.key_problem(key) for key in row if columns.is_level(key)]
    if any(level_problems):
        return None, '; '.join(problem for problem in level_problems if problem)
    return {key: '' if value is None else str(value) for key, value in row.items()}, ''


def _check_columns(header, manifest):
    missing = [column for column in ('path', 'label') if column not in header]
    unknown = [
        column
        for column in header
        if column not in MANIFEST_COLUMNS and not _LevelColumns.is_level(column)
    ]
    if missing or unknown:
        raise ValueError(
            f'{manifest}: header must be path,label[,split][,label/<level>...]; missing '
            f'{missing}, unknown {unknown}'
        )


def _manifest_entries(manifest, read_rows, confinement, columns):
    """The manifest's rows as InputEntry, in row order.

    Finding duplicate rows keeps each row's path until the end (about 0.1 KB per row).
    """
    first_line_of = {}
    with storage.open_read(manifest, guess_compression=True) as f:
        for entry_id, (row, problem, line) in enumerate(read_rows(f, manifest, columns)):
            entry = _manifest_entry(
                (entry_id, line), row, problem, manifest, confinement, first_line_of
            )
            yield entry._replace(levels=columns.values(row)) if row and columns.levels else entry


def _manifest_entry(position, row, problem, manifest, confinement, first_line_of):
    """One manifest row as an InputEntry; rows that cannot be used carry a reason.

    Args:
        position: (the row's id: rows count from 0, after a CSV's header; the file's line
            number of the row, from 1, which messages name).
    """
    entry_id, line = position
    row_ref = f'{manifest}#line={line}'
    if row is None:
        return InputEntry(entry_id, row_ref, row_ref, '', reject='malformed_row', detail=problem)
    raw_path = (row.get('path') or '').strip()
    label = (row.get('label') or '').strip()
    split = (row.get('split') or '').strip()
    if not raw_path:
        return InputEntry(
            entry_id, row_ref, row_ref, label, reject='empty_path', detail='the row has no path'
        )
    try:
        path, key = confinement.resolve(raw_path)
    except _Refused as refused:
        return InputEntry(
            entry_id, refused.path, refused.path, label, split, refused.reason, refused.detail
        )
    entry = InputEntry(entry_id, path, key, label, split)
    if not label:
        return entry._replace(reject='empty_label', detail=f'line {line} has an empty label')
    if split and not layout.SPLIT_NAME.match(split):
        return entry._replace(
            reject='invalid_split', detail=f'split {split!r} is not a usable folder name'
        )
    if path in first_line_of:
        return entry._replace(
            reject='duplicate_row', detail=f'same path as line {first_line_of[path]}'
        )
    first_line_of[path] = line
    return entry


class _Refused(Exception):
    """A manifest path that may not be read; `path` is safe to show (credentials redacted)."""

    def __init__(self, reason, path, detail):
        super().__init__(f'{reason}: {detail}')
        self.reason, self.path, self.detail = reason, path, detail


def normalize_root(root):
    """An --allow-root as an absolute local path or a readable URI, without a trailing '/'."""
    if USERINFO.match(root):
        raise ValueError(f'--allow-root {redact(root)} carries credentials in its URL')
    if not is_uri(root):
        return os.path.abspath(root).rstrip('/') or '/'
    if not _readable_scheme(root):
        raise ValueError(f'--allow-root {root}: Beam has no filesystem for this URL scheme')
    return root.rstrip('/')


def _readable_scheme(uri):
    return _has_filesystem(uri.split('://', 1)[0].lower())


@functools.cache
def _has_filesystem(scheme):
    from apache_beam.io.filesystems import FileSystems  # pylint: disable=import-outside-toplevel

    try:
        FileSystems.get_filesystem(f'{scheme}://x/y')
        return True
    except Exception:  # pylint: disable=broad-except  # Beam raises ValueError or BeamIOError
        return False


def _normalize(path):
    """Resolves '.' and '..' of a local path or a URI, lexically."""
    if not is_uri(path):
        return posixpath.normpath(path)
    scheme, rest = path.split('://', 1)
    return f'{scheme}://{posixpath.normpath(rest)}'


class _Confinement:
    """Decides where a manifest row's path leads, and whether a build may read it there."""

    def __init__(self, folder, roots, follow_symlinks):
        self._folder = folder
        self._roots = [folder, *roots]
        self._follow_symlinks = follow_symlinks
        self._real_roots = [os.path.realpath(root) for root in self._roots if not is_uri(root)]
        self._real_folders = {}  # folder -> its real path: one lookup per folder, not per row

    def resolve(self, raw):
        """Returns (path, key) of a row's path; raises _Refused where it may not be read."""
        if USERINFO.match(raw):
            raise _Refused(
                'credentials_in_path',
                redact(raw),
                'the URL carries credentials; they were not used',
            )
        if is_uri(raw):
            if not _readable_scheme(raw):
                scheme = raw.split('://', 1)[0]
                raise _Refused('unsupported_scheme', redact(raw), f'Beam cannot read {scheme}://')
            path = key = raw
        elif posixpath.isabs(raw):
            path = key = posixpath.normpath(raw)
        else:
            key = posixpath.normpath(raw)
            path = _normalize(storage.join(self._folder, key))
        if '\x00' in raw:
            raise _Refused('nul_in_path', path.replace('\x00', '\\x00'), 'the path has a NUL byte')
        if is_uri(raw) and set(raw.split('://', 1)[1].split('/')) & {'.', '..'}:
            raise _Refused('path_traversal', raw, 'the URL has . or .. segments')
        if key == '..' or key.startswith('../'):
            if not any(inside(path, root) for root in self._roots[1:]):
                raise _Refused(
                    'path_traversal',
                    path,
                    f'{raw!r} leads out of the manifest folder {self._folder} '
                    f'(add --allow-root to read from elsewhere)',
                )
            key = path  # outside the manifest's folder: the key is the whole path
        if not any(inside(path, root) for root in self._roots):
            raise _Refused(
                'outside_allowed_roots',
                path,
                f'not below the manifest folder {self._folder} or an --allow-root',
            )
        if not is_uri(path) and not self._follow_symlinks:
            self._check_symlinks(path)
        return path, key

    def _check_symlinks(self, path):
        """Refuses a local path whose real location is outside every allowed root."""
        folder, name = posixpath.split(path)
        if folder not in self._real_folders:
            self._real_folders[folder] = os.path.realpath(folder)
        real = posixpath.join(self._real_folders[folder], name)
        try:
            if stat.S_ISLNK(os.lstat(real).st_mode):
                real = os.path.realpath(real)
        except OSError:
            return  # a missing file is reported by validation, with the error it gives
        if not any(inside(real, root) for root in self._real_roots):
            raise _Refused(
                'symlink_outside_root',
                path,
                f'leads to {printable(real)}, outside the manifest folder and every '
                f'--allow-root; pass --follow-symlinks to read it',
            )
