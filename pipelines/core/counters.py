"""What the build's steps count, in two ways: Beam counters, summed by the launcher at the end,
and live counts for the local runner's progress display.

Every counter is in the `imageshards` namespace: `listed`, `validated`, `reencoded`,
`rejected_<reason>`, `duplicates`, `written`, `bytes_written`, `shards_written`. They are for the
build's closing lines; dataset.json holds the counts a reader relies on.

Beam's metrics are not live on the local FnApiRunner (they arrive with the result), and its
workers are separate processes. So each worker also counts its own work with `advance(phase,
n)` and keeps the counts in a small JSON file of its own, rewritten at most every
`FLUSH_SECONDS` and at the end of each bundle (`flush`), in the folder that the
`IMAGESHARDS_PROGRESS` environment variable names; the launcher sums the files and shows them
(pipelines/local/progress.py). The variable is set by the launcher for a local run only, and
the workers inherit it; without it (on Dataflow, in a test pipeline) `advance` does nothing.
Live counts are for the display only: a retried bundle counts twice.
"""

import json
import logging
import os
import threading
import time
import uuid

import apache_beam as beam
from apache_beam.metrics.metric import MetricsFilter

_LOG = logging.getLogger(__name__)

NAMESPACE = 'imageshards'
PROGRESS_ENV = 'IMAGESHARDS_PROGRESS'
FLUSH_SECONDS = 0.5
VALIDATE, WRITE = 'validating', 'writing'  # the phases of the live counts


def counter(name) -> beam.metrics.metricbase.Counter:
    """The counter `name` of the build (create it in a DoFn's `__init__`)."""
    return beam.metrics.Metrics.counter(NAMESPACE, name)


def totals(result) -> dict:
    """{counter name: value} of a finished pipeline's result; {} where the runner has none."""
    found = {}
    try:
        for item in result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))['counters']:
            value = item.committed if item.committed is not None else item.attempted
            found[item.key.metric.name] = found.get(item.key.metric.name, 0) + value
    except Exception:  # pylint: disable=broad-except
        _LOG.warning('the runner reported no metrics; dataset.json has the counts')
    return found


_lock = threading.Lock()
_counts = None  # this process's _Counts, for the folder PROGRESS_ENV names


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


def advance(phase, n, total=None) -> None:
    """Counts `n` more units of `phase` done in this process (and the phase's total, if known)."""
    folder = os.environ.get(PROGRESS_ENV)
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


def flush() -> None:
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
