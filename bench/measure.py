"""Wall time and peak resident memory of a command's whole process tree."""

import subprocess
import threading
import time

import psutil


def run_measured(command, env=None, interval=0.1):
    """Runs `command`; returns (seconds, peak RSS in bytes summed over the process tree, output)."""
    start = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    peak = [0]
    done = threading.Event()

    def sample():
        parent = psutil.Process(process.pid)
        while not done.is_set():
            try:
                members = [parent] + parent.children(recursive=True)
                total = 0
                for member in members:
                    try:
                        total += member.memory_info().rss
                    except psutil.Error:
                        pass
                peak[0] = max(peak[0], total)
            except psutil.Error:
                return
            done.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = process.communicate()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    if process.returncode:
        raise RuntimeError(f'{command} failed ({process.returncode}):\n{output[-4000:]}')
    return seconds, peak[0], output
