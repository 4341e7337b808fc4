"""An archive cut short is said, not skipped: wherever a tar, .tar.gz or zip ends early (inside a
member's data, in the padding after one, exactly where the next member's header should be), the
member it cuts is rejected as `truncated_archive` by its name, or where it cuts none, the rest
of the archive is, in one rejection; the build's log names the archive as incomplete."""

import gzip
import io
import logging
import pathlib
import tarfile
import zlib

import pytest
from test_archive_inputs import rejected

from pipelines import launcher
from pipelines.inputs import tar_and_zip

import containers_for_tests as made
import images_for_tests as imgs

FLAGS = ('--splits', 'train=1.0', '--num-shards', '1', '--seed', '3', '--no-analyze')


def _run(*args):
    return launcher.run(['--direct_running_mode=in_memory', *FLAGS, *args])


def _members(count):
    """{name: JPEG bytes} of `count` images in two class folders, of differing sizes."""
    return {
        f'{("cat", "dog")[i % 2]}/{i:04d}.jpg': imgs.jpeg(i, i % 2, size=(24 + i % 9, 32 + i % 7))
        for i in range(count)
    }


def _cut(path, at, into):
    """A copy of the archive `path` cut to its first `at` bytes, at `into`."""
    into.write_bytes(pathlib.Path(path).read_bytes()[:at])
    return str(into)


def _offsets(path):
    """[(header offset, data offset, size)] of a tar's members."""
    with tarfile.open(path) as tar:
        return [(info.offset, info.offset_data, info.size) for info in tar.getmembers()]


def _truncations(path):
    return [member for member in tar_and_zip.members(path) if member.reject]


def test_a_tar_cut_at_sixty_percent_rejects_what_is_cut_and_says_so(tmp_path, caplog):
    """The issue's case: 505 images, the tar cut at 60% of its bytes. Each image here takes a
    header and three blocks, so that 60% of the tar (10,240-byte records) falls exactly where
    a member's header should be: every member before is whole, and none says the tar ends."""
    images = {
        f'{("cat", "dog")[i % 2]}/{i:04d}.jpg': imgs.jpeg(i, i % 2, (40, 40)) for i in range(505)
    }
    whole = made.tar_of(tmp_path / 'whole.tar', images)
    at = pathlib.Path(whole).stat().st_size * 6 // 10
    cut = _cut(whole, at, tmp_path / 'cut.tar')
    intact = sum(data + length <= at for _, data, length in _offsets(whole))
    assert at in [offset for offset, _, _ in _offsets(whole)]
    with caplog.at_level(logging.WARNING):
        dataset = _run('--input', cut, '--output', str(tmp_path / 'out'))
    counts = dataset['counts']
    assert counts['written'] == intact and 0 < intact < 505
    assert counts['rejected_by_reason'] == {'truncated_archive': 1}
    assert counts['inputs'] == counts['written'] + counts['rejected']
    (row,) = rejected(tmp_path / 'out')
    assert row['reason'] == 'truncated_archive' and row['path'].startswith(cut + '!')
    assert any(cut in line and 'incomplete' in line for line in caplog.messages)


def test_a_tar_cut_where_a_header_should_be_is_incomplete(tmp_path):
    whole = made.tar_of(tmp_path / 'whole.tar', _members(6))
    fourth = _offsets(whole)[3][0]
    (end,) = _truncations(_cut(whole, fourth, tmp_path / 'cut.tar'))
    assert end.reject == 'truncated_archive' and end.name == f'@{fourth}'
    assert f'ends at byte {fourth:,}' in end.detail


def test_a_tar_cut_in_the_padding_after_a_member_keeps_the_member(tmp_path):
    whole = made.tar_of(tmp_path / 'whole.tar', _members(6))
    _, data, length = _offsets(whole)[2]
    cut = _cut(whole, data + length + 1, tmp_path / 'cut.tar')
    found = list(tar_and_zip.members(cut))
    assert [member.name for member in found[:3]] == list(_members(3))
    assert not any(member.reject for member in found[:3])
    assert [member.reject for member in found[3:]] == ['truncated_archive']


def test_a_tar_cut_inside_a_member_rejects_that_member_alone(tmp_path):
    whole = made.tar_of(tmp_path / 'whole.tar', _members(6))
    _, data, length = _offsets(whole)[2]
    (cut,) = _truncations(_cut(whole, data + length // 2, tmp_path / 'cut.tar'))
    assert cut.name == list(_members(3))[2] and cut.reject == 'truncated_archive'


def test_a_whole_tar_without_its_end_blocks_cut_short_is_whole(tmp_path):
    """A tar cut inside its end-of-archive blocks has lost nothing."""
    whole = made.tar_of(tmp_path / 'whole.tar', _members(6))
    offset, data, length = _offsets(whole)[-1]
    end = data + -(-length // 512) * 512
    assert not _truncations(_cut(whole, end + 100, tmp_path / 'cut.tar'))


def _gzip_cut(whole, in_data):
    """(where to cut a .tar.gz, the member in whose data (`in_data`) or header its decompressed
    bytes then end): the first such place from 60% of its bytes on."""
    data = pathlib.Path(whole).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        spans = [
            (info.name, info.offset, info.offset_data, info.offset_data + info.size) for info in tar
        ]
    for at in range(len(data) * 6 // 10, len(data)):
        end = len(zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data[:at]))
        for name, header, start, stop in spans:
            if (start < end < stop) if in_data else (header < end < start):
                return at, name
    raise AssertionError('no such cut')


@pytest.mark.parametrize('kind', ['tar.gz', 'zip'])
def test_a_compressed_archive_cut_short_rejects_the_member_it_cuts(tmp_path, caplog, kind):
    members = _members(40)
    if kind == 'zip':
        whole = made.zip_of(tmp_path / 'whole.zip', members)
        at = pathlib.Path(whole).stat().st_size * 6 // 10
    else:
        whole = made.tar_of(tmp_path / 'whole.tar.gz', members, compress=True)
        at, _ = _gzip_cut(whole, in_data=True)
    cut = _cut(whole, at, tmp_path / f'cut.{kind}')
    with caplog.at_level(logging.WARNING):
        dataset = _run('--input', cut, '--output', str(tmp_path / 'out'))
    counts = dataset['counts']
    assert counts['rejected_by_reason'] == {'truncated_archive': 1}
    assert counts['inputs'] == counts['written'] + 1 and counts['written'] >= 15
    (row,) = rejected(tmp_path / 'out')
    assert row['path'].split('!', 1)[1] in members  # the member cut, by its name
    assert any(cut in line and 'incomplete' in line for line in caplog.messages)


def test_a_tar_gz_cut_in_a_header_keeps_every_member_before_it(tmp_path):
    whole = made.tar_of(tmp_path / 'whole.tar.gz', _members(40), compress=True)
    at, name = _gzip_cut(whole, in_data=False)
    found = list(tar_and_zip.members(_cut(whole, at, tmp_path / 'cut.tar.gz')))
    assert [m.name for m in found if not m.reject] == list(_members(40))[: len(found) - 1]
    assert found[-1].name.startswith('@') and found[-1].reject == 'truncated_archive'
    assert found[-2].name == list(_members(40))[list(_members(40)).index(name) - 1]
