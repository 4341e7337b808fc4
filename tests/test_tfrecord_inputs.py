"""TFRecord files of tf.train.Examples as inputs: records written by TensorFlow itself, and an
earlier build, re-sharded without an image written to disk; labels by name, by number or as
lists; bad records rejected with reasons."""

import json
import pathlib

import pytest

from imageshards import records
from imageshards import tfrecord
from pipelines import launcher

import containers_for_tests as made
import images_for_tests as imgs

FLAGS = ('--num-shards', '2', '--seed', '4', '--no-analyze')


def _run(*args):
    return launcher.run(['--direct_running_mode=in_memory', *FLAGS, *args])


def _records(out):
    dataset = json.loads((pathlib.Path(out) / 'dataset.json').read_text())
    found = []
    for info in dataset['splits'].values():
        for shard in info['shards']:
            with open(pathlib.Path(out) / shard['path'], 'rb') as f:
                for _, record in records.framed_records(f, shard['path']):
                    found.append(records.example_values(records.parse_example(record)))
    return found


def test_records_written_by_tensorflow_build_with_their_label_names(tmp_path, tf):
    path = tmp_path / 'train-00000-of-00001'  # Model Garden's names have no extension
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(10):
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        'image/encoded': tf.train.Feature(
                            bytes_list=tf.train.BytesList(value=[imgs.jpeg(i, i % 2)])
                        ),
                        'image/class/label': tf.train.Feature(
                            int64_list=tf.train.Int64List(value=[1 + i % 2])
                        ),
                        'image/class/text': tf.train.Feature(
                            bytes_list=tf.train.BytesList(value=[[b'tench', b'goldfish'][i % 2]])
                        ),
                    }
                )
            )
            writer.write(example.SerializeToString())
    dataset = _run('--input', str(path), '--output', str(tmp_path / 'out'))
    assert dataset['labels'] == ['goldfish', 'tench']
    assert dataset['counts']['written'] == 10
    images = sorted(r['image/encoded'][1][0] for r in _records(tmp_path / 'out'))
    assert images == sorted(imgs.jpeg(i, i % 2) for i in range(10))


def test_an_earlier_build_is_re_sharded_record_for_record(tmp_path):
    root = tmp_path / 'tree'
    imgs.write_tree(root, 8, ('a', 'b', 'c'))
    _run('--input', str(root), '--output', str(tmp_path / 'first'))
    again = _run(
        '--input',
        str(tmp_path / 'first' / 'train' / '*.tfrecord'),
        '--output',
        str(tmp_path / 'second'),
        '--num-shards',
        '5',
    )
    assert again['labels'] == ['a', 'b', 'c']
    assert [s['num_records'] for s in again['splits']['train']['shards']] == [5, 5, 5, 5, 4]
    first = sorted(r['image/encoded'][1][0] for r in _records(tmp_path / 'first'))
    assert sorted(r['image/encoded'][1][0] for r in _records(tmp_path / 'second')) == first


def test_integer_labels_lists_and_bad_records(tmp_path):
    names = tmp_path / 'names.txt'
    names.write_text('cat\ndog\nbird\n')
    good = [made.example(imgs.jpeg(i, i % 3), label=i % 3) for i in range(6)]
    bad = [
        made.example(None, label=1),  # no image/encoded
        made.example(imgs.jpeg(20), label=7),  # no name for 7
        made.example(imgs.jpeg(21)),  # no label
        b'\xff\xff\xff not a protobuf',
    ]
    made.tfrecord_file(tmp_path / 'a.tfrecord', good + bad)
    data = (tmp_path / 'a.tfrecord').read_bytes()
    made.tfrecord_file(tmp_path / 'b.tfrecord.gz', good[:2], compress=True)
    two = sum(len(tfrecord.frame(record)) for record in good[:2])
    (tmp_path / 'b.tfrecord').write_bytes(data[: two + 10])  # cut inside its third record
    out = tmp_path / 'out'
    dataset = _run(
        '--input', str(tmp_path / '*.tfrecord*'), '--output', str(out), '--class-names', str(names)
    )
    counts = dataset['counts']
    assert counts['written'] == 8 + 2  # a's six, b's first two (its third is cut), b.gz's two
    assert counts['rejected_by_reason'] == {
        'no_image_feature': 1,
        'unknown_class': 1,
        'no_label': 1,
        'not_an_example': 1,
        'corrupt_record': 1,
    }
    assert counts['inputs'] == counts['written'] + counts['rejected']
    assert dataset['labels'] == ['bird', 'cat', 'dog']


def test_records_with_several_labels_make_a_multi_label_build(tmp_path):
    serialized = [
        made.example(imgs.jpeg(i), text=[['sky'], ['sky', 'sea'], ['sea', 'sand']][i % 3])
        for i in range(9)
    ]
    made.tfrecord_file(tmp_path / 'x.tfrecords', serialized)
    dataset = _run('--input', str(tmp_path / 'x.tfrecords'), '--output', str(tmp_path / 'out'))
    assert dataset['multi_label'] is True and dataset['labels'] == ['sand', 'sea', 'sky']
    texts = sorted(tuple(r['image/class/text'][1]) for r in _records(tmp_path / 'out'))
    assert texts[:3] == [(b'sand', b'sea')] * 3 and texts[-3:] == [(b'sky',)] * 3


@pytest.mark.parametrize('form', ['idx', 'tfrecord'])
def test_input_form_names_what_detection_would_not_find(tmp_path, form):
    made.tfrecord_file(tmp_path / 'records.bin', [made.example(imgs.jpeg(1), label=0)])
    if form == 'tfrecord':
        dataset = _run(
            '--input',
            str(tmp_path / 'records.bin'),
            '--output',
            str(tmp_path / 'out'),
            '--input-form',
            'tfrecord',
        )
        assert dataset['counts']['written'] == 1
    else:
        with pytest.raises(ValueError, match='--input-form idx expects MNIST IDX files; found'):
            _run(
                '--input',
                str(tmp_path / 'records.bin'),
                '--output',
                str(tmp_path / 'out'),
                '--input-form',
                'idx',
            )
