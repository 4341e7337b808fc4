"""A chief and a worker of a multi-worker training run, as two processes on loopback.

Each process gets its own TF_CONFIG, as Vertex AI gives each replica, and the same flags. What
they do is observed from outside: TensorFlow's TFRecord reader logs every file it opens (at
VLOG level 2), and the worker runs with umask 077, so that any file it created in the shared
job directory would lack the group and other read bits that the chief's (umask 022) have.

    processes = start_both(data, tmp_path, flags)   {'chief': Popen, 'worker': Popen}
    codes = wait(processes, timeout=300)             {'chief': 0, 'worker': 0}
    logs = read_logs(tmp_path)                       {'chief': text, 'worker': text}
"""

import ast
import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time

UMASKS = {'chief': 0o022, 'worker': 0o077}
READING = re.compile(r'tf_record_dataset_op\.cc:\d+\] Reading file: (\S+)')


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(('127.0.0.1', 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def loopback_cluster():
    """A TF_CONFIG cluster of a chief and a worker on free loopback ports."""
    chief_port, worker_port = free_ports(2)
    return {'chief': [f'127.0.0.1:{chief_port}'], 'worker': [f'127.0.0.1:{worker_port}']}


def start(role, cluster, data, tmp_path, flags=()):
    """`python -m trainer.task` as `role` of `cluster`, its job dir tmp_path/job, its output
    in tmp_path/ROLE.log."""
    scratch = tmp_path / f'{role}-tmp'
    scratch.mkdir()
    env = dict(
        os.environ,
        TF_CONFIG=json.dumps({'cluster': cluster, 'task': {'type': role, 'index': 0}}),
        PYTHONPATH=os.pathsep.join(sys.path),
        TMPDIR=str(scratch),  # where a non-chief's throw-away checkpoints and export go
        TF_CPP_MIN_LOG_LEVEL='0',
        TF_CPP_VMODULE='tf_record_dataset_op=2',  # "Reading file: PATH" for every shard opened
    )
    log = open(tmp_path / f'{role}.log', 'w')  # closed by wait
    # --verbose: TensorFlow's C++ log lines, which the tests read, are shown only then.
    command = [sys.executable, '-m', 'trainer.task', '--verbose', '--data', str(data)]
    process = subprocess.Popen(
        [*command, '--job-dir', str(tmp_path / 'job'), *flags],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        umask=UMASKS[role],
    )
    process.log = log
    return process


def start_both(data, tmp_path, flags=()):
    cluster = loopback_cluster()
    return {role: start(role, cluster, data, tmp_path, flags) for role in UMASKS}


def wait(processes, timeout):
    """Waits for all; if one fails, stops the rest (they would wait for it forever)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        codes = {role: p.poll() for role, p in processes.items()}
        if all(code is not None for code in codes.values()) or any(codes.values()):
            break
        time.sleep(0.2)
    for p in processes.values():
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait()
        p.log.close()
    return {role: p.returncode for role, p in processes.items()}


def read_logs(tmp_path):
    return {role: (tmp_path / f'{role}.log').read_text() for role in UMASKS}


def final_metrics(log) -> dict:
    """The metrics a process logged at its end (trainer/task.py: every worker logs its own)."""
    return ast.literal_eval(re.search(r'final metrics: (\{.*\})', log).group(1))


def files_read(log, split):
    """The shards of `split` whose opening the TFRecord reader logged."""
    return {path for path in READING.findall(log) if f'/{split}/' in path}


def written_by_others(job):
    """{path under `job`: its Path} of what is in the job dir, and the paths of it that lack
    the read bit for others (what the worker, umask 077, would have made)."""
    written = {path.relative_to(job).as_posix(): path for path in job.rglob('*')}
    by_worker = [name for name, path in written.items() if not path.stat().st_mode & stat.S_IROTH]
    return written, by_worker


def scratch_of(log):
    """The throw-away folder a non-chief's log names (trainer/distribute.py), asserted gone."""
    scratch = re.search(r'checkpoints and the export go to (\S+)', log).group(1)
    assert not os.path.exists(scratch)
    return scratch
