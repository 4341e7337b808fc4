"""One build per output (imageshards/output_lock.py, imageshards/gcs_lock.py): real flock between
real processes, and a lock object on the GCS emulator made to honour generation preconditions
as Cloud Storage does (bench/gcs_preconditions.py)."""

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from imageshards import gcs_lock
from imageshards import layout
from imageshards import output_lock
from pipelines.writing import overwrite

pytest_plugins = ['gcs_emulator']

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A build's lock in a process of its own: held until its stdin closes, then released.
HOLD = """
import sys
from imageshards import output_lock
output, expiry, refresh = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
options = dict(expiry=expiry, refresh=refresh) if output.startswith('gs://') else {}
lock = output_lock.acquire(output, ['imageshards', 'build', '--output', output], **options)
print('locked', flush=True)
sys.stdin.read()
lock.release()
print('released', flush=True)
"""


def _hold(output, expiry=30.0, refresh=0.5):
    """A process holding the lock of `output`, once it says so."""
    process = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, '-c', HOLD, str(output), str(expiry), str(refresh)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPOSITORY,
    )
    assert process.stdout.readline() == 'locked\n'
    return process


def _release(process):
    process.stdin.close()
    assert process.stdout.readline() == 'released\n'
    assert process.wait(timeout=30) == 0


def _kill(process):
    process.kill()
    process.wait()


def _busy_line(output, pid):
    """The refusal, up to its start time (which the holder chose)."""
    return (
        f'--output {output} is being written by another build (pid {pid} on '
        f'{socket.gethostname()}, started '
    )


def test_a_second_build_is_refused_in_one_line_naming_the_holder(tmp_path):
    out = tmp_path / 'out'
    holding = _hold(out)
    try:
        with pytest.raises(output_lock.OutputBusy) as refused:
            output_lock.acquire(out, ['imageshards', 'build', '--output', str(out), '--overwrite'])
        line = str(refused.value)
        assert line.startswith(_busy_line(out, holding.pid)) and '\n' not in line
        assert line.endswith(
            f' UTC: imageshards build --output {out}); wait for it to end, or stop it (kill '
            f'{holding.pid} on {socket.gethostname()}), then run this again'
        )
        assert output_lock.holder(out).pid == holding.pid  # `verify`: being written
    finally:
        _release(holding)
    assert not out.exists()  # its lock made the folder, and nothing else went there
    assert output_lock.holder(out) is None
    with output_lock.acquire(out, 'imageshards build') as lock:
        lock.check()
        (out / 'dataset.json').write_text('{}')
    assert sorted(os.listdir(out)) == ['dataset.json']


def test_the_lock_of_a_killed_build_is_taken_over_saying_whose_it_was(tmp_path, caplog):
    out = tmp_path / 'out'
    holding = _hold(out)
    _kill(holding)
    assert (out / layout.LOCK_FILE).exists()  # left behind, but locked by no one
    assert output_lock.holder(out) is None
    with caplog.at_level(logging.WARNING), output_lock.acquire(out, 'imageshards build'):
        pass
    assert [r.getMessage().split(' (pid ')[0] for r in caplog.records] == [
        f'taking over the lock of {out}: the build that held it'
    ]
    assert caplog.records[0].getMessage().endswith(') is no longer running')
    assert f'pid {holding.pid} on ' in caplog.records[0].getMessage()


RACE = """
import sys, time
from imageshards import output_lock
output, log = sys.argv[1], sys.argv[2]
held = 0
while held < 5:
    try:
        lock = output_lock.acquire(output, 'racer')
    except output_lock.OutputBusy:
        continue
    start = time.monotonic()
    time.sleep(0.03)
    end = time.monotonic()
    lock.release()
    with open(log, 'a') as f:
        f.write(f'{start} {end}\\n')
    held += 1
"""


def test_builds_racing_for_one_output_never_hold_it_at_once(tmp_path):
    out, log = tmp_path / 'out', tmp_path / 'held.txt'
    racers = [
        subprocess.Popen([sys.executable, '-c', RACE, str(out), str(log)], cwd=REPOSITORY)
        for _ in range(4)
    ]
    assert [racer.wait(timeout=120) for racer in racers] == [0] * 4
    spans = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
    assert len(spans) == 20
    overlapping = [(a, b) for a, b in zip(spans, spans[1:]) if b[0] < a[1]]
    assert overlapping == []


def test_a_lock_file_removed_while_held_is_noticed(tmp_path):
    out = tmp_path / 'out'
    lock = output_lock.acquire(out, 'first')
    os.unlink(out / layout.LOCK_FILE)  # what --overwrite must never do
    with pytest.raises(output_lock.LockLost, match='was removed while this build held it'):
        lock.check()
    with output_lock.acquire(out, 'second'):  # a new file, locked by another build
        pass
    lock.release()


def test_overwrite_keeps_the_lock_of_the_build_that_runs_it(tmp_path):
    out = tmp_path / 'out'
    with output_lock.acquire(out, 'imageshards build --overwrite') as lock:
        (out / layout.DATASET_JSON).write_text('{}')
        (out / layout.SUCCESS).write_text('')
        overwrite.prepare_output(str(out), overwrite=True)
        assert sorted(os.listdir(out)) == [layout.LOCK_FILE]
        lock.check()
    assert not overwrite.is_own_file(layout.LOCK_FILE) and layout.is_lock_file(layout.LOCK_FILE)


def test_any_process_of_the_build_can_confirm_it_still_holds_the_lock(tmp_path):
    out = tmp_path / 'out'
    with output_lock.acquire(out, 'imageshards build') as lock:
        output_lock.ensure_held(out, build=lock.holder.build)
        with pytest.raises(output_lock.LockLost, match='no longer locked by this build'):
            output_lock.ensure_held(out, build='another build')
    with pytest.raises(output_lock.LockLost):
        output_lock.ensure_held(out, build=lock.holder.build)


def test_credentials_in_the_command_are_not_recorded():
    me = output_lock.Holder.this_build(['imageshards', 'build', '--input', 'https://u:p@h/x.csv'])
    assert me.command == 'imageshards build --input https://***@h/x.csv'
    assert output_lock.Holder.from_json(me.to_json()) == me
    assert output_lock.Holder.from_json(b'{"host": "h", "pi') is None  # being written


def test_a_gcs_lock_refuses_a_second_build_and_is_gone_once_released(gcs_with_preconditions):
    out = gcs_with_preconditions.uri('refused')
    holding = _hold(out)
    try:
        with pytest.raises(output_lock.OutputBusy) as refused:
            output_lock.acquire(out, 'imageshards build')
        line = str(refused.value)
        assert line.startswith(_busy_line(out, holding.pid))
        assert line.endswith(' s after its last refresh if that build is gone')
        assert f', lapses {gcs_lock.EXPIRY_SECONDS:.0f} s after' in line
        assert output_lock.holder(out).pid == holding.pid
    finally:
        _release(holding)
    assert gcs_with_preconditions.names('refused') == []
    assert output_lock.holder(out) is None


@pytest.mark.slow
def test_a_gcs_lock_no_longer_refreshed_expires_and_is_taken_over(gcs_with_preconditions, caplog):
    out = gcs_with_preconditions.uri('expires')
    holding = _hold(out, expiry=2.0, refresh=0.3)
    time.sleep(1.0)
    with pytest.raises(output_lock.OutputBusy):  # refreshed: alive
        output_lock.acquire(out, 'imageshards build', expiry=2.0)
    _kill(holding)
    with pytest.raises(output_lock.OutputBusy):  # killed, but not yet expired
        output_lock.acquire(out, 'imageshards build', expiry=2.0)
    assert output_lock.holder(out, expiry=2.0).pid == holding.pid
    time.sleep(2.5)
    assert output_lock.holder(out, expiry=2.0) is None
    with caplog.at_level(logging.WARNING), output_lock.acquire(out, 'x', expiry=2.0) as lock:
        lock.check()
    (record,) = caplog.records
    assert record.getMessage().startswith(f'taking over the lock of {out}: the build that held it')
    assert 's ago (its lock lapses after 2 s)' in record.getMessage()


def test_a_gcs_lock_taken_over_is_lost_to_its_holder(gcs_with_preconditions, caplog):
    out = gcs_with_preconditions.uri('lost')
    first = output_lock.acquire(out, 'first', expiry=60.0, refresh=0.6)
    time.sleep(0.3)
    with caplog.at_level(logging.WARNING):
        second = output_lock.acquire(out, 'second', expiry=0.1)  # first looks stale to it
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            first.check()
        except output_lock.LockLost as lost:
            assert 'was taken over or removed while this build held its lock' in str(lost)
            break
        time.sleep(0.05)
    else:
        raise AssertionError('the first build did not notice it lost its lock')
    second.check()
    output_lock.ensure_held(out, build=second.holder.build)
    first.release()  # removes nothing: it is not its lock any more
    assert output_lock.holder(out).build == second.holder.build
    second.release()


def test_of_builds_racing_for_a_gcs_output_one_wins(gcs_with_preconditions):
    out = gcs_with_preconditions.uri('race')
    results, start = [], threading.Barrier(4)

    def race():
        start.wait()
        try:
            results.append(output_lock.acquire(out, 'racer', refresh=60.0))
        except output_lock.OutputBusy:
            results.append(None)

    threads = [threading.Thread(target=race) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [lock for lock in results if lock is not None]
    assert len(winners) == 1 and len(results) == 4
    winners[0].release()


def test_killing_the_holder_of_a_local_lock_frees_it_at_once(tmp_path):
    out = tmp_path / 'out'
    holding = _hold(out)
    os.kill(holding.pid, signal.SIGKILL)
    holding.wait()
    started = time.monotonic()
    with output_lock.acquire(out, 'next build'):
        pass
    assert time.monotonic() - started < 1.0
