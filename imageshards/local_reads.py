"""Local input files asked of the kernel ahead of their reads, each opened once.

A step that reads many local files in turn (validation, the writer) first asks the kernel to
fetch the next ones (`prefetching`), so that on a cold page cache the disk works while the
files before them are checked; on a warm one, where the first file of a run is in the page
cache already, the run is not asked for. The descriptor opened to ask is handed to the read
that follows (`take`, from storage.read_input) instead of being closed and the path opened
again: a path lookup less per file, which on a warm cache was a third of a small file's read
(bench/RESULTS.md, "Build cost per image"). At most HELD descriptors wait at once; one that no
read takes (its input rejected before reading, a step that stopped early) is closed when pushed
out, or when the `prefetching` that opened it ends.
"""

import collections
import os
import threading

PREFETCH_AHEAD = 64  # files asked for ahead of the one being read
PREFETCH_MAX_BYTES = 64 << 20  # of each
HELD = 2 * PREFETCH_AHEAD  # descriptors kept for the reads to come, at most: one `prefetching`

_held = collections.OrderedDict()  # path -> descriptor, oldest first
_lock = threading.Lock()


def prefetching(items, path_of, ahead=PREFETCH_AHEAD):
    """Yields `items` (a sequence), having asked the kernel for the local files of the next
    `ahead` of them (`prefetch_local`) before each run of `ahead`: a file is then read from the
    page cache while the disk fetches those after it. `path_of(item)` may be None: nothing to
    fetch."""
    asked = []
    try:
        for start in range(0, len(items), ahead):
            if start == 0:
                asked += prefetch_local(map(path_of, items[:ahead]), probe=True)
            run = items[start + ahead : start + 2 * ahead]
            asked += prefetch_local(map(path_of, run), probe=True)
            yield from items[start : start + ahead]
    finally:  # what no read took
        _close(asked)


def prefetch_local(paths, probe=False):
    """Asks the kernel to start reading the local files among `paths` into the page cache, and
    returns at once the paths whose descriptors it keeps for `take`: the reads that follow find
    them there instead of each waiting on the disk in turn (on a cold cache, this halved a build
    of 200,000 small JPEGs: bench/RESULTS.md). Files that cannot be opened are left to the read
    that reports them.

    With `probe`, the first file is looked for in the page cache first; where it is there, as a
    warm cache holds a whole run of files, the others are not asked for: asking for files the
    cache holds costs a fifth of their reads (bench/RESULTS.md, "Build CPU at or below TFDS's")."""
    kept = []
    if not hasattr(os, 'posix_fadvise'):
        return kept
    for path in paths:
        if path is None or '://' in path:
            continue
        try:  # not blocking: a FIFO among the inputs must not hang the build here
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        if probe:
            probe = False
            if _in_page_cache(fd):
                _hold(path, fd)
                return [*kept, path]
        try:  # at most PREFETCH_MAX_BYTES: a huge file is rejected by its size, never read
            os.posix_fadvise(fd, 0, PREFETCH_MAX_BYTES, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        _hold(path, fd)
        kept.append(path)
    return kept


def _in_page_cache(fd):
    """Whether an open file's first byte is in the page cache: a read that may not wait for the
    disk (RWF_NOWAIT, Linux 4.14) succeeds. False where that cannot be asked (elsewhere, not a
    regular file)."""
    if _NOWAIT is None:
        return False
    try:
        os.preadv(fd, [bytearray(1)], 0, _NOWAIT)
        return True
    except OSError:  # EAGAIN: on the disk; or not supported here
        return False


_NOWAIT = getattr(os, 'RWF_NOWAIT', None)


def take(path):
    """The descriptor `prefetch_local` opened for `path`, now the caller's to close; or None."""
    with _lock:
        return _held.pop(path, None)


def _hold(path, fd):
    with _lock:
        if path in _held:  # listed twice: the first read takes the one kept
            os.close(fd)
            return
        _held[path] = fd
        while len(_held) > HELD:
            os.close(_held.popitem(last=False)[1])


def _close(paths):
    for path in paths:
        fd = take(path)
        if fd is not None:
            os.close(fd)
