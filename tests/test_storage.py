"""imageshards/storage.py: asking the kernel for the files a step reads next."""

import os
import threading

import pytest

from imageshards import local_reads
from imageshards import storage


@pytest.mark.parametrize('cached', [False, True])
@pytest.mark.parametrize('count', [0, 1, 3, 4, 5, 11])
def test_prefetching_yields_every_item_in_order(tmp_path, monkeypatch, count, cached):
    # Files on the disk are all asked for, a run ahead; of a run found in the page cache (its
    # first file there), only that first file is looked at.
    monkeypatch.setattr(local_reads, '_in_page_cache', lambda fd: cached)
    paths = []
    for i in range(count):
        path = tmp_path / f'{i}.bin'
        path.write_bytes(bytes([i]) * 10)
        paths.append(str(path))
    asked = []

    def path_of(path):
        asked.append(path)
        return path

    yielded = []
    for index, path in enumerate(storage.prefetching(paths, path_of, ahead=4)):
        run_start = paths[index - index % 4]
        assert (path if not cached else run_start) in asked, 'yielded before it was asked for'
        yielded.append(path)
    assert yielded == paths
    assert asked == (paths[::4] if cached else paths)  # each asked for once, in order


def test_a_file_just_read_is_found_in_the_page_cache(tmp_path):
    path = tmp_path / 'x.bin'
    path.write_bytes(b'x' * 10_000)
    assert path.read_bytes()
    fd = os.open(path, os.O_RDONLY)
    try:
        assert local_reads._in_page_cache(fd)  # pylint: disable=protected-access
    finally:
        os.close(fd)


def test_prefetch_takes_what_it_cannot_open_in_its_stride(tmp_path):
    real = tmp_path / 'real.jpg'
    real.write_bytes(b'x' * 100)
    fifo = tmp_path / 'pipe.jpg'
    os.mkfifo(fifo)  # opening it for reading, blocking, would wait for a writer forever
    done = threading.Event()

    def prefetch():
        storage.prefetch_local(
            [None, str(tmp_path / 'missing.jpg'), 'gs://bucket/a.jpg', str(fifo), str(real)]
        )
        done.set()

    worker = threading.Thread(target=prefetch, daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert done.is_set(), 'prefetch_local blocked'
    assert real.read_bytes() == b'x' * 100


def _open_descriptors():
    return len(os.listdir('/proc/self/fd'))


def test_a_read_after_prefetching_uses_the_descriptor_opened_ahead(tmp_path, monkeypatch):
    monkeypatch.setattr(local_reads, '_in_page_cache', lambda fd: False)  # as on a cold cache
    paths = []
    for i in range(10):
        path = tmp_path / f'{i}.jpg'
        path.write_bytes(bytes([i]) * 100)
        paths.append(str(path))
    before = _open_descriptors()
    read = []
    for path in storage.prefetching(paths, lambda path: path, ahead=4):
        os.unlink(path)  # gone by its name: only the descriptor opened ahead still reads it
        read.append(storage.read_input(path, max_bytes=1000))
    assert read == [bytes([i]) * 100 for i in range(10)]
    assert _open_descriptors() == before


def test_descriptors_no_read_took_are_closed_when_prefetching_ends(tmp_path):
    paths = []
    for i in range(10):
        path = tmp_path / f'{i}.jpg'
        path.write_bytes(b'x')
        paths.append(str(path))
    before = _open_descriptors()
    for i, _ in enumerate(storage.prefetching(paths, lambda path: path, ahead=4)):
        if i == 5:  # a step that stops early, its next files asked for
            assert _open_descriptors() > before
            break
    assert _open_descriptors() == before
    assert storage.read_input(paths[7]) == b'x'  # read by its name, as without prefetching
