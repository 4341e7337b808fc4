"""Builds that read from and write to gs://, on a real GCS emulator, against local builds.

A build of the same images with the same seed must give the same records in the same shards and
order whether they live on local disk or in gs://; only the locations in them differ:
`image/filename` (the source) and, in `paths` builds, `image/path`.
"""

import csv
import hashlib
import io
import json

import pytest

from imageshards.kinds import example_bytes
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards.shard_formats import tfrecord
from pipelines import launcher

import images_for_tests as imgs

pytest_plugins = ['gcs_emulator']

CLASSES = ('ant', 'bee', 'cat')
FLAGS = ('--splits', 'train=0.75,val=0.25', '--num-shards', '3', '--seed', '7')
BROKEN = {
    'bee/truncated.jpg': (imgs.jpeg(1, size=(64, 64))[:300], 'truncated'),
    'cat/empty.jpg': (b'', 'empty_file'),
    'ant/page.png': (b'<!doctype html><title>404</title>', 'not_an_image'),
}


# The TFDS metadata of a build with no label levels (imageshards/tfds_metadata.py).
TFDS_FILES = ['dataset_info.json', 'features.json', 'image.class.label.labels.txt']
# The tf.Transform output, written locally by TensorFlow and copied up by Finalize.
TRANSFORM_FILES = [
    'transform_fn/saved_model.pb',
    'transform_fn/fingerprint.pb',
    'transform_fn/assets/label',
    'transform_fn/assets/pixel_statistics',
    'transform_fn/assets.extra/analysis.json',
    'transform_fn/variables/variables.index',
    'transform_fn/variables/variables.data-00000-of-00001',
    'transformed_metadata/schema.pbtxt',
    'transformed_metadata/asset_map',
    'metadata/schema.pbtxt',  # the records' raw schema, where TFTransformOutput looks for it
]


def _run(*args):
    return launcher.run(['--direct_running_mode=in_memory', '--no_auth', *args])


@pytest.fixture(scope='module')
def data(tmp_path_factory):
    """data/images/<class>/... with broken, re-encoded and skipped files; data/manifest.csv."""
    data = tmp_path_factory.mktemp('gcs-data') / 'data'
    images = data / 'images'
    imgs.write_tree(images, 10, CLASSES)
    for relative, (content, _) in BROKEN.items():
        (images / relative).write_bytes(content)
    (images / 'ant' / 'rotated.jpg').write_bytes(imgs.exif_rotated_jpeg(5))
    (images / 'ant' / 'notes.txt').write_text('not an image')
    (images / 'cat' / '.hidden.jpg').write_bytes(imgs.jpeg(6))
    listed = sorted(
        path.relative_to(data).as_posix()
        for path in images.rglob('*')
        if path.suffix in ('.jpg', '.png') and not path.name.startswith('.')
    )
    with open(data / 'manifest.csv', 'w', newline='', encoding='utf-8') as f:
        writer = csv.writer(f)
        writer.writerow(['path', 'label', 'split'])
        # Relative paths, in an order that is not the tree's; some rows fix their split.
        for i, path in enumerate(reversed(listed)):
            writer.writerow([path, path.split('/')[1], 'test' if i % 5 == 0 else ''])
        writer.writerow(['images/ant/missing.jpg', 'ant', ''])
        writer.writerow([listed[0], 'ant', ''])  # a duplicate row
    return data


@pytest.fixture(scope='module')
def gcs_data(gcs, data):
    return gcs.upload_tree(data, 'data')


@pytest.fixture(scope='module')
def tree_builds(gcs, data, gcs_data, tmp_path_factory):
    local_out = tmp_path_factory.mktemp('local-tree') / 'out'
    local = _run('--input', str(data / 'images'), '--output', str(local_out), *FLAGS)
    remote_out = gcs.uri('tree-out')
    remote = _run('--input', f'{gcs_data}/images', '--output', remote_out, *FLAGS)
    return (local_out, local), (remote_out, remote)


@pytest.fixture(scope='module')
def manifest_builds(gcs, data, gcs_data, tmp_path_factory):
    local_out = tmp_path_factory.mktemp('local-manifest') / 'out'
    flags = [*FLAGS, '--format', 'paths']
    local = _run('--input', str(data / 'manifest.csv'), '--output', str(local_out), *flags)
    remote_out = gcs.uri('manifest-out')
    remote = _run('--input', f'{gcs_data}/manifest.csv', '--output', remote_out, *flags)
    return (local_out, local), (remote_out, remote)


def _with_local_paths(data, fmt, moves):
    """A gs:// shard's bytes with image/filename and image/path moved to the local folders.

    Args:
        moves: [(gs:// prefix, local prefix)]; every filename or path starts with one of them.
    """
    schema = kinds.Classification(fmt).schema
    out = []
    for record in tfrecord.read_records(io.BytesIO(data)):
        feature = example_bytes.example_class().FromString(record).features.feature
        values = {
            key: (feature[key].int64_list if kind == 'int64' else feature[key].bytes_list).value[0]
            for key, kind in schema.items()
        }
        for key in {features.FILENAME, features.PATH} & set(schema):
            values[key] = _moved(values[key].decode('utf-8'), moves)
        out.append(tfrecord.frame(example_bytes.encode_example(kinds.Classification(fmt), values)))
    return b''.join(out)


def _moved(uri, moves):
    for remote, local in moves:
        if uri.startswith(remote + '/'):
            return local + uri[len(remote) :]
    raise AssertionError(f'{uri} is in none of {[remote for remote, _ in moves]}')


def _assert_same_build_but_paths(gcs, local, remote, local_input, remote_input):
    """Same counts, splits, shards and records; gs:// shards differ only in paths and URIs.

    Args:
        local_input, remote_input: the folder of the local inputs and of their gs:// copies.
    """
    (local_out, mine), (remote_out, theirs) = local, remote
    moves = [(remote_input, local_input), (remote_out, str(local_out))]
    assert json.loads(gcs.read(f'{remote_out}/dataset.json')) == theirs
    for key in ('format', 'seed', 'labels', 'counts', 'features'):
        assert theirs[key] == mine[key], key
    assert list(theirs['splits']) == list(mine['splits'])
    for split, info in mine['splits'].items():
        other = theirs['splits'][split]
        assert {k: v for k, v in other.items() if k != 'shards'} == {
            k: v for k, v in info.items() if k != 'shards'
        }
        for shard, remote_shard in zip(info['shards'], other['shards'], strict=True):
            for key in ('path', 'num_records', 'class_counts'):
                assert remote_shard[key] == shard[key], (shard['path'], key)
            data = gcs.read(f'{remote_out}/{shard["path"]}')
            assert remote_shard['sha256'] == hashlib.sha256(data).hexdigest()
            assert remote_shard['num_bytes'] == len(data)
            moved = _with_local_paths(data, mine['format'], moves)
            assert moved == (local_out / shard['path']).read_bytes(), shard['path']
            assert hashlib.sha256(moved).hexdigest() == shard['sha256']


def test_a_gs_tree_builds_the_records_of_the_same_local_tree(gcs, data, gcs_data, tree_builds):
    local, remote = tree_builds
    assert local[1]['counts']['written'] == 31 and local[1]['counts']['skipped'] == 2
    assert remote[1]['input'] == f'{gcs_data}/images'
    _assert_same_build_but_paths(gcs, local, remote, str(data / 'images'), f'{gcs_data}/images')


def test_a_gs_output_holds_the_build_and_no_temporary_files(gcs, tree_builds):
    remote_out, dataset = tree_builds[1]
    shards = [
        s[key]
        for info in dataset['splits'].values()
        for s in info['shards']
        for key in ('path', 'index_file')
    ]
    prefix = gcs.name(remote_out)
    assert gcs.names(prefix) == sorted(
        f'{prefix}/{name}'
        for name in [
            '_SUCCESS',
            'dataset.json',
            'rejected.jsonl',
            *shards,
            *TFDS_FILES,
            *TRANSFORM_FILES,
        ]
    )
    assert json.loads(gcs.read(f'{remote_out}/dataset.json'))['analysis']['label_counts']


def test_a_gs_manifest_with_relative_paths_builds_the_same_path_records(
    gcs, data, gcs_data, manifest_builds
):
    local, remote = manifest_builds
    assert set(local[1]['splits']) == {'train', 'val', 'test'}
    assert remote[1]['input'] == f'{gcs_data}/manifest.csv'
    _assert_same_build_but_paths(gcs, local, remote, str(data), gcs_data)
    # The lossless copy of the EXIF-rotated JPEG, which `image/path` points at.
    local_copies = sorted((local[0] / 'reencoded').iterdir())
    assert len(local_copies) == remote[1]['counts']['reencoded'] == 1
    name = local_copies[0].name
    assert gcs.read(f'{remote[0]}/reencoded/{name}') == local_copies[0].read_bytes()


@pytest.mark.parametrize('builds', ['tree_builds', 'manifest_builds'])
def test_rejected_gs_inputs_are_reported_with_their_reasons(request, gcs, data, gcs_data, builds):
    local, remote = request.getfixturevalue(builds)
    mine = [json.loads(line) for line in (local[0] / 'rejected.jsonl').read_text().splitlines()]
    theirs = [json.loads(line) for line in gcs.read(f'{remote[0]}/rejected.jsonl').splitlines()]
    assert [(r['id'], r['reason']) for r in theirs] == [(r['id'], r['reason']) for r in mine]
    assert [r['path'] for r in theirs] == [r['path'].replace(str(data), gcs_data, 1) for r in mine]
    assert all(r['detail'] for r in theirs)
    reasons = {r['reason'] for r in theirs}
    assert {reason for _, reason in BROKEN.values()} <= reasons
    if builds == 'manifest_builds':
        assert {'missing_file', 'duplicate_row'} <= reasons


def test_overwrite_and_refusal_of_a_non_empty_gs_output(gcs, tmp_path):
    imgs.write_tree(tmp_path / 'small', 3, ('a', 'b'))
    source = gcs.upload_tree(tmp_path / 'small', 'small')
    out = gcs.uri('reused')
    # The empty `folder/` object that the Cloud console makes for a folder is no content.
    gcs.upload('reused/', b'')
    _run('--input', source, '--output', out, '--num-shards', '3')
    gcs.upload('reused/keep.txt', b'mine')
    with pytest.raises(FileExistsError, match='--overwrite'):
        _run('--input', source, '--output', out, '--num-shards', '2')
    dataset = _run('--input', source, '--output', out, '--num-shards', '2', '--overwrite')
    assert [s['path'] for s in dataset['splits']['train']['shards']] == [
        'train/train-00000-of-00002.tfrecord',
        'train/train-00001-of-00002.tfrecord',
    ]
    assert gcs.names('reused') == sorted(
        [
            'reused/',
            'reused/_SUCCESS',
            'reused/dataset.json',
            'reused/keep.txt',
            'reused/rejected.jsonl',
            'reused/train/train-00000-of-00002.tfrecord',
            'reused/train/train-00000-of-00002.tfrecord.idx',
            'reused/train/train-00001-of-00002.tfrecord',
            'reused/train/train-00001-of-00002.tfrecord.idx',
            *(f'reused/{name}' for name in TFDS_FILES + TRANSFORM_FILES),
        ]
    )
    assert gcs.read(f'{out}/keep.txt') == b'mine'


def test_a_gs_output_left_by_an_unfinished_build_is_refused_with_the_reason(gcs, gcs_data):
    gcs.upload('unfinished/.imageshards-tmp/listing-0123456789ab.jsonl', b'[]\n')
    with pytest.raises(FileExistsError, match='of a build that did not finish'):
        _run('--input', f'{gcs_data}/images', '--output', gcs.uri('unfinished'))


@pytest.mark.parametrize('builds', ['tree_builds', 'manifest_builds'])
def test_verify_passes_on_a_gs_output_and_names_a_damaged_gs_shard(request, gcs, builds, capsys):
    from imageshards_cli import verify  # pylint: disable=import-outside-toplevel

    remote_out, dataset = request.getfixturevalue(builds)[1]
    assert verify.main([remote_out]) == 0, capsys.readouterr().out
    shard = dataset['splits']['train']['shards'][0]['path']
    blob = gcs.bucket.blob(f'{gcs.name(remote_out)}/{shard}')
    original = blob.download_as_bytes()
    damaged = bytearray(original)
    damaged[len(damaged) // 2] ^= 0xFF
    blob.upload_from_string(bytes(damaged))
    try:
        assert verify.main([remote_out]) == 1
        assert shard in capsys.readouterr().out
    finally:
        blob.upload_from_string(original)  # the build is shared by this module's tests


def test_gs_inputs_over_the_limit_are_too_large_from_their_listed_size_or_one_ranged_read(
    gcs, tmp_path
):
    tree = tmp_path / 'sizes'
    imgs.write_tree(tree, 2, ('cat', 'dog'))
    (tree / 'cat' / 'big.jpg').write_bytes(imgs.jpeg(9)[:100] + b'\0' * 50_000)
    (tree / 'dog' / 'empty.jpg').write_bytes(b'')
    uri = gcs.upload_tree(tree, 'sizes')
    # A tree: the listing's sizes. A manifest naming the objects: unknown sizes, read at most
    # one byte past the limit in one request (an empty object's range is not satisfiable).
    manifest = tree / 'm.csv'
    rows = ['cat/big.jpg,cat', 'dog/empty.jpg,dog', 'cat/img_0000.jpg,cat', 'dog/img_0001.jpg,dog']
    manifest.write_text('path,label\n' + '\n'.join(f'{uri}/{row}' for row in rows) + '\n')
    for spec, where in ((uri, 'tree'), (str(manifest), 'manifest')):
        out = tmp_path / where
        _run(
            '--input',
            spec,
            '--output',
            str(out),
            '--max-image-bytes',
            '20000',
            '--no-analyze',
            '--allow-root',
            uri,
        )
        rejected = {
            row['path'].rsplit('/', 1)[1]: (row['reason'], row['detail'])
            for row in map(json.loads, (out / 'rejected.jsonl').read_text().splitlines())
        }
        too_large = (
            '50,100 bytes, more than --max-image-bytes 20,000; not read'
            if where == 'tree'
            else 'more than --max-image-bytes 20,000 bytes; not read past them'
        )
        assert rejected == {
            'big.jpg': ('too_large', too_large),
            'empty.jpg': ('empty_file', 'file has 0 bytes'),
        }


def test_splits_from_a_gs_build_keeps_every_image_in_its_split(gcs, data, tree_builds, tmp_path):
    remote_out, remote = tree_builds[1]
    out = tmp_path / 'grown'
    grown = _run(
        '--input', str(data / 'images'), '--output', str(out), *FLAGS, '--splits-from', remote_out
    )
    previous = grown['grouping']['previous']
    assert previous == {
        'build': remote_out,
        'kept': remote['counts']['written'],
        'new': 0,
        'removed': 0,
        'moved': 0,
    }
    for split, info in remote['splits'].items():
        assert grown['splits'][split]['class_counts'] == info['class_counts'], split
