"""Archives and arrays on gs://, read where they are on a real GCS emulator: the same records as
the same files on local disk (but for `image/filename`, which names where each came from)."""

import pytest
from test_archive_inputs import shard_records

from pipelines import launcher

import containers_for_tests as made
import images_for_tests as imgs

pytest_plugins = ['gcs_emulator']

FLAGS = ('--splits', 'train=0.6,test=0.4', '--num-shards', '2', '--seed', '3', '--no-analyze')


def _run(*args):
    return launcher.run(['--direct_running_mode=in_memory', '--no_auth', *FLAGS, *args])


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    """A tree, its tar, .tar.gz and zip, its per-class tars, and MNIST-like IDX files."""
    folder = tmp_path_factory.mktemp('gcs-archives')
    tree = folder / 'tree'
    imgs.write_tree(tree, 6, ('ant', 'bee', 'cat'))
    archived = folder / 'archived'
    archived.mkdir()
    made.tar_tree(tree, archived / 'tree.tar')
    made.tar_tree(tree, archived / 'tree.tgz', 'tree', compress=True)
    made.zip_tree(tree, archived / 'tree.zip')
    (folder / 'classes').mkdir()
    for name in ('ant', 'bee', 'cat'):
        made.tar_tree(tree / name, folder / 'classes' / f'{name}.tar')
    (folder / 'mnist').mkdir()
    made.mnist_like(folder / 'mnist')
    return folder


@pytest.fixture(scope='module')
def uploaded(gcs, files):
    for name in ('archived', 'classes', 'mnist'):
        gcs.upload_tree(files / name, name)
    return gcs


@pytest.mark.parametrize('name', ['archived/tree.tar', 'archived/tree.tgz', 'archived/tree.zip'])
def test_a_gs_archive_builds_the_records_of_the_local_tree(uploaded, files, tmp_path, name):
    _run('--input', str(files / 'tree'), '--output', str(tmp_path / 'local'))
    remote = _run('--input', uploaded.uri(name), '--output', str(tmp_path / 'remote'))
    assert remote['counts']['written'] == 18
    assert shard_records(tmp_path / 'remote') == shard_records(tmp_path / 'local')


def test_a_gs_folder_of_class_tars_and_of_idx_files(uploaded, files, tmp_path):
    _run('--input', str(files / 'classes'), '--output', str(tmp_path / 'local'))
    _run('--input', uploaded.uri('classes'), '--output', str(tmp_path / 'remote'))
    assert shard_records(tmp_path / 'remote') == shard_records(tmp_path / 'local')
    local = _run('--input', str(files / 'mnist'), '--output', str(tmp_path / 'mnist-local'))
    remote = _run('--input', uploaded.uri('mnist'), '--output', str(tmp_path / 'mnist-remote'))
    assert remote['counts'] == local['counts'] and remote['counts']['written'] == 17
    assert shard_records(tmp_path / 'mnist-remote') == shard_records(tmp_path / 'mnist-local')


def test_gs_webdataset_shards_build_as_the_same_shards_on_disk(gcs, tmp_path):
    """Their labels are members whose bytes the workers' index holds for the listing."""
    shards = tmp_path / 'shards'
    shards.mkdir()
    for shard in range(2):
        made.webdataset_shard(
            shards / f'shard-{shard:02d}.tar',
            {
                f'{shard}{i:03d}': {'jpg': imgs.jpeg(shard * 9 + i, i % 2), 'cls': str(i % 2)}
                for i in range(5)
            },
        )
    local = _run('--input', str(shards), '--output', str(tmp_path / 'local'))
    remote = _run(
        '--input', gcs.upload_tree(shards, 'shards'), '--output', str(tmp_path / 'remote')
    )
    assert remote['counts'] == local['counts'] and remote['counts']['written'] == 10
    assert remote['labels'] == local['labels'] == ['0', '1']
    assert shard_records(tmp_path / 'remote') == shard_records(tmp_path / 'local')


def test_gs_detection_sets_in_archives_build_as_the_sets_extracted(gcs, tmp_path, caplog):
    """A VOC tar and a YOLO zip as --input, a COCO file whose --image-root is a .tar.gz, all on
    gs://: indexed by the build's workers (the annotation files' bytes in their indexes), built
    as the same sets on local disk."""
    import object_sets  # pylint: disable=import-outside-toplevel
    from test_object_archives import assert_same_build  # pylint: disable=import-outside-toplevel
    from test_object_archives import build  # pylint: disable=import-outside-toplevel
    from test_object_archives import tar_of  # pylint: disable=import-outside-toplevel
    from test_object_archives import zip_of  # pylint: disable=import-outside-toplevel

    object_sets.write_voc(str(tmp_path / 'VOCdevkit' / 'VOC2012'))
    object_sets.write_yolo(str(tmp_path / 'shapes'))
    object_sets.write_coco(str(tmp_path / 'coco'), images=8)
    tar_of(tmp_path / 'VOCdevkit', tmp_path / 'voc.tar', 'VOCdevkit')
    zip_of(tmp_path / 'shapes', tmp_path / 'shapes.zip', 'shapes')
    tar_of(tmp_path / 'coco' / 'images', tmp_path / 'images.tar.gz', 'images', 'w:gz')
    for name in ('voc.tar', 'shapes.zip', 'images.tar.gz'):
        gcs.upload(f'sets/{name}', (tmp_path / name).read_bytes())
    instances = tmp_path / 'coco' / 'annotations' / 'instances.json'
    gcs.upload('sets/instances.json', instances.read_bytes())
    for local, remote, flags in (
        (tmp_path / 'VOCdevkit' / 'VOC2012', 'voc.tar', ()),
        (tmp_path / 'shapes' / 'data.yaml', 'shapes.zip', ()),
        (instances, 'instances.json', ('--image-root', gcs.uri('sets', 'images.tar.gz'))),
    ):
        out = tmp_path / f'out-{remote}'
        facts = build(local, out, '--no_auth')
        caplog.clear()
        with caplog.at_level('INFO', logger='pipelines.inputs.archive_index'):
            remote_facts = build(
                gcs.uri('sets', remote), tmp_path / f'gs-{remote}', '--no_auth', *flags
            )
        assert 'indexing 1 archive on the workers' in caplog.text
        assert_same_build(out, facts, tmp_path / f'gs-{remote}', remote_facts)
