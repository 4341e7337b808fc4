"""A full disk, a read-only or missing output, a permission error: one line each.

`describe` turns an OSError met writing a path into the line a person reads, e.g.
`no space left on device writing OUT/train/train-00003-of-00008.tfrecord: 0.1 MB free, this
build needs about 340 MB`; `find_os_error` finds such an error behind what a runner raised (the
exception's chain, or the text of a worker's traceback, which is all the runner passes on);
`check_free_space` refuses a local build before it starts where its inputs cannot fit.
A build that meets one exits with status 1 (EXIT_STATUS) after that line alone.
"""

import errno
import os
import re
import resource
import shutil

from imageshards import file_names
from imageshards import storage
from imageshards.kinds import features

EXIT_STATUS = 1
_SPACE = (errno.ENOSPC, errno.EDQUOT)
HANDLED = (
    *_SPACE,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.ENOENT,
    errno.ENOTDIR,
    errno.EFBIG,
)
# `OSError: [Errno 28] No space left on device: '/out/x'`, as a traceback's last line has it.
_IN_TEXT = re.compile(r"\[Errno (\d+)\] ([^:\n\[\]']+)(?::\s*'([^'\n]+)')?")
# What a build writes beside each input's bytes: a record's other features and framing, its
# entry in the listing and in the metadata blocks (pipelines/core/blocks.py), with room to spare.
PER_INPUT_BYTES = 1024
_MARGIN = 1.05


class OutputError(Exception):
    """An output that cannot be written; the message is the one line to show."""


def describe(error, path=None, needed_bytes=None):
    """The one line for OSError `error`, met writing `path`: the error's own file name where it
    has one (a failed write has none: pass the file, or at least the output folder)."""
    path = error.filename if error.filename is not None else path
    if path is None:
        return _describe(error, None, 'the output', needed_bytes)
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = file_names.from_bytes(path)
    return _describe(error, path, file_names.display(path), needed_bytes)


def _describe(error, path, shown, needed_bytes):
    code = error.errno
    if code in _SPACE:
        what = 'no space left on device' if code == errno.ENOSPC else 'disk quota exceeded'
        free = None if path is None else free_bytes(path)
        figures = [] if free is None else [f'{megabytes(free)} free']
        if needed_bytes:
            figures.append(f'this build needs about {megabytes(needed_bytes)}')
        return f'{what} writing {shown}' + (': ' + ', '.join(figures) if figures else '')
    if code == errno.EROFS:
        return f'read-only file system: cannot write {shown}; choose an --output on a writable disk'
    if code in (errno.EACCES, errno.EPERM):
        return (
            f'permission denied writing {shown}; choose an --output you may write to, or change '
            f'its permissions'
        )
    if code in (errno.ENOENT, errno.ENOTDIR):
        missing = file_names.display(_first_missing(path)) if path else 'a folder'
        return f'cannot write {shown}: {missing} does not exist (was it removed?)'
    if code == errno.EFBIG:
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        size = 'unlimited' if limit == resource.RLIM_INFINITY else megabytes(limit)
        return f'file too large writing {shown}: the file size limit (ulimit -f) is {size}'
    return f'{error.strerror or error} writing {shown}'


def find_os_error(exc):
    """The OSError of a kind `describe` knows behind `exc`: in its chain (cause, context), or
    else named in its text (`[Errno 28] ...: 'path'`, as a worker's traceback ends). None if
    there is none."""
    seen, current = set(), exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in HANDLED:
            return current
        current = current.__cause__ or current.__context__
    for match in _IN_TEXT.finditer(str(exc)):
        code = int(match.group(1))
        if code in HANDLED:
            return OSError(code, match.group(2).strip(), match.group(3))
    return None


def free_bytes(path):
    """Bytes free for this user on the disk of a local path (its nearest existing folder);
    None for a URI."""
    path = os.fspath(path)
    if storage.is_uri(path):
        return None
    folder = _nearest_existing(os.path.abspath(path))
    return shutil.disk_usage(folder).free


def estimate_needed_bytes(fmt, input_bytes, num_inputs, payload_bytes=0):
    """About how many bytes a local build writes into its output at most.

    Args:
        fmt: `examples` (records hold the images' bytes) or `paths` (they name them; the
            re-encoded copies of the few images TensorFlow cannot decode are not counted).
        input_bytes: the total size of the inputs listed.
        payload_bytes: the total size of the small inputs whose bytes the local runner also
            keeps in the temporary folder until the end (pipelines/local/spill.py's payloads).
    """
    stored = input_bytes + payload_bytes if fmt == features.EXAMPLES else 0
    return int((stored + num_inputs * PER_INPUT_BYTES) * _MARGIN)


def check_free_space(output, needed_bytes, skip_flag):
    """Raises OutputError, with the figures, where a local `output`'s disk has less than
    `needed_bytes` free. `skip_flag` is the flag that skips this check, for the line."""
    free = free_bytes(output)
    if free is None or free >= needed_bytes:
        return
    raise OutputError(
        f'not enough space for --output {file_names.display(os.fspath(output))}: '
        f'{megabytes(free)} free on its disk, this build needs about {megabytes(needed_bytes)}; '
        f'free some space or choose another --output ({skip_flag} builds anyway)'
    )


def megabytes(count):
    """`0.1 MB`, `12 MB`, `3,456 MB` (10^6 bytes)."""
    value = count / 1e6
    return f'{value:.1f} MB' if value < 10 else f'{value:,.0f} MB'


def _nearest_existing(path):
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _first_missing(path):
    """The outermost folder of `path` that does not exist (or `path` itself)."""
    path = os.path.abspath(path)
    existing = _nearest_existing(path)
    if existing == path:
        return path
    rest = os.path.relpath(path, existing).split(os.sep)
    return os.path.join(existing, rest[0])
