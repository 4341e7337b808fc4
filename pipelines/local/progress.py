"""The local runner's progress display: the launcher's side of the live counts that each
worker process keeps in a file of its own (pipelines/core/counters.py `advance`), summed and shown
by a thread (`Watch`) through imageshards/progress.py.
"""

import json
import logging
import os
import shutil
import tempfile
import threading

from imageshards import progress as display_lib
from pipelines.core import counters

_LOG = logging.getLogger(__name__)


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
        os.environ[counters.PROGRESS_ENV] = self._folder
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
        if os.environ.get(counters.PROGRESS_ENV) == self._folder:
            del os.environ[counters.PROGRESS_ENV]
        shutil.rmtree(self._folder, ignore_errors=True)
