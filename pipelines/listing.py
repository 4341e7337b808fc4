"""Listing the inputs of a build: a directory tree, a glob, or a CSV/JSONL manifest.

Listing runs once, in the launching process, through Beam's `FileSystems` (local paths and
`gs://` alike). It fixes every input's `image/id` (its position in listing order: a tree or glob
sorted by relative path, a manifest in row order) and its stable key (the path relative to the
input root), which seeds the shuffle. Problems found here (an empty label, a duplicate row) are
carried to the pipeline as rejections, so every input is accounted for in one place.

Inputs are untrusted (docs/reliability.md):
* A manifest may only name files below its own folder or below a root given with
  `--allow-root`: `..` escapes, absolute paths and URIs elsewhere, URL schemes Beam cannot read,
  NUL bytes and URLs carrying credentials are rejected with a reason (credentials redacted).
* On local disks, a symlinked file that leads outside the input root (or the allowed roots) is
  rejected, and a symlinked directory is not descended into, unless `--follow-symlinks`.
  Symlinks exist only there, so local trees are walked here rather than by Beam, whose local
  listing silently drops symlinked directories and dangling links.
"""

import collections
import csv
import dataclasses
import functools
import io
import json
import logging
import os
import posixpath
import re
import stat
import typing

from apache_beam.io.filesystem import FileSystem
from apache_beam.io.filesystems import FileSystems

from pipelines.options import SPLIT_NAME

_LOG = logging.getLogger(__name__)

IMAGE_EXTENSIONS = frozenset(
    ['.jpg', '.jpeg', '.jpe', '.jfif', '.png', '.gif', '.bmp', '.webp', '.tif', '.tiff']
)
MANIFEST_COLUMNS = ('path', 'label', 'split')
_GLOB_CHARS = re.compile(r'[*?\[]')
_URI_SCHEME = re.compile(r'^[a-zA-Z][a-zA-Z0-9+.-]*://')
# scheme://user:password@host/...: everything up to the last '@' before the path.
_USERINFO = re.compile(r'^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#]*@')
_WEB_SCHEMES = ('http://', 'https://', 'ftp://')


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


def list_inputs(spec, allow_roots=(), follow_symlinks=False):
    """Lists a tree, glob, .csv or .jsonl manifest; raises ValueError when nothing matches.

    Args:
        spec: the --input value.
        allow_roots: folders (local or URIs) that manifest rows may name besides the manifest's.
        follow_symlinks: accept symlinks wherever they lead, and descend symlinked folders.
    """
    if _USERINFO.match(spec):
        raise ValueError(f'--input {redact(spec)} carries credentials in its URL; remove them')
    roots = [_normalize_root(root) for root in allow_roots]
    if spec.lower().endswith('.csv'):
        listing = _list_manifest(spec, _read_csv_rows, roots, follow_symlinks)
    elif spec.lower().endswith('.jsonl'):
        listing = _list_manifest(spec, _read_jsonl_rows, roots, follow_symlinks)
    elif _GLOB_CHARS.search(spec):
        listing = _list_files(_glob_base(spec), _absolute(spec), spec, follow_symlinks)
    else:
        root = _absolute(spec).rstrip('/')
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


def is_uri(path):
    return bool(_URI_SCHEME.match(path))


def redact(path):
    """`path` without credentials: URL user info, and the query of web URLs (signed URLs)."""
    path = _USERINFO.sub(r'\1***@', path)
    if path.lower().startswith(_WEB_SCHEMES) and '?' in path:
        path = path.split('?', 1)[0] + '?***'
    return path


def _absolute(path):
    return path if is_uri(path) else os.path.abspath(path)


def _glob_base(pattern):
    """The folder above the first wildcard: `data/*/*.jpg` -> `data`."""
    prefix = pattern[: _GLOB_CHARS.search(pattern).start()]
    base = prefix.rsplit('/', 1)[0] if '/' in prefix else '.'
    return _absolute(base).rstrip('/')


def _inside(path, root):
    return path == root or path.startswith(root.rstrip('/') + '/')


def _printable(path):
    """A path that encodes as UTF-8: undecodable bytes of a local name shown as \\xNN."""
    return path if _is_utf8(path) else os.fsencode(path).decode('utf-8', 'backslashreplace')


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
            if not problem and _printable(path) != path:
                problem, detail = 'invalid_file_name', 'the name is not valid UTF-8; rename it'
            candidates.append((_printable(relative), _printable(path), problem, detail))
            continue
        skipped[reason] += 1
        if len(skipped_examples) < 20:
            skipped_examples.append(_printable(path))
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
    return Listing(entries, _labels(entries), dict(skipped), skipped_examples, root)


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
        return 'broken_symlink', f'links to {_printable(target)}: {type(e).__name__}'
    if stat.S_ISDIR(mode):
        return 'symlinked_dir', ''
    if not follow_symlinks and not _inside(target, real_root):
        return 'symlink_outside_root', (
            f'links to {_printable(target)}, outside {real_root}; pass --follow-symlinks to read it'
        )
    if not stat.S_ISREG(mode):
        return 'not_a_regular_file', f'links to {_printable(target)}, not a regular file'
    return '', ''


def _labels(entries):
    return sorted({entry.label for entry in entries if not entry.reject})


def _read_csv_rows(f, manifest):
    text = io.TextIOWrapper(f, encoding='utf-8-sig', errors='surrogateescape', newline='')
    reader = csv.DictReader(text)
    header = reader.fieldnames or []
    _check_columns(header, manifest)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:  # e.g. a field over the csv module's size limit
            yield None, f'unreadable CSV row: {e}'
            continue
        if None in row:
            yield None, f'row has more fields than the header ({len(header)})'
        elif None in row.values():
            yield None, f'row has fewer fields than the header ({len(header)})'
        elif not all(_is_utf8(value) for value in row.values()):
            yield None, 'row is not valid UTF-8'
        else:
            yield row, ''


def _read_jsonl_rows(f, manifest):
    del manifest
    for raw in f:
        try:
            line = raw.decode('utf-8-sig')
        except UnicodeDecodeError as e:
            yield None, f'line is not valid UTF-8: {e}'
            continue
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (ValueError, RecursionError) as e:
            yield None, f'not valid JSON: {type(e).__name__}: {e}'
            continue
        if not isinstance(row, dict):
            yield None, f'expected a JSON object, got {type(row).__name__}'
            continue
        unknown = sorted(set(row) - set(MANIFEST_COLUMNS))
        if unknown:
            yield None, f'unknown keys {unknown}; expected {list(MANIFEST_COLUMNS)}'
            continue
        nested = sorted(key for key, value in row.items() if isinstance(value, (dict, list)))
        if nested:
            yield None, f'{nested} must be strings, not JSON objects or arrays'
            continue
        yield {key: '' if value is None else str(value) for key, value in row.items()}, ''


def _is_utf8(text):
    try:
        text.encode('utf-8')
        return True
    except UnicodeEncodeError:
        return False


def _check_columns(header, manifest):
    missing = [column for column in ('path', 'label') if column not in header]
    unknown = [column for column in header if column not in MANIFEST_COLUMNS]
    if missing or unknown:
        raise ValueError(
            f'{manifest}: header must be path,label[,split]; missing {missing}, unknown {unknown}'
        )


def _list_manifest(manifest, read_rows, roots, follow_symlinks):
    """Lists a manifest in row order; relative paths resolve against the manifest's folder."""
    manifest = _absolute(manifest)
    if not FileSystems.exists(manifest):
        raise ValueError(f'--input manifest does not exist: {manifest}')
    folder = manifest.rsplit('/', 1)[0]
    confinement = _Confinement(folder, roots, follow_symlinks)
    entries, first_row_of = [], {}
    with FileSystems.open(manifest) as f:
        for row, problem in read_rows(f, manifest):
            entries.append(
                _manifest_entry(len(entries), row, problem, manifest, confinement, first_row_of)
            )
    return Listing(entries, _labels(entries), {}, [], folder)


def _manifest_entry(entry_id, row, problem, manifest, confinement, first_row_of):
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
    try:
        path, key = confinement.resolve(raw_path)
    except _Refused as refused:
        return InputEntry(
            entry_id, refused.path, refused.path, label, split, refused.reason, refused.detail
        )
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


class _Refused(Exception):
    """A manifest path that may not be read; `path` is safe to show (credentials redacted)."""

    def __init__(self, reason, path, detail):
        super().__init__(f'{reason}: {detail}')
        self.reason, self.path, self.detail = reason, path, detail


def _normalize_root(root):
    """An --allow-root as an absolute local path or a readable URI, without a trailing '/'."""
    if _USERINFO.match(root):
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
        if _USERINFO.match(raw):
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
            path = _normalize(FileSystems.join(self._folder, key))
        if '\x00' in raw:
            raise _Refused('nul_in_path', path.replace('\x00', '\\x00'), 'the path has a NUL byte')
        if is_uri(raw) and set(raw.split('://', 1)[1].split('/')) & {'.', '..'}:
            raise _Refused('path_traversal', raw, 'the URL has . or .. segments')
        if key == '..' or key.startswith('../'):
            if not any(_inside(path, root) for root in self._roots[1:]):
                raise _Refused(
                    'path_traversal',
                    path,
                    f'{raw!r} leads out of the manifest folder {self._folder} '
                    f'(add --allow-root to read from elsewhere)',
                )
            key = path  # outside the manifest's folder: the key is the whole path
        if not any(_inside(path, root) for root in self._roots):
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
        if not any(_inside(real, root) for root in self._real_roots):
            raise _Refused(
                'symlink_outside_root',
                path,
                f'leads to {_printable(real)}, outside the manifest folder and every '
                f'--allow-root; pass --follow-symlinks to read it',
            )


def write_listing(entries, path, chunk_size):
    """Writes entries as JSON lines of `chunk_size` entries each: one line, one work item."""
    with FileSystems.create(path) as f:
        for start in range(0, len(entries), chunk_size):
            chunk = [list(entry) for entry in entries[start : start + chunk_size]]
            f.write(json.dumps(chunk, ensure_ascii=False).encode('utf-8') + b'\n')


def parse_listing_line(line):
    return [InputEntry(*fields) for fields in json.loads(line)]
