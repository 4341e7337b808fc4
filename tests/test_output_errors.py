"""A full disk, a read-only or missing output, a permission error: one line each
(imageshards/output_errors.py), met for real: a 150 KB tmpfs, a read-only mount, a folder
another user owns, a file size limit."""

import errno
import os
import resource
import shutil
import subprocess
import sys

import pytest

from imageshards import output_errors
from imageshards.kinds import features


def _fill(path):
    """Writes to `path` until the disk is full; returns the OSError."""
    with pytest.raises(OSError) as failed:
        with open(path, 'wb') as f:
            for _ in range(1000):
                f.write(b'\0' * 65536)
                f.flush()
    return failed.value


def test_a_full_disk_is_one_line_with_the_figures(mounted):
    disk = mounted()
    path = disk / 'out' / 'train-00000-of-00001.tfrecord'
    path.parent.mkdir()
    error = _fill(path)
    assert error.errno == errno.ENOSPC
    free = output_errors.megabytes(shutil.disk_usage(disk).free)
    assert output_errors.describe(error, path, needed_bytes=340_000_000) == (
        f'no space left on device writing {path}: {free} free, this build needs about 340 MB'
    )
    assert output_errors.describe(error, path) == (
        f'no space left on device writing {path}: {free} free'
    )
    assert output_errors.describe(error) == 'no space left on device writing the output'


def test_a_build_that_cannot_fit_is_refused_before_it_starts(mounted):
    disk = mounted()
    out = disk / 'not' / 'yet' / 'made'
    needed = output_errors.estimate_needed_bytes(features.EXAMPLES, 1_000_000, 200)
    free = output_errors.megabytes(shutil.disk_usage(disk).free)
    with pytest.raises(output_errors.OutputError) as refused:
        output_errors.check_free_space(out, needed, '--no-space-check')
    assert str(refused.value) == (
        f'not enough space for --output {out}: {free} free on its disk, this build needs about '
        f'1.3 MB; free some space or choose another --output (--no-space-check builds anyway)'
    )
    output_errors.check_free_space(out, 100_000, '--no-space-check')  # fits: nothing said


def test_a_build_larger_than_any_disk_is_refused_without_a_small_disk(tmp_path):
    """The same check where no tmpfs can be mounted: more than this disk has free."""
    needed = shutil.disk_usage(tmp_path).free + 10**12
    with pytest.raises(output_errors.OutputError, match=r'^not enough space for --output '):
        output_errors.check_free_space(tmp_path / 'out', needed, '--no-space-check')


def test_a_read_only_output_is_one_line(mounted):
    disk = mounted('size=150k,ro')
    with pytest.raises(OSError) as failed:
        os.mkdir(disk / 'out')
    assert failed.value.errno == errno.EROFS
    assert output_errors.describe(failed.value) == (
        f'read-only file system: cannot write {disk}/out; choose an --output on a writable disk'
    )


WRITE = """
import os, sys
from imageshards import output_errors
if os.geteuid() == 0:
    os.setgid(65534)
    os.setuid(65534)  # nobody: root would write anywhere
try:
    open(sys.argv[1], 'wb').close()
except OSError as e:
    print(output_errors.describe(e))
"""


def test_a_permission_error_is_one_line(tmp_path):
    folder = tmp_path / 'theirs'
    folder.mkdir()
    os.chmod(tmp_path, 0o755)  # nobody may reach it, not write in it
    os.chmod(folder, 0o555)
    done = subprocess.run(
        [sys.executable, '-c', WRITE, str(folder / 'dataset.json')],
        capture_output=True,
        text=True,
        check=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert done.stdout == (
        f'permission denied writing {folder}/dataset.json; choose an --output you may write to, '
        f'or change its permissions\n'
    )


def test_an_output_removed_during_the_build_is_one_line(tmp_path):
    out = tmp_path / 'out'
    with pytest.raises(OSError) as failed:
        open(out / 'train' / 'x.tfrecord', 'wb').close()
    assert output_errors.describe(failed.value) == (
        f'cannot write {out}/train/x.tfrecord: {out} does not exist (was it removed?)'
    )


FILL_UNDER_LIMIT = """
import sys
from imageshards import output_errors
try:
    with open(sys.argv[1], 'wb') as f:
        f.write(bytes(200_000))
except OSError as e:
    print(output_errors.describe(e, sys.argv[1]))
"""


def _limit_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))


def test_a_file_size_limit_is_one_line(tmp_path):
    """The fallback where no small disk can be mounted: RLIMIT_FSIZE (Python ignores SIGXFSZ,
    so the write fails with EFBIG)."""
    path = tmp_path / 'big.tfrecord'
    done = subprocess.run(
        [sys.executable, '-c', FILL_UNDER_LIMIT, str(path)],
        capture_output=True,
        text=True,
        check=True,
        preexec_fn=_limit_file_size,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert done.stdout == (
        f'file too large writing {path}: the file size limit (ulimit -f) is 0.1 MB\n'
    )


def test_the_error_is_found_behind_what_a_runner_raises():
    error = OSError(errno.ENOSPC, 'No space left on device', '/out/x')
    try:
        try:
            raise error
        except OSError as e:
            raise RuntimeError('the pipeline failed') from e
    except RuntimeError as wrapped:
        assert output_errors.find_os_error(wrapped) is error
    # A worker's failure reaches the launcher as text only.
    text = (
        'Traceback (most recent call last):\n  ...\n'
        "OSError: [Errno 28] No space left on device [while running 'ValidateImages/Validate']"
    )
    found = output_errors.find_os_error(RuntimeError(text))
    assert (found.errno, found.strerror, found.filename) == (
        errno.ENOSPC,
        'No space left on device',
        None,
    )
    text = "OSError: [Errno 30] Read-only file system: '/out/.imageshards-tmp/a' [while running"
    found = output_errors.find_os_error(RuntimeError(text))
    assert (found.errno, found.filename) == (errno.EROFS, '/out/.imageshards-tmp/a')
    assert output_errors.find_os_error(RuntimeError('[Errno 104] Connection reset')) is None
    assert output_errors.find_os_error(ValueError('nothing of the kind')) is None


def test_what_a_build_needs_is_its_images_bytes_or_almost_nothing():
    examples = output_errors.estimate_needed_bytes(features.EXAMPLES, 10_000_000, 1000, 500_000)
    assert examples == int((10_500_000 + 1000 * output_errors.PER_INPUT_BYTES) * 1.05)
    assert output_errors.estimate_needed_bytes(features.PATHS, 10_000_000, 1000) < 1_100_000
    assert [output_errors.megabytes(n) for n in (0, 149_000, 12_400_000, 3_456_000_000)] == [
        '0.0 MB',
        '0.1 MB',
        '12 MB',
        '3,456 MB',
    ]
