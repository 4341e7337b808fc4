"""Archives as inputs, read where they are: a tar, .tar.gz or zip of a tree builds the tree's
own build, record for record; per-class tars (ImageNet's layout) and WebDataset shards build as
they are; and every member of a bad archive is written or rejected with a reason."""

import io
import json
import pathlib
import tarfile
import zipfile

import pytest

from imageshards import records
from pipelines import launcher

import containers_for_tests as made
import images_for_tests as imgs

FLAGS = ('--splits', 'train=0.6,test=0.4', '--num-shards', '2', '--seed', '3', '--no-analyze')


def _run(*args):
    return launcher.run(['--direct_running_mode=in_memory', *FLAGS, *args])


def shard_records(out):
    """[(shard, {feature: values})] of a build, in shard order and record order, without
    `image/filename` (which names where each image came from)."""
    dataset = json.loads((pathlib.Path(out) / 'dataset.json').read_text())
    found = []
    for split in dataset['splits'].values():
        for shard in split['shards']:
            with open(pathlib.Path(out) / shard['path'], 'rb') as f:
                for _, record in records.framed_records(f, shard['path']):
                    values = records.example_values(records.parse_example(record))
                    del values['image/filename']
                    found.append((shard['path'], values))
    return found


def filenames(out):
    dataset = json.loads((pathlib.Path(out) / 'dataset.json').read_text())
    names = []
    for split in dataset['splits'].values():
        for shard in split['shards']:
            with open(pathlib.Path(out) / shard['path'], 'rb') as f:
                for _, record in records.framed_records(f, shard['path']):
                    feature = records.parse_example(record).features.feature
                    names.append(feature['image/filename'].bytes_list.value[0].decode())
    return names


def _without_digests(splits):
    """dataset.json's splits but for each shard's size and digest (its records name their
    sources, which differ)."""
    return {
        name: {
            **info,
            'shards': [
                {k: v for k, v in shard.items() if k not in ('num_bytes', 'sha256')}
                for shard in info['shards']
            ],
        }
        for name, info in splits.items()
    }


def rejected(out):
    lines = (pathlib.Path(out) / 'rejected.jsonl').read_text(encoding='utf-8').splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
    """A small class tree (JPEGs and a PNG, a non-image file) and its build."""
    root = tmp_path_factory.mktemp('archives') / 'flowers'
    imgs.write_tree(root, 7, ('daisy', 'rose', 'tulip'))
    (root / 'rose' / 'big.png').write_bytes(imgs.png(50, 1, size=(40, 30)))
    (root / 'LICENSE.txt').write_text('CC-BY')
    out = root.parent / 'tree-out'
    return root, _run('--input', str(root), '--output', str(out)), out


@pytest.mark.parametrize(
    'archive',
    [
        lambda root, at: made.tar_tree(root, at / 'flowers.tar'),
        lambda root, at: made.tar_tree(root, at / 'flowers.tgz', 'flowers', compress=True),
        lambda root, at: made.tar_tree(root, at / 'flowers.tar.gz', compress=True),
        lambda root, at: made.zip_tree(root, at / 'flowers.zip'),
        lambda root, at: made.zip_tree(root, at / 'stored.zip', 'flowers/', zipfile.ZIP_STORED),
    ],
    ids=['tar', 'tgz-of-root-folder', 'tar.gz', 'zip', 'stored-zip-of-root-folder'],
)
def test_an_archive_of_a_tree_is_the_same_build_as_the_tree(tree, tmp_path, archive):
    root, dataset, out = tree
    path = archive(root, tmp_path)
    archived = _run('--input', path, '--output', str(tmp_path / 'out'))
    assert shard_records(tmp_path / 'out') == shard_records(out)  # ids, labels, bytes, order
    for key in ('labels', 'counts'):
        assert archived[key] == dataset[key], key
    assert _without_digests(archived['splits']) == _without_digests(dataset['splits'])
    names = filenames(tmp_path / 'out')
    assert all(name.startswith(path + '!') for name in names)
    assert sorted(name.split('!', 1)[1].split('/')[-2] for name in names) == sorted(
        path_.parent.name for path_ in root.rglob('*.*') if path_.parent != root
    )


def test_per_class_tars_named_after_their_class_build_as_the_tree(tree, tmp_path):
    root, _, out = tree
    classes = tmp_path / 'train'
    classes.mkdir()
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        made.tar_tree(folder, classes / f'{folder.name}.tar')
    dataset = _run('--input', str(classes), '--output', str(tmp_path / 'out'))
    assert shard_records(tmp_path / 'out') == shard_records(out)
    assert dataset['labels'] == ['daisy', 'rose', 'tulip']
    glob = _run('--input', f'{classes}/*.tar', '--output', str(tmp_path / 'glob'))
    assert shard_records(tmp_path / 'glob') == shard_records(out)
    assert glob['counts'] == dataset['counts']


def test_webdataset_shards_take_labels_from_cls_and_json(tmp_path):
    names = tmp_path / 'names.txt'
    names.write_text('zero\none\ntwo\n')
    shards = tmp_path / 'shards'
    shards.mkdir()
    for shard in range(2):
        samples = {
            f'{shard:02d}{i:04d}': {'jpg': imgs.jpeg(shard * 10 + i, i % 3), 'cls': str(i % 3)}
            for i in range(6)
        }
        samples[f'{shard:02d}9000'] = {'png': imgs.png(7), 'txt': 'no label'}
        samples[f'{shard:02d}9001'] = {'json': {'label': 1}}  # no image: not an input
        made.webdataset_shard(shards / f'shard-{shard:06d}.tar', samples)
    out = tmp_path / 'out'
    dataset = _run('--input', str(shards), '--output', str(out), '--class-names', str(names))
    assert dataset['labels'] == ['one', 'two', 'zero']
    assert dataset['counts']['inputs'] == 14 and dataset['counts']['written'] == 12
    assert {row['reason'] for row in rejected(out)} == {'no_label'}
    assert dataset['counts']['skipped_by_reason'] == {'not_image': 2}  # the .txt members
    keys = {r['image/id'][1][0]: r for _, r in shard_records(out)}
    assert sorted(keys) == [0, 1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12]  # 6 and 13: rejected


def test_webdataset_json_labels_make_a_multi_label_build(tmp_path):
    samples = {
        f'{i:04d}': {'jpg': imgs.jpeg(i, i % 2), 'json': {'labels': ['sky', 'sea'][: 1 + i % 2]}}
        for i in range(8)
    }
    shard = made.webdataset_shard(tmp_path / 'data.tar', samples)
    dataset = _run('--input', shard, '--output', str(tmp_path / 'out'))
    assert dataset['multi_label'] is True
    assert dataset['labels'] == ['sea', 'sky']
    texts = sorted(tuple(r['image/class/text'][1]) for _, r in shard_records(tmp_path / 'out'))
    assert texts == [(b'sea', b'sky')] * 4 + [(b'sky',)] * 4


def _bad_tar(tmp_path):
    good = {f'cat/{i}.jpg': imgs.jpeg(i, 0) for i in range(3)}
    good.update({f'dog/{i}.jpg': imgs.jpeg(10 + i, 1) for i in range(3)})
    members = {
        **good,
        '../escape.jpg': imgs.jpeg(20),
        '/etc/absolute.jpg': imgs.jpeg(21),
        'cat/link.jpg': made.link('cat/link.jpg', '/etc/passwd'),
        'dog/hard.jpg': made.link('dog/hard.jpg', 'dog/0.jpg', tarfile.LNKTYPE),
        'dog/null.jpg': made.device('dog/null.jpg'),
        'dog/twice.jpg': imgs.jpeg(30, 1),
    }
    path = made.tar_of(tmp_path / 'bad.tar', members)
    with tarfile.open(path, 'a') as tar:  # a later member of the same name replaces it
        info = tarfile.TarInfo('dog/twice.jpg')
        later = imgs.jpeg(31, 1)
        info.size = len(later)
        tar.addfile(info, io.BytesIO(later))
    return path


def test_a_hostile_tar_loses_nothing_and_follows_nothing(tmp_path):
    dataset = _run('--input', _bad_tar(tmp_path), '--output', str(tmp_path / 'out'))
    counts = dataset['counts']
    assert counts['inputs'] == counts['written'] + counts['rejected'] == 13
    assert counts['written'] == 7  # 6 images and the later dog/twice.jpg
    assert counts['rejected_by_reason'] == {
        'unsafe_member_name': 2,
        'archive_link': 2,
        'not_a_regular_file': 1,
        'duplicate_member': 1,
    }
    details = {row['reason']: row['detail'] for row in rejected(tmp_path / 'out')}
    assert 'never followed' in details['archive_link']


def test_a_truncated_tar_keeps_every_whole_member(tmp_path):
    members = {f'cat/{i}.jpg': imgs.jpeg(i, 0, size=(40, 40)) for i in range(4)}
    members.update({f'dog/{i}.jpg': imgs.jpeg(i + 9, 1, size=(40, 40)) for i in range(4)})
    whole = pathlib.Path(made.tar_of(tmp_path / 'whole.tar', members)).read_bytes()
    cut_at = 512 * 14  # inside the fifth member's data (each: a header and 3 blocks or so)
    (tmp_path / 'cut.tar').write_bytes(whole[:cut_at])
    dataset = _run('--input', str(tmp_path / 'cut.tar'), '--output', str(tmp_path / 'out'))
    rows = rejected(tmp_path / 'out')
    assert [row['reason'] for row in rows] == ['truncated_archive']
    assert f'ends at byte {cut_at:,}' in rows[0]['detail']
    assert dataset['counts']['inputs'] == dataset['counts']['written'] + 1
    assert dataset['counts']['written'] >= 3


def test_a_tar_with_a_corrupt_header_keeps_the_members_before_it(tmp_path):
    members = {f'cat/{i}.jpg': imgs.jpeg(i, 0) for i in range(3)}
    members.update({f'dog/{i}.jpg': imgs.jpeg(i + 9, 1) for i in range(3)})
    data = bytearray(pathlib.Path(made.tar_of(tmp_path / 'x.tar', members)).read_bytes())
    with tarfile.open(tmp_path / 'x.tar') as tar:
        fourth = tar.getmembers()[3].offset
    data[fourth : fourth + 100] = b'\xee' * 100  # the header of dog/0.jpg
    (tmp_path / 'corrupt.tar').write_bytes(bytes(data))
    dataset = _run('--input', str(tmp_path / 'corrupt.tar'), '--output', str(tmp_path / 'out'))
    assert dataset['counts']['written'] == 3
    rows = rejected(tmp_path / 'out')
    assert [row['reason'] for row in rows] == ['corrupt_archive']
    assert 'not a tar header' in rows[0]['detail'] and f'{fourth:,}' in rows[0]['detail']


def test_a_truncated_tar_gz_keeps_what_decompresses(tmp_path):
    members = {f'cat/{i}.jpg': imgs.jpeg(i, 0, size=(64, 64)) for i in range(6)}
    members.update({f'dog/{i}.jpg': imgs.jpeg(i + 9, 1, size=(64, 64)) for i in range(6)})
    whole = pathlib.Path(made.tar_of(tmp_path / 'w.tgz', members, compress=True)).read_bytes()
    (tmp_path / 'cut.tgz').write_bytes(whole[: len(whole) * 2 // 3])
    dataset = _run('--input', str(tmp_path / 'cut.tgz'), '--output', str(tmp_path / 'out'))
    counts = dataset['counts']
    assert counts['inputs'] == counts['written'] + counts['rejected']
    assert 0 < counts['written'] < 12
    assert 'truncated_archive' in counts['rejected_by_reason']


def test_a_zip_cut_short_keeps_the_members_its_local_headers_show(tmp_path):
    members = {f'cat/{i}.jpg': imgs.jpeg(i, 0) for i in range(4)}
    members.update({f'dog/{i}.jpg': imgs.jpeg(i + 9, 1) for i in range(4)})
    whole = pathlib.Path(made.zip_of(tmp_path / 'w.zip', members)).read_bytes()
    (tmp_path / 'cut.zip').write_bytes(whole[: len(whole) - 600])  # the central directory
    dataset = _run('--input', str(tmp_path / 'cut.zip'), '--output', str(tmp_path / 'out'))
    assert dataset['counts']['written'] >= 6
    assert [row['reason'] for row in rejected(tmp_path / 'out')] == ['truncated_archive']
    assert dataset['counts']['inputs'] == dataset['counts']['written'] + 1


def test_zip_bombs_and_members_that_cannot_be_read_are_rejected(tmp_path):
    path = made.zip_of(
        tmp_path / 'bombs.zip',
        {
            **{f'cat/{i}.jpg': imgs.jpeg(i, 0) for i in range(3)},
            **{f'dog/{i}.jpg': imgs.jpeg(i + 5, 1) for i in range(3)},
            'dog/zeros.bmp': bytes(2_000_000),  # inflates past what its entry will declare
        },
    )
    with zipfile.ZipFile(path, 'a', compression=zipfile.ZIP_BZIP2) as archive:
        archive.writestr('cat/bzip2.jpg', imgs.jpeg(40))
    data = bytearray(pathlib.Path(path).read_bytes())
    _declare_size(data, 'dog/zeros.bmp', 1000)
    (tmp_path / 'bombs.zip').write_bytes(bytes(data))
    dataset = _run('--input', str(tmp_path / 'bombs.zip'), '--output', str(tmp_path / 'out'))
    assert dataset['counts']['written'] == 6
    assert dataset['counts']['rejected_by_reason'] == {
        'zip_bomb': 1,
        'unsupported_compression': 1,
    }


def _declare_size(data, name, size):
    """Rewrites a member's uncompressed size in the zip's central directory."""
    at = 0
    while True:
        at = data.index(b'PK\x01\x02', at)
        name_length = int.from_bytes(data[at + 28 : at + 30], 'little')
        if data[at + 46 : at + 46 + name_length] == name.encode():
            data[at + 24 : at + 28] = size.to_bytes(4, 'little')
            return
        at += 46


def test_a_manifest_names_members_of_an_archive(tree, tmp_path):
    root = tree[0]
    made.tar_tree(root, tmp_path / 'flowers.tar')
    (tmp_path / 'images.csv').write_text(
        'path,label\n'
        'flowers.tar!daisy/img_0001.jpg,daisy\n'
        'flowers.tar!./rose/big.png,rose\n'
        'flowers.tar!tulip/missing.jpg,tulip\n'
        f'{root}/tulip/img_0003.jpg,tulip\n',
        encoding='utf-8',
    )
    out = tmp_path / 'out'
    dataset = _run(
        '--input', str(tmp_path / 'images.csv'), '--output', str(out), '--allow-root', str(root)
    )
    assert dataset['counts']['written'] == 3
    assert [row['reason'] for row in rejected(out)] == ['missing_file']
    assert rejected(out)[0]['path'] == f'{tmp_path}/flowers.tar!tulip/missing.jpg'
    assert sorted(filenames(out))[0] == f'{root}/tulip/img_0003.jpg'
    assert f'{tmp_path}/flowers.tar!rose/big.png' in filenames(out)


def test_a_wrong_input_form_is_one_line_that_says_what_was_found(tmp_path):
    mnist = tmp_path / 'mnist'
    mnist.mkdir()
    made.mnist_like(mnist)
    with pytest.raises(
        ValueError,
        match=r'--input-form webdataset expects WebDataset shards; '
        r'found 2 idx files .*, 2 IDX labels files',
    ):
        _run('--input', str(mnist), '--output', str(tmp_path / 'out'), '--input-form', 'webdataset')
    (tmp_path / 'docs').mkdir()
    (tmp_path / 'docs' / 'a.txt').write_text('x')
    (tmp_path / 'docs' / 'b.pdf').write_text('x')
    with pytest.raises(ValueError, match=r'no files of a form it reads: found 2 other files'):
        _run('--input', str(tmp_path / 'docs' / '*.*'), '--output', str(tmp_path / 'out'))
    with pytest.raises(ValueError, match='not a readable tar archive'):
        (tmp_path / 'fake.tar').write_bytes(b'not a tar at all' * 100)
        _run('--input', str(tmp_path / 'fake.tar'), '--output', str(tmp_path / 'out'))


def test_a_paths_build_of_an_archive_is_refused_in_one_line(tree, tmp_path):
    path = made.tar_tree(tree[0], tmp_path / 'flowers.tar')
    with pytest.raises(ValueError, match='--format paths names image files'):
        _run('--input', path, '--output', str(tmp_path / 'out'), '--format', 'paths')


def test_with_metadata_inline_as_on_dataflow_a_tar_gz_is_read_through_per_shard(
    tree, tmp_path, monkeypatch
):
    """Where no payload files keep a .tar.gz's members (a distributed runner's store), the
    writer reads each shard's members by going through the archive once, in its order."""
    from pipelines import runner  # pylint: disable=import-outside-toplevel
    from pipelines.core import blocks  # pylint: disable=import-outside-toplevel

    monkeypatch.setattr(runner.Launch, 'block_store', lambda self, output: blocks.BlockStore())
    root, _, out = tree
    path = made.tar_tree(root, tmp_path / 'flowers.tgz', compress=True)
    _run('--input', path, '--output', str(tmp_path / 'out'))
    assert shard_records(tmp_path / 'out') == shard_records(out)
