"""Training on a random-access build (ArrayRecord): each epoch a new permutation of the whole split,
read in parallel into the trainer's batches, resumed exactly, split among workers, measured by
`imageshards report`, a damaged shard named; the same build read by Grain and by TFDS; a TFRecord
build of the same images read as before."""

import hashlib
import shutil

import numpy as np
import pytest

from imageshards.kinds import features
from imageshards_cli import shuffle_metrics
from pipelines import launcher
from trainer import dataset_info
from trainer import input_pipeline
from trainer import random_access
from trainer import shard_reading

import images_for_tests
from build_commands import build_flags

CLASSES = ('blue', 'green', 'red', 'yellow')
BATCH = 8  # divides the 120 training records: every record is in a full batch
SIZE = (16, 16)


@pytest.fixture(scope='module')
def builds(tmp_path_factory):
    """The same 160 images built as TFRecord and as ArrayRecord shards: {format: OUT}; 120
    training records in 3 shards."""
    root = tmp_path_factory.mktemp('tree')
    images_for_tests.write_tree(root, 40, CLASSES)
    found = {}
    for shard_format in ('tfrecord', 'array_record'):
        out = tmp_path_factory.mktemp(shard_format) / 'out'
        flags = build_flags(
            root,
            out,
            '--shard-format',
            shard_format,
            splits='train=0.75,val=0.25',
            num_shards=3,
            seed=5,
            analyze=False,
            in_memory=True,
        )
        launcher.run(flags)
        found[shard_format] = str(out)
    return found


def _order(build, epochs, seed, batch=BATCH, **options):
    """[epochs, records per epoch] image ids in the order training delivers them."""
    dataset = input_pipeline.make_dataset(
        build,
        'train',
        batch,
        training=True,
        seed=seed,
        epochs=epochs,
        decode_images=False,
        **options,
    )
    ids = np.concatenate([batch_ids.numpy() for _, batch_ids in dataset])
    return ids.reshape(epochs, -1)


def _batches(build, **options):
    dataset = input_pipeline.make_dataset(
        build, 'train', BATCH, training=True, image_size=SIZE, with_ids=True, **options
    )
    return [(x.numpy(), y.numpy(), i.numpy()) for x, y, i in dataset]


def _stored_ids(build, split='train'):
    """The split's image ids in stored order, shard after shard: record key k's id at index k."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    info = dataset_info.load(build)
    records = tf.data.Dataset.from_tensor_slices(info.shard_paths(split)).flat_map(
        info.shard_format.tf_records
    )
    spec = {features.ID: tf.io.FixedLenFeature([], tf.int64)}
    return np.array([int(tf.io.parse_single_example(r, spec)[features.ID]) for r in records])


def test_each_epoch_is_the_permutation_of_seed_and_epoch_over_every_record(builds):
    build = builds['array_record']
    stored = _stored_ids(build)
    assert len(stored) == dataset_info.load(build).num_records('train') == 120
    order = _order(build, 3, seed=11)
    for epoch, ids in enumerate(order):
        assert sorted(ids) == sorted(stored)  # every record once
        np.testing.assert_array_equal(ids, stored[random_access.epoch_order(11, epoch, 120)])


def test_two_epochs_are_uncorrelated_and_the_seed_fixes_the_order(builds):
    build = builds['array_record']
    order = _order(build, 2, seed=3)
    bound = 4 / np.sqrt(order.shape[1])
    assert not np.array_equal(order[0], order[1])
    assert abs(shuffle_metrics.epoch_order_spearman(order[0], order[1])) < bound
    assert abs(shuffle_metrics.spearman_id_vs_position(order[0])) < bound
    # A batch mixes the shards: the first 40 records (a shard's worth) come from all three.
    stored = list(_stored_ids(build))
    shards_of_first = {stored.index(i) // 40 for i in order[0][:40]}
    assert shards_of_first == {0, 1, 2}
    np.testing.assert_array_equal(order, _order(build, 2, seed=3))
    assert not np.array_equal(order[0], _order(build, 1, seed=4)[0])


def test_images_come_in_the_order_that_decode_images_false_reports(builds):
    build = builds['array_record']
    batches = _batches(build, epochs=2, seed=6, augment='standard')
    np.testing.assert_array_equal(
        np.concatenate([ids for _, _, ids in batches]), _order(build, 2, seed=6).ravel()
    )
    images, labels, _ = batches[0]
    assert images.shape == (BATCH, *SIZE, 3) and images.dtype == np.uint8
    assert labels.dtype == np.int64


def test_a_resumed_epoch_gives_exactly_the_remaining_batches_and_reads_no_skipped_record(
    builds, monkeypatch
):
    build = builds['array_record']
    full = _batches(build, epochs=3, seed=2, augment='standard')
    per_epoch = len(full) // 3
    read = []
    original = random_access.SplitReader.read
    monkeypatch.setattr(
        random_access.SplitReader,
        'read',
        lambda self, keys: read.append(len(keys)) or original(self, keys),
    )
    resumed = _batches(build, epochs=3, seed=2, augment='standard', start_epoch=1, skip_batches=5)
    assert len(resumed) == 2 * per_epoch - 5
    for (x, y, i), (x2, y2, i2) in zip(full[per_epoch + 5 :], resumed):
        np.testing.assert_array_equal(i, i2)
        np.testing.assert_array_equal(y, y2)
        np.testing.assert_array_equal(x, x2)
    assert sum(read) == 2 * 120 - 5 * BATCH


def test_workers_read_disjoint_parts_that_together_make_the_one_pipeline_order(tf, builds):
    build = builds['array_record']
    parts = []
    for worker in range(2):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=worker, num_replicas_in_sync=2
        )
        parts.append(_order(build, 1, seed=9, batch=2 * BATCH, input_context=context)[0])
    # 60 records each, 7 full batches of 8.
    assert len(parts[0]) == len(parts[1]) == 56 and not set(parts[0]) & set(parts[1])
    single = _order(build, 1, seed=9, batch=2 * BATCH)[0]
    # Step t's global batch, the two workers' batches of 8, is the one pipeline's batch t of 16.
    for step in range(len(single) // (2 * BATCH)):
        part = slice(step * BATCH, (step + 1) * BATCH)
        together = set(parts[0][part]) | set(parts[1][part])
        assert together == set(single[step * 2 * BATCH : (step + 1) * 2 * BATCH])
    info = dataset_info.load(build)
    assert shard_reading.records_per_worker(info, 'train', 7) == [18] * 1 + [17] * 6
    assert input_pipeline.steps_per_epoch(info, 'train', 16, num_pipelines=2) == 7


def test_evaluation_reads_an_array_record_build_as_a_tfrecord_one(builds):
    def evaluation_ids(build):
        dataset = input_pipeline.make_dataset(build, 'val', 16, training=False, decode_images=False)
        return np.concatenate([batch_ids.numpy() for _, batch_ids in dataset])

    ids = evaluation_ids(builds['array_record'])
    np.testing.assert_array_equal(ids, evaluation_ids(builds['tfrecord']))
    assert sorted(ids) == sorted(_stored_ids(builds['array_record'], 'val'))


# The first epochs of the TFRecord build with seed 7, batches of 8, as the shard list, interleave
# and shuffle buffer gave them before random-access builds had a path of their own.
TFRECORD_ORDER_SHA256 = 'cbadac4baf24289fcc13b78fc0d480bac6e77a16729eba242d7b1764a30de47f'


def test_a_tfrecord_build_of_the_same_images_is_read_as_before(tf, builds):
    # tf.data's seeded shuffles draw on TensorFlow's global seed too, which any test that trains
    # sets (keras.utils.set_random_seed): the order above is that of a process without one.
    tf.random.set_seed(None)
    order = _order(builds['tfrecord'], 2, seed=7)
    assert sorted(order[0]) == sorted(_stored_ids(builds['array_record']))
    assert hashlib.sha256(order.astype('<i8').tobytes()).hexdigest() == TFRECORD_ORDER_SHA256


def test_grain_reads_every_record_of_the_build(tf, builds):
    import grain  # pylint: disable=import-outside-toplevel

    info = dataset_info.load(builds['array_record'])
    source = grain.sources.ArrayRecordDataSource(info.shard_paths('train'))
    assert len(source) == 120
    records = [source[key] for key in range(len(source))]
    spec = {features.ID: tf.io.FixedLenFeature([], tf.int64)}
    ids = tf.io.parse_example(records, spec)[features.ID].numpy()
    np.testing.assert_array_equal(ids, _stored_ids(builds['array_record']))
    assert records == list(random_access.SplitReader.of_split(info, 'train').read(range(120)))
    shuffled = list(grain.MapDataset.source(source).shuffle(seed=1))
    assert shuffled != records and sorted(shuffled) == sorted(records)


def test_tfds_as_data_source_reads_the_records(builds):
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

    sources = tfds.builder_from_directory(builds['array_record']).as_data_source()
    train = sources['train']
    assert len(train) == 120
    ids = [int(train[key]['image/id']) for key in range(len(train))]
    np.testing.assert_array_equal(ids, _stored_ids(builds['array_record']))


def test_the_shuffle_report_measures_an_epoch_of_the_permutation(builds, tmp_path):
    from imageshards_cli import report  # pylint: disable=import-outside-toplevel

    path, metrics = report.report(
        builds['array_record'],
        'train',
        str(tmp_path),
        epochs=2,
        batch_size=BATCH,
        seed=3,
        baseline_buffer=None,
    )
    mine = metrics['imageshards']
    assert metrics['random_access'] and metrics['shard_format'] == 'array_record'
    assert mine['records_per_epoch'] == 120
    assert abs(mine['epoch_order_spearman']) < mine['spearman_bound_for_random_order']
    np.testing.assert_allclose(
        shuffle_metrics.epoch_order_spearman(*_order(builds['array_record'], 2, seed=3)),
        mine['epoch_order_spearman'],
    )
    assert mine['mean_distinct_labels_per_batch'] == pytest.approx(
        mine['ideal_distinct_labels_per_batch'], abs=0.3
    )
    page = open(path, encoding='utf-8').read()
    assert 'a new permutation of the whole split each epoch, no shuffle buffer' in page
    assert 'two uniformly random orders' in page and '1/√(shards)' not in page


def test_a_damaged_shard_is_named_when_training_reads_it(tf, builds, tmp_path):
    build = tmp_path / 'damaged'
    shutil.copytree(builds['array_record'], build)
    info = dataset_info.load(str(build))
    shard = info.shard_paths('train')[1]
    data = bytearray(open(shard, 'rb').read())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)  # inside some record's chunk, whose hash then fails
    open(shard, 'wb').write(bytes(data))
    with pytest.raises(tf.errors.OpError, match=f'{shard}: cannot read record'):
        _order(str(build), 1, seed=0)


def test_the_trainer_trains_on_an_array_record_build(builds, tmp_path):
    from trainer import config as config_lib  # pylint: disable=import-outside-toplevel
    from trainer import train as train_lib  # pylint: disable=import-outside-toplevel

    flags = ['--data', builds['array_record'], '--job-dir', str(tmp_path / 'job')]
    flags += ['--image-size', '16', '--batch-size', '8', '--epochs', '2', '--crop-area', '0.5,1']
    metrics = train_lib.train(config_lib.parse_train_args(flags))
    assert metrics['steps_per_epoch'] == 15 and metrics['steps'] == 30
    assert 0 <= metrics['val_accuracy'] <= 1
