"""Every augmentation op, eagerly and inside tf.data.Dataset.map (they can differ)."""

import dataclasses

import numpy as np
import pytest

from trainer import augment

SEED = (3, 4)
SINGLE_OPS = {
    'flip_horizontal': augment.AugmentConfig(flip_horizontal=True),
    'flip_vertical': augment.AugmentConfig(flip_vertical=True),
    'rotation': augment.AugmentConfig(rotation_degrees=30),
    'shift': augment.AugmentConfig(shift_fraction=0.2),
    'shear': augment.AugmentConfig(shear_degrees=20),
    'zoom': augment.AugmentConfig(zoom_range=0.3),
    'scale': augment.AugmentConfig(scale_range=(1.2, 1.6)),
    'erasing': augment.AugmentConfig(erasing_probability=1.0),
    'brightness': augment.AugmentConfig(brightness_delta=0.3),
    'contrast': augment.AugmentConfig(contrast_range=(0.5, 1.5)),
    'standard': augment.PRESETS['standard'],
}


def _gradient(tf, dtype):
    rng = np.random.default_rng(0)
    # A smooth gradient plus noise, so that warps and crops visibly move pixels.
    ramp = np.linspace(0, 1, 32, dtype=np.float32)
    images = ramp[None, :, None, None] * ramp[None, None, :, None] * np.ones((8, 32, 32, 3))
    images = np.clip(images + rng.normal(0, 0.05, images.shape), 0, 1).astype(np.float32)
    if dtype == 'uint8':
        return tf.constant(np.round(images * 255).astype(np.uint8))
    return tf.constant(images)


@pytest.fixture(scope='module', params=['uint8', 'float32'])
def batch(tf, request):
    """The input pipeline's uint8 batches, and float batches in [0, 1]."""
    return _gradient(tf, request.param)


@pytest.mark.parametrize('name', sorted(SINGLE_OPS))
def test_op_is_the_same_eagerly_and_inside_dataset_map(tf, batch, name):
    config = SINGLE_OPS[name]
    eager = augment.augment_batch(batch, config, tf.constant(SEED)).numpy()
    dataset = tf.data.Dataset.from_tensors(batch).map(
        lambda images: augment.augment_batch(images, config, tf.constant(SEED))
    )
    in_map = next(iter(dataset)).numpy()
    np.testing.assert_allclose(in_map, eager, atol=1e-5)
    assert eager.shape == batch.shape
    assert eager.dtype == batch.dtype.as_numpy_dtype
    if eager.dtype == np.float32:
        assert eager.min() >= -1e-6 and eager.max() <= 1 + 1e-6
    # The op did something, and not the same thing to every image.
    original = batch.numpy().astype(np.float64)
    assert not np.array_equal(eager, batch.numpy())
    per_image = [float(np.abs(eager[i] - original[i]).mean()) for i in range(8)]
    assert sum(value > 0 for value in per_image) > 0
    assert len({round(value, 6) for value in per_image}) > 1


def test_same_seed_same_result_other_seed_other_result(tf, batch):
    config = augment.PRESETS['standard']
    first = augment.augment_batch(batch, config, tf.constant(SEED)).numpy()
    again = augment.augment_batch(batch, config, tf.constant(SEED)).numpy()
    other = augment.augment_batch(batch, config, tf.constant((5, 6))).numpy()
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, other)


def test_horizontal_flip_mirrors_some_images_exactly(tf, batch):
    flipped = augment.augment_batch(batch, SINGLE_OPS['flip_horizontal'], tf.constant(SEED))
    flipped, original = flipped.numpy(), batch.numpy()
    mirrored = [np.array_equal(flipped[i], original[i, :, ::-1]) for i in range(8)]
    kept = [np.array_equal(flipped[i], original[i]) for i in range(8)]
    assert all(m or k for m, k in zip(mirrored, kept))
    assert any(mirrored) and any(kept)


@pytest.mark.parametrize('per_image', [False, True])
def test_rotation_keeps_the_centre_pixel(tf, batch, per_image):
    odd = batch[:, :31, :31]  # an odd size has a centre pixel that rotation does not move
    rotation = SINGLE_OPS['rotation']
    if per_image:
        seeds = [tf.constant((8, i), tf.int64) for i in range(8)]
        rotated = np.stack([augment.augment_image(odd[i], rotation, seeds[i]) for i in range(8)])
    else:
        rotated = augment.augment_batch(odd, rotation, tf.constant(SEED)).numpy()
    tolerance = 1 if rotated.dtype == np.uint8 else 1e-4  # uint8 interpolation rounds
    np.testing.assert_allclose(
        rotated[:, 15, 15].astype(float), odd.numpy()[:, 15, 15].astype(float), atol=tolerance
    )


def test_erasing_replaces_one_rectangle(tf, batch):
    erased = augment.augment_batch(batch, SINGLE_OPS['erasing'], tf.constant(SEED)).numpy()
    for i in range(8):
        rows, cols = np.nonzero(np.any(erased[i] != batch.numpy()[i], axis=-1))
        assert rows.size > 0
        box = erased[i, rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
        # Everything that changed lies in one rectangle, and it covers at most the max area.
        assert box.shape[0] * box.shape[1] <= 0.25 * 32 * 32 * 1.3
        outside = np.ones((32, 32), bool)
        outside[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1] = False
        np.testing.assert_array_equal(erased[i][outside], batch.numpy()[i][outside])


def test_nothing_asked_for_changes_nothing(tf, batch):
    same = augment.augment_batch(batch, augment.AugmentConfig(), tf.constant(SEED))
    np.testing.assert_array_equal(same.numpy(), batch.numpy())
    assert not augment.AugmentConfig().active
    assert augment.PRESETS['standard'].active


def test_parse_augment_presets_overrides_and_errors():
    assert augment.parse_augment(None) == augment.AugmentConfig()
    assert augment.parse_augment('none') == augment.AugmentConfig()
    assert augment.parse_augment('standard') == augment.PRESETS['standard']
    tuned = augment.parse_augment('standard,rotation_degrees=20,erasing_probability=0')
    assert tuned == dataclasses.replace(
        augment.PRESETS['standard'], rotation_degrees=20.0, erasing_probability=0.0
    )
    named = augment.parse_augment('flip_vertical,scale_range=1.1:1.4,fill_mode=constant')
    assert named.flip_vertical and named.scale_range == (1.1, 1.4)
    assert named.fill_mode == 'constant' and not named.flip_horizontal
    with pytest.raises(ValueError, match='unknown'):
        augment.parse_augment('twirl=3')
    with pytest.raises(ValueError, match='needs a value'):
        augment.parse_augment('rotation_degrees')


PER_IMAGE_OPS = sorted(set(SINGLE_OPS) - {'scale'})  # the scale: folded into the crop window


@pytest.mark.parametrize('name', PER_IMAGE_OPS)
def test_per_image_op_is_the_same_eagerly_and_inside_dataset_map(tf, batch, name):
    config = SINGLE_OPS[name]
    seeds = [tf.constant((7, i), tf.int64) for i in range(8)]
    eager = np.stack([augment.augment_image(batch[i], config, seeds[i]).numpy() for i in range(8)])
    dataset = tf.data.Dataset.from_tensor_slices((batch, tf.stack(seeds))).map(
        lambda image, seed: augment.augment_image(image, config, seed)
    )
    np.testing.assert_array_equal(np.stack([x.numpy() for x in dataset]), eager)
    assert eager.dtype == batch.dtype.as_numpy_dtype and eager.shape == batch.shape
    assert not np.array_equal(eager, batch.numpy())


def test_per_image_flips_mirror_some_images_exactly(tf, batch):
    for config, axis in ((SINGLE_OPS['flip_horizontal'], 1), (SINGLE_OPS['flip_vertical'], 0)):
        original = batch.numpy()
        mirrored, kept = [], []
        for i in range(8):
            out = augment.augment_image(batch[i], config, tf.constant((1, i), tf.int64)).numpy()
            mirrored.append(np.array_equal(out, np.flip(original[i], axis)))
            kept.append(np.array_equal(out, original[i]))
        assert all(m or k for m, k in zip(mirrored, kept))
        assert any(mirrored) and any(kept)


def test_per_image_erasing_replaces_one_rectangle_in_its_share_of_images(tf, batch):
    image = batch[0]
    original = image.numpy()
    erased_count = 0
    for i in range(200):
        config = augment.AugmentConfig(erasing_probability=0.25)
        out = augment.augment_image(image, config, tf.constant((2, i), tf.int64)).numpy()
        changed = np.any(out != original, axis=-1)
        if not changed.any():
            continue
        erased_count += 1
        rows, cols = np.nonzero(changed)
        box = out[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1]
        # One rectangle of one colour, no larger than the largest area asked for.
        assert box.shape[0] * box.shape[1] <= 0.25 * 32 * 32 * 1.3
        assert len(np.unique(box.reshape(-1, 3), axis=0)) == 1
        outside = np.ones((32, 32), bool)
        outside[rows.min() : rows.max() + 1, cols.min() : cols.max() + 1] = False
        np.testing.assert_array_equal(out[outside], original[outside])
    assert 25 <= erased_count <= 75  # about a quarter of 200


def test_per_image_brightness_shifts_each_image_by_one_amount(tf, batch):
    config = augment.AugmentConfig(brightness_delta=0.1)
    floats = batch.numpy().astype(np.float64) / (255 if batch.dtype == tf.uint8 else 1)
    shifts = []
    for i in range(8):
        out = augment.augment_image(batch[i], config, tf.constant((4, i), tf.int64)).numpy()
        out = out.astype(np.float64) / (255 if batch.dtype == tf.uint8 else 1)
        inside = (out > 0.01) & (out < 0.99)  # not clipped
        shift = out[inside] - floats[i][inside]
        assert np.ptp(shift) <= 2.5 / 255 and abs(shift.mean()) <= 0.1 + 1 / 255
        shifts.append(shift.mean())
    assert len({round(value, 3) for value in shifts}) > 1


def test_scale_window_keeps_a_part_of_the_window_as_scale_crop_would(tf):
    window = tf.constant([10, 20, 100, 80])
    for i in range(50):
        top, left, height, width = augment.scale_window(
            window, (1.2, 1.6), tf.constant((5, i), tf.int64)
        ).numpy()
        assert round(100 / 1.6) <= height <= round(100 / 1.2)
        assert round(80 / 1.6) <= width <= round(80 / 1.2)
        assert 10 <= top and top + height <= 110 and 20 <= left and left + width <= 100
    again = augment.scale_window(window, (1.2, 1.6), tf.constant((5, 0), tf.int64))
    first = augment.scale_window(window, (1.2, 1.6), tf.constant((5, 0), tf.int64))
    np.testing.assert_array_equal(again.numpy(), first.numpy())
