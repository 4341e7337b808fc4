"""Scoring a detector or a segmenter on a split: COCO box mAP (trainer/coco_metrics.py), with
mask mAP for instance segmentation (`mask_map`, ...: each detection's mask pasted into the
image, trainer/instance_masks.py), or mean IoU (trainer/segmenter.py), on images placed on the
canvas as the serving signature places them.

`ObjectMetrics` scores the validation split at each epoch's end and puts its figures into the
epoch's logs (`val_map`, `val_map_50`, ... or `val_mean_iou`) before trainer/best_epoch.py
reads them: the best epoch is the one of the best val mAP (or mIoU).
"""

import keras
import numpy as np
import tensorflow as tf

from trainer import centernet
from trainer import coco_metrics
from trainer import instance_masks
from trainer import objects_geometry as geometry
from trainer import objects_input
from trainer import retinanet
from trainer import segmenter


class Scorer:
    """Scores a model on one split of a build (its ground truth read once)."""

    def __init__(self, task, info, split, batch_size):
        self.task, self.info, self.split = task, info, split
        self.batch_size = batch_size
        self._truth, self._predict = None, None
        self.masks = task.name == objects_input.INSTANCE
        if task.name != objects_input.SEMANTIC:
            self._truth = coco_metrics.ground_truth(info, split, task.classes, self.masks)

    def __call__(self, model) -> dict:
        data = objects_input.evaluation_dataset(
            self.info, self.split, self.batch_size, self.task.settings
        )
        if self._truth is None:
            return self._mean_iou(model, data)
        results = []
        for index, boxes, scores, classes, masks in self.detections(model, data):
            if masks is not None:
                height, width = self._truth.sizes[index]
                masks = [instance_masks.paste(m, b, height, width) for m, b in zip(masks, boxes)]
            results += coco_metrics.detections(
                index, boxes, scores, classes, self._truth.sizes, masks
            )
        found = coco_metrics.evaluate(self._truth, results, self.task.classes)
        if self.masks:
            segm = coco_metrics.evaluate(self._truth, results, self.task.classes, 'segm')
            found.update({f'mask_{key}': value for key, value in segm.items()})
        return found

    def detections(self, model, data=None):
        """(record index, boxes [n, 4] yxyx fractions of the image, scores [n], classes [n],
        box masks [n, S, S] or None) of each image of the split, in its order."""
        if data is None:
            data = objects_input.evaluation_dataset(
                self.info, self.split, self.batch_size, self.task.settings
            )
        canvas = self.task.settings.canvas
        predict = self._compiled(
            model,
            lambda images, scaled, offset: detected(
                model(images, training=False), scaled, offset, canvas
            ),
        )
        for images, found in data:
            boxes, scores, classes, valid, masks = (
                None if value is None else value.numpy()
                for value in predict(images, found['scaled'], found['offset'])
            )
            for i, index in enumerate(found['index'].numpy()):
                n = valid[i]
                shapes = None if masks is None else masks[i, :n]
                yield int(index), boxes[i, :n], scores[i, :n], classes[i, :n], shapes

    def _compiled(self, model, predict):
        """`predict` as one tf.function per model, kept: a Scorer runs after every epoch, and a
        new function each time traced the model again; the split's last, smaller batch is
        traced once with a relaxed shape (`reduce_retracing`), not once per size."""
        if self._predict is None or self._predict[0] is not model:
            self._predict = (model, tf.function(predict, reduce_retracing=True))
        return self._predict[1]

    def _mean_iou(self, model, data):
        classes = len(self.task.classes)
        predict = self._compiled(
            model,
            lambda images: segmenter.class_map(
                model(images, training=False), self.task.settings.canvas
            ),
        )
        counts = np.zeros((classes, classes), np.int64)
        for images, found in data:
            counts += segmenter.confusion(found['class_map'].numpy(), predict(images), classes)
        return segmenter.mean_iou(counts, self.task.classes)


def detected(outputs, scaled, offset, canvas):
    """A detector's outputs on placed images -> (boxes [B, M, 4] yxyx fractions of the images,
    scores, classes, valid, box masks [B, M, S, S] or None): what evaluation scores and the
    served model answers. A box is clipped to the image's part of the canvas before its mask is
    read, so that the mask spans the box that is given."""
    if retinanet.CLASSES in outputs:
        boxes, scores, classes, valid = retinanet.detect(outputs, canvas)
    else:
        boxes, scores, classes, valid = centernet.detect(outputs)
    covered = tf.minimum(scaled - offset, tf.constant(canvas, tf.float32)) / canvas
    boxes = tf.minimum(boxes, tf.tile(covered, [1, 2])[:, None, :])
    masks = None
    if instance_masks.MASKS in outputs:
        masks = instance_masks.box_masks(outputs[instance_masks.MASKS], boxes, classes)
    return geometry.canvas_to_image(boxes, scaled, offset, canvas), scores, classes, valid, masks


def scalars(metrics) -> dict:
    """The numbers of a Scorer's metrics (what epoch logs can hold)."""
    return {key: value for key, value in metrics.items() if isinstance(value, float)}


class ObjectMetrics(keras.callbacks.Callback):
    """Scores the validation split at each epoch's end into the logs, prefixed `val_`."""

    def __init__(self, scorer):
        super().__init__()
        self.scorer = scorer

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        found = scalars(self.scorer(self.model))
        logs.update({f'val_{key}': value for key, value in found.items()})
        shown = ', '.join(f'val_{key} {value:.4f}' for key, value in found.items())
        print(f'epoch {epoch + 1}: {shown}', flush=True)
