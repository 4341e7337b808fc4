"""Augmentation moves boxes, masks and class maps with the pixels (trainer/objects_geometry.py),
checked against where a drawn rectangle's pixels land; CenterNet's targets decode back to
their boxes (trainer/centernet.py)."""

import numpy as np
import pytest
import tensorflow as tf

from trainer import centernet
from trainer import instance_masks
from trainer import objects_geometry as geometry
from trainer import objects_input

HEIGHT, WIDTH = 120, 200
RECT = (30, 50, 70, 130)  # top, left, bottom, right in pixels (exclusive ends)


def _scene():
    """An image with a white rectangle at RECT, its box, mask and class map."""
    image = np.zeros((HEIGHT, WIDTH, 3), np.float32)
    top, left, bottom, right = RECT
    image[top:bottom, left:right] = 255
    mask = (image[..., 0] > 0).astype(np.uint8) * 255
    box = [top / HEIGHT, left / WIDTH, bottom / HEIGHT, right / WIDTH]
    objects = geometry.Objects(
        tf.constant([box], tf.float32),
        tf.constant([3], tf.int32),
        tf.constant([False]),
        tf.constant(mask[None]),
    )
    class_map = tf.constant((mask > 0).astype(np.uint8)[..., None] * 4)
    return tf.constant(image), objects, class_map


def _extent(pixels):
    """[top, left, bottom, right] (exclusive ends) of the nonzero pixels of a 2-D array."""
    rows, cols = np.nonzero(pixels)
    return [rows.min(), cols.min(), rows.max() + 1, cols.max() + 1]


def _box_pixels(box, height, width):
    return [box[0] * height, box[1] * width, box[2] * height, box[3] * width]


def test_a_flip_moves_the_box_mask_and_class_map_with_the_pixels():
    image, objects, class_map = _scene()
    image, flipped, class_map = geometry.flip(image, objects, class_map, flipped=tf.constant(True))
    drawn = _extent(image.numpy()[..., 0])
    assert drawn == [30, WIDTH - 130, 70, WIDTH - 50]
    np.testing.assert_allclose(
        _box_pixels(flipped.boxes.numpy()[0], HEIGHT, WIDTH), drawn, atol=1e-4
    )
    assert _extent(flipped.masks.numpy()[0]) == drawn
    assert _extent(class_map.numpy()[..., 0]) == drawn
    kept, same, _ = geometry.flip(*_scene(), flipped=tf.constant(False))
    np.testing.assert_array_equal(kept.numpy(), _scene()[0].numpy())
    np.testing.assert_allclose(same.boxes.numpy(), _scene()[1].boxes.numpy())


@pytest.mark.parametrize('seed', range(6))
def test_scale_jitter_and_a_crop_move_the_box_and_mask_where_the_pixels_go(seed):
    image, objects, class_map = _scene()
    canvas = (96, 96)
    placed, moved, placed_map, placement = geometry.place(
        image, objects, canvas, (1.2, 2.5), tf.constant([seed, 7], tf.int64), class_map
    )
    pixels = placed.numpy()[..., 0]
    if not moved.boxes.shape[0]:  # the crop left too little of it: nothing of it may show
        assert (pixels > 128).sum() < 4 * canvas[0]
        return
    drawn = _extent(pixels > 128)
    box = _box_pixels(moved.boxes.numpy()[0], *canvas)
    np.testing.assert_allclose(box, drawn, atol=1.0)  # bilinear edges: within a pixel
    assert np.abs(np.array(_extent(moved.masks.numpy()[0])) - drawn).max() <= 1
    assert np.abs(np.array(_extent(placed_map.numpy()[..., 0] == 4)) - drawn).max() <= 1
    # The placement maps the canvas box back to the image's box.
    back = placement.boxes_to_image(moved.boxes, canvas).numpy()[0]
    cut = np.clip(np.array(_box_pixels(back, HEIGHT, WIDTH)), 0, None)
    visible = np.array(RECT, np.float32)
    assert (cut[:2] >= visible[:2] - 1).all() and (cut[2:] <= visible[2:] + 1).all()


def test_fitting_pads_at_the_bottom_and_right_and_a_class_map_with_void():
    image, objects, class_map = _scene()
    placed, moved, placed_map, placement = geometry.place(
        image, objects, (128, 128), class_map=class_map
    )
    scale = 128 / WIDTH  # the wider side fits
    np.testing.assert_allclose(placement.scaled.numpy(), [round(HEIGHT * scale), 128])
    rows = int(placement.scaled.numpy()[0])
    assert (placed.numpy()[rows:] == 0).all()
    assert (placed_map.numpy()[rows:] == geometry.VOID).all()
    assert (placed_map.numpy()[:rows] != geometry.VOID).all()
    np.testing.assert_allclose(
        _box_pixels(moved.boxes.numpy()[0], 128, 128), np.array(RECT) * scale, atol=0.5
    )


def test_a_crop_drops_boxes_left_too_small_and_a_crowd_stays_a_crowd():
    image = tf.zeros((100, 100, 3))
    objects = geometry.Objects(
        tf.constant([[0.0, 0.0, 0.02, 0.02], [0.1, 0.1, 0.9, 0.9], [0.5, 0.5, 0.9, 0.9]]),
        tf.constant([0, 1, 2], tf.int32),
        tf.constant([False, True, False]),
    )
    _, moved, _, _ = geometry.place(image, objects, (64, 64))
    assert moved.classes.numpy().tolist() == [1, 2]  # the 1.3-pixel box is gone
    assert moved.crowd.numpy().tolist() == [True, False]


def test_class_maps_drawn_from_masks_put_later_objects_on_top():
    masks = np.zeros((2, 4, 4), np.uint8)
    masks[0, :2, :2] = 255
    masks[1, 1:3, 1:3] = 255
    found = objects_input.classes_of_masks(tf.constant(masks), tf.constant([5, 7]))
    expected = [[6, 6, 0, 0], [6, 8, 8, 0], [0, 8, 8, 0], [0, 0, 0, 0]]
    assert found.numpy()[..., 0].tolist() == expected
    empty = objects_input.classes_of_masks(tf.zeros((0, 3, 5), tf.uint8), tf.zeros([0], tf.int32))
    assert empty.shape == (3, 5, 1) and not empty.numpy().any()  # an image without objects


def test_centernet_targets_decode_back_to_their_boxes():
    canvas = (128, 128)
    boxes = tf.constant([[0.1, 0.2, 0.4, 0.5], [0.5, 0.55, 0.95, 0.7], [0.0, 0.0, 1.0, 1.0]])
    objects = geometry.Objects(boxes, tf.constant([2, 0, 1]), tf.constant([False, False, True]))
    _, targets = centernet.targets(3, canvas)(tf.zeros((*canvas, 3)), objects)
    heat = targets[centernet.HEATMAP]
    assert heat.shape == (32, 32, 4)
    assert float(tf.reduce_max(heat[..., 2])) == 1.0 and float(tf.reduce_max(heat[..., 1])) == 0
    assert float(tf.reduce_min(heat[..., 3])) == 1.0  # the crowd covers every cell: ignored
    logits = tf.math.log(tf.clip_by_value(heat[..., :3], 1e-6, 1 - 1e-6))
    logits -= tf.math.log(tf.clip_by_value(1 - heat[..., :3], 1e-6, 1.0))
    outputs = {
        centernet.HEATMAP: logits[None],
        centernet.BOXES: targets[centernet.BOXES][None, ..., :4],
    }
    found, scores, classes, valid = centernet.detect(outputs)
    top = scores.numpy()[0] > 0.99
    assert sorted(classes.numpy()[0][top].tolist()) == [0, 2]
    for want, label in ((boxes[0], 2), (boxes[1], 0)):
        got = found.numpy()[0][top][classes.numpy()[0][top] == label][0]
        np.testing.assert_allclose(got, want.numpy(), atol=1e-5)
    assert int(valid[0]) >= 2


def _disc(canvas, centre, radius):
    rows, cols = np.mgrid[: canvas[0], : canvas[1]]
    return ((rows + 0.5 - centre[0]) ** 2 + (cols + 0.5 - centre[1]) ** 2) <= radius**2


@pytest.mark.parametrize('image_size', [(128, 96), (300, 200)])
def test_instance_mask_targets_read_back_through_box_masks_and_paste_to_the_shapes(image_size):
    canvas = (128, 96)
    discs = [_disc(canvas, (40, 30), 22), _disc(canvas, (90, 64), 16)]
    boxes = [[18 / 128, 8 / 96, 62 / 128, 52 / 96], [74 / 128, 48 / 96, 106 / 128, 80 / 96]]
    objects = geometry.Objects(
        tf.constant(boxes, tf.float32),
        tf.constant([2, 0]),
        tf.constant([False, False]),
        tf.constant(np.stack(discs), tf.uint8),
    )
    _, found = centernet.targets(3, canvas, masks=True)(tf.zeros((*canvas, 3)), objects)
    target = found[instance_masks.MASKS].numpy()
    assert target.shape == (32, 24, 6)
    assert target[..., 1].max() == 0 and target[..., 4].max() == 0  # class 1: no object
    assert target[10, 7, 2] == 1.0 and target[10, 7, 5] == 1.0  # the first disc's centre
    assert target[1, 1, 5] == 0.0  # outside every box of class 2: not counted
    # Logits that say the targets, read back per detection and pasted onto an image of
    # `image_size` (the canvas scaled): each disc comes back where it lies on that image.
    share = np.clip(target[None, ..., :3], 1e-4, 1 - 1e-4)
    logits = tf.constant(np.log(share / (1 - share)), tf.float32)
    masks = instance_masks.box_masks(
        logits, tf.constant([boxes], tf.float32), tf.constant([[2, 0]])
    )
    assert masks.shape == (1, 2, 28, 28)
    height, width = image_size
    for mask, box, disc in zip(masks.numpy()[0], boxes, discs):
        pasted = instance_masks.paste(mask, box, height, width)
        rows, cols = np.mgrid[:height, :width]
        scaled = disc[(rows * canvas[0] // height), (cols * canvas[1] // width)]
        overlap = (pasted & scaled).sum() / (pasted | scaled).sum()
        assert overlap > 0.85, overlap
    truth = tf.constant(target[None])
    loss = lambda values: float(instance_masks.loss(truth, values)[0])
    # the targets' own logits are the least loss: others, a mask of nothing or all, lose more
    assert loss(logits) < loss(logits + 0.5) and loss(logits) < loss(logits - 0.5)
    assert loss(logits) < 0.5 * loss(tf.zeros_like(logits)) < loss(-logits)
    outside = tf.constant(target[None, ..., 3:] == 0)  # cells in no box of their class
    assert loss(tf.where(outside, 9.0, logits)) == pytest.approx(loss(logits))


def test_deeplabv3_plus_is_kerashubs_model_its_classes_found_at_a_quarter_then_upsampled():
    import keras
    import keras_hub

    from trainer import deeplab

    canvas, classes = (64, 96), 5
    encoder = keras_hub.models.ResNetBackbone(**deeplab.RESNET_18, image_shape=(*canvas, 3))
    backbone = keras_hub.models.DeepLabV3Backbone(
        image_encoder=encoder,
        spatial_pyramid_pooling_key='P5',
        upsampling_size=8,
        dilation_rates=[6, 12, 18],
        low_level_feature_key='P2',
        image_shape=(*canvas, 3),
    )
    library = keras_hub.models.DeepLabV3ImageSegmenter(
        backbone=backbone, num_classes=classes, activation=None, preprocessor=None
    )
    ours = deeplab.build(classes, canvas)
    assert ours.count_params() == library.count_params()  # the same weights, and no others
    assert ours.output_shape == (None, 16, 24, classes)  # at 1/4: segmenter.class_map upsamples
    images = np.random.default_rng(0).uniform(-2, 2, (2, *canvas, 3)).astype(np.float32)
    features = keras.Model(backbone.inputs, backbone.get_layer('segmentation_head_relu').output)
    kernel = library.get_layer('segmentation_output').kernel
    quarter = tf.nn.conv2d(features(images), kernel, 1, 'SAME')
    upsampled = tf.image.resize(quarter, canvas, method='bilinear')  # Keras' bilinear, 4x
    np.testing.assert_allclose(upsampled, library(images), rtol=1e-3, atol=1e-3)


def test_augment_auto_is_the_objects_preset_and_a_spec_adjusts_or_turns_it_off():
    assert objects_input.augmentation('auto') == {
        'flip': True,
        'scale_range': (0.75, 1.33),
        'colour': 0.2,
    }
    defaults = objects_input.ObjectInput()
    assert objects_input.augmentation(None) == {
        'flip': defaults.flip,
        'scale_range': defaults.scale_range,
        'colour': defaults.colour,
    }
    no_flip = objects_input.augmentation('auto,flip_horizontal=0')
    assert no_flip == {'flip': False, 'scale_range': (0.75, 1.33), 'colour': 0.2}
    assert objects_input.augmentation('none') == {
        'flip': False,
        'scale_range': (1.0, 1.0),
        'colour': 0.0,
    }
    chosen = objects_input.augmentation('flip_horizontal,scale_range=0.5:2,brightness_delta=0.1')
    assert chosen == {'flip': True, 'scale_range': (0.5, 2.0), 'colour': 0.1}


@pytest.mark.parametrize('spec', ['standard', 'objects,rotation_degrees=10', 'flip_vertical'])
def test_augment_ops_that_would_not_move_the_boxes_are_refused_by_name(spec):
    wanted = {'standard': 'erasing_probability', 'flip_vertical': 'flip_vertical'}
    with pytest.raises(ValueError, match=wanted.get(spec, 'rotation_degrees')):
        objects_input.augmentation(spec)


def test_without_augmentation_a_training_example_is_the_evaluation_placement():
    image, objects, _ = _scene()
    png = tf.io.encode_png(tf.cast(image, tf.uint8)).numpy()
    (ymin, xmin, ymax, xmax) = objects.boxes.numpy()[0].tolist()
    example = tf.train.Example(
        features=tf.train.Features(
            feature={
                'image/encoded': _bytes([png]),
                'image/object/bbox/xmin': _floats([xmin]),
                'image/object/bbox/ymin': _floats([ymin]),
                'image/object/bbox/xmax': _floats([xmax]),
                'image/object/bbox/ymax': _floats([ymax]),
                'image/object/class/label': _ints([3]),
                'image/object/is_crowd': _ints([0]),
            }
        )
    ).SerializeToString()
    placed, _, _, _ = geometry.place(image, objects, (64, 64))
    seed = tf.constant([1, 2], tf.int64)
    plain = objects_input.ObjectInput(canvas=(64, 64), **objects_input.augmentation('none'))
    trained, _, _ = objects_input.augmented(tf.constant(example), seed, plain)
    np.testing.assert_array_equal(trained.numpy(), placed.numpy())
    jittered = objects_input.ObjectInput(canvas=(64, 64))  # the default: flips, scale, colour
    for salt in range(4):  # one of four draws at least differs
        other, _, _ = objects_input.augmented(tf.constant(example), seed + salt, jittered)
        if not np.array_equal(other.numpy(), placed.numpy()):
            break
    else:
        raise AssertionError('the default augmentation left four draws as they were')


def _bytes(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


def _floats(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=values))


def _ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
