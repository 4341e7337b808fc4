"""`imageshards inspect` on a real build and on TFRecord files this project did not write."""

import hashlib
import re

import pytest

from imageshards import features
from imageshards import records
from imageshards_cli import inspect
from pipelines import launcher

import images_for_tests as imgs

BLOB = bytes(range(256)) * 3  # binary: must never be printed


@pytest.fixture(scope='session')
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp('inspect')
    imgs.write_tree(root / 'in', 8, ('ant', 'bee'))
    out = root / 'out'
    launcher.run(
        [
            '--direct_running_mode=in_memory',
            '--input',
            str(root / 'in'),
            '--output',
            str(out),
            '--splits',
            'train=0.75,val=0.25',
            '--num-shards',
            '2',
        ]
    )
    return out


def _foreign_example(tf, index):
    feature = {
        'scores': tf.train.Feature(
            float_list=tf.train.FloatList(value=[0.5, 1.5, 2.5][: index + 1])
        ),
        'tokens': tf.train.Feature(int64_list=tf.train.Int64List(value=list(range(20)))),
        'blob': tf.train.Feature(bytes_list=tf.train.BytesList(value=[BLOB, b'caption'])),
    }
    if index % 2:
        feature['maybe'] = tf.train.Feature(int64_list=tf.train.Int64List(value=[index]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.fixture(scope='session')
def foreign(tf, tmp_path_factory):
    """Two TFRecord files written by TensorFlow, with keys and kinds of their own."""
    folder = tmp_path_factory.mktemp('foreign')
    for name, indices in (('a.tfrecord', range(0, 3)), ('b.tfrecord', range(3, 4))):
        with tf.io.TFRecordWriter(str(folder / name)) as writer:
            for index in indices:
                writer.write(_foreign_example(tf, index))
    return folder


def _inspect(capsys, *argv):
    status = inspect.main([str(arg) for arg in argv])
    return status, capsys.readouterr().out


def _schema_line(out, key):
    """(kind, values per record, rest) of a key's line in the printed schema."""
    match = re.search(rf'^  {re.escape(key)} +(\S+) +(\S+)(.*)$', out, re.MULTILINE)
    assert match, (key, out)
    return match.groups()


def test_a_build_shows_the_contract_schema_and_readable_records(built, capsys):
    status, out = _inspect(capsys, built, '-n', '2')
    assert status == 0
    for key, kind in features.record_schema(features.EXAMPLES).items():
        assert _schema_line(out, key)[:2] == (kind, '1')
    first = 'train/train-00000-of-00002.tfrecord'
    with open(built / first, 'rb') as f:
        offset, record = list(records.framed_records(f, first))[1]
    values = records.example_values(records.parse_example(record))
    encoded = values[features.ENCODED][1][0]
    label = values[features.LABEL_TEXT][1][0].decode()
    height, width = values[features.HEIGHT][1][0], values[features.WIDTH][1][0]
    assert f'record 1 ({first}, byte {offset}): {label}, {width}x{height} ' in out
    sha = hashlib.sha256(encoded).hexdigest()[:12]
    assert f'<{len(encoded):,} bytes, sha256 {sha}>' in out
    assert f"'{label}'" in out and f"'{values[features.FILENAME][1][0].decode()}'" in out
    assert 'record 2 ' not in out


def test_split_picks_the_shards_from_dataset_json(built, capsys):
    status, out = _inspect(capsys, built, '--split', 'val', '-n', '1')
    assert status == 0
    assert 'split val:' in out and 'record 0 (val/val-00000-of-00002.tfrecord, byte 0)' in out
    status, _ = _inspect(capsys, built, '--split', 'nope')
    assert status == 2


def test_foreign_records_show_their_own_keys_kinds_and_value_counts(foreign, capsys):
    status, out = _inspect(capsys, foreign / 'a.tfrecord', '-n', '3')
    assert status == 0
    assert 'schema over 3 records' in out
    assert _schema_line(out, 'scores')[:2] == ('float', '1..3')
    assert _schema_line(out, 'tokens')[:2] == ('int64', '20')
    assert _schema_line(out, 'blob')[:2] == ('bytes', '2')
    assert _schema_line(out, 'maybe') == ('int64', '0..1', '  (missing from 2 of 3 records)')
    assert '  scores  [0.5, 1.5]' in out
    assert '  tokens  [0, 1, 2, 3, 4, 5, 6, 7, ... (20 values)]' in out
    blob = f"[<768 bytes, sha256 {hashlib.sha256(BLOB).hexdigest()[:12]}>, 'caption']"
    assert f'  blob    {blob}' in out
    assert repr(BLOB)[2:40] not in out


def test_a_glob_reads_every_matching_file_in_order(foreign, capsys):
    status, out = _inspect(capsys, foreign / '*.tfrecord', '-n', '10')
    assert status == 0
    assert f'{foreign / "a.tfrecord"} (+1 more files)' in out
    assert 'schema over 4 records' in out
    assert f'record 3 ({foreign / "b.tfrecord"}, byte 0)' in out


def test_a_corrupt_file_is_named_after_the_records_before_it(foreign, tmp_path, capsys):
    data = bytearray((foreign / 'a.tfrecord').read_bytes())
    data[-3] ^= 0xFF  # the last record's data CRC
    (tmp_path / 'bad.tfrecord').write_bytes(bytes(data))
    status, out = _inspect(capsys, tmp_path / 'bad.tfrecord')
    assert status == 1
    assert 'schema over 2 records' in out
    assert re.search(rf'error: {re.escape(str(tmp_path))}/bad.tfrecord: corrupt record data', out)


def test_a_path_that_matches_nothing_is_a_usage_error(tmp_path, capsys):
    status, _ = _inspect(capsys, tmp_path / 'none-*.tfrecord')
    assert status == 2
