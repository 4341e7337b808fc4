"""Archives on gs:// are indexed by the build's workers, not the launcher: what the launcher reads
does not grow with the archives' bytes, the listing from their indexes is the listing from the
archives, and the build the build of the same files on local disk."""

import io
import os
import tarfile

import apache_beam as beam
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from test_archive_inputs import shard_records

from bench import archive_listing
from pipelines import launcher
from pipelines.core.settings import CLASS_ARCHIVES
from pipelines.core.settings import WEBDATASET
from pipelines.inputs import archive_index
from pipelines.inputs import archive_inputs

import containers_for_tests as made
import images_for_tests as imgs

pytest_plugins = ['gcs_emulator']

FLAGS = ('--splits', 'train=0.5,test=0.5', '--num-shards', '2', '--seed', '3', '--no-analyze')
CLASSES = 12


def _run(*args, mode='in_memory'):
    return launcher.run([f'--direct_running_mode={mode}', '--no_auth', *FLAGS, *args])


def _class_tar(path, class_index, side):
    """A class's tar of three JPEGs of side `side`."""
    members = {f'{i}.jpg': imgs.jpeg(i, class_index, size=(side, side)) for i in range(3)}
    return made.tar_of(path, members)


@pytest.fixture(scope='module')
def class_tars(gcs, tmp_path_factory):
    """{side: (local folder, gs:// folder, bytes in all)} of CLASSES class tars of small images,
    and of the same images 256 times larger in pixels."""
    made_tars = {}
    for side in (16, 256):
        folder = tmp_path_factory.mktemp(f'tars-{side}')
        for k in range(CLASSES):
            _class_tar(folder / f'n{k:08d}.tar', k, side)
        size = sum(os.path.getsize(folder / name) for name in os.listdir(folder))
        made_tars[side] = (folder, gcs.upload_tree(folder, f'tars-{side}'), size)
    return made_tars


def _launcher_reads(uri, out):
    """{'requests', 'bytes'} this process (the launcher) asked of Cloud Storage for a build of
    `uri`, whose workers are processes of their own."""
    with archive_listing.counting_responses() as counts:
        _run(
            '--input',
            uri,
            '--input-form',  # no glance at the first archive's first members: bounded, not 0
            CLASS_ARCHIVES,
            '--output',
            str(out),
            '--direct_num_workers=1',
            mode='multi_processing',
        )
    return counts


def test_what_the_launcher_reads_does_not_grow_with_the_archives(class_tars, tmp_path):
    _, small_uri, small_bytes = class_tars[16]
    _, large_uri, large_bytes = class_tars[256]
    assert large_bytes > 4 * small_bytes  # (a tar is padded to 10,240-byte records)
    small = _launcher_reads(small_uri, tmp_path / 'small')
    large = _launcher_reads(large_uri, tmp_path / 'large')
    # The listing of the folder and each archive's index: a few KB an archive, whatever its size
    assert large['bytes'] <= small['bytes'] + 64 * CLASSES  # (sizes with more digits)
    assert large['bytes'] <= 4096 * CLASSES < large_bytes / 10
    assert large['requests'] == small['requests']
    assert shard_records(tmp_path / 'large') != shard_records(tmp_path / 'small')


def test_a_build_from_gs_archives_is_the_build_from_local_ones(class_tars, tmp_path):
    local_folder, uri, _ = class_tars[16]
    local = _run('--input', str(local_folder), '--output', str(tmp_path / 'local'))
    remote = _run('--input', uri, '--output', str(tmp_path / 'remote'))
    assert remote['counts'] == local['counts'] and remote['labels'] == local['labels']
    assert shard_records(tmp_path / 'remote') == shard_records(tmp_path / 'local')


def _odd_archives(folder):
    """Archives of every kind, holding what listing rejects or keeps the bytes of."""
    names = ['../escape.jpg', 'ok.jpg', 'twice.jpg', 'link', 'twice.jpg', 'cut.jpg']
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode='w') as tar:
        for index, name in enumerate(names):
            info = made.link(name, 'ok.jpg') if name == 'link' else tarfile.TarInfo(name)
            info.size = 0 if name == 'link' else len(imgs.jpeg(index))
            tar.addfile(info, None if name == 'link' else io.BytesIO(imgs.jpeg(index)))
    whole = data.getvalue()
    (folder / 'a.tar').write_bytes(whole[: whole.rindex(imgs.jpeg(5)) + 100])  # cut.jpg cut
    tar = str(folder / 'a.tar')
    shard = made.webdataset_shard(
        folder / 'b.tar', {'s1': {'jpg': imgs.jpeg(5), 'cls': '3', 'json': {'label': 'x'}}}
    )
    zipped = made.zip_of(folder / 'c.zip', {'d/e.jpg': imgs.jpeg(6), 'f.png': imgs.png(7)})
    compressed = made.tar_of(folder / 'd.tgz', {'g.jpg': imgs.jpeg(8)}, compress=True)
    (folder / 'e.tar').write_bytes(b'not a tar at all' * 64)
    return [tar, shard, zipped, compressed, str(folder / 'e.tar')]


@pytest.mark.parametrize('form', [CLASS_ARCHIVES, WEBDATASET])
def test_an_archive_index_holds_the_members_listing_reads(tmp_path, form):
    files = _odd_archives(tmp_path)

    def run_indexing(transform):
        with TestPipeline() as pipeline:
            _ = pipeline | transform

    found = archive_index.indexed(run_indexing, files, form, str(tmp_path / 'index'))
    here = archive_inputs.read_here(files, form)
    indexed = [next(found) for _ in files[:-1]]
    assert indexed == [next(here) for _ in files[:-1]]
    rejected = {m.reject for _, members in indexed for m in members}
    assert {
        'unsafe_member_name',
        'archive_link',
        'duplicate_member',
        'truncated_archive',
    } <= rejected
    labels = [m.data for m in indexed[1][1] if m.name in ('s1.cls', 's1.json')]
    assert labels == ([b'3', b'{"label": "x"}'] if form == WEBDATASET else [None, None])
    with pytest.raises(ValueError, match='e.tar is not a readable tar archive'):
        next(found)
    with pytest.raises(ValueError, match='e.tar is not a readable tar archive'):
        next(here)


def test_the_index_step_spreads_the_archives_and_leaves_no_index(tmp_path):
    files = _odd_archives(tmp_path)[:4]
    folder = tmp_path / 'index'
    ran = []

    def run_indexing(transform):
        ran.append(transform)
        with TestPipeline() as pipeline:
            _ = pipeline | transform

    found = list(archive_index.indexed(run_indexing, files, CLASS_ARCHIVES, str(folder)))
    assert len(found) == 4 and len(ran) == 1
    assert isinstance(ran[0], beam.PTransform) and not folder.exists()
