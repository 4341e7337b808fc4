"""A stand-in for a build, for tests/test_lifeline.py: it starts processes the ways a build does,
and each of them writes a file after a delay, as a killed build's worker could write _SUCCESS.

    python -m stand_in_build FOLDER DELAY [exit]   the build (`exit`: return once all started)
    python -m stand_in_build late FOLDER NAME DELAY   one of its processes

The processes, by name: `shell` (`sh -c`, as Beam starts its workers), `plain` (Popen, as the early
listing and the tf.Transform helper start), `forked` (os.fork, as pipelines/local/warm_workers.py
forks workers), `escaped` (a session of its own: out of the build's process group), and `child` (the
build itself). Each writes FOLDER/pid-NAME when it starts and FOLDER/late-NAME after DELAY seconds;
the build also writes FOLDER/scratch, its TMPDIR.
"""

import os
import shlex
import subprocess
import sys
import time

NAMES = ('shell', 'plain', 'forked', 'escaped', 'child')


def _write(path, text):
    with open(f'{path}.tmp', 'w', encoding='utf-8') as f:
        f.write(text)
    os.replace(f'{path}.tmp', path)


def late(folder, name, delay):
    _write(os.path.join(folder, f'pid-{name}'), str(os.getpid()))
    time.sleep(delay)
    _write(os.path.join(folder, f'late-{name}'), 'written after the delay')
    return 0


def build(folder, delay, exit_early):
    def command(name):
        return [sys.executable, '-m', 'stand_in_build', 'late', folder, name, str(delay)]

    subprocess.Popen(shlex.join(command('shell')), shell=True)  # pylint: disable=consider-using-with
    subprocess.Popen(command('plain'))  # pylint: disable=consider-using-with
    subprocess.Popen(command('escaped'), start_new_session=True)  # pylint: disable=consider-using-with
    if os.fork() == 0:
        os._exit(late(folder, 'forked', delay))  # pylint: disable=protected-access
    _write(os.path.join(folder, 'scratch'), os.environ.get('TMPDIR', ''))
    if exit_early:
        while not all(os.path.exists(os.path.join(folder, f'pid-{n}')) for n in NAMES[:4]):
            time.sleep(0.01)
        _write(os.path.join(folder, 'pid-child'), str(os.getpid()))
        return 0
    return late(folder, 'child', delay)


def main(argv):
    if argv[0] == 'late':
        return late(argv[1], argv[2], float(argv[3]))
    return build(argv[0], float(argv[1]), argv[2:] == ['exit'])


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
