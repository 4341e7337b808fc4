"""Builds in each shard format (--shard-format): the same records in the same order as a TFRecord
build's, read back by the tools and by each format's own readers (TFDS's as_data_source,
Hugging Face datasets, pyarrow), damage found, and a gs:// output written as a local one."""

import json
import os

import datasets
import numpy as np
import pyarrow.parquet as pq
import pytest

from imageshards import dataset_json
from imageshards import records
from imageshards.kinds import features
from imageshards.shard_formats import registry as shard_formats
from imageshards_cli import inspect
from imageshards_cli import verify
from pipelines import launcher

import images_for_tests as imgs
import multilabel_builds
from build_commands import build_flags

pytest_plugins = ['gcs_emulator']

FORMATS = ('tfrecord', 'array_record', 'parquet')
CLASSES = ('ant', 'bee', 'cat')


def _build(source, out, shard_format, *extra):
    launcher.run(
        build_flags(
            source,
            out,
            '--shard-format',
            shard_format,
            *extra,
            splits='train=0.7,val=0.3',
            num_shards=2,
            seed=5,
            analyze=False,
            in_memory=True,
        )
    )
    return out


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp('formats') / 'images'
    imgs.write_tree(root, 8, CLASSES)
    (root / 'bee' / 'logo.png').write_bytes(imgs.png(3, 1))
    (root / 'cat' / 'broken.jpg').write_bytes(imgs.jpeg(2)[:200])
    return root


@pytest.fixture(scope='module')
def builds(tree, tmp_path_factory):
    base = tmp_path_factory.mktemp('format-builds')
    return {fmt: _build(str(tree), str(base / fmt), fmt) for fmt in FORMATS}


def _dataset(out):
    return dataset_json.load(out, complete=True)


def _records(out):
    """{split: [record bytes in order]} of a build, read through its format."""
    dataset = _dataset(out)
    shard_format = shard_formats.of_build(dataset)
    found = {}
    for split, entry in dataset['splits'].items():
        found[split] = [
            record
            for shard in entry['shards']
            for _, record in records.shard_records(f'{out}/{shard["path"]}', shard_format)
        ]
    return found


@pytest.mark.parametrize('fmt', FORMATS[1:])
def test_every_format_holds_the_records_of_the_tfrecord_build_in_its_order(builds, fmt):
    assert _records(builds[fmt]) == _records(builds['tfrecord'])
    dataset, tfrecord = (_dataset(builds[f]) for f in (fmt, 'tfrecord'))
    assert dataset['shard_format'] == fmt and 'shard_format' not in tfrecord
    assert dataset['counts'] == tfrecord['counts']
    for split, entry in dataset['splits'].items():
        for shard, other in zip(entry['shards'], tfrecord['splits'][split]['shards']):
            assert shard['path'] == other['path'].replace('.tfrecord', f'.{fmt}')
            assert 'index_file' not in shard and 'index_file' in other
            assert shard['num_records'] == other['num_records']
            assert shard['class_counts'] == other['class_counts']


@pytest.mark.parametrize('fmt', FORMATS[1:])
def test_verify_passes_and_names_a_damaged_shard_in_its_formats_words(
    builds, fmt, tmp_path, capsys
):
    assert verify.main([builds[fmt]]) == 0
    copy = tmp_path / 'copy'
    _copy_tree(builds[fmt], copy)
    shard = sorted((copy / 'train').glob(f'*.{fmt}'))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x55
    shard.write_bytes(bytes(data))
    capsys.readouterr()
    assert verify.main([str(copy)]) == 1
    out = capsys.readouterr().out
    assert f'{shard}: ' in out
    assert 'sha256' in out  # the shard's digest no longer matches dataset.json's


def _copy_tree(source, destination):
    import shutil

    shutil.copytree(source, destination)


def test_tfds_reads_an_array_record_build_by_index(builds):
    import tensorflow_datasets as tfds

    builder = tfds.builder_from_directory(builds['array_record'])
    assert builder.info.file_format.value == 'array_record'
    sources = builder.as_data_source()
    dataset = _dataset(builds['array_record'])
    for split, entry in dataset['splits'].items():
        assert len(sources[split]) == entry['num_records']
    expected = _records(builds['tfrecord'])['train']
    ids = [records.example_values(records.parse_example(r))[features.ID][1][0] for r in expected]
    last = sources['train'][len(expected) - 1]
    assert last[features.ID] == ids[-1]
    assert last[features.ENCODED].shape[-1] == 3


def test_hugging_face_datasets_loads_a_parquet_build_with_its_features(builds):
    out = builds['parquet']
    dataset = _dataset(out)
    loaded = datasets.load_dataset(
        'parquet', data_files={s: f'{out}/{s}/*.parquet' for s in dataset['splits']}
    )
    train = loaded['train']
    assert train.features['label'].names == dataset['labels']
    assert type(train.features['image']).__name__ == 'Image'
    assert len(train) == dataset['splits']['train']['num_records']
    row = train[0]
    assert row['label_text'] == dataset['labels'][row['label']]
    assert np.asarray(row['image']).shape == (row['height'], row['width'], 3)
    first = records.example_values(records.parse_example(_records(builds['tfrecord'])['train'][0]))
    assert row['id'] == first[features.ID][1][0]
    assert row['filename'] == first[features.FILENAME][1][0]


def test_parquet_row_groups_and_columns(builds):
    out = builds['parquet']
    shard = _dataset(out)['splits']['train']['shards'][0]['path']
    parquet = pq.ParquetFile(f'{out}/{shard}')
    assert parquet.metadata.row_group(0).num_rows == min(100, parquet.metadata.num_rows)
    names = parquet.schema_arrow.names
    assert names[0] == 'image' and {'label', 'label_text', 'key_sha256', 'id'} <= set(names)
    stored = json.loads(parquet.schema_arrow.metadata[b'imageshards'])
    assert stored['columns'][features.SHA256] == 'key_sha256'


def test_a_multi_label_parquet_build_has_lists_of_class_labels(tmp_path):
    built = multilabel_builds.write_colour_build(
        tmp_path / 'ml', count=24, levels=True, analyze=False
    )
    manifest = f'{built}-images/manifest.csv'
    out = str(tmp_path / 'ml-parquet')
    launcher.run(
        ['--input', manifest, '--output', out, '--num-shards', '2', '--shard-format', 'parquet']
        + ['--direct_running_mode=in_memory', '--no-analyze']
    )
    assert _records(out) == _records(str(built))
    loaded = datasets.load_dataset('parquet', data_files={'train': f'{out}/train/*.parquet'})
    feature = loaded['train'].features
    assert feature['label'].feature.names == list(multilabel_builds.COLOURS)
    assert feature['label_mood'].feature.names == ['cool', 'warm']
    row = loaded['train'][0]
    assert row['label_text'] == [multilabel_builds.COLOURS[i] for i in row['label']]
    # Every column but the encoded images is Snappy-compressed, the list columns included.
    shard = sorted(os.listdir(f'{out}/train'))[0]
    group = pq.ParquetFile(f'{out}/train/{shard}').metadata.row_group(0)
    compression = {
        group.column(i).path_in_schema: group.column(i).compression
        for i in range(group.num_columns)
    }
    assert compression.pop('image.bytes') == 'UNCOMPRESSED'
    assert compression['label.list.element'] == 'SNAPPY'
    assert set(compression.values()) == {'SNAPPY'}


@pytest.mark.parametrize('fmt', FORMATS[1:])
def test_inspect_reads_a_shard_file_of_each_format(builds, fmt, capsys):
    out = builds[fmt]
    shard = _dataset(out)['splits']['val']['shards'][0]['path']
    assert inspect.main([f'{out}/{shard}', '-n', '1']) == 0
    word = {'array_record': 'record', 'parquet': 'row'}[fmt]
    assert f'{word} 0):' in capsys.readouterr().out


@pytest.mark.parametrize('fmt', FORMATS[1:])
def test_splits_from_an_earlier_build_of_each_format(builds, tree, tmp_path, fmt):
    out = _build(str(tree), str(tmp_path / 'again'), 'tfrecord', '--splits-from', builds[fmt])
    before = _dataset(builds[fmt])
    after = _dataset(out)
    for split in before['splits']:
        assert after['splits'][split]['num_records'] == before['splits'][split]['num_records']
    assert _ids_by_split(out) == _ids_by_split(builds[fmt])


def _ids_by_split(out):
    return {
        split: sorted(
            records.example_values(records.parse_example(r))[features.ID][1][0] for r in rs
        )
        for split, rs in _records(out).items()
    }


@pytest.mark.parametrize('fmt', FORMATS[1:])
def test_a_gs_output_holds_the_shards_of_a_local_one(gcs, tree, builds, fmt):
    remote = _build(str(tree), gcs.uri(f'out-{fmt}'), fmt)
    local = _dataset(builds[fmt])
    found = json.loads(gcs.read(f'{remote}/dataset.json'))
    for split, entry in local['splits'].items():
        digests = [shard['sha256'] for shard in entry['shards']]
        assert [shard['sha256'] for shard in found['splits'][split]['shards']] == digests
        for shard in entry['shards']:
            assert (
                gcs.read(f'{remote}/{shard["path"]}')
                == open(f'{builds[fmt]}/{shard["path"]}', 'rb').read()
            )
    assert verify.main([remote]) == 0
