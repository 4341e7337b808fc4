"""A worker process that ends in the middle of a run stops the build at once
(pipelines/local/worker_watch.py). The same with a real build whose worker is SIGKILLed:
tests/test_operators.py."""

import logging
import signal
import subprocess
import sys
import threading
import time

import pytest

from pipelines.local import worker_watch

WARNED = 'a worker process of the build ended (exit status -9: killed, or out of memory?)'


def _worker_ends():
    raise RuntimeError('Worker subprocess exited with return code -9')


@pytest.fixture
def watched(monkeypatch):
    """watch_workers() for one test; the processes it would end, recorded instead."""
    hook, handler = threading.excepthook, signal.getsignal(signal.SIGUSR2)
    ended = []
    monkeypatch.setattr(worker_watch, 'end_processes_below', lambda: ended.append(True))
    worker_watch.watch_workers()
    yield ended
    threading.excepthook = hook
    signal.signal(signal.SIGUSR2, handler)


def test_a_worker_that_ends_while_the_pipeline_runs_stops_it_and_the_others(watched, caplog):
    first, later = (threading.Thread(target=_worker_ends, name='run_worker') for _ in range(2))
    with pytest.raises(worker_watch.WorkerLost):
        with worker_watch.running_watched():
            first.start()
            time.sleep(30)  # the runner, waiting for that worker's bundle: interrupted at once
    first.join()
    later.start()  # once the pipeline has returned: nothing
    later.join()
    time.sleep(0.1)
    assert watched == [True]  # the other workers, ended once
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [WARNED]


def _in_a_process_group_of_its_own(code):
    """Runs Python `code` as the build's launcher runs: leading a process group."""
    return subprocess.run(
        [sys.executable, '-c', code],
        capture_output=True,
        text=True,
        start_new_session=True,
        timeout=60,
    )


def test_the_processes_ended_are_those_below_in_the_same_process_group():
    """In a process of its own (the build's launcher leads its group): its child and
    grandchild go, a child in a group of its own (the watchdog) stays."""
    code = (
        'import os, subprocess, sys, time\n'
        'from pipelines.local import worker_watch\n'
        "child = subprocess.Popen(['sh', '-c', 'sleep 60 & wait'])\n"
        "apart = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        'time.sleep(0.5)\n'
        'worker_watch.end_processes_below()\n'
        'child.wait()\n'
        'print(child.returncode, apart.poll())\n'
        'apart.kill()\n'
    )
    done = _in_a_process_group_of_its_own(code)
    assert done.stdout.split() == ['-9', 'None']


def test_a_shell_between_the_build_and_a_worker_says_nothing_as_they_end():
    """Beam starts each worker as `sh -c COMMAND`; a shell that saw its child killed before it
    was would print "Killed" on the build's stderr. Thirty of them: each pair is ended in an
    order of their pids, which puts the child first for some."""
    code = (
        'import subprocess, time\n'
        'from pipelines.local import worker_watch\n'
        "shells = [subprocess.Popen(['sh', '-c', 'sleep 60; true']) for _ in range(30)]\n"
        'time.sleep(1)\n'
        'worker_watch.end_processes_below()\n'
        'print(sorted({shell.wait() for shell in shells}))\n'
    )
    done = _in_a_process_group_of_its_own(code)
    assert done.stdout.split() == ['[-9]']
    assert done.stderr == ''
