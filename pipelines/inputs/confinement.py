"""Where a manifest row's path may lead: below the manifest's folder or an `--allow-root`, as a
local path or a URI Beam can read, never with credentials, `..` escapes or NUL bytes, and
(unless `--follow-symlinks`) not through a local symlink leading elsewhere. A refused path
becomes a rejection with a reason (`Refused`), its credentials redacted. A path that no file
name can be (a lone surrogate that is no undecodable byte: imageshards/file_names.py) is
`invalid_file_name`.
"""

import functools
import os
import posixpath
import stat

from imageshards import file_names
from imageshards import storage
from imageshards.file_names import display
from imageshards.storage import is_uri
from pipelines.inputs.entries import USERINFO
from pipelines.inputs.entries import inside
from pipelines.inputs.entries import redact


class Refused(Exception):
    """A manifest path that may not be read; `path` is safe to show (credentials redacted),
    `key` the key it would have had, where it is known (an archive's missing member)."""

    def __init__(self, reason, path, detail, key=None):
        super().__init__(f'{reason}: {detail}')
        self.reason, self.path, self.detail, self.key = reason, path, detail, key


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


class Confinement:
    """Decides where a manifest row's path leads, and whether a build may read it there."""

    def __init__(self, folder, roots, follow_symlinks):
        self._folder = folder
        self._roots = [folder, *roots]
        self._follow_symlinks = follow_symlinks
        self._real_roots = [os.path.realpath(root) for root in self._roots if not is_uri(root)]
        self._real_folders = {}  # folder -> its real path: one lookup per folder, not per row

    def located(self, raw):
        """(path, key) a row's path names, unchecked: what `resolve` returns if it may be read."""
        if is_uri(raw):
            return raw, raw
        if posixpath.isabs(raw):
            path = posixpath.normpath(raw)
            return path, path
        key = posixpath.normpath(raw)
        return _normalize(storage.join(self._folder, key)), key

    def resolve(self, raw):
        """Returns (path, key, size) of a row's path (size: of a local file whose symlinks are
        checked, else -1: unknown); raises Refused where it may not be read."""
        if USERINFO.match(raw):
            raise Refused(
                'credentials_in_path',
                redact(raw),
                'the URL carries credentials; they were not used',
            )
        if is_uri(raw) and not _readable_scheme(raw):
            scheme = raw.split('://', 1)[0]
            raise Refused('unsupported_scheme', redact(raw), f'Beam cannot read {scheme}://')
        path, key = self.located(raw)
        if '\x00' in raw:
            raise Refused('nul_in_path', path.replace('\x00', '\\x00'), 'the path has a NUL byte')
        _check_representable(path)
        if is_uri(raw) and set(raw.split('://', 1)[1].split('/')) & {'.', '..'}:
            raise Refused('path_traversal', raw, 'the URL has . or .. segments')
        if key == '..' or key.startswith('../'):
            if not any(inside(path, root) for root in self._roots[1:]):
                raise Refused(
                    'path_traversal',
                    path,
                    f'{raw!r} leads out of the manifest folder {self._folder} '
                    f'(add --allow-root to read from elsewhere)',
                )
            key = path  # outside the manifest's folder: the key is the whole path
        if not any(inside(path, root) for root in self._roots):
            raise Refused(
                'outside_allowed_roots',
                path,
                f'not below the manifest folder {self._folder} or an --allow-root',
            )
        size = -1
        if not is_uri(path) and not self._follow_symlinks:
            size = self._check_symlinks(path)
        return path, key, size

    def _check_symlinks(self, path):
        """Refuses a local path whose real location is outside every allowed root; returns the
        size of the regular file it leads to (-1: none, or missing)."""
        folder, name = posixpath.split(path)
        if folder not in self._real_folders:
            self._real_folders[folder] = os.path.realpath(folder)
        real = posixpath.join(self._real_folders[folder], name)
        try:
            found = os.lstat(real)
            if stat.S_ISLNK(found.st_mode):
                real = os.path.realpath(real)
                found = os.stat(real)
        except OSError:
            return -1  # a missing file is reported by validation, with the error it gives
        if not any(inside(real, root) for root in self._real_roots):
            raise Refused(
                'symlink_outside_root',
                path,
                f'leads to {display(real)}, outside the manifest folder and every '
                f'--allow-root; pass --follow-symlinks to read it',
            )
        return found.st_size if stat.S_ISREG(found.st_mode) else -1


def _check_representable(path):
    """Refuses a path that is no file name: a local one whose str has a lone surrogate that is
    no undecodable byte, an object's name that is not Unicode."""
    try:
        if is_uri(path) and not file_names.is_utf8(path):
            raise file_names.UnrepresentableName(f'{display(path)}: an object name is Unicode')
        file_names.to_bytes(path)
    except file_names.UnrepresentableName as e:
        raise Refused('invalid_file_name', display(path), f'{e}; rename it') from None
