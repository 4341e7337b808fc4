"""One progress display per command: done/total, rate and time left for each phase of work.

On a terminal it is a live `rich` display on stderr, one bar per phase (log lines and printed
problems appear above it). Elsewhere (a log file, CI) it writes a line per phase every
`LOG_EVERY` seconds and when the phase ends, so a long run still shows signs of life.

    with progress.Display() as display:
        display.update('checking', done, total, unit='records')
"""

import logging
import time

from rich import progress as rich_progress
from rich.text import Text

from imageshards import console

_LOG = logging.getLogger(__name__)
LOG_EVERY = 30.0  # seconds between lines when stderr is no terminal
MIN_RATE_SECONDS = 1.0  # a rate over less time says more of the poll than of the work


class _RateColumn(rich_progress.ProgressColumn):
    """`912 images/s` (rich's own speed column counts bytes)."""

    def render(self, task):
        if not task.speed:
            return Text('')
        return Text(f'{task.speed:,.0f} {task.fields.get("unit", "")}/s')


def _columns():
    return (
        rich_progress.TextColumn('{task.description:<10}'),
        rich_progress.BarColumn(),
        rich_progress.MofNCompleteColumn(),
        rich_progress.TextColumn('{task.fields[unit]}'),
        _RateColumn(),
        rich_progress.TextColumn('elapsed'),
        rich_progress.TimeElapsedColumn(),
        rich_progress.TextColumn('left'),
        rich_progress.TimeRemainingColumn(),
    )


class _Phase:
    """What the log-line display remembers of a phase."""

    def __init__(self):
        self.started = time.monotonic()
        self.logged = self.started
        self.done = 0
        self.total = None
        self.finished = False


class Display:
    """The progress of named phases; a context manager that ends the display on exit."""

    def __init__(self, terminal=None):
        self.terminal = console.stderr_is_terminal() if terminal is None else terminal
        self._phases = {}
        self._tasks = {}
        self._rich = None
        if self.terminal:
            self._rich = rich_progress.Progress(*_columns(), transient=False)

    def __enter__(self):
        if self._rich:
            self._rich.start()
        return self

    def __exit__(self, *exc_info):
        self.close()

    def update(self, phase, done, total=None, unit='items'):
        """Sets a phase's count of work done (and its total, once known)."""
        state = self._phases.setdefault(phase, _Phase())
        state.done, state.total = done, total if total is not None else state.total
        if self._rich:
            if phase not in self._tasks:
                self._tasks[phase] = self._rich.add_task(phase, total=state.total, unit=unit)
            self._rich.update(self._tasks[phase], completed=done, total=state.total)
            return
        now = time.monotonic()
        complete = state.total is not None and done >= state.total
        if (now - state.logged >= LOG_EVERY or complete) and not state.finished:
            state.logged, state.finished = now, complete
            _LOG.info('%s', describe(phase, done, state.total, unit, now - state.started))

    def close(self):
        if self._rich:
            self._rich.stop()
            self._rich = None


def describe(phase, done, total, unit, seconds):
    """`validating: 27,392 of 57,504 images (48%), 912/s, about 31 s left`; the rate only once
    the phase has been seen for MIN_RATE_SECONDS (a phase first seen done has no rate to say)."""
    rate = done / seconds if seconds >= MIN_RATE_SECONDS else 0.0
    shown = f', {rate:,.0f}/s' if rate else ''
    if total is None:
        return f'{phase}: {done:,} {unit}{shown}'
    text = f'{phase}: {done:,} of {total:,} {unit} ({done / max(total, 1):.0%}){shown}'
    if done < total and rate > 0:
        text += f', about {console.duration((total - done) / rate)} left'
    return text
