"""The trainer's own semantic segmenter: the compact backbone's 1/4-scale features, a class per
pixel (DeepLab's decoder, small), plus class scores read from each deeper stage on its own and
upsampled (FCN's skip scores, Long et al., 2015), all summed and upsampled to the canvas.

The deeper scores are what tell one object from another: an object of 50 px is 12 cells across
at 1/4, where a cell sees its edges, and 1-3 cells at 1/16 and 1/32, where a cell sees it whole.
Through the pyramid alone (its 64 channels summed with the shallow laterals) the segmenter found
the objects' extent but mostly not their class; with the scores from the 1/8, 1/16 and 1/32
stages (a 1x1 convolution each) the smoke set's val mean IoU went from 0.090 to 0.157 in the
same 8 epochs (bench/RESULTS.md, "Class scores from every stage").

Its classes: a build's `segmentation_classes` where its records carry class maps (Pascal VOC's
21, background first), else `background` and the build's labels (class maps drawn from the
instance masks, trainer/objects_input.py). VOID pixels (255: VOC's borders, the canvas padding)
count in no loss and no score.

`mean_iou` is the standard measure: per class, intersection over union of predicted and true
pixels summed over the split, then the mean over the classes present (in the truth or the
predictions); metrics.json has `mean_iou` and `iou_per_class` (prefixed `val_`, `test_`).
"""

import keras
import numpy as np
import tensorflow as tf

from trainer import objects_backbone as backbone
from trainer import objects_geometry as geometry

BACKGROUND = 'background'
LOGITS = 'class_logits'
# The class layers: heads, copied by --init-from only from a job on the same classes.
HEADS = (LOGITS, *backbone.stage_score_names('segment'))


def build(num_classes, canvas, name='segmenter') -> keras.Model:
    """uint8 images [B, *canvas, 3] -> logits [B, *canvas, num_classes] (float32)."""
    images = keras.Input((*canvas, 3), dtype='uint8', name='images')
    x, stages = backbone.features_and_stages(images)
    x = backbone.conv(x, backbone.PYRAMID, 'segment_hidden')
    x = keras.layers.Conv2D(num_classes, 1, name=LOGITS)(x)
    scores = [x, *backbone.stage_scores(stages, num_classes, 'segment')]
    x = keras.layers.Add(name='segment_scores')(scores)
    x = keras.layers.UpSampling2D(4, interpolation='bilinear', name='segment_up')(x)
    return keras.Model(
        images, keras.layers.Activation('linear', dtype='float32', name='classes')(x), name=name
    )


def targets(image, _objects, class_map):
    """(image uint8, class map int32 [H, W]) of a placed training image."""
    return tf.cast(tf.round(image), tf.uint8), tf.cast(class_map[..., 0], tf.int32)


def loss(y_true, logits):
    """Cross-entropy per image over its pixels that are not VOID, plus the batch's soft Dice
    loss over the classes it holds (Milletari et al., 2016): with the background most of every
    image, cross-entropy alone keeps a short run predicting background (8 epochs on the smoke
    set: background IoU 0.96, the objects' mean 0.05)."""
    y_true = tf.cast(y_true, tf.int32)
    valid = tf.cast(y_true != geometry.VOID, tf.float32)
    labels = tf.where(y_true == geometry.VOID, 0, y_true)
    each = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits) * valid
    pixels = tf.maximum(tf.reduce_sum(valid, axis=[1, 2]), 1.0)
    return tf.reduce_sum(each, axis=[1, 2]) / pixels + _dice_loss(labels, logits, valid)


def _dice_loss(labels, logits, valid):
    """1 - the mean soft Dice coefficient of the classes present in the batch's truth."""
    probabilities = tf.nn.softmax(logits) * valid[..., None]
    truth = tf.one_hot(labels, tf.shape(logits)[-1]) * valid[..., None]
    overlap = tf.reduce_sum(probabilities * truth, axis=[0, 1, 2])
    sizes = tf.reduce_sum(probabilities + truth, axis=[0, 1, 2])
    present = tf.cast(tf.reduce_sum(truth, axis=[0, 1, 2]) > 0, tf.float32)
    dice = (2 * overlap + 1) / (sizes + 1)
    return 1 - tf.reduce_sum(dice * present) / tf.maximum(tf.reduce_sum(present), 1.0)


def confusion(truth, predicted, num_classes) -> np.ndarray:
    """Pixel counts [true class, predicted class] of maps (VOID pixels left out)."""
    truth, predicted = np.asarray(truth).ravel(), np.asarray(predicted).ravel()
    keep = truth != geometry.VOID
    pairs = truth[keep].astype(np.int64) * num_classes + predicted[keep]
    return np.bincount(pairs, minlength=num_classes**2).reshape(num_classes, num_classes)


def mean_iou(counts, names) -> dict:
    """{'mean_iou', 'iou_per_class'} of a confusion matrix."""
    intersection = np.diag(counts).astype(np.float64)
    union = counts.sum(0) + counts.sum(1) - intersection
    present = union > 0
    iou = np.where(present, intersection / np.maximum(union, 1), 0.0)
    return {
        'mean_iou': float(iou[present].mean()) if present.any() else 0.0,
        'iou_per_class': {name: float(v) for name, v, p in zip(names, iou, present) if p},
    }
