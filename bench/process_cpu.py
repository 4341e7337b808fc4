"""CPU seconds of each process of a command's tree: which of a build's processes costs what.

bench/measure.py gives the whole tree's sum; this samples every descendant's user and system
seconds every 50 ms and prints the last sample of each (a process's final few milliseconds may
be missed), largest first, then the kernel's exact sum over the tree.

    python -m bench.process_cpu imageshards build --input TREE --output OUT --overwrite
    python -m bench.process_cpu python -m bench.peer_tfds TREE OUT
"""

import os
import subprocess
import sys
import time

import psutil

from bench.measure import become_subreaper
from bench.measure import children_cpu
from bench.measure import reap_orphans


def main(argv=None):
    command = sys.argv[1:] if argv is None else argv
    become_subreaper()  # an orphaned descendant is reaped here, its time counted
    before = children_cpu()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = {}  # pid -> (user, system, command line)
    while process.poll() is None:
        for child in psutil.Process().children(recursive=True):
            try:
                times = child.cpu_times()
                last[child.pid] = (times.user, times.system, ' '.join(child.cmdline())[:100])
            except psutil.Error:  # ended meanwhile
                pass
        time.sleep(0.05)
    reap_orphans(command)
    total = children_cpu() - before
    for pid, (user, system, line) in sorted(last.items(), key=lambda item: -sum(item[1][:2])):
        if user + system >= 0.01:
            print(
                f'{pid:>8} {user + system:7.2f} s (user {user:6.2f}, system {system:5.2f})  {line}'
            )
    print(f'whole tree: {total:.2f} s CPU; exit status {process.returncode}')
    return process.returncode


if __name__ == '__main__':
    os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
    sys.exit(main())
