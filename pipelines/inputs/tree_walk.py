"""A local tree walked in the order of its files' relative paths, one folder's names in memory
at a time, so that its listing can stream (pipelines/inputs/listing.py). Symlinks exist only
on local disks: a tree is walked here rather than by Beam, whose local listing silently drops
symlinked folders and dangling links.
"""

import os
import stat

from imageshards.file_names import display
from pipelines.inputs.entries import inside

# Problems of the walk that are not inputs at all, counted as skipped.
NOT_FILES = frozenset(['symlinked_dir', 'symlink_loop', 'unreadable_dir'])


def walk_sorted(root, follow_symlinks):
    """Yields (path, problem, detail, size) for every file below local `root`, in sorted order.

    Files come in the order of their relative paths (as `file_names.display` shows them, as
    sorted strings compare), so that listing can stream: each folder's entries are sorted, a
    folder's name followed by '/' (a folder `a` holds `a/x`, which sorts after a file `a-b` and
    before a file `a0`). What is not walked (unreadable, symlinked or looping folders) comes in
    no set order. `problem` is '' for a regular file (or a symlink to one) that may be read; one
    of NOT_FILES for what is not a file; else the reason to reject the file.
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
            if child.is_file(follow_symlinks=False):  # most entries: asked first
                kind, size = 'file', child.stat(follow_symlinks=False).st_size
            elif child.is_dir(follow_symlinks=False):
                kind = 'folder'
            elif child.is_symlink():
                kind = 'link' if follow_symlinks and os.path.isdir(child.path) else 'symlink'
            else:
                kind = 'special'
            walked = kind in ('folder', 'link')
            name = child.name
            if not name.isascii():  # display's own first test, per file, without its call
                name = display(name)
            if walked:
                name += '/'
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
