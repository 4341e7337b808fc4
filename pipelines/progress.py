"""Build progress across the local runner's worker processes.

Beam's metrics are not live on the local FnApiRunner (they arrive with the result), and its
workers are separate processes. So each worker counts its own work with `advance(phase, n)`
and keeps the counts in a small JSON file of its own, rewritten at most every
`FLUSH_SECONDS` and at the end of each bundle (`flush`), in the folder that the
`IMAGESHARDS_PROGRESS` environment variable names; a thread of the launcher (`Watch`) sums
the files and shows them (imageshards/progress.py).

The variable is set by the launcher for a local run only, and the workers inherit it; without
it (on Dataflow, in a test pipeline) `advance` does nothing. Counts are for the display only:
a retried bundle counts twice, and the build's own accounting is in dataset.json.
"""

import json
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid

from imageshards import progress as display_lib

_LOG = logging.getLogger(__name__)

ENV = 'IMAGESHARDS_PROGRESS'
FLUSH_SECONDS = 0.5
VALIDATE, WRITE = 'validating', 'writing'

_lock = threading.Lock()
_counts = None  # this process's _Counts, for the folder ENV names


class _Counts:
    """One process's counts per phase, and the file it keeps them in."""

    def __init__(self, folder):
        self.folder = folder
        self.path = os.path.join(folder, f'{os.getpid()}-{uuid.uuid4().hex[:8]}.json')
        self.done, self.totals = {}, {}
        self.flushed = float('-inf')  # the first count is written at once
        self.dirty = False

    def flush(self):
        self.flushed, self.dirty = time.monotonic(), False
        temporary = f'{self.path}.tmp'
        try:  # never a folder of its own making: the launcher may have removed it (done)
            with open(temporary, 'w', encoding='utf-8') as f:
                json.dump({'done': self.done, 'totals': self.totals}, f)
            os.replace(temporary, self.path)
        except OSError:
            pass


def advance(phase, n, total=None):
    """Counts `n` more units of `phase` done in this process (and the phase's total, if known)."""
    folder = os.environ.get(ENV)
    if not folder:
        return
    global _counts  # pylint: disable=global-statement
    with _lock:
        if _counts is None or _counts.folder != folder:
            _counts = _Counts(folder)
            threading.Thread(target=_flush_now_and_then, args=(_counts,), daemon=True).start()
        _counts.done[phase] = _counts.done.get(phase, 0) + n
        if total is not None:
            _counts.totals[phase] = total
        if time.monotonic() - _counts.flushed >= FLUSH_SECONDS:
            _counts.flush()
        else:
            _counts.dirty = True


def flush():
    """Writes this process's counts now if some are not yet in its file: at a bundle's end, as
    the runner may stop the worker before the next timed flush."""
    with _lock:
        if _counts is not None and _counts.dirty:
            _counts.flush()


def _flush_now_and_then(counts):
    """Writes the last counts of a burst that ended between two flushes."""
    while counts is _counts:
        time.sleep(FLUSH_SECONDS)
        with _lock:
            if counts.dirty:
                counts.flush()


def read_counts(folder):
    """({phase: done}, {phase: total}) summed over every worker's file in `folder`."""
    done, totals = {}, {}
    for name in os.listdir(folder):
        if not name.endswith('.json'):
            continue
        try:
            with open(os.path.join(folder, name), encoding='utf-8') as f:
                counts = json.load(f)
        except (OSError, ValueError):  # replaced while being read: the next poll has it
            continue
        for phase, n in counts['done'].items():
            done[phase] = done.get(phase, 0) + n
        totals.update(counts['totals'])
    return done, totals


class Watch:
    """The launcher's side: a folder for the workers' counts and a thread that shows them.

    Args:
        totals: {phase: total} known before the run (the inputs to validate).
        units: {phase: unit word}.
        enabled: False where workers cannot reach a local folder (Dataflow): nothing happens.
    """

    def __init__(self, totals, units, enabled=True):
        self._totals, self._units, self._enabled = dict(totals), units, enabled
        self._folder = None
        self._stop = threading.Event()
        self._thread = None
        self._display = None

    def __enter__(self):
        if not self._enabled:
            return self
        self._folder = tempfile.mkdtemp(prefix='imageshards-progress-')
        os.environ[ENV] = self._folder
        self._display = display_lib.Display().__enter__()
        for phase, total in self._totals.items():  # timed from now, not from its first count
            self._display.update(phase, 0, total, self._units.get(phase, ''))
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self):
        while not self._stop.wait(0.5):
            self._show()

    def _show(self):
        done, totals = read_counts(self._folder)
        for phase, n in done.items():
            total = totals.get(phase, self._totals.get(phase))
            self._display.update(phase, min(n, total or n), total, self._units.get(phase, ''))

    def __exit__(self, *exc_info):
        if not self._enabled:
            return
        self._stop.set()
        self._thread.join()
        if exc_info[0] is None:
            self._show()
        self._display.close()
        if os.environ.get(ENV) == self._folder:
            del os.environ[ENV]
        shutil.rmtree(self._folder, ignore_errors=True)
