"""Instance masks of the trainer's detector (`instance_segmentation`): a mask per detected box.

A CenterNet detector (trainer/centernet.py) with one more head: per class, at 1/4 of the canvas,
whether a cell belongs to an object of that class (`mask_logits`). An instance's mask is its
class's channel inside its box, the way Mask R-CNN reads the mask of the class a box was given
inside that box: the head learns, per class, an object's extent where a box of that class lies,
which is all that is asked of it. Its loss (`loss`) is that: binary cross-entropy of each class
channel over the cells inside that class's boxes (crowd regions included: they are that class's
pixels), the cells outside every box of the class left out.

Detections carry masks as Model Garden's and the Object Detection API's do
(`detection_masks`): MASK_SIZE x MASK_SIZE probabilities over each box (`box_masks`), pasted
into the image's pixels (`paste`) for COCO's mask mAP and by whoever serves the model.
"""

import keras
import numpy as np
import tensorflow as tf
from PIL import Image

MASKS = 'masks'
MASK_SIZE = 28  # Mask R-CNN's
THRESHOLD = 0.5  # a pasted mask's pixels: probability >= this


def head(features, num_classes, conv) -> 'keras.KerasTensor':
    """The mask head on the detector's 1/4 features: logits [B, h, w, C] (float32)."""
    x = conv(features, features.shape[-1], 'mask_hidden')
    x = keras.layers.Conv2D(num_classes, 1, name='mask_logits')(x)
    return keras.layers.Activation('linear', dtype='float32', name=MASKS)(x)


def targets(objects, num_classes, cells, inside) -> tf.Tensor:
    """[h, w, 2C]: per class, the share of each cell its objects' masks cover, then 1 where the
    cell's centre lies in one of its boxes (the cells the loss counts). `inside(boxes)` ->
    [N, h, w] of boxes in cells."""
    masks = tf.cast(objects.masks > 0, tf.float32)[..., None]  # [N, H, W, 1] on the canvas
    share = tf.image.resize(masks, cells, method='area')[..., 0]  # [N, h, w]
    size = tf.constant(cells, tf.float32)
    counted = inside(objects.boxes * tf.tile(size, [2]))

    def per_class(values):
        flat = tf.reshape(values, [-1, cells[0] * cells[1]])
        found = tf.maximum(tf.math.unsorted_segment_max(flat, objects.classes, num_classes), 0.0)
        return tf.transpose(tf.reshape(found, [num_classes, *cells]), [1, 2, 0])

    return tf.concat([per_class(share), per_class(counted)], -1)


def loss(y_true, logits):
    """Binary cross-entropy of the cells inside each class's boxes, per image, over the
    batch's counted cells (a cell counted once per class whose box holds it)."""
    classes = tf.shape(logits)[-1]
    truth, counted = y_true[..., :classes], y_true[..., classes:]
    each = tf.nn.sigmoid_cross_entropy_with_logits(labels=truth, logits=logits) * counted
    per_image = tf.maximum(tf.reduce_mean(tf.reduce_sum(counted, axis=[1, 2, 3])), 1.0)
    return tf.reduce_sum(each, axis=[1, 2, 3]) / per_image


def box_masks(logits, boxes, classes) -> tf.Tensor:
    """Each detection's mask: [B, M, MASK_SIZE, MASK_SIZE] probabilities of its class over its
    box (`boxes` [B, M, 4] yxyx fractions of the canvas, `classes` [B, M])."""
    shape = tf.shape(logits)
    batch, cells = shape[0], tf.cast(shape[1:3], tf.float32)
    count = tf.shape(boxes)[1]
    # A cell's value lies at its centre: canvas fraction f is cell coordinate f * h - 0.5,
    # and crop_and_resize reads coordinate y * (h - 1) at y.
    scale = tf.tile(cells, [2])
    sampled = (boxes * scale - 0.5) / tf.maximum(scale - 1.0, 1.0)
    crops = tf.image.crop_and_resize(
        tf.sigmoid(logits),
        tf.reshape(sampled, [-1, 4]),
        tf.repeat(tf.range(batch), count),
        [MASK_SIZE, MASK_SIZE],
    )  # [B * M, S, S, C]
    crops = tf.transpose(crops, [0, 3, 1, 2])
    picked = tf.gather(crops, tf.reshape(classes, [-1]), axis=1, batch_dims=1)
    return tf.reshape(picked, [batch, count, MASK_SIZE, MASK_SIZE])


def paste(mask, box, height, width) -> np.ndarray:
    """A box mask (MASK_SIZE^2 probabilities) -> bool [height, width] of the image: resized onto
    its box (`box` yxyx fractions of the image), set where >= THRESHOLD."""
    full = np.zeros((height, width), bool)
    top, left = int(np.floor(box[0] * height)), int(np.floor(box[1] * width))
    bottom, right = int(np.ceil(box[2] * height)), int(np.ceil(box[3] * width))
    if bottom <= top or right <= left:
        return full
    # The box's exact extent in pixels, sampled at the pixels' centres it spans.
    exact = np.array(box, np.float64) * [height, width, height, width]
    rows = (np.arange(top, bottom) + 0.5 - exact[0]) / max(exact[2] - exact[0], 1e-6)
    cols = (np.arange(left, right) + 0.5 - exact[1]) / max(exact[3] - exact[1], 1e-6)
    resized = Image.fromarray(np.asarray(mask, np.float32)).resize(
        (MASK_SIZE * 4, MASK_SIZE * 4), Image.BILINEAR
    )
    grid = np.asarray(resized)
    r = np.clip((rows * grid.shape[0]).astype(int), 0, grid.shape[0] - 1)
    c = np.clip((cols * grid.shape[1]).astype(int), 0, grid.shape[1] - 1)
    full[top:bottom, left:right] = grid[r[:, None], c[None, :]] >= THRESHOLD
    return full
