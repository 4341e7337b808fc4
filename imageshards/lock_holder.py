"""Who holds an output's lock (imageshards/output_lock.py, gcs_lock.py), and the lines that
refuse a second build or take over a dead one's lock."""

import dataclasses
import datetime
import json
import os
import re
import shlex
import socket
import uuid

from imageshards import lifeline

_USERINFO = re.compile(r'(://)[^/@\s]+@')


class OutputBusy(Exception):
    """Another build holds the output's lock; the message is the one line to show."""


class LockLost(Exception):
    """This build no longer holds its output's lock: it must not mark the output finished."""


@dataclasses.dataclass(frozen=True)
class Holder:
    """Who holds an output's lock, as its lock records it."""

    host: str
    pid: int  # the build's command (what a person would stop), or the build's own process
    started: str  # when it took the lock, UTC: '2025-01-02 03:04:05 UTC'
    command: str
    build: str  # the build's token (imageshards/lifeline.py), or a fresh one
    refreshed_ago: float | None = None  # gs://: seconds since its last refresh

    @classmethod
    def this_build(cls, command):
        """This process's build; `command` (argv or a string) is recorded with credentials in
        URLs redacted."""
        if not isinstance(command, str):
            command = shlex.join(command)
        now = datetime.datetime.now(datetime.UTC)
        return cls(
            host=socket.gethostname(),
            pid=lifeline.command_pid() or os.getpid(),
            started=now.strftime('%Y-%m-%d %H:%M:%S UTC'),
            command=_USERINFO.sub(r'\1***@', command),
            build=lifeline.build_token() or uuid.uuid4().hex,
        )

    def to_json(self):
        fields = dataclasses.asdict(self)
        del fields['refreshed_ago']
        return json.dumps(fields, sort_keys=True).encode('utf-8') + b'\n'

    @classmethod
    def from_json(cls, data):
        """The Holder a lock's bytes record, or None (empty, or being written)."""
        try:
            fields = json.loads(data)
            return cls(**{f: fields[f] for f in ('host', 'pid', 'started', 'command', 'build')})
        except (ValueError, TypeError, KeyError):
            return None

    def describe(self):
        return f'pid {self.pid} on {self.host}, started {self.started}: {self.command}'


def busy_message(output, found, expiry=None):
    """The line that refuses a build: who writes `output`, and what to do."""
    if found is None or not found.pid:
        who, stop = 'it has not said which yet', 'stop it'
    else:
        who, stop = found.describe(), f'stop it (kill {found.pid} on {found.host})'
    line = f'--output {output} is being written by another build ({who}); wait for it to end, or '
    line += f'{stop}, then run this again'
    if found is not None and found.refreshed_ago is not None and expiry:
        line += (
            f'; its lock, last refreshed {found.refreshed_ago:.0f} s ago, lapses {expiry:.0f} s '
            f'after its last refresh if that build is gone'
        )
    return line


def being_written_message(output, found, command):
    """The line of a tool that reads a build (`command`) while a build writes `output`."""
    return (
        f'{output} is being written by a build now ({found.describe()}); run {command} again '
        f'once it has ended'
    )


def takeover_message(output, found, why='is no longer running'):
    return f'taking over the lock of {output}: the build that held it ({found.describe()}) {why}'
