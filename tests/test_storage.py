"""imageshards/storage.py: asking the kernel for the files a step reads next."""

import os
import threading

import pytest

from imageshards import storage


@pytest.mark.parametrize('count', [0, 1, 3, 4, 5, 11])
def test_prefetching_yields_every_item_in_order(tmp_path, count):
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
    for path in storage.prefetching(paths, path_of, ahead=4):
        assert path in asked, 'yielded before its file was asked for'
        yielded.append(path)
    assert yielded == paths
    assert asked == paths  # each file asked for once, in order


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
