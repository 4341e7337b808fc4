"""A multi-label build's labels in the input pipeline: multi-hot vectors, per level too, eagerly
and inside tf.data, and the same exact resume as a single-label build's."""

import numpy as np
import pytest

from trainer import dataset_info
from trainer import input_pipeline
from trainer import labels as labels_lib

import multilabel_builds

SIZE = (16, 16)


@pytest.fixture(scope='module')
def build(tmp_path_factory):
    return multilabel_builds.write_colour_build(tmp_path_factory.mktemp('ml') / 'out', levels=True)


def _expected(ids, level=None):
    """The multi-hot rows (or ids) the pipeline should give images `ids`."""
    rows = []
    for i in ids:
        colours = multilabel_builds.colour_labels(int(i))
        if level == 'mood':
            rows.append(
                ['cool', 'warm'].index(multilabel_builds.mood(colours)[0]) if colours else -1
            )
        else:
            rows.append([float(c in colours) for c in multilabel_builds.COLOURS])
    return np.array(rows)


def _batches(build, training=True, **options):
    dataset = input_pipeline.make_dataset(
        str(build), 'train', 8, training=training, image_size=SIZE, with_ids=True, **options
    )
    return list(dataset.as_numpy_iterator())


@pytest.mark.parametrize('training', [True, False])
def test_labels_are_each_images_multi_hot_label_set(build, training):
    batches = _batches(build, training, epochs=1, seed=1)
    assert batches
    for images, labels, ids in batches:
        assert images.dtype == np.uint8 and labels.dtype == np.float32
        assert labels.shape == (len(ids), len(multilabel_builds.COLOURS))
        np.testing.assert_array_equal(labels, _expected(ids))
    every = np.concatenate([labels for _, labels, _ in batches])
    assert (every.sum(axis=1) == 0).any() and (every.sum(axis=1) >= 2).any()


def test_levels_give_multi_hot_for_multi_label_levels_and_ids_for_the_others(build):
    info = dataset_info.load(str(build))
    assert info.multi_label and info.multi_label_levels == ('colour',)
    batches = _batches(build, epochs=1, seed=1, label_levels=('colour', 'mood'))
    for _, labels, ids in batches:
        assert labels['colour'].dtype == np.float32 and labels['mood'].dtype == np.int64
        np.testing.assert_array_equal(labels['colour'], _expected(ids))
        np.testing.assert_array_equal(labels['mood'], _expected(ids, 'mood'))
    moods = np.concatenate([labels['mood'] for _, labels, _ in batches])
    assert -1 in moods and 0 in moods and 1 in moods


def test_resuming_mid_epoch_gives_the_batches_of_an_uninterrupted_run(build):
    full = _batches(build, epochs=2, seed=2, augment='standard')
    per_epoch = len(full) // 2
    resumed = _batches(build, epochs=2, seed=2, augment='standard', start_epoch=0, skip_batches=2)
    assert len(resumed) == len(full) - 2
    for (x, y, i), (x2, y2, i2) in zip(full[2:], resumed):
        np.testing.assert_array_equal(i, i2)
        np.testing.assert_array_equal(y, y2)
        np.testing.assert_array_equal(x, x2)
    assert per_epoch >= 3


def test_patches_repeat_each_images_label_set(build):
    batches = _batches(build, epochs=1, seed=1, patches_per_image=3, patch_size=8)
    for images, labels, ids in batches:
        assert images.shape[1:] == (8, 8, 3) and labels.shape == (len(ids), 4)
        np.testing.assert_array_equal(labels, _expected(ids))


def _sparse(tf, rows):
    indices = [[r, k] for r, row in enumerate(rows) for k in range(len(row))]
    values = [v for row in rows for v in row]
    return tf.SparseTensor(
        tf.constant(indices, tf.int64, [len(indices), 2]),
        tf.constant(values, tf.int64),
        [len(rows), max(map(len, rows), default=0)],
    )


@pytest.mark.parametrize('rows', [[[0, 2], [], [1, 2, 3]], [[], []], [[3]]])
def test_multi_hot_and_ids_are_the_same_eagerly_and_in_tf_data(tf, rows):
    eager_hot = labels_lib.multi_hot(_sparse(tf, rows), 5).numpy()
    expected = np.array([[float(k in row) for k in range(5)] for row in rows], np.float32)
    np.testing.assert_array_equal(eager_hot, expected)
    single = [row[:1] for row in rows]
    eager_ids = labels_lib.first_or_missing(_sparse(tf, single)).numpy()
    np.testing.assert_array_equal(eager_ids, [row[0] if row else -1 for row in rows])
    dataset = tf.data.Dataset.range(1).map(
        lambda _: (
            labels_lib.multi_hot(_sparse(tf, rows), 5),
            labels_lib.first_or_missing(_sparse(tf, single)),
        )
    )
    in_graph_hot, in_graph_ids = next(iter(dataset))
    np.testing.assert_array_equal(in_graph_hot.numpy(), eager_hot)
    np.testing.assert_array_equal(in_graph_ids.numpy(), eager_ids)
