"""Each Beam step of the build on a TestPipeline: validate, deduplicate, write shards."""

import hashlib
import pathlib

import apache_beam as beam
import google_crc32c
import pytest
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to

from imageshards import layout
from imageshards import storage
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards.kinds.record_kind import LabelNames
from imageshards.shard_formats import registry as shard_formats
from imageshards.shard_formats import tfrecord
from pipelines.assignment import assign
from pipelines.assignment import plan as plan_lib
from pipelines.core import blocks
from pipelines.core.blocks import ImageMeta
from pipelines.core.settings import ValidationSettings
from pipelines.core.settings import WriteSettings
from pipelines.inputs import listing
from pipelines.inputs.entries import InputEntry
from pipelines.local import spill
from pipelines.validation import images
from pipelines.validation.dedup import DropDuplicates
from pipelines.validation.validate import ValidateImages
from pipelines.writing.write import WriteShards

import images_for_tests as imgs
from beam_helpers import collect
from beam_helpers import new_test_pipeline


def _listing(tmp_path, entries, chunk_size):
    """A listing file of `entries` and its work items."""
    path = str(tmp_path / 'listing.jsonl')
    listing.write_listing(entries, path, chunk_size)
    return path, listing.work_items(path)


def _expected_meta(entry_id, key, split, data, info, label=0):
    """The ImageMeta validation makes of an input of `data` that inspects as `info`."""
    return ImageMeta(
        id=entry_id,
        key=key,
        label=label,
        split=split,
        format=info.format,
        height=info.height,
        width=info.width,
        channels=info.channels,
        sha256=bytes.fromhex(info.sha256),
        num_bytes=info.num_bytes,
        source_sha256=hashlib.sha256(data).digest() if info.reencoded else b'',
        source_crc32c=google_crc32c.value(data),
        reencoded=info.reencoded,
    )


def _unexpected_read(meta):
    raise AssertionError(f'{meta.key} should have been kept by validation (a small image)')


def test_validate_images_keeps_metadata_and_rejects_with_reasons(tmp_path):
    good = tmp_path / 'cat' / 'a.jpg'
    good.parent.mkdir()
    good.write_bytes(imgs.jpeg(1))
    bmp = tmp_path / 'cat' / 'b.bmp'
    bmp.write_bytes(imgs.encode(imgs.pixels(2), 'BMP'))
    broken = tmp_path / 'cat' / 'c.jpg'
    broken.write_bytes(imgs.jpeg(3)[:100])
    entries = [
        InputEntry(0, str(good), 'cat/a.jpg', 'cat'),
        InputEntry(1, str(bmp), 'cat/b.bmp', 'cat', 'val'),
        InputEntry(2, str(broken), 'cat/c.jpg', 'cat'),
        InputEntry(3, str(tmp_path / 'cat' / 'gone.jpg'), 'cat/gone.jpg', 'cat'),
        InputEntry(4, 'm.csv#row=4', 'm.csv#row=4', '', reject='empty_path', detail='no path'),
    ]
    good_info, _ = images.inspect_image(good.read_bytes(), 10**8)
    bmp_info, bmp_stored = images.inspect_image(bmp.read_bytes(), 10**8)
    assert (good_info.format, good_info.reencoded, bmp_info.format, bmp_info.reencoded) == (
        'jpeg',
        False,
        'png',
        True,
    )
    listing_path, items = _listing(tmp_path, entries, chunk_size=2)
    assert len(items) == 3
    store = spill.SpillingStore(str(tmp_path / 'blocks'))
    with new_test_pipeline() as p:
        result = (
            p
            | beam.Create(items)
            | ValidateImages(
                listing_path,
                ValidationSettings({'cat': 0}, max_pixels=10**8, io_threads=2),
                store,
            )
        )
        # Each valid image's metadata, and the bytes its record stores, kept in a payload file.
        kept = result.blocks | beam.FlatMap(
            lambda ref: [
                (meta._replace(payload=0, payload_offset=0), stored)
                for meta, stored in zip(
                    store.metas([ref]), store.read_payloads(store.metas([ref]), _unexpected_read)
                )
            ]
        )
        expected = [
            (_expected_meta(0, 'cat/a.jpg', '', good.read_bytes(), good_info), good.read_bytes()),
            (_expected_meta(1, 'cat/b.bmp', 'val', bmp.read_bytes(), bmp_info), bmp_stored),
        ]
        assert_that(kept, equal_to(expected), label='valid')
        reasons = result.rejected | beam.Map(lambda r: (r['id'], r['reason']))
        assert_that(
            reasons,
            equal_to([(2, 'truncated'), (3, 'missing_file'), (4, 'empty_path')]),
            label='rejected',
        )


def _meta(i, sha, label=0):
    return ImageMeta(
        id=i,
        key=f'k{i}',
        label=label,
        split='',
        format='jpeg',
        height=1,
        width=1,
        channels=3,
        sha256=sha,
        num_bytes=10,
        source_sha256=b'',
        source_crc32c=0,
        reencoded=False,
    )


@pytest.mark.parametrize('bucket_bits', [0, 3])
def test_drop_duplicates_keeps_the_first_in_listing_order(tmp_path, bucket_bits):
    groups = [[_meta(5, b'a'), _meta(1, b'b')], [_meta(3, b'a'), _meta(9, b'a'), _meta(2, b'c')]]
    with new_test_pipeline() as p:
        result = (
            p
            | beam.Create([blocks.pack(metas) for metas in groups])
            | DropDuplicates('/in', bucket_bits=bucket_bits)
        )
        kept = result.blocks | beam.FlatMap(lambda block: [m.id for m in blocks.unpack(block)])
        assert_that(kept, equal_to([1, 2, 3]), label='kept')
        dropped = result.duplicates | beam.Map(
            lambda d: (d['id'], d['path'], d['duplicate_of_id'], d['duplicate_of_path'])
        )
        assert_that(
            dropped,
            equal_to([(5, '/in/k5', 3, '/in/k3'), (9, '/in/k9', 3, '/in/k3')]),
            label='dropped',
        )


def _tree_metas(tmp_path, count):
    """Real images under tmp_path/in and their ImageMeta, alternating two labels."""
    metas = []
    for i in range(count):
        data = imgs.jpeg(i, i % 2) if i % 3 else imgs.png(i, i % 2)
        path = tmp_path / 'in' / f'{i}.img'
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        info, _ = images.inspect_image(data, 10**8)
        metas.append(_expected_meta(i, f'{i}.img', '', data, info, label=i % 2))
    return metas


def _source(tmp_path, meta):
    return str(tmp_path / 'in' / meta.key)


def _write_shards(p, pieces, plan, tmp_path, fmt=features.EXAMPLES, labels=('a', 'b')):
    """WriteShards of `pieces` ((split, shard), [ImageMeta]) under `plan`, into tmp_path/out."""
    out = tmp_path / 'out'
    return (
        p
        | 'Pieces' >> beam.Create([(key, blocks.pack(metas)) for key, metas in pieces])
        | WriteShards(
            p | 'Plan' >> beam.Create([plan.layout]),
            WriteSettings(
                kind=kinds.Classification(fmt),
                names=LabelNames(tuple(labels)),
                shard_format=shard_formats.named('tfrecord'),
                input_base=str(tmp_path / 'in'),
                output_dir=str(out),
                temp_dir=str(out / 'tmp'),
                io_threads=2,
            ),
        )
    ).shards


def _staged(out, relative):
    """Where WriteShards leaves a shard for Finalize to move into place."""
    return pathlib.Path(storage.join(str(out), layout.staged_shard(relative)))


def _read_shard(path, tf):
    with open(path, 'rb') as f:
        return [tf.train.Example.FromString(record) for record in tfrecord.read_records(f, path)]


def test_write_shards_writes_exact_shard_contents(tmp_path, tf):
    metas = _tree_metas(tmp_path, 7)
    plan = plan_lib.make_plan(
        {('', 0, 0): (4, 0), ('', 1, 0): (3, 0)}, [('train', 1.0)], num_shards=3
    )
    pieces = [
        (('train', 0), metas[:2]),
        (('train', 0), metas[6:]),
        (('train', 1), metas[2:4]),
        (('train', 2), metas[4:6]),
    ]
    out = tmp_path / 'out'
    with new_test_pipeline() as p:
        shards = _write_shards(p, pieces, plan, tmp_path, labels=('even', 'odd'))
        assert_that(
            shards | beam.Map(lambda s: (s['path'], s['num_records'], s['class_counts'])),
            equal_to(
                [
                    ('train/train-00000-of-00003.tfrecord', 3, {'even': 2, 'odd': 1}),
                    ('train/train-00001-of-00003.tfrecord', 2, {'even': 1, 'odd': 1}),
                    ('train/train-00002-of-00003.tfrecord', 2, {'even': 1, 'odd': 1}),
                ]
            ),
        )
    for index, members in enumerate([metas[:2] + metas[6:], metas[2:4], metas[4:6]]):
        records = _read_shard(_staged(out, f'train/train-0000{index}-of-00003.tfrecord'), tf)
        expected = sorted(members, key=lambda m: assign.order_key(0, m))
        assert [r.features.feature[features.ID].int64_list.value[0] for r in records] == [
            m.id for m in expected
        ]
        for record, meta in zip(records, expected):
            feature = record.features.feature
            encoded = feature[features.ENCODED].bytes_list.value[0]
            assert encoded == open(_source(tmp_path, meta), 'rb').read()
            assert feature[features.SHA256].bytes_list.value[0].decode() == meta.sha256.hex()
            assert feature[features.LABEL].int64_list.value[0] == meta.label
            assert feature[features.LABEL_TEXT].bytes_list.value[0] == [b'even', b'odd'][meta.label]
            assert feature[features.FILENAME].bytes_list.value[0].decode() == _source(
                tmp_path, meta
            )
            assert feature[features.FORMAT].bytes_list.value[0].decode() == meta.format
            assert feature[features.HEIGHT].int64_list.value[0] == 24
            assert feature[features.WIDTH].int64_list.value[0] == 32


def test_write_shards_writes_empty_shards_and_paths_records(tmp_path, tf):
    metas = _tree_metas(tmp_path, 2)
    plan = plan_lib.make_plan(
        {('', 0, 0): (1, 0), ('', 1, 0): (1, 0)}, [('train', 1.0)], num_shards=3
    )
    out = tmp_path / 'out'
    shards = collect(
        lambda p: _write_shards(p, [(('train', 0), metas)], plan, tmp_path, features.PATHS),
        tmp_path,
    )
    assert sorted((s['index'], s['num_records']) for s in shards) == [(0, 2), (1, 0), (2, 0)]
    assert _staged(out, 'train/train-00002-of-00003.tfrecord').read_bytes() == b''
    records = _read_shard(_staged(out, 'train/train-00000-of-00003.tfrecord'), tf)
    paths = sorted(r.features.feature[features.PATH].bytes_list.value[0].decode() for r in records)
    assert paths == sorted(_source(tmp_path, m) for m in metas)
    assert all(features.ENCODED not in r.features.feature for r in records)


def test_shard_bytes_parse_with_the_trainers_feature_spec(tmp_path, tf):
    metas = _tree_metas(tmp_path, 3)
    plan = plan_lib.make_plan(
        {('', 0, 0): (2, 0), ('', 1, 0): (1, 0)}, [('train', 1.0)], num_shards=1
    )
    out = tmp_path / 'out'
    with new_test_pipeline() as p:
        _write_shards(p, [(('train', 0), metas)], plan, tmp_path)
    dataset = tf.data.TFRecordDataset(str(_staged(out, 'train/train-00000-of-00001.tfrecord')))
    batch = next(
        iter(
            dataset.batch(8).map(
                lambda records: tf.io.parse_example(
                    records, kinds.Classification(features.EXAMPLES).feature_spec()
                )
            )
        )
    )
    assert sorted(batch[features.ID].numpy().tolist()) == [0, 1, 2]
    for encoded, sha in zip(batch[features.ENCODED].numpy(), batch[features.SHA256].numpy()):
        assert images.sha256_hex(encoded) == sha.decode()
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        assert image.shape == (24, 32, 3)


def test_write_shards_fails_loudly_when_an_input_changed_after_validation(tmp_path):
    metas = _tree_metas(tmp_path, 2)
    with open(_source(tmp_path, metas[1]), 'r+b') as f:  # same size, other bytes
        f.seek(200)
        f.write(b'\x00\x01\x02')
    plan = plan_lib.make_plan(
        {('', 0, 0): (1, 0), ('', 1, 0): (1, 0)}, [('train', 1.0)], num_shards=1
    )
    out = tmp_path / 'out'
    with pytest.raises(Exception, match='changed while the build was running'):
        with new_test_pipeline() as p:
            _write_shards(p, [(('train', 0), metas)], plan, tmp_path)
    assert not (out / 'train').exists() and not _staged(out, 'train').exists()
