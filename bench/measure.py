"""Wall time, CPU seconds and peak resident memory of a command's whole process tree.

CPU seconds are user + system time of every process of the tree, as the kernel accounts them
when each is reaped (what a Dataflow job is billed by: vCPU time). This process makes itself a
child subreaper (Linux's PR_SET_CHILD_SUBREAPER), so that a descendant whose parent ended first
is reaped here and counted too, not lost to init.
"""

import ctypes
import dataclasses
import os
import resource
import subprocess
import sys
import threading
import time

import psutil

_PR_SET_CHILD_SUBREAPER = 36


@dataclasses.dataclass
class Measurement:
    seconds: float
    peak: int  # bytes: the largest sum of RSS over the process tree at one sample
    output: str
    process_peaks: list  # [(role, peak bytes)] of each process, largest first
    cpu: float = 0.0  # user + system seconds of every process of the tree


def run_measured(command, env=None, interval=0.1, cwd=None):
    """Runs `command`; returns (seconds, peak RSS in bytes summed over the process tree, output)."""
    measured = measure(command, env, interval, cwd)
    return measured.seconds, measured.peak, measured.output


def measure(command, env=None, interval=0.1, cwd=None):
    """Runs `command` (in `cwd`), sampling the RSS of its process tree every `interval` s; a
    Measurement."""
    become_subreaper()
    before = children_cpu()
    start = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    peak = [0]
    peaks = {}  # pid -> [role, peak]
    done = threading.Event()

    def sample():
        parent = psutil.Process(process.pid)
        while not done.is_set():
            try:
                members = [parent] + parent.children(recursive=True)
            except psutil.Error:
                return
            total = 0
            for member in members:
                try:
                    rss = member.memory_info().rss
                    if member.pid not in peaks:
                        peaks[member.pid] = [_role(member, parent), 0]
                except psutil.Error:
                    continue
                total += rss
                peaks[member.pid][1] = max(peaks[member.pid][1], rss)
            peak[0] = max(peak[0], total)
            done.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = process.communicate()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    reap_orphans(command)
    cpu = children_cpu() - before
    if process.returncode:
        raise RuntimeError(f'{command} failed ({process.returncode}):\n{output[-4000:]}')
    process_peaks = sorted((tuple(value) for value in peaks.values()), key=lambda p: -p[1])
    return Measurement(seconds, peak[0], output, process_peaks, cpu)


def children_cpu():
    """User + system seconds of this process's reaped descendants so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def become_subreaper():
    if sys.platform.startswith('linux'):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def reap_orphans(command, timeout=60.0):
    """Waits for the descendants of `command` that outlived their parents (reparented here),
    so that their CPU time counts; raises RuntimeError for one still running after `timeout`
    seconds (a build's processes end with its command)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            continue
        if time.monotonic() > deadline:
            left = [child.pid for child in psutil.Process().children()]
            raise RuntimeError(f'{command}: processes {left} outlived it')
        time.sleep(0.05)


def _role(member, parent):
    if member.pid == parent.pid:
        return 'launcher'
    command = ' '.join(member.cmdline())
    return 'worker' if 'sdk_worker' in command else (member.name() or 'other')
