"""End-to-end builds on a few hundred generated images: the output contract, balance, shuffle,
determinism, rejects and accounting, for tree, CSV and JSONL inputs in both formats."""

import collections
import csv
import hashlib
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards.shard_formats import tfrecord
from pipelines import launcher
from pipelines.validation import images

import images_for_tests as imgs

CLASSES = ('ant', 'bee', 'cat', 'dog')
PER_CLASS = 60
SPLITS = 'train=0.8,val=0.1,test=0.1'
# name -> (bytes, expected reason)
BROKEN = {
    'bee/truncated.jpg': (imgs.jpeg(1, size=(64, 64))[:300], 'truncated'),
    'bee/empty.jpg': (b'', 'empty_file'),
    'cat/page.png': (b'<!doctype html><title>404</title>', 'not_an_image'),
    'dog/bomb.png': (imgs.decompression_bomb_png(12_000), 'decompression_bomb'),
}
EXTRA_VALID = {
    'ant/rotated.jpg': imgs.exif_rotated_jpeg(99),
    'cat/old.BMP': imgs.encode(imgs.pixels(98), 'BMP'),
    'dog/deep/nested/x.jpeg': imgs.jpeg(97, 3),
}


@pytest.fixture(scope='session')
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp('tree')
    imgs.write_tree(root, PER_CLASS, CLASSES)
    for relative, data in {**{k: v for k, (v, _) in BROKEN.items()}, **EXTRA_VALID}.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    (root / 'ant' / 'notes.txt').write_text('not an image')
    (root / 'cat' / '.DS_Store').write_bytes(b'\0\0')
    return root


def _run(*args):
    """launcher.run in this process (tests choose another running mode by adding it after)."""
    return launcher.run(['--direct_running_mode=in_memory', *args])


def _build(tmp_path_factory, name, *args):
    out = tmp_path_factory.mktemp(name) / 'out'
    dataset = _run(*args, '--output', str(out), '--max-pixels', '50000000')
    return out, dataset


@pytest.fixture(scope='session')
def tree_build(tree, tmp_path_factory):
    return _build(
        tmp_path_factory,
        'tree',
        '--input',
        str(tree),
        '--splits',
        SPLITS,
        '--num-shards',
        '4',
        '--seed',
        '3',
    )


def _records(out, dataset, split):
    for shard in dataset['splits'][split]['shards']:
        with open(out / shard['path'], 'rb') as f:
            for record in tfrecord.read_records(f, shard['path']):
                yield _to_dict(record)


def _to_dict(record):
    from tensorflow.core.example import example_pb2  # pylint: disable=import-outside-toplevel

    example = example_pb2.Example.FromString(record)
    out = {}
    for key, feature in example.features.feature.items():
        kind = feature.WhichOneof('kind')
        value = getattr(feature, kind).value[0]
        out[key] = value
    return out


def _jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding='utf-8').splitlines()]


def _all_records(out, dataset):
    return {split: list(_records(out, dataset, split)) for split in dataset['splits']}


def test_output_layout_and_dataset_json_contract(tree_build):
    out, dataset = tree_build
    assert (out / '_SUCCESS').exists() and (out / 'rejected.jsonl').exists()
    assert not (out / '.imageshards-tmp').exists()
    assert dataset['format'] == 'examples' and dataset['seed'] == 3
    assert dataset['labels'] == sorted(CLASSES)
    counts = dataset['counts']
    total_inputs = len(CLASSES) * PER_CLASS + len(BROKEN) + len(EXTRA_VALID)
    assert counts['inputs'] == total_inputs
    assert counts['inputs'] == counts['written'] + counts['rejected'] + counts['duplicates']
    assert counts['rejected'] == len(BROKEN) and counts['duplicates'] == 0
    assert counts['skipped'] == 2 and counts['skipped_by_reason'] == {'hidden': 1, 'not_image': 1}
    assert counts['reencoded'] == 2  # the EXIF-rotated JPEG and the BMP
    assert list(dataset['splits']) == ['train', 'val', 'test']
    for split, info in dataset['splits'].items():
        assert info['num_shards'] == 4
        assert [s['path'] for s in info['shards']] == [
            f'{split}/{split}-{i:05d}-of-00004.tfrecord' for i in range(4)
        ]
        for shard in info['shards']:
            data = (out / shard['path']).read_bytes()
            assert shard['num_bytes'] == len(data)
            assert shard['sha256'] == hashlib.sha256(data).hexdigest()
        assert info['num_records'] == sum(s['num_records'] for s in info['shards'])


def test_every_rejected_input_has_its_reason(tree_build, tree):
    out, _ = tree_build
    rows = _jsonl(out / 'rejected.jsonl')
    assert {os.path.relpath(r['path'], tree): r['reason'] for r in rows} == {
        name: reason for name, (_, reason) in BROKEN.items()
    }
    assert all(r['detail'] for r in rows)
    assert [r['id'] for r in rows] == sorted(r['id'] for r in rows)


def test_records_carry_the_contract_fields_and_decode_to_pillow_pixels(tree_build, tree, tf):
    out, dataset = tree_build
    records = [r for rs in _all_records(out, dataset).values() for r in rs]
    assert len(records) == dataset['counts']['written']
    assert set(records[0]) == set(kinds.Classification('examples').schema)
    listed = sorted(
        p
        for p in (str(p.relative_to(tree)) for p in tree.rglob('*') if p.is_file())
        if not os.path.basename(p).startswith('.') and not p.endswith('.txt')
    )
    ids = sorted(r[features.ID] for r in records)
    rejected_ids = {row['id'] for row in _jsonl(out / 'rejected.jsonl')}
    assert ids == sorted(set(range(len(listed))) - rejected_ids)
    for record in records:
        source = record[features.FILENAME].decode()
        relative = os.path.relpath(source, tree)
        assert listed.index(relative) == record[features.ID]  # ids follow sorted relative paths
        label = relative.split('/')[0]
        assert record[features.LABEL_TEXT].decode() == label
        assert dataset['labels'][record[features.LABEL]] == label
        encoded = record[features.ENCODED]
        assert hashlib.sha256(encoded).hexdigest() == record[features.SHA256].decode()
        expected = images.decode_rgb(open(source, 'rb').read())
        assert (record[features.HEIGHT], record[features.WIDTH]) == expected.shape[:2]
        if record[features.FORMAT] == b'jpeg':
            decoded = tf.io.decode_jpeg(encoded, channels=3, dct_method='INTEGER_ACCURATE')
        else:
            decoded = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        np.testing.assert_array_equal(decoded.numpy(), expected, err_msg=relative)


def test_splits_are_stratified_and_shards_balanced(tree_build):
    out, dataset = tree_build
    records = _all_records(out, dataset)
    per_class = collections.Counter(r[features.LABEL] for rs in records.values() for r in rs)
    for split, fraction in (('train', 0.8), ('val', 0.1), ('test', 0.1)):
        in_split = collections.Counter(r[features.LABEL] for r in records[split])
        for label, n in per_class.items():
            assert abs(in_split[label] - n * fraction) <= 1, (split, label)
        shards = dataset['splits'][split]['shards']
        sizes = [s['num_records'] for s in shards]
        assert max(sizes) - min(sizes) <= 1
        total = sum(sizes)
        for shard in shards:
            for name in dataset['labels']:
                share = (
                    dataset['splits'][split]['class_counts'].get(name, 0)
                    * shard['num_records']
                    / total
                )
                assert abs(shard['class_counts'].get(name, 0) - share) <= 1, (shard['path'], name)


def test_record_order_is_uncorrelated_with_label_sorted_input(tree_build):
    out, dataset = tree_build
    ids = [r[features.ID] for r in _records(out, dataset, 'train')]
    n = len(ids)
    ranks = np.argsort(np.argsort(ids))
    rho = np.corrcoef(ranks, np.arange(n))[0, 1]
    # A uniformly random order has |rho| ~ 1/sqrt(n); sorted input would give 1.
    assert abs(rho) < 4 / np.sqrt(n), rho


def _shard_bytes(out, dataset):
    return {
        s['path']: (out / s['path']).read_bytes()
        for info in dataset['splits'].values()
        for s in info['shards']
    }


def _without_timestamp(dataset):
    return {k: v for k, v in dataset.items() if k != 'created'}


def test_same_seed_gives_byte_identical_output(tree, tree_build, tmp_path_factory):
    out, dataset = tree_build
    again_out, again = _build(
        tmp_path_factory,
        'again',
        '--input',
        str(tree),
        '--splits',
        SPLITS,
        '--num-shards',
        '4',
        '--seed',
        '3',
        '--io-threads',
        '3',
        '--chunk-size',
        '7',
    )
    assert _shard_bytes(again_out, again) == _shard_bytes(out, dataset)
    assert _without_timestamp(again) == _without_timestamp(dataset)
    assert (again_out / 'rejected.jsonl').read_bytes() == (out / 'rejected.jsonl').read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize('mode', ['multi_processing', 'multi_threading'])
def test_running_mode_does_not_change_a_byte(tree, tree_build, tmp_path_factory, mode):
    out, dataset = tree_build
    other_out, other = _build(
        tmp_path_factory,
        mode,
        '--input',
        str(tree),
        '--splits',
        SPLITS,
        '--num-shards',
        '4',
        '--seed',
        '3',
        f'--direct_running_mode={mode}',
        '--direct_num_workers=2',
    )
    assert _shard_bytes(other_out, other) == _shard_bytes(out, dataset)
    assert _without_timestamp(other) == _without_timestamp(dataset)


def test_another_seed_gives_another_order_with_the_same_balance(tree, tree_build, tmp_path_factory):
    out, dataset = tree_build
    other_out, other = _build(
        tmp_path_factory,
        'seed4',
        '--input',
        str(tree),
        '--splits',
        SPLITS,
        '--num-shards',
        '4',
        '--seed',
        '4',
    )
    first = [r[features.ID] for r in _records(out, dataset, 'train')]
    second = [r[features.ID] for r in _records(other_out, other, 'train')]
    assert first != second
    assert {s: i['class_counts'] for s, i in dataset['splits'].items()} == {
        s: i['class_counts'] for s, i in other['splits'].items()
    }


@pytest.fixture(scope='session')
def manifest_rows(tree):
    rows = []
    for i, path in enumerate(sorted(p for p in tree.rglob('*.jpg') if not p.name.startswith('.'))):
        label = path.relative_to(tree).parts[0]
        split = 'test' if i % 10 == 0 else ''
        rows.append({'path': str(path.relative_to(tree)), 'label': label, 'split': split})
    rows.append(dict(rows[1]))  # a duplicate row
    rows.append({'path': 'ant/missing.jpg', 'label': 'ant', 'split': ''})
    return rows


def test_csv_manifest_build_follows_row_order_and_split_column(
    tree, manifest_rows, tmp_path_factory, caplog
):
    caplog.set_level(logging.INFO, logger='pipelines')
    manifest = tree / 'manifest.csv'
    with open(manifest, 'w', newline='', encoding='utf-8') as f:
        writer = csv.DictWriter(f, ['path', 'label', 'split'])
        writer.writeheader()
        writer.writerows(manifest_rows)
    out, dataset = _build(
        tmp_path_factory,
        'csv',
        '--input',
        str(manifest),
        '--splits',
        'train=0.9,val=0.1',
        '--num-shards',
        '2',
    )
    manifest.unlink()
    records = _all_records(out, dataset)
    assert set(dataset['splits']) == {'train', 'val', 'test'}
    said = [r.getMessage() for r in caplog.records if 'split column places' in r.getMessage()]
    tests = sum(1 for row in manifest_rows[:-2] if row['split'] == 'test')
    assert said == [
        f"the manifest's split column places {tests} inputs itself (test {tests}), whatever "
        '--splits says; --splits divides the rest'
    ]
    for split, rs in records.items():
        for r in rs:
            row = manifest_rows[r[features.ID]]
            assert os.path.relpath(r[features.FILENAME].decode(), tree) == row['path']
            assert (row['split'] == 'test') == (split == 'test')
    rejected = {row['id']: row['reason'] for row in _jsonl(out / 'rejected.jsonl')}
    n = len(manifest_rows)
    assert rejected[n - 2] == 'duplicate_row' and rejected[n - 1] == 'missing_file'
    counts = dataset['counts']
    assert counts['inputs'] == n == counts['written'] + counts['rejected']


def test_jsonl_manifest_build_in_paths_format_matches_the_examples_build(
    tree, manifest_rows, tmp_path_factory
):
    manifest = tree / 'manifest.jsonl'
    manifest.write_text(''.join(json.dumps(row) + '\n' for row in manifest_rows), encoding='utf-8')
    common = ['--input', str(manifest), '--num-shards', '2', '--seed', '11']
    paths_out, paths = _build(tmp_path_factory, 'jsonl_paths', *common, '--format', 'paths')
    examples_out, examples = _build(tmp_path_factory, 'jsonl_examples', *common)
    manifest.unlink()
    assert paths['format'] == 'paths'
    assert paths['counts'] == examples['counts']
    for split in examples['splits']:
        path_records = list(_records(paths_out, paths, split))
        example_records = list(_records(examples_out, examples, split))
        assert [r[features.ID] for r in path_records] == [r[features.ID] for r in example_records]
        for p, e in zip(path_records, example_records):
            assert set(p) == set(kinds.Classification('paths').schema)
            assert open(p[features.PATH].decode(), 'rb').read() == e[features.ENCODED]
            assert p[features.SHA256] == e[features.SHA256]


def test_paths_build_points_reencoded_images_at_lossless_copies(tree, tmp_path_factory):
    out, dataset = _build(tmp_path_factory, 'tree_paths', '--input', str(tree), '--format', 'paths')
    reencoded = [
        r
        for rs in _all_records(out, dataset).values()
        for r in rs
        if r[features.PATH].decode().startswith(str(out))
    ]
    assert len(reencoded) == dataset['counts']['reencoded'] == 2
    for record in reencoded:
        data = open(record[features.PATH].decode(), 'rb').read()
        assert hashlib.sha256(data).hexdigest() == record[features.SHA256].decode()
        source = open(record[features.FILENAME].decode(), 'rb').read()
        np.testing.assert_array_equal(images.decode_rgb(data), images.decode_rgb(source))


@pytest.mark.slow
def test_module_and_console_script_build_the_same_bytes(tree, tmp_path):
    console = os.path.join(os.path.dirname(sys.executable), 'imageshards')
    flags = ['--input', str(tree), '--num-shards', '2', '--max-pixels', '50000000']
    for command, out in [
        ([console, 'build'], 'a'),
        ([sys.executable, '-m', 'pipelines.build'], 'b'),
    ]:
        subprocess.run(
            [*command, *flags, '--output', str(tmp_path / out)],
            check=True,
            capture_output=True,
            cwd=os.path.dirname(os.path.dirname(__file__)),
        )
    for name in ('train-00000-of-00002.tfrecord', 'train-00001-of-00002.tfrecord'):
        a, b = (tmp_path / out / 'train' / name for out in 'ab')
        assert a.read_bytes() == b.read_bytes()
