"""Where an input's bytes are and the one reader of them (pipelines/core/sources.py, reading.py):
sources written as text and read back, members read by range, inflated within their declared
size, streams read forward, and the listing's work items that keep a stream whole."""

import gzip
import zipfile

import numpy as np
import pytest

from imageshards import storage
from pipelines.core import reading
from pipelines.core import sources
from pipelines.core.sources import Source
from pipelines.core.sources import ZipEntry
from pipelines.inputs import listing
from pipelines.inputs.entries import InputEntry


@pytest.mark.parametrize(
    'source',
    [
        Source('/data/a:b!c.tar', 'x/y:z!.jpg', sources.RANGE, 512, 3000),
        Source(
            'gs://b/mnist.npz',
            'x_train/7',
            sources.ZIP_STREAM,
            128,
            784,
            sources.PIXELS,
            (28, 28, 1),
            ZipEntry(10, 20, 30, 40, 8),
        ),
        Source('/d/latin1_\udce9t\udce9.tgz', 'a/\udce9.jpg', sources.GZIP, 0, 1),
    ],
)
def test_a_source_round_trips_through_its_text(source):
    assert Source.decode(source.encode()) == source
    assert source.display == f'{source.container}!{source.member}'
    assert sources.is_sequential(source.encode()) == (source.how != sources.RANGE)


def test_zip_members_are_inflated_and_checked_within_their_declared_size(tmp_path):
    path = tmp_path / 'x.zip'
    with zipfile.ZipFile(path, 'w', compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr('a.jpg', b'abc' * 1000)
    info = zipfile.ZipFile(path).getinfo('a.jpg')

    def source(**changes):
        entry = ZipEntry(info.header_offset, info.compress_size, info.file_size, info.CRC, 8)
        return Source(
            str(path), 'a.jpg', sources.ZIP, 0, info.file_size, zip_entry=entry._replace(**changes)
        ).encode()

    reader = reading.Reader()
    assert reader.read('', source(), 10_000) == b'abc' * 1000
    with pytest.raises(reading.Unreadable) as bomb:
        reader.read('', source(size=100), 10_000)
    assert bomb.value.reason == 'zip_bomb'
    with pytest.raises(reading.Unreadable) as crc:
        reader.read('', source(crc32=info.CRC ^ 1), 10_000)
    assert crc.value.reason == 'corrupt_archive'
    with pytest.raises(storage.TooLarge):
        reader.read('', source(), 2_999)  # from the declared size, unread


def test_a_stream_is_read_forward_and_a_cut_one_is_truncated(tmp_path):
    data = bytes(range(256)) * 100
    (tmp_path / 'x.gz').write_bytes(gzip.compress(data))
    (tmp_path / 'cut.gz').write_bytes(gzip.compress(data)[:200])
    reader = reading.Reader(contiguous=True)
    for offset in (0, 1000, 20_000, 500):  # the last one behind: read again from the start
        source = Source(str(tmp_path / 'x.gz'), 'm', sources.GZIP, offset, 300)
        assert reader.read('', source.encode(), 1000) == data[offset : offset + 300]
    with pytest.raises(reading.Unreadable) as cut:
        reader.read(
            '', Source(str(tmp_path / 'cut.gz'), 'm', sources.GZIP, 20_000, 300).encode(), 1000
        )
    assert cut.value.reason in ('truncated_archive', 'corrupt_archive')
    reader.close()


def test_an_array_row_is_stored_as_a_png_of_exactly_its_pixels(tmp_path):
    import io  # pylint: disable=import-outside-toplevel

    from PIL import Image  # pylint: disable=import-outside-toplevel

    rows = np.random.default_rng(0).integers(0, 256, (3, 5, 7, 3), dtype=np.uint8)
    (tmp_path / 'rows.bin').write_bytes(rows.tobytes())
    row = Source(
        str(tmp_path / 'rows.bin'), '2', sources.RANGE, 2 * 105, 105, sources.PIXELS, (5, 7, 3)
    )
    png = reading.Reader().read('', row.encode(), 1000)
    assert png == reading.Reader().read('', row.encode(), 1000)  # the same bytes every time
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(png))), rows[2])


def test_a_sequential_stream_is_one_work_item_over_several_lines(tmp_path):
    def entry(i, container=None):
        source = ''
        if container:
            source = Source(container, str(i), sources.GZIP, i * 10, 10).encode()
        return InputEntry(i, f'/p/{i}', f'k/{i}', 'a', source=source)

    entries = [entry(i) for i in range(3)] + [entry(i, '/s.tgz') for i in range(3, 10)]
    entries += [entry(i, '/t.tgz') for i in range(10, 12)] + [entry(12)]
    path = str(tmp_path / 'listing.jsonl')
    listing.write_listing(entries, path, chunk_size=3)
    items = listing.work_items(path)
    found = [[e.id for e in listing.read_work_item(path, item)] for item in items]
    assert found == [[0, 1, 2], [3, 4, 5, 6, 7, 8, 9], [10, 11], [12]]
    lines = [[e.id for e in line] for line in listing.read_work_item_lines(path, items[1])]
    assert lines == [[3, 4, 5], [6, 7, 8], [9]]
