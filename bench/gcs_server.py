"""A real GCS server on this machine (the `gcp-storage-emulator` package), for the test suite
(tests/gcs_emulator.py's fixtures) and the benchmarks (bench/gcs_latency.py).

`running_server` starts the emulator in a subprocess on a free loopback port, in memory, and
stops it at the end; with `preconditions`, it runs bench/gcs_preconditions.py instead, the
emulator made to honour `ifGenerationMatch` as Cloud Storage does. `credentials_file` writes
the credential Beam's client is handed (tests/gcs_emulator.py says why).
"""

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

_WITH_PRECONDITIONS = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), 'gcs_preconditions.py'
)
_START_SECONDS = 30


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _wait_until_serving(process, url, log_path):
    deadline = time.monotonic() + _START_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False  # most likely the port was taken in the meantime
        try:
            with urllib.request.urlopen(url + '/', timeout=1) as response:
                if response.status == 200:
                    return True
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.05)
    process.kill()
    with open(log_path, encoding='utf-8', errors='replace') as f:
        log = f.read()[-2000:]
    raise RuntimeError(f'the GCS emulator did not answer at {url} in {_START_SECONDS} s:\n{log}')


@contextlib.contextmanager
def running_server(work_dir, preconditions=False):
    """Runs the emulator in a subprocess; yields its URL (http://127.0.0.1:PORT).

    Args:
        preconditions: whether it honours `ifGenerationMatch` (bench/gcs_preconditions.py).
    """
    log_path = os.path.join(work_dir, 'gcs-emulator.log')
    for _ in range(3):  # another process may take the free port before the emulator does
        port = _free_port()
        url = f'http://127.0.0.1:{port}'
        emulator = [_WITH_PRECONDITIONS] if preconditions else ['-m', 'gcp_storage_emulator']
        command = [sys.executable, *emulator, 'start']
        command += ['--host', '127.0.0.1', '--port', str(port), '--in-memory', '--quiet']
        with open(log_path, 'wb') as log:
            process = subprocess.Popen(command, cwd=work_dir, stdout=log, stderr=subprocess.STDOUT)
        if _wait_until_serving(process, url, log_path):
            break
    else:
        raise RuntimeError(f'the GCS emulator did not start; see {log_path}')
    try:
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def credentials_file(work_dir):
    """A user credential (`gcloud auth application-default login`'s file format) whose token
    expires in the year 2999: nothing is refreshed or fetched, and the emulator ignores it."""
    path = os.path.join(work_dir, 'application_default_credentials.json')
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(
            {
                'type': 'authorized_user',
                'client_id': 'imageshards-tests',
                'client_secret': 'unused',
                'refresh_token': 'unused',
                'token': 'emulator',
                'expiry': '2999-01-01T00:00:00Z',
            },
            f,
        )
    return path
