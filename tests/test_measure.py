"""bench/measure.py counts the CPU seconds of a command's whole process tree, orphans included."""

import json
import subprocess
import sys

# A command whose child outlives it: the parent exits at once, the child spins ~0.4 s of CPU.
_ORPHAN = (
    'import os, time\n'
    'if os.fork() == 0:\n'
    '    end = time.process_time() + 0.4\n'
    '    while time.process_time() < end:\n'
    '        pass\n'
    '    os._exit(0)\n'
)
# Run in a process of its own: measure() makes its caller a child subreaper for good.
_MEASURE = (
    'import json, sys\n'
    'from bench.measure import measure\n'
    'm = measure([sys.executable, "-c", sys.argv[1]])\n'
    'print(json.dumps({"cpu": m.cpu}))\n'
)


def test_cpu_counts_a_child_that_outlives_its_parent():
    result = subprocess.run(
        [sys.executable, '-c', _MEASURE, _ORPHAN], capture_output=True, text=True, check=True
    )
    measured = json.loads(result.stdout)
    assert measured['cpu'] >= 0.4
