"""Batches decoded in one function call each (trainer/record_decoding.py), for training and for
evaluation: the same images, labels and order as decoding image by image, which
skip_bad_images keeps."""

import numpy as np
import pytest

from imageshards.kinds import example_bytes
from imageshards.kinds import features
from imageshards.shard_formats import tfrecord
from trainer import dataset_info
from trainer import input_pipeline

SIZE = (16, 16)


def _batches(data_dir, split='train', batch=8, training=True, **options):
    dataset = input_pipeline.make_dataset(
        str(data_dir), split, batch, training=training, image_size=SIZE, with_ids=True, **options
    )
    return [(x.numpy(), y.numpy(), i.numpy()) for x, y, i in dataset]


@pytest.mark.parametrize('augment', [None, 'standard'])
def test_batches_decoded_in_one_call_are_those_decoded_image_by_image(color_builds, augment):
    """The default path decodes each batch in one function call; skip_bad_images keeps the
    per-image map (an undecodable image must drop alone). On a clean build they agree."""
    whole = _batches(color_builds['examples'], epochs=2, augment=augment)
    per_image = _batches(color_builds['examples'], epochs=2, augment=augment, skip_bad_images=True)
    specs = [
        input_pipeline.make_dataset(
            str(color_builds['examples']), 'train', 8, training=True, skip_bad_images=skip
        ).element_spec
        for skip in (False, True)
    ]
    assert specs[0] == specs[1]  # static shapes too: Keras' metrics rely on the batch size
    assert len(whole) == len(per_image) > 0
    for (x, y, i), (px, py, pi) in zip(whole, per_image):
        assert x.dtype == px.dtype and x.shape == px.shape
        assert np.array_equal(x, px) and np.array_equal(y, py) and np.array_equal(i, pi)


def test_evaluation_batches_decoded_in_one_call_are_those_decoded_image_by_image(tf, color_builds):
    """Evaluation decodes each batch in one call too, the last one partial: the images,
    labels and order of the per-image path (which skip_bad_images keeps), each image the
    central crop that serving cuts from the record's bytes."""
    from trainer import preprocess  # pylint: disable=import-outside-toplevel

    build = color_builds['examples']
    records = dataset_info.load(str(build)).num_records('val')
    batch = 7 if records % 7 else 5  # a partial last batch
    whole = _batches(build, 'val', batch, training=False)
    per_image = _batches(build, 'val', batch, training=False, skip_bad_images=True)
    sizes = [len(ids) for _, _, ids in whole]
    assert sizes == [batch] * (records // batch) + [records % batch]
    specs = [
        input_pipeline.make_dataset(str(build), 'val', batch, training=False, **skip).element_spec
        for skip in ({}, {'skip_bad_images': True})
    ]
    assert specs[0] == specs[1]
    assert len(whole) == len(per_image)
    for (x, y, i), (px, py, pi) in zip(whole, per_image):
        assert x.dtype == px.dtype and x.shape == px.shape
        assert np.array_equal(x, px) and np.array_equal(y, py) and np.array_equal(i, pi)
    encoded = {}
    for path in dataset_info.load(str(build)).shard_paths('val'):
        with open(path, 'rb') as f:
            for record in tfrecord.read_records(f):
                example = example_bytes.example_class().FromString(record).features.feature
                encoded[example[features.ID].int64_list.value[0]] = example[
                    features.ENCODED
                ].bytes_list.value[0]
    for x, _, ids in whole:
        for image, image_id in zip(x, ids):
            served = preprocess.for_eval(tf.constant(encoded[image_id]), SIZE).numpy()
            np.testing.assert_array_equal(image, served)
