"""`imageshards verify` on real builds: clean builds pass, damaged copies fail naming the file."""

import hashlib
import json
import shutil

import pytest

from imageshards import features
from imageshards import layout
from imageshards import output_lock
from imageshards import records
from imageshards import tfrecord
from imageshards_cli import verify
from pipelines import launcher

import images_for_tests as imgs

CLASSES = ('ant', 'bee', 'cat')
PER_CLASS = 12


@pytest.fixture(scope='session')
def builds(tmp_path_factory):
    """{format: output directory} of two builds of one small tree, made once."""
    root = tmp_path_factory.mktemp('verify')
    imgs.write_tree(root / 'in', PER_CLASS, CLASSES)
    outputs = {}
    for fmt in features.FORMATS:
        outputs[fmt] = root / fmt
        launcher.run(
            [
                '--direct_running_mode=in_memory',
                '--input',
                str(root / 'in'),
                '--output',
                str(outputs[fmt]),
                '--format',
                fmt,
                '--splits',
                'train=0.75,val=0.25',
                '--num-shards',
                '2',
                '--seed',
                '5',
            ]
        )
    return outputs


@pytest.fixture
def copy(builds, tmp_path):
    """A fresh copy of the `examples` build, to damage."""
    return shutil.copytree(builds[features.EXAMPLES], tmp_path / 'copy')


def _verify(out, capsys):
    status = verify.main([str(out)])
    return status, capsys.readouterr().out


def _dataset(out):
    return json.loads((out / 'dataset.json').read_text(encoding='utf-8'))


def _shard(out, split='train', index=0):
    """(path relative to out, [(offset, record)]) of one shard."""
    relative = _dataset(out)['splits'][split]['shards'][index]['path']
    with open(out / relative, 'rb') as f:
        return relative, list(records.framed_records(f, relative))


def _rewrite(out, relative, edit):
    """Re-frames a shard's records after `edit(examples)`; dataset.json gets its size and sha256,
    the index file the new offsets.

    So that only what is inside the records is wrong, not the framing or the shard's totals.
    """
    with open(out / relative, 'rb') as f:
        examples = [records.parse_example(r) for r in tfrecord.read_records(f, relative)]
    edit(examples)
    framed = [tfrecord.frame(e.SerializeToString(deterministic=True)) for e in examples]
    data = b''.join(framed)
    (out / relative).write_bytes(data)
    (out / (relative + '.idx')).write_bytes(tfrecord.index_text(map(len, framed)))
    dataset = _dataset(out)
    for info in dataset['splits'].values():
        for shard in info['shards']:
            if shard['path'] == relative:
                shard.update(num_bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (out / 'dataset.json').write_text(json.dumps(dataset), encoding='utf-8')


def _flip(path, position):
    data = bytearray(path.read_bytes())
    data[position] ^= 0x55
    path.write_bytes(bytes(data))


@pytest.mark.parametrize('fmt', features.FORMATS)
def test_a_clean_build_passes(builds, capsys, fmt):
    status, out = _verify(builds[fmt], capsys)
    assert status == 0, out
    assert 'OK: every check holds' in out
    dataset = _dataset(builds[fmt])
    for split, info in dataset['splits'].items():
        num_bytes = sum(shard['num_bytes'] for shard in info['shards'])
        assert f'{split}: 2 shards, {info["num_records"]:,} records, {num_bytes:,} bytes' in out
    assert f'decoded {dataset["counts"]["written"]:,} images' in out


def test_a_flipped_byte_in_image_bytes_is_caught(copy, capsys):
    relative, framed = _shard(copy)
    offset, record = framed[1]
    encoded = records.parse_example(record).features.feature[features.ENCODED].bytes_list.value[0]
    data = (copy / relative).read_bytes()
    _flip(copy / relative, data.index(encoded, offset) + len(encoded) // 2)
    status, out = _verify(copy, capsys)
    assert status == 1
    assert f'{copy / relative}: corrupt record data at byte {offset}' in out
    assert f'{copy / relative}: sha256 is ' in out


def test_a_flipped_byte_in_a_record_header_is_caught(copy, capsys):
    relative, framed = _shard(copy, 'val', 1)
    offset = framed[2][0]
    _flip(copy / relative, offset + 1)  # in the record's length
    status, out = _verify(copy, capsys)
    assert status == 1
    assert f'{copy / relative}: corrupt record length at byte {offset}' in out


def test_a_truncated_shard_is_caught_with_every_other_bad_shard(copy, capsys):
    truncated, framed = _shard(copy, 'train', 1)
    size = (copy / truncated).stat().st_size
    (copy / truncated).write_bytes((copy / truncated).read_bytes()[: size - 7])
    flipped, _ = _shard(copy, 'val', 0)
    _flip(copy / flipped, 20)  # inside the first record's data
    status, out = _verify(copy, capsys)
    assert status == 1
    assert f'{copy / truncated}: truncated record at byte {framed[-1][0]}' in out
    assert f'{copy / truncated}: num_bytes is {size - 7}, but dataset.json says {size}' in out
    assert f'{copy / flipped}: corrupt record data at byte 0' in out
    assert 'FAILED' in out


def test_counts_that_do_not_add_up_are_caught(copy, capsys):
    dataset = _dataset(copy)
    dataset['counts']['inputs'] += 1
    dataset['splits']['val']['num_records'] += 1
    (copy / 'dataset.json').write_text(json.dumps(dataset), encoding='utf-8')
    with open(copy / 'rejected.jsonl', 'a', encoding='utf-8') as f:
        f.write('{"id": 0}\n')
    status, out = _verify(copy, capsys)
    assert status == 1
    where = copy / 'dataset.json'
    assert f'{where}: counts do not add up: inputs {dataset["counts"]["inputs"]}' in out
    assert f'{where}: counts.written is ' in out
    assert f'{where}: splits.val.num_records is ' in out
    rejected = dataset['counts']['rejected']
    assert f'{copy / "rejected.jsonl"}: has {rejected + 1} lines, but counts.rejected is ' in out


def test_records_that_lie_about_their_image_are_caught(copy, capsys):
    relative, _ = _shard(copy)

    def edit(examples):
        examples[0].features.feature[features.ENCODED].bytes_list.value[0] = imgs.jpeg(
            7, size=(9, 11)
        )
        examples[1].features.feature[features.HEIGHT].int64_list.value[0] += 1
        examples[2].features.feature[features.ENCODED].bytes_list.value[0] = b'not an image'

    _rewrite(copy, relative, edit)
    framed = _shard(copy)[1]
    status, out = _verify(copy, capsys)
    assert status == 1
    where = f'{copy / relative}: record at byte'
    assert f'{where} 0: image/key/sha256 does not match the image bytes' in out
    assert f'{where} 0: image decodes to 9x11 (height x width), but the record says' in out
    assert f'{where} {framed[1][0]}: image decodes to ' in out
    assert f'{where} {framed[2][0]}: image does not decode' in out
    assert 'num_bytes is' not in out and 'sha256 is' not in out  # the framing is intact


def test_wrong_labels_and_repeated_ids_are_caught(copy, capsys):
    relative, _ = _shard(copy)
    _, train = _shard(copy, 'train', 1)
    train_id = records.parse_example(train[0][1]).features.feature[features.ID]

    def edit(examples):
        text = examples[0].features.feature[features.LABEL_TEXT].bytes_list.value
        text[0] = b'bee' if text[0] != b'bee' else b'ant'
        examples[1].features.feature[features.ID].CopyFrom(train_id)
        del examples[2].features.feature[features.FORMAT]

    _rewrite(copy, relative, edit)
    framed = _shard(copy)[1]
    status, out = _verify(copy, capsys)
    assert status == 1
    where = f'{copy / relative}: record at byte'
    assert f'{where} 0: image/class/label' in out and 'image/class/text is' in out
    # Shards are read in listed order: the id is seen first in train-00000, then in train-00001.
    repeated = f'{copy / "train/train-00001-of-00002.tfrecord"}: record at byte 0: image/id'
    assert f'{repeated} {train_id.int64_list.value[0]} occurs again' in out
    assert f'{where} {framed[2][0]}: missing feature image/format' in out


def test_a_paths_build_checks_the_files_its_records_point_to(builds, tmp_path, capsys):
    out = shutil.copytree(builds[features.PATHS], tmp_path / 'paths')
    relative, _ = _shard(out)
    other = tmp_path / 'other.png'
    other.write_bytes(imgs.png(3))

    def edit(examples):
        examples[0].features.feature[features.PATH].bytes_list.value[0] = str(other).encode()
        examples[1].features.feature[features.PATH].bytes_list.value[0] = b'/nonexistent/x.jpg'

    _rewrite(out, relative, edit)
    framed = _shard(out)[1]
    status, text = _verify(out, capsys)
    assert status == 1
    where = f'{out / relative}: record at byte'
    assert f'{where} 0: image/key/sha256 does not match the image bytes' in text
    assert f'{where} {framed[1][0]}: cannot read image/path /nonexistent/x.jpg' in text


def test_a_directory_without_dataset_json_fails(tmp_path, capsys):
    status, out = _verify(tmp_path, capsys)
    assert status == 1
    assert f'{tmp_path / "dataset.json"}: no dataset.json' in out


def test_an_output_being_written_is_said_so_by_verify_and_report(builds, capsys):
    from imageshards_cli import report  # pylint: disable=import-outside-toplevel

    out = builds[features.EXAMPLES]
    with output_lock.acquire(out, ['imageshards', 'build', '--output', str(out)]) as lock:
        status, printed = _verify(out, capsys)
        assert report.main([str(out)]) == 2
    said = f'{out} is being written by a build now ({lock.holder.describe()}); run '
    assert (status, printed) == (1, f'{out}: {said}imageshards verify again once it has ended\n')
    assert capsys.readouterr().err == f'imageshards report: {said}it again once it has ended\n'
    assert _verify(out, capsys)[0] == 0  # once it has ended


def test_the_lock_a_killed_build_left_is_no_unknown_file(builds, capsys, tmp_path):
    out = shutil.copytree(builds[features.EXAMPLES], tmp_path / 'copy')
    (out / layout.LOCK_FILE).write_text('{}')  # locked by no one: its build was killed
    assert _verify(out, capsys)[0] == 0


def test_formats_are_counted_per_shard_and_split_and_checked(copy, capsys):
    dataset = _dataset(copy)
    tree = {'jpeg': 2 * PER_CLASS * len(CLASSES) // 3, 'png': PER_CLASS * len(CLASSES) // 3}
    summed = {'jpeg': 0, 'png': 0}
    for info in dataset['splits'].values():
        assert sum(info['formats'].values()) == info['num_records']
        for fmt, count in info['formats'].items():
            summed[fmt] += count
        assert info['formats'] == {
            fmt: sum(shard['formats'].get(fmt, 0) for shard in info['shards'])
            for fmt in info['formats']
        }
    assert summed == tree  # write_tree: every third image a PNG
    shard = dataset['splits']['train']['shards'][0]
    stated = dict(shard['formats'])
    shard['formats'] = {'jpeg': shard['num_records']}  # a shard that says it holds JPEGs alone
    dataset['splits']['val']['formats']['png'] += 1  # a split whose shards do not add up
    (copy / 'dataset.json').write_text(json.dumps(dataset), encoding='utf-8')
    status, out = _verify(copy, capsys)
    assert status == 1
    assert f'{copy / shard["path"]}: formats is {stated}, but dataset.json says' in out
    assert f'{copy / "dataset.json"}: splits.train.formats is ' in out  # its shard changed
    assert f'{copy / "dataset.json"}: splits.val.formats is ' in out
