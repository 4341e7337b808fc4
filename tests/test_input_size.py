"""Bounded memory and time per input: an input larger than --max-image-bytes is rejected as
`too_large` from its size alone, before it is read; below it, validation holds one image's bytes
at a time per thread. (The issue's 3 GB file as an operator builds it, with the build's peak
memory: tests/test_operators.py.)"""

import json
import os

import pytest

from imageshards import storage
from pipelines import launcher
from pipelines.core import options
from pipelines.core.settings import ValidationSettings
from pipelines.core.sources import SMALL_INPUT_BYTES
from pipelines.inputs import listing
from pipelines.inputs.entries import InputEntry
from pipelines.validation import validate

import images_for_tests as imgs

HUGE = 3 << 30  # the 3 GB, as a sparse file: no disk, no memory until it is read


def sparse_jpeg(path, size=HUGE):
    """A file of `size` bytes named .jpg that starts as a JPEG does (the rest a hole)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, 'wb') as f:
        f.write(imgs.jpeg(0)[:200])
        f.truncate(size)
    return path


@pytest.fixture
def tree_with_a_huge_file(tmp_path):
    root = tmp_path / 'in'
    imgs.write_tree(root, 3, ('cat', 'dog'))
    sparse_jpeg(root / 'cat' / 'video.jpg')
    return root


@pytest.fixture
def reads(monkeypatch):
    """The paths the build reads, in this process (an in_memory build)."""
    read = []
    read_input = storage.read_input

    def spy(path, max_bytes=None):
        read.append(path)
        return read_input(path, max_bytes)

    monkeypatch.setattr(storage, 'read_input', spy)
    return read


def _rejections(out):
    return {
        os.path.basename(row['path']): (row['reason'], row['detail'])
        for row in map(json.loads, (out / 'rejected.jsonl').read_text().splitlines())
    }


def test_listing_knows_every_local_file_size(tree_with_a_huge_file):
    entries = listing.list_inputs(str(tree_with_a_huge_file)).entries
    sizes = {entry.key: entry.size for entry in entries}
    assert sizes['cat/video.jpg'] == HUGE
    assert all(size == os.path.getsize(tree_with_a_huge_file / key) for key, size in sizes.items())


def test_the_space_estimate_leaves_out_an_input_that_will_be_rejected_unread(
    tree_with_a_huge_file, tmp_path
):
    """A 3 GB file over --max-image-bytes is never written: a disk with less than 3 GB free
    must not refuse the build for it (the estimate counts the six small images only)."""
    scan = listing.scan_inputs(str(tree_with_a_huge_file))
    summary = listing.write_listing_file(scan, str(tmp_path / 'l.jsonl'), 4, 'in', 1 << 20)
    files = [p for p in tree_with_a_huge_file.rglob('*') if p.is_file()]
    small = sum(p.stat().st_size for p in files if p.name != 'video.jpg')
    assert summary.num_inputs == 7 and summary.input_bytes == small < HUGE
    scan = listing.scan_inputs(str(tree_with_a_huge_file))  # its entries stream once
    unlimited = listing.write_listing_file(scan, str(tmp_path / 'm.jsonl'), 4, 'in')
    assert unlimited.input_bytes == small + HUGE


def test_a_huge_input_is_rejected_from_its_listed_size_without_being_read(
    tree_with_a_huge_file, tmp_path, reads
):
    out = tmp_path / 'out'
    argv = ['--input', str(tree_with_a_huge_file), '--output', str(out), '--no-analyze']
    dataset = launcher.run(argv + ['--direct_running_mode=in_memory'])
    assert _rejections(out) == {
        'video.jpg': (
            'too_large',
            f'{HUGE:,} bytes, more than --max-image-bytes 268,435,456; not read',
        )
    }
    assert dataset['counts']['written'] == 6 and not [p for p in reads if 'video' in p]


def test_a_manifest_row_of_a_huge_file_is_rejected_unread_and_one_of_unknown_size_after_a_stat(
    tree_with_a_huge_file, tmp_path, reads
):
    manifest = tree_with_a_huge_file / 'images.csv'
    manifest.write_text(
        'path,label\ncat/video.jpg,cat\ndog/img_0003.jpg,dog\ncat/img_0000.jpg,cat\n'
    )
    for follow, read in ((False, []), (True, [str(tree_with_a_huge_file / 'cat' / 'video.jpg')])):
        # With --follow-symlinks listing does not look at a row's file: its size is unknown
        # until validation opens it, and takes its size before it reads a byte.
        out = tmp_path / f'out-{follow}'
        argv = ['--input', str(manifest), '--output', str(out), '--no-analyze']
        argv += ['--direct_running_mode=in_memory'] + (['--follow-symlinks'] if follow else [])
        reads.clear()
        launcher.run(argv)
        reason, detail = _rejections(out)['video.jpg']
        assert (reason, detail.startswith(f'{HUGE:,} bytes, more than')) == ('too_large', True)
        assert [p for p in reads if 'video' in p] == read


def test_max_image_bytes_is_a_flag_stated_in_help():
    # The help the command prints (tests/test_command_line.py runs it, printed once).
    shown = options.build_arg_parser().format_help()
    assert '--max-image-bytes' in shown and '256 MiB' in shown
    assert '--no-space-check' in shown


def test_a_local_read_refuses_a_file_over_the_limit_before_reading_it(tmp_path):
    path = sparse_jpeg(tmp_path / 'x.jpg')
    with pytest.raises(storage.TooLarge, match=f'{HUGE:,} bytes, more than'):
        storage.read_input(str(path), max_bytes=1 << 20)  # reading 3 GB would take seconds
    small = tmp_path / 'y.jpg'
    small.write_bytes(imgs.jpeg(1))
    assert storage.read_input(str(small), max_bytes=small.stat().st_size) == imgs.jpeg(1)


def test_the_kernel_is_asked_for_a_bounded_prefix_of_each_file(tmp_path, monkeypatch):
    asked = []
    monkeypatch.setattr(
        os, 'posix_fadvise', lambda fd, offset, length, advice: asked.append(length)
    )
    storage.prefetch_local([str(sparse_jpeg(tmp_path / 'x.jpg'))])
    assert asked == [storage.PREFETCH_MAX_BYTES] and storage.PREFETCH_MAX_BYTES < HUGE // 40


def test_validation_keeps_no_bytes_of_a_large_image_for_later(tmp_path):
    """The outcomes a worker's thread pool holds until they are taken in order carry the bytes
    of small images only (kept for the writer): at most one larger image per thread is held,
    while it is checked."""
    small, large = tmp_path / 'small.png', tmp_path / 'large.png'
    small.write_bytes(imgs.png(1))
    large.write_bytes(imgs.encode(imgs.pixels(2, size=(400, 400)), 'PNG', compress_level=0))
    assert len(small.read_bytes()) <= SMALL_INPUT_BYTES < len(large.read_bytes())
    settings = ValidationSettings({'x': 0}, max_pixels=10**8, max_image_bytes=1 << 30)
    work_item = validate._ValidateWorkItem('', settings, None, None)  # pylint: disable=protected-access
    outcomes = [
        work_item._validate(InputEntry(i, str(path), path.name, 'x'))  # pylint: disable=protected-access
        for i, path in enumerate((small, large))
    ]
    assert [stored for _, stored, _ in outcomes] == [small.read_bytes(), None]


def _meta_of(data, resized=False):
    import google_crc32c  # pylint: disable=import-outside-toplevel

    from pipelines.core.blocks import ImageMeta  # pylint: disable=import-outside-toplevel

    return ImageMeta(
        id=0,
        key='x.jpg',
        label=0,
        split='',
        format='JPEG',
        height=8,
        width=8,
        channels=3,
        sha256=b'',
        num_bytes=100 if resized else len(data),  # a resize stores fewer bytes than its source
        source_sha256=b'',
        source_crc32c=google_crc32c.value(data),
        reencoded=False,
        original_height=16 if resized else 0,
        original_width=16 if resized else 0,
    )


@pytest.mark.parametrize('resized', [False, True])
def test_the_writer_reads_no_more_of_an_input_than_validation_could(tmp_path, resized):
    """An input replaced by a huge file between validation and writing is found from its
    size: the writer neither reads it nor holds it (a record stored as it is knows its
    source's size; a resize's source is read up to --max-image-bytes)."""
    from pipelines.writing import encode  # pylint: disable=import-outside-toplevel

    path = tmp_path / 'x.jpg'
    data = imgs.jpeg(0)
    path.write_bytes(data)
    meta = _meta_of(data, resized)
    assert encode.read_checked(str(path), meta, 1 << 20) == data
    sparse_jpeg(path, HUGE)  # a hole: reading it would take 3 GB of memory
    with pytest.raises(encode.InputChangedError, match='changed while the build was running') as e:
        encode.read_checked(str(path), meta, 1 << 20)
    assert f'now {HUGE:,} bytes' in str(e.value) and 'not read' in str(e.value)
    path.write_bytes(data[:-1] + b'\x00')  # the same size, other bytes
    with pytest.raises(encode.InputChangedError, match='its bytes differ'):
        encode.read_checked(str(path), meta, 1 << 20)
