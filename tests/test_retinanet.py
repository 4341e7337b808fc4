"""KerasHub's RetinaNet (`--model retinanet`, trainer/retinanet.py) on a detection build: it
trains, is scored by COCO's measures, serves the boxes it is scored on, starts its class head at
RetinaNet's prior, and its targets are the library's label encoding of the objects."""

import keras
import numpy as np
import pytest
from test_object_training import _config
from test_object_training import assert_served_as_evaluated
from test_object_training import fixture_coco_build  # noqa: F401 (the `coco_build` fixture)
from test_object_training import served_and_evaluated

from trainer import dataset_info
from trainer import objects_geometry as geometry
from trainer import objects_train
from trainer import retinanet
from trainer import train as train_lib
from trainer import warm_start


def test_kerashubs_retinanet_trains_detection_and_serves_the_boxes_it_is_scored_on(
    coco_build, tmp_path, tf
):
    flags = '--task', 'detection', '--model', 'retinanet'
    info = dataset_info.load(str(coco_build))
    with pytest.raises(ValueError, match='retinanet needs multiples of 128'):
        objects_train.task_for(_config(coco_build, tmp_path, *flags), info)  # 64 px
    config = _config(coco_build, tmp_path / 'job', *flags, '--image-size', '128', '--epochs', '1')
    metrics = train_lib.train(config)
    assert metrics['model'] == 'retinanet' and metrics['selected_by'] == 'val_map'
    for name in ('map', 'map_50', 'map_75', 'map_small', 'map_medium', 'map_large'):
        assert 0.0 <= metrics[f'test_{name}'] <= 1.0 and f'val_{name}' in metrics
    task = objects_train.task_for(config, info)
    model = objects_train.build(task)[0]
    detector = model.get_layer(retinanet.DETECTOR)
    # The class head starts at RetinaNet's prior (keras-hub 0.32 gives it to the box head).
    prior = detector.classification_head.prediction_layer.bias.numpy()
    np.testing.assert_allclose(1 / (1 + np.exp(-prior)), 0.01, rtol=1e-5)
    assert not np.any(detector.box_head.prediction_layer.bias.numpy())
    copied = warm_start.apply(model, config.job_dir, config, objects_train.heads(task))
    assert not copied['new_layers']
    assert objects_train.heads(task) == {'classification_head': list(task.classes)}
    evaluated, answer = served_and_evaluated(tf, task, info, model, config.resolved_model_dir)
    assert 'detection_masks' not in answer
    for index, boxes, scores, classes, masks in evaluated:
        assert_served_as_evaluated(answer, task, index, boxes, scores, classes)
        assert masks is None


def test_retinanets_targets_are_the_librarys_label_encoding_of_the_objects(tf):
    canvas = (128, 128)
    boxes = tf.constant([[0.25, 0.25, 0.5, 0.5], [0.0, 0.0, 1.0, 1.0], [0.6, 0.1, 0.9, 0.3]])
    objects = geometry.Objects(boxes, tf.constant([2, 0, 1]), tf.constant([False, True, False]))
    image, found = retinanet.targets(canvas)(tf.zeros([*canvas, 3]), objects)
    anchors = retinanet.anchor_boxes(canvas).numpy()
    labels, deltas = found[retinanet.CLASSES].numpy()[:, 0], found[retinanet.BOXES].numpy()
    assert image.dtype == tf.uint8 and labels.shape == (len(anchors),)
    assert set(np.unique(labels)) <= {-2.0, -1.0, 1.0, 2.0}  # the crowd (class 0) matches none
    for label, box in ((2.0, boxes[0]), (1.0, boxes[2])):
        at = np.flatnonzero(labels == label)
        assert len(at) > 0 and np.all(deltas[at, 4] == 1.0)
        # Decoded with the model's own decoding, the matched anchors' targets are the box.
        decoded = keras.utils.bounding_boxes.decode_deltas_to_boxes(
            anchors=anchors[at],
            boxes_delta=deltas[at, :4][None],
            anchor_format='yxyx',
            encoded_format='center_xywh',
            box_format='yxyx',
            image_shape=(*canvas, 3),
        )
        np.testing.assert_allclose(decoded[0], np.tile(box * 128, (len(at), 1)), atol=1e-3)
    assert np.all(deltas[labels < 0] == 0.0)
    none = geometry.Objects(tf.zeros([0, 4]), tf.zeros([0], tf.int32), tf.zeros([0], tf.bool))
    _, empty = retinanet.targets(canvas)(tf.zeros([*canvas, 3]), none)
    assert np.all(empty[retinanet.CLASSES].numpy() == -1.0)
