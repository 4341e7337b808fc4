"""The trainer's tf.data input pipeline on real builds: order, resume, formats, workers, faults."""

import json
import shutil

import numpy as np
import pytest

from imageshards.kinds import example_bytes
from imageshards.kinds import features
from imageshards.shard_formats import tfrecord
from trainer import corrupt_shards
from trainer import dataset_info
from trainer import input_options
from trainer import input_pipeline
from trainer import record_decoding

SIZE = (16, 16)


def _batches(data_dir, split='train', batch=8, training=True, image_size=SIZE, **options):
    dataset = input_pipeline.make_dataset(
        str(data_dir),
        split,
        batch,
        training=training,
        image_size=image_size,
        with_ids=True,
        **options,
    )
    return [(x.numpy(), y.numpy(), i.numpy()) for x, y, i in dataset]


def test_training_batches_are_full_shuffled_and_cover_each_epoch(color_builds):
    info = dataset_info.load(str(color_builds['examples']))
    per_epoch = input_pipeline.steps_per_epoch(info, 'train', 8)
    batches = _batches(color_builds['examples'], epochs=2, seed=1)
    assert len(batches) == 2 * per_epoch
    images, labels, _ = batches[0]
    assert images.shape == (8, *SIZE, 3) and images.dtype == np.uint8
    assert labels.dtype == np.int64 and images.max() > images.min()
    epochs = [
        np.concatenate([b[2] for b in batches[e * per_epoch : (e + 1) * per_epoch]])
        for e in range(2)
    ]
    for ids in epochs:
        assert len(set(ids)) == len(ids)  # no record twice in an epoch
        assert len(ids) > info.num_records('train') - 8  # only the remainder is dropped
    assert not np.array_equal(epochs[0], epochs[1])  # reshuffled per epoch


def test_order_is_a_function_of_the_seed(color_builds):
    first = _batches(color_builds['examples'], epochs=1, seed=3)
    again = _batches(color_builds['examples'], epochs=1, seed=3)
    other = _batches(color_builds['examples'], epochs=1, seed=4)
    for (x, _, i), (x2, _, i2) in zip(first, again):
        np.testing.assert_array_equal(i, i2)
        np.testing.assert_array_equal(x, x2)
    assert not all(np.array_equal(a[2], b[2]) for a, b in zip(first, other))


def test_resuming_mid_epoch_gives_the_batches_of_an_uninterrupted_run(color_builds):
    full = _batches(color_builds['examples'], epochs=3, seed=2, augment='standard')
    per_epoch = len(full) // 3
    resumed = _batches(
        color_builds['examples'],
        epochs=3,
        seed=2,
        augment='standard',
        start_epoch=1,
        skip_batches=3,
    )
    assert len(resumed) == len(full) - per_epoch - 3
    for (x, y, i), (x2, y2, i2) in zip(full[per_epoch + 3 :], resumed):
        np.testing.assert_array_equal(i, i2)
        np.testing.assert_array_equal(y, y2)
        np.testing.assert_allclose(x, x2, atol=1e-6)


def test_crops_decoded_at_a_dct_scale_resume_exactly_and_keep_the_order(color_builds):
    # At 8x8, crops of the 24x32 images at least 16x16 decode at half scale; the build's
    # analysis shows images that large, so make_dataset turns the scaling on by itself.
    small = {'image_size': (8, 8), 'seed': 2, 'augment': 'standard'}
    full = _batches(color_builds['examples'], epochs=2, **small)
    per_epoch = len(full) // 2
    resumed = _batches(color_builds['examples'], epochs=2, start_epoch=1, skip_batches=2, **small)
    assert len(resumed) == per_epoch - 2
    for (x, y, i), (x2, y2, i2) in zip(full[per_epoch + 2 :], resumed):
        np.testing.assert_array_equal(i, i2)
        np.testing.assert_array_equal(y, y2)
        np.testing.assert_array_equal(x, x2)
    unscaled = _batches(color_builds['examples'], epochs=2, dct_scaling=False, **small)
    for (_, y, i), (_, y2, i2) in zip(full, unscaled):
        np.testing.assert_array_equal(i, i2)
        np.testing.assert_array_equal(y, y2)
    differ = [
        not np.array_equal(a[0][k], b[0][k]) for a, b in zip(full, unscaled) for k in range(8)
    ]
    assert 0 < sum(differ) < len(differ)  # the scaled crops (PNGs and small crops: as before)


def test_flips_leave_each_crop_as_it_was_or_mirror_it(color_builds):
    # Flips are drawn per image from a stream of their own: the crops stay those of no
    # augmentation, and whether an image is mirrored does not follow from its crop.
    plain = _batches(color_builds['examples'], epochs=1, seed=6)
    flipped = _batches(color_builds['examples'], epochs=1, seed=6, augment='flip_horizontal')
    images = np.concatenate([b[0] for b in plain])
    flips = np.concatenate([b[0] for b in flipped])
    np.testing.assert_array_equal(
        np.concatenate([b[2] for b in plain]), np.concatenate([b[2] for b in flipped])
    )
    asymmetric = [
        i for i in range(len(images)) if not np.array_equal(images[i], images[i, :, ::-1])
    ]
    assert len(asymmetric) > len(images) // 2
    mirrored = [np.array_equal(flips[i], images[i, :, ::-1]) for i in asymmetric]
    kept = [np.array_equal(flips[i], images[i]) for i in asymmetric]
    assert all(m or k for m, k in zip(mirrored, kept))
    assert 0.25 < np.mean(mirrored) < 0.75


def test_scale_and_brightness_apply_per_image_and_keep_the_order(color_builds):
    plain = _batches(color_builds['examples'], epochs=1, seed=6)
    spec = 'scale_range=1.3:1.6,brightness_delta=0.2'
    augmented = _batches(color_builds['examples'], epochs=1, seed=6, augment=spec)
    for (x, y, i), (x2, y2, i2) in zip(plain, augmented):
        np.testing.assert_array_equal(i, i2)
        np.testing.assert_array_equal(y, y2)
        assert x2.shape == x.shape and x2.dtype == x.dtype
    changed = [
        not np.array_equal(a[0][k], b[0][k]) for a, b in zip(plain, augmented) for k in range(8)
    ]
    assert all(changed)


def test_evaluation_reads_every_record_once_in_a_fixed_order(color_builds):
    info = dataset_info.load(str(color_builds['examples']))
    first = _batches(color_builds['examples'], 'val', training=False)
    again = _batches(color_builds['examples'], 'val', training=False)
    ids = np.concatenate([b[2] for b in first])
    assert sorted(ids) == sorted(set(ids)) and len(ids) == info.num_records('val')
    np.testing.assert_array_equal(ids, np.concatenate([b[2] for b in again]))
    np.testing.assert_array_equal(first[0][0], again[0][0])


def test_paths_and_examples_builds_give_the_same_images(color_builds):
    for training, options in ((False, {}), (True, {'epochs': 1, 'augment': 'standard'})):
        examples = _batches(
            color_builds['examples'],
            'val' if not training else 'train',
            training=training,
            **options,
        )
        paths = _batches(
            color_builds['paths'], 'val' if not training else 'train', training=training, **options
        )
        assert len(examples) == len(paths)
        for (x, y, i), (x2, y2, i2) in zip(examples, paths):
            np.testing.assert_array_equal(i, i2)
            np.testing.assert_array_equal(y, y2)
            np.testing.assert_array_equal(x, x2)


def test_workers_read_disjoint_shards(tf, color_builds):
    ids = []
    for pipeline in range(2):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=pipeline, num_replicas_in_sync=2
        )
        batches = _batches(color_builds['examples'], epochs=1, batch=8, input_context=context)
        assert batches[0][0].shape[0] == 4  # the per-replica share of the global batch
        ids.append(set(np.concatenate([b[2] for b in batches])))
    assert ids[0] and ids[1] and not ids[0] & ids[1]


def test_more_workers_than_shards_is_a_clear_error(tf, color_builds):
    context = tf.distribute.InputContext(
        num_input_pipelines=5, input_pipeline_id=0, num_replicas_in_sync=5
    )
    with pytest.raises(ValueError, match='has 4 shards but .* 5 input pipelines'):
        input_pipeline.make_dataset(
            str(color_builds['examples']), 'train', 10, training=True, input_context=context
        )


def test_patches_mix_many_images_in_each_batch(color_builds):
    batches = _batches(
        color_builds['examples'],
        epochs=1,
        batch=32,
        patches_per_image=8,
        patch_size=8,
        patch_shuffle_images=64,
    )
    assert batches[0][0].shape == (32, 8, 8, 3)
    distinct = [len(set(b[2])) for b in batches]
    assert np.mean(distinct) >= 20, distinct
    # Without the patch shuffle, a batch holds the patches of 32 / 8 = 4 images.
    naive = _batches(
        color_builds['examples'],
        epochs=1,
        batch=32,
        patches_per_image=8,
        patch_size=8,
        patch_shuffle_images=0,
    )
    assert [len(set(b[2])) for b in naive] == [4] * len(naive)


def _copy_with_shard(tmp_path, build, replace):
    """A copy of a build whose first train shard is `replace(records)`'s output bytes."""
    copy = tmp_path / 'copy'
    shutil.copytree(build, copy)
    dataset = json.loads((copy / 'dataset.json').read_text())
    shard = copy / dataset['splits']['train']['shards'][0]['path']
    with open(shard, 'rb') as f:
        records = list(tfrecord.read_records(f))
    shard.write_bytes(replace(records))
    return copy, shard


def test_a_corrupt_shard_is_named(tf, tmp_path, color_builds):
    def flip_a_byte(records):
        data = bytearray(b''.join(tfrecord.frame(r) for r in records))
        data[len(data) // 2] ^= 0xFF
        return bytes(data)

    copy, shard = _copy_with_shard(tmp_path, color_builds['examples'], flip_a_byte)
    dataset = input_pipeline.make_dataset(str(copy), 'train', 8, training=True, epochs=1)
    with pytest.raises(tf.errors.DataLossError) as caught:
        for _ in dataset:
            pass
    info = dataset_info.load(str(copy))
    named = corrupt_shards.name_corrupt_shards(
        caught.value, info.shard_paths('train'), info.shard_format
    )
    assert isinstance(named, corrupt_shards.CorruptShardError)
    assert str(shard) in str(named)


def _with_an_undecodable_image(records):
    example = example_bytes.example_class().FromString(records[0])
    example.features.feature[features.ENCODED].bytes_list.value[0] = b'\xff\xd8\xff' + b'x' * 50
    broken = [example.SerializeToString(deterministic=True)] + records[1:]
    return b''.join(tfrecord.frame(r) for r in broken)


def test_an_undecodable_image_fails_loudly_or_is_skipped_and_counted(tf, tmp_path, color_builds):
    copy, _ = _copy_with_shard(tmp_path, color_builds['examples'], _with_an_undecodable_image)
    with pytest.raises(tf.errors.InvalidArgumentError):
        _batches(copy, epochs=1)
    skipped = record_decoding.SkippedImages()
    dataset = input_pipeline.make_dataset(
        str(copy),
        'train',
        8,
        training=True,
        epochs=1,
        image_size=SIZE,
        skip_bad_images=True,
        skipped=skipped,
    )
    delivered = sum(int(labels.shape[0]) for _, labels in dataset)
    records = dataset_info.load(str(copy)).num_records('train')
    assert skipped.skipped == 1
    assert delivered == (records - 1) // 8 * 8


def test_an_unfinished_build_is_refused(tmp_path, color_builds):
    copy = tmp_path / 'unfinished'
    shutil.copytree(color_builds['examples'], copy)
    (copy / '_SUCCESS').unlink()
    with pytest.raises(FileNotFoundError, match='has no _SUCCESS'):
        dataset_info.load(str(copy))


def test_epochs_can_be_cut_to_a_number_of_batches_and_resumed_inside_one(color_builds):
    full = _batches(color_builds['examples'], epochs=2, seed=6)
    per_epoch = len(full) // 2
    cut = _batches(color_builds['examples'], epochs=2, seed=6, batches_per_epoch=per_epoch - 2)
    assert len(cut) == 2 * (per_epoch - 2)
    for got, want in zip(cut, full[: per_epoch - 2] + full[per_epoch : 2 * per_epoch - 2]):
        np.testing.assert_array_equal(got[2], want[2])
    resumed = _batches(
        color_builds['examples'],
        epochs=2,
        seed=6,
        batches_per_epoch=per_epoch - 2,
        start_epoch=0,
        skip_batches=3,
    )
    assert [b[2].tolist() for b in resumed] == [b[2].tolist() for b in cut[3:]]


def _stored_ids(tf, build, split):
    """{shard path: image ids in the shard's stored order}."""
    info = dataset_info.load(str(build))
    spec = {features.ID: tf.io.FixedLenFeature([], tf.int64)}
    return {
        path: [
            int(tf.io.parse_single_example(record, spec)[features.ID])
            for record in tf.data.TFRecordDataset(path)
        ]
        for path in info.shard_paths(split)
    }


def _epoch_ids(build, **options):
    dataset = input_pipeline.make_dataset(
        str(build), 'train', 4, training=True, with_ids=True, decode_images=False, **options
    )
    per_epoch = input_pipeline.steps_per_epoch(dataset_info.load(str(build)), 'train', 4)
    ids = [int(i) for _, batch_ids in dataset for i in batch_ids.numpy()]
    return [ids[e * per_epoch * 4 : (e + 1) * per_epoch * 4] for e in range(options['epochs'])]


def _starts(stored, epoch_ids):
    """Per shard, where in its stored order the epoch began reading it; asserts a rotation."""
    starts = []
    for ids in stored.values():
        mine = set(ids)
        seen = [i for i in epoch_ids if i in mine]
        start = ids.index(seen[0])
        assert seen == (ids[start:] + ids[:start])[: len(seen)]
        starts.append(start)
    return starts


def test_few_shards_are_read_from_a_start_that_changes_each_epoch(tf, color_builds):
    stored = _stored_ids(tf, color_builds['examples'], 'train')
    assert len(stored) < input_options.ROTATE_BELOW * input_pipeline.InputOptions().cycle_length
    # A one-record shuffle buffer leaves the order the shards are read in.
    epochs = _epoch_ids(color_builds['examples'], epochs=3, seed=7, shuffle_buffer=1)
    starts = [_starts(stored, ids) for ids in epochs]
    assert len({tuple(s) for s in starts}) == 3  # every epoch starts the shards elsewhere
    assert any(start for start in starts[0])
    for ids in epochs:
        assert len(set(ids)) == len(ids)
    again = _epoch_ids(color_builds['examples'], epochs=3, seed=7, shuffle_buffer=1)
    assert again == epochs  # the starts are a function of (seed, epoch, shard)
    unrotated = _epoch_ids(
        color_builds['examples'], epochs=2, seed=7, shuffle_buffer=1, rotate_shards=False
    )
    assert [_starts(stored, ids) for ids in unrotated] == [[0] * len(stored)] * 2


@pytest.fixture(scope='module')
def jpeg_build(tmp_path_factory):
    """A build of JPEGs alone (its dataset.json counts no other format)."""
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    import images_for_tests  # pylint: disable=import-outside-toplevel

    root = images_for_tests.write_noise_tree(tmp_path_factory.mktemp('jpegs') / 'in', 16)
    out = root.parent / 'out'
    launcher.run(
        ['--input', str(root), '--output', str(out), '--splits', 'train=0.75,val=0.25']
        + ['--num-shards', '2', '--seed', '3', '--direct_running_mode=in_memory']
    )
    return out


def test_a_split_of_jpegs_alone_skips_the_format_check_for_the_same_images(
    jpeg_build, color_builds
):
    build = dataset_info.load(str(jpeg_build))
    assert build.split('train')['formats'] == {'jpeg': build.num_records('train')}
    assert build.jpeg_only('train') and build.jpeg_only('val')
    assert not dataset_info.load(str(color_builds['examples'])).jpeg_only('train')  # PNGs too
    assert not dataset_info.load(str(color_builds['paths'])).jpeg_only('train')  # files may change
    for training in (True, False):
        options = {'training': training, 'epochs': 1} if training else {'training': False}
        chosen = _batches(jpeg_build, **options)  # jpeg_only from dataset.json
        checked = _batches(jpeg_build, jpeg_only=False, **options)
        assert len(chosen) == len(checked) > 0
        for (x, y, i), (cx, cy, ci) in zip(chosen, checked):
            assert np.array_equal(x, cx) and np.array_equal(y, cy) and np.array_equal(i, ci)


def test_a_png_where_the_split_counts_jpegs_alone_fails_loudly(tf, color_builds):
    with pytest.raises(tf.errors.InvalidArgumentError, match='a record that is not a JPEG'):
        _batches(color_builds['examples'], epochs=1, jpeg_only=True)
