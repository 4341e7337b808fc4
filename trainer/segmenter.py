"""The trainer's own semantic segmenter: the compact backbone's 1/4-scale features, a class per
pixel (DeepLab's decoder, small), plus class scores read from each deeper stage on its own and
upsampled (FCN's skip scores, Long et al., 2015), all summed at 1/4 of the canvas.

The deeper scores are what tell one object from another: an object of 50 px is 12 cells across
at 1/4, where a cell sees its edges, and 1-3 cells at 1/16 and 1/32, where a cell sees it whole.
Through the pyramid alone (its 64 channels summed with the shallow laterals) the segmenter found
the objects' extent but mostly not their class; with the scores from the 1/8, 1/16 and 1/32
stages (a 1x1 convolution each) the smoke set's val mean IoU went from 0.090 to 0.157 in the
same 8 epochs (bench/RESULTS.md, "Class scores from every stage").

The model ends at 1/4 (STRIDE), and the loss scores its logits there, against each cell's
shares of the classes (`cell_classes`): what upsampling the logits first and scoring every
pixel computes of logits that are constant within a cell, at 0.28 s a training step of 8 images
at 320 against 0.49 s: with bfloat16 (trainer/distribute.py) the smoke config trains 15 epochs
in about the time 8 took, val mean IoU 0.157 -> 0.267
(bench/RESULTS.md, "The segmenter's loss at 1/4").
Evaluation and serving upsample the logits bilinearly to the canvas (`class_map`), as the
model's last layer did before.

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
STRIDE = 4  # a segmenter's logits are at 1/4 of the canvas; `class_map` upsamples them
# The class layers: heads, copied by --init-from only from a job on the same classes.
HEADS = (LOGITS, *backbone.stage_score_names('segment'))


def build(num_classes, canvas, name='segmenter') -> keras.Model:
    """uint8 images [B, *canvas, 3] -> logits [B, *canvas / STRIDE, num_classes] (float32)."""
    images = keras.Input((*canvas, 3), dtype='uint8', name='images')
    x, stages = backbone.features_and_stages(images)
    x = backbone.conv(x, backbone.PYRAMID, 'segment_hidden')
    x = keras.layers.Conv2D(num_classes, 1, name=LOGITS)(x)
    scores = [x, *backbone.stage_scores(stages, num_classes, 'segment')]
    x = keras.layers.Add(name='segment_scores')(scores)
    return keras.Model(
        images, keras.layers.Activation('linear', dtype='float32', name='classes')(x), name=name
    )


def targets(image, _objects, class_map):
    """(image uint8, class map int32 [H, W]) of a placed training image."""
    return tf.cast(tf.round(image), tf.uint8), tf.cast(class_map[..., 0], tf.int32)


def class_map(logits, canvas):
    """A segmenter's logits (at 1/STRIDE) -> int32 class maps [B, *canvas]: the logits upsampled
    bilinearly, as the models did before their output moved to 1/4, then the best class."""
    logits = tf.image.resize(logits, canvas, method='bilinear')
    return tf.argmax(logits, -1, output_type=tf.int32)


def cell_classes(y_true, num_classes, stride) -> tf.Tensor:
    """int class maps [B, H, W] -> each class's share of the pixels of each stride x stride
    cell [B, H / stride, W / stride, C] (VOID pixels in no class): the truth that logits at
    1/stride are trained against."""
    y_true = tf.cast(y_true, tf.int32)
    valid = tf.cast(y_true != geometry.VOID, tf.float32)
    truth = tf.one_hot(tf.where(y_true == geometry.VOID, 0, y_true), num_classes)
    return tf.nn.avg_pool2d(truth * valid[..., None], stride, stride, 'VALID')


def loss(y_true, logits):
    """Cross-entropy per image, plus the batch's soft Dice loss over the classes it holds
    (Milletari et al., 2016), of the logits at 1/STRIDE against each cell's class shares
    (`cell_classes`): the full-resolution loss of logits constant within a cell, at 0.28 s a
    training step of 8 images at 320 where upsampling first to score every pixel took 0.49 s
    (bench/RESULTS.md, "The segmenter's loss at 1/4"). With the background most of every
    image, cross-entropy alone keeps a short run predicting background (8 epochs on the smoke
    set: background IoU 0.96, the objects' mean 0.05)."""
    stride = y_true.shape[1] // logits.shape[1]  # the model's: STRIDE
    truth = cell_classes(y_true, logits.shape[-1], stride)
    cover = tf.reduce_sum(truth, -1)  # the share of a cell's pixels that are not VOID
    each = -tf.reduce_sum(truth * tf.nn.log_softmax(logits), -1)
    pixels = tf.maximum(tf.reduce_sum(cover, axis=[1, 2]), 1e-6)
    return tf.reduce_sum(each, axis=[1, 2]) / pixels + _dice_loss(truth, logits, cover, stride)


def _dice_loss(truth, logits, cover, stride):
    """1 - the mean soft Dice coefficient of the classes present in the batch's truth (sums in
    pixels, stride**2 a cell, so that the +1 smoothing weighs as at full resolution)."""
    probabilities = tf.nn.softmax(logits)
    overlap = tf.reduce_sum(probabilities * truth, axis=[0, 1, 2]) * stride**2
    sizes = tf.reduce_sum(probabilities * cover[..., None] + truth, axis=[0, 1, 2]) * stride**2
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
