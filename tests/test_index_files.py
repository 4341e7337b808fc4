"""Index files beside the shards (DALI's tfrecord2idx format): written by the build, equal to
what DALI's and the PyTorch `tfrecord` package's own tools make of the same shard, checked by
`imageshards verify`, removed by --overwrite; and both readers read a build through them as it is.

The readers' tests need the `dali` and `pytorch` extras and are skipped without them.
"""

import json
import os
import runpy
import shutil
import subprocess
import sys

import pytest

from imageshards import dataset_json
from imageshards import layout
from imageshards import records
from imageshards import tfrecord
from imageshards_cli import verify
from pipelines import launcher

import images_for_tests as imgs

CLASSES = ('ant', 'bee', 'cat')
PER_CLASS = 14


def _build(root, out, *flags):
    return launcher.run(
        [
            '--direct_running_mode=in_memory',
            '--input',
            str(root),
            '--output',
            str(out),
            '--splits',
            'train=0.75,val=0.25',
            '--seed',
            '2',
            '--no-analyze',
            *flags,
        ]
    )


@pytest.fixture(scope='module')
def built(tmp_path_factory):
    """(output directory, dataset.json) of a small build with 3 shards a split."""
    root = tmp_path_factory.mktemp('index')
    imgs.write_tree(root / 'in', PER_CLASS, CLASSES)
    out = root / 'out'
    return out, _build(root / 'in', out, '--num-shards', '3')


def _shards(dataset):
    return [shard for info in dataset['splits'].values() for shard in info['shards']]


def _framed(path):
    with open(path, 'rb') as f:
        return [(offset, 16 + len(r)) for offset, r in records.framed_records(f, str(path))]


def test_index_text_is_offset_and_length_per_record_and_parses_back():
    text = tfrecord.index_text([30, 1234, 17])
    assert text == b'0 30\n30 1234\n1264 17\n'
    assert tfrecord.parse_index(text) == [(0, 30), (30, 1234), (1264, 17)]
    assert tfrecord.index_text([]) == b''
    with pytest.raises(ValueError, match='line 2'):
        tfrecord.parse_index(b'0 30\n30 x\n')


def test_every_shard_has_its_index_file_listed_beside_it(built):
    out, dataset = built
    for shard in _shards(dataset):
        assert shard[dataset_json.INDEX_KEY] == shard['path'] + '.idx'
        index = tfrecord.parse_index((out / shard[dataset_json.INDEX_KEY]).read_bytes())
        assert index == _framed(out / shard['path'])
        assert len(index) == shard['num_records']
    assert not (out / layout.TEMP_DIR).exists()


def _dali_tool():
    for folder in (os.path.dirname(sys.executable), *os.environ.get('PATH', '').split(':')):
        tool = os.path.join(folder, 'tfrecord2idx')
        if os.path.exists(tool):
            return tool
    return None


def test_the_index_files_are_what_dali_tfrecord2idx_writes(built, tmp_path, monkeypatch):
    tool = _dali_tool()
    assert tool, "DALI's tfrecord2idx is not installed (pip install -e '.[test]' brings it)"
    out, dataset = built
    for shard in _shards(dataset):
        theirs = tmp_path / 'theirs.idx'
        monkeypatch.setattr(sys, 'argv', [tool, str(out / shard['path']), str(theirs)])
        runpy.run_path(tool, run_name='__main__')
        assert theirs.read_bytes() == (out / shard[dataset_json.INDEX_KEY]).read_bytes()


def _tfrecord_package(code, *args):
    """Runs `code` in a fresh Python with the PyTorch `tfrecord` package (its example_pb2 and
    TensorFlow's cannot share one process's protobuf pool); returns what it prints, as JSON."""
    done = subprocess.run(
        [sys.executable, '-c', code, *map(str, args)], capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def test_the_index_files_are_what_the_tfrecord_package_writes(built, tmp_path):
    out, dataset = built
    code = (
        'import sys, json\n'
        'from tfrecord.tools.tfrecord2idx import create_index\n'
        'create_index(sys.argv[1], sys.argv[2])\n'
        'print(json.dumps(open(sys.argv[2]).read()))\n'
    )
    for shard in _shards(dataset):
        theirs = _tfrecord_package(code, out / shard['path'], tmp_path / 'theirs.idx')
        assert theirs.encode() == (out / shard[dataset_json.INDEX_KEY]).read_bytes()


def test_verify_catches_a_wrong_a_short_and_a_missing_index_file(built, tmp_path, capsys):
    out = shutil.copytree(built[0], tmp_path / 'copy')
    shards = _shards(built[1])
    first, second, third = (out / shard[dataset_json.INDEX_KEY] for shard in shards[:3])
    lines = first.read_bytes().splitlines(keepends=True)
    first.write_bytes(lines[0] + lines[1].replace(b' ', b' 1', 1) + b''.join(lines[2:]))
    second.write_bytes(b''.join(second.read_bytes().splitlines(keepends=True)[:-1]))
    third.unlink()
    status = verify.main([str(out)])
    printed = capsys.readouterr().out
    assert status == 1
    assert f'{first}: line 2 says offset' in printed
    assert f'{second}: {len(lines) - 1 if first == second else ""}' in printed
    assert 'lines, but the shard has' in printed
    assert f'{third}: cannot read the index file' in printed


def test_a_clean_build_verifies_with_its_index_files(built, capsys):
    assert verify.main([str(built[0])]) == 0, capsys.readouterr().out


def test_overwrite_removes_the_index_files_of_an_earlier_build(built, tmp_path):
    out = shutil.copytree(built[0], tmp_path / 'again')
    earlier = {shard[dataset_json.INDEX_KEY] for shard in _shards(built[1])}
    (out / 'notes.txt').write_text('mine')
    dataset = _build(built[0].parent / 'in', out, '--num-shards', '2', '--overwrite')
    now = {shard[dataset_json.INDEX_KEY] for shard in _shards(dataset)}
    indexes = {
        os.path.relpath(os.path.join(folder, name), out)
        for folder, _, names in os.walk(out)
        for name in names
        if name.endswith('.idx')
    }
    assert indexes == now and earlier - now
    assert (out / 'notes.txt').read_text() == 'mine'
    assert layout.is_own_file('train/train-00001-of-00003.tfrecord.idx')
    assert not layout.is_own_file('train/notes.idx')


def _train(out, dataset):
    shards = dataset['splits']['train']['shards']
    return [str(out / s['path']) for s in shards], [str(out / s['index_file']) for s in shards]


def test_dali_reads_a_build_through_its_index_files(built):
    import nvidia.dali.fn as fn  # pylint: disable=import-outside-toplevel
    import nvidia.dali.tfrecord as tfrec  # pylint: disable=import-outside-toplevel
    from nvidia.dali import pipeline_def  # pylint: disable=import-outside-toplevel

    out, dataset = built
    paths, indexes = _train(out, dataset)
    total = dataset['splits']['train']['num_records']

    @pipeline_def(batch_size=total, num_threads=1, device_id=None)
    def read():
        parsed = fn.readers.tfrecord(
            path=paths,
            index_path=indexes,
            features={
                'image/id': tfrec.FixedLenFeature([1], tfrec.int64, -1),
                'image/class/label': tfrec.FixedLenFeature([1], tfrec.int64, -1),
                'image/encoded': tfrec.FixedLenFeature((), tfrec.string, ''),
            },
            random_shuffle=True,
            name='Reader',
        )
        images = fn.decoders.image(parsed['image/encoded'], device='cpu')
        return parsed['image/id'], parsed['image/class/label'], images

    pipe = read(seed=1)
    pipe.build()
    ids, labels, images = pipe.run()
    ids = [int(ids.at(i)[0]) for i in range(total)]
    assert sorted(ids) == sorted(_ids(out, dataset))
    assert ids != sorted(ids)  # shuffled
    assert all(images.at(i).shape[2] == 3 for i in range(total))
    assert {int(labels.at(i)[0]) for i in range(total)} == {0, 1, 2}


def _ids(out, dataset, split='train'):
    found = []
    for shard in dataset['splits'][split]['shards']:
        with open(out / shard['path'], 'rb') as f:
            for record in tfrecord.read_records(f):
                found.append(
                    records.example_values(records.parse_example(record))['image/id'][1][0]
                )
    return found


_TFRECORD_READS = """
import json, sys
from tfrecord import iterator_utils, reader
paths, indexes = json.loads(sys.argv[1]), json.loads(sys.argv[2])
description = {'image/id': 'int', 'image/class/label': 'int', 'image/encoded': 'byte'}
parts = []
for path, index in zip(paths, indexes):
    # What its torch TFRecordDataset does per DataLoader worker: a part of the shard each,
    # found through the index (random access), here in 2 parts.
    for part in range(2):
        loaded = reader.tfrecord_loader(path, index, description, shard=(part, 2))
        parts.append([int(example['image/id'][0]) for example in loaded])
loaded = reader.tfrecord_loader(paths[0], indexes[0], description)
shuffled = [int(e['image/id'][0]) for e in iterator_utils.shuffle_iterator(loaded, 8)]
first = next(iter(reader.tfrecord_loader(paths[0], indexes[0], description, shard=(0, 1))))
head = bytes(first['image/encoded'][:4]).hex()
print(json.dumps({'parts': parts, 'shuffled': shuffled, 'head': head}))
"""


def test_the_tfrecord_package_reads_a_build_by_index_shards_and_shuffles(built):
    out, dataset = built
    paths, indexes = _train(out, dataset)
    found = _tfrecord_package(_TFRECORD_READS, json.dumps(paths), json.dumps(indexes))
    parts = found['parts']
    assert sorted(i for part in parts for i in part) == sorted(_ids(out, dataset))
    assert all(parts) and len(parts) == 2 * len(paths)
    first_shard = {'splits': {'train': {'shards': dataset['splits']['train']['shards'][:1]}}}
    assert sorted(found['shuffled']) == sorted(_ids(out, first_shard))
    assert found['shuffled'] != parts[0] + parts[1]
    assert bytes.fromhex(found['head'])[:3] in (b'\xff\xd8\xff', b'\x89PN')
