"""Wall time and peak resident memory of a command's whole process tree."""

import dataclasses
import subprocess
import threading
import time

import psutil


@dataclasses.dataclass
class Measurement:
    seconds: float
    peak: int  # bytes: the largest sum of RSS over the process tree at one sample
    output: str
    process_peaks: list  # [(role, peak bytes)] of each process, largest first


def run_measured(command, env=None, interval=0.1, cwd=None):
    """Runs `command`; returns (seconds, peak RSS in bytes summed over the process tree, output)."""
    measured = measure(command, env, interval, cwd)
    return measured.seconds, measured.peak, measured.output


def measure(command, env=None, interval=0.1, cwd=None):
    """Runs `command` (in `cwd`), sampling the RSS of its process tree every `interval` s; a
    Measurement."""
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
    if process.returncode:
        raise RuntimeError(f'{command} failed ({process.returncode}):\n{output[-4000:]}')
    process_peaks = sorted((tuple(value) for value in peaks.values()), key=lambda p: -p[1])
    return Measurement(seconds, peak[0], output, process_peaks)


def _role(member, parent):
    if member.pid == parent.pid:
        return 'launcher'
    command = ' '.join(member.cmdline())
    return 'worker' if 'sdk_worker' in command else (member.name() or 'other')
