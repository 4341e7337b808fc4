"""The trainer's own detector: CenterNet (Zhou et al., "Objects as Points", 2019) on the compact
backbone (trainer/objects_backbone.py).

At 1/4 of the canvas the model predicts, per class, a heatmap of object centres, and per cell a
box's size and the centre's sub-cell offset. Its targets (`targets`, built in the input
pipeline): a Gaussian peak per object at its centre's cell in its class's channel (radius from
the box's size, the peak exactly 1), size and offset at that cell; a crowd region makes no peak
and its cells are left out of the heatmap loss (`ignore`). The heatmap loss is CenterNet's
penalty-reduced focal loss, the box loss an L1 at the centre cells (size weighted 0.1), each
divided by the batch's objects.

`detect` turns outputs into at most MAX_DETECTIONS boxes per image: the heatmap's local maxima
(3x3), their boxes, then per-class non-maximum suppression (IoU 0.5): what evaluation scores and
the serving signature returns, as [ymin, xmin, ymax, xmax] fractions of the canvas.
"""

import keras
import tensorflow as tf

from trainer import instance_masks
from trainer import objects_backbone as backbone

STRIDE = 4
MAX_DETECTIONS = 100
MIN_SCORE = 0.001  # COCO's evaluation scores down to here (its recall needs the low ones)
NMS_IOU = 0.5
SIZE_WEIGHT = 0.1
HEATMAP = 'heatmap'
BOXES = 'boxes'  # size (h, w) and offset (y, x) in cells, per cell
PRIOR = 0.01  # the heatmap's initial probability (its bias): positives lead from the first step
# The heatmap's class layers: heads, copied by --init-from only from a job on the same classes.
HEADS = ('heatmap_logits', *backbone.stage_score_names('heatmap'))


def build(num_classes, canvas, name='centernet', masks=False) -> keras.Model:
    """uint8 images [B, *canvas, 3] -> {HEATMAP: logits [B, h, w, C], BOXES: [B, h, w, 4]},
    and with `masks` instance_masks.MASKS: logits [B, h, w, C] (trainer/instance_masks.py)."""
    images = keras.Input((*canvas, 3), dtype='uint8', name='images')
    x, stages = backbone.features_and_stages(images)
    heat = backbone.conv(x, backbone.PYRAMID, 'heatmap_hidden')
    bias = keras.initializers.Constant(-float(tf.math.log((1 - PRIOR) / PRIOR)))
    heat = keras.layers.Conv2D(num_classes, 1, bias_initializer=bias, name=HEADS[0])(heat)
    # The stages' scores start at zero, so the heatmap starts at PRIOR.
    deeper = backbone.stage_scores(
        stages, num_classes, 'heatmap', use_bias=False, kernel_initializer='zeros'
    )
    heat = keras.layers.Add(name='heatmap_scores')([heat, *deeper])
    box = backbone.conv(x, backbone.PYRAMID, 'box_hidden')
    box = keras.layers.Conv2D(4, 1, name='box_regression')(box)
    outputs = {
        HEATMAP: keras.layers.Activation('linear', dtype='float32', name=HEATMAP)(heat),
        BOXES: keras.layers.Activation('linear', dtype='float32', name=BOXES)(box),
    }
    if masks:
        outputs[instance_masks.MASKS] = instance_masks.head(x, num_classes, backbone.conv)
    return keras.Model(images, outputs, name=name)


def targets(num_classes, canvas, masks=False):
    """A function (image, geometry.Objects, class map) -> (image uint8, {HEATMAP: [h, w, C + 1]
    (the last channel: cells to ignore), BOXES: [h, w, 5] (size, offset, 1 at centres)}, and
    with `masks` instance_masks.MASKS: [h, w, 2C] from the objects' masks)."""
    cells = (canvas[0] // STRIDE, canvas[1] // STRIDE)

    def make(image, objects, _class_map=None):
        size = tf.constant(cells, tf.float32)
        boxes = objects.boxes * tf.tile(size, [2])  # in cells
        crowd = objects.crowd
        ys, xs = tf.meshgrid(
            tf.range(cells[0], dtype=tf.float32),
            tf.range(cells[1], dtype=tf.float32),
            indexing='ij',
        )
        centre = (boxes[:, :2] + boxes[:, 2:]) / 2
        cell = tf.minimum(tf.floor(centre), size - 1)
        extent = boxes[:, 2:] - boxes[:, :2]
        sigma = tf.maximum(_radius(extent), 0.0) / 3 + 0.35
        d2 = (ys[None] - cell[:, 0, None, None]) ** 2 + (xs[None] - cell[:, 1, None, None]) ** 2
        peaks = tf.exp(-d2 / (2 * sigma[:, None, None] ** 2))  # [N, h, w], 1 at the cell
        peaks = tf.where(crowd[:, None, None], 0.0, peaks)
        flat = tf.reshape(peaks, [-1, cells[0] * cells[1]])
        heat = tf.math.unsorted_segment_max(flat, objects.classes, num_classes)
        heat = tf.transpose(tf.reshape(tf.maximum(heat, 0.0), [num_classes, *cells]), [1, 2, 0])
        ignore = _inside(tf.boolean_mask(boxes, crowd), ys, xs)
        solid = lambda values: tf.boolean_mask(values, tf.logical_not(crowd))
        values = tf.concat(
            [solid(extent), solid(centre - cell), tf.ones_like(solid(extent)[:, :1])], -1
        )
        box_map = tf.tensor_scatter_nd_update(
            tf.zeros([*cells, 5]), tf.cast(solid(cell), tf.int32), values
        )
        image = tf.cast(tf.round(image), tf.uint8)
        found = {HEATMAP: tf.concat([heat, ignore[..., None]], -1), BOXES: box_map}
        if masks:
            inside = lambda cell_boxes: _inside(cell_boxes, ys, xs, each=True)
            found[instance_masks.MASKS] = instance_masks.targets(
                objects, num_classes, cells, inside
            )
        return image, found

    return make


def _radius(extent):
    """CenterNet's Gaussian radius of boxes [N, 2] (h, w in cells): a shift of the corners that
    keeps an IoU of 0.7 with the box, the tightest of its three cases (its `gaussian_radius`,
    formulas as CenterNet's code has them)."""
    h, w = extent[:, 0], extent[:, 1]
    overlap = 0.7
    b1, c1 = h + w, w * h * (1 - overlap) / (1 + overlap)
    r1 = (b1 + tf.sqrt(b1**2 - 4 * c1)) / 2
    b2, c2 = 2 * (h + w), (1 - overlap) * w * h
    r2 = (b2 + tf.sqrt(b2**2 - 16 * c2)) / 2
    b3, c3 = -2 * overlap * (h + w), (overlap - 1) * w * h
    r3 = (b3 + tf.sqrt(b3**2 - 16 * overlap * c3)) / 2
    return tf.minimum(tf.minimum(r1, r2), r3)


def _inside(boxes, ys, xs, each=False):
    """1.0 where a cell's centre lies in any of `boxes` [N, 4] (cells), else 0 ([h, w]; with
    `each`, [N, h, w]: per box)."""
    y, x = ys[None] + 0.5, xs[None] + 0.5
    inside = (
        (y >= boxes[:, 0, None, None])
        & (y <= boxes[:, 2, None, None])
        & (x >= boxes[:, 1, None, None])
        & (x <= boxes[:, 3, None, None])
    )
    return tf.cast(inside if each else tf.reduce_any(inside, axis=0), tf.float32)


def heatmap_loss(y_true, logits):
    """Penalty-reduced focal loss per image (crowd cells left out), over the batch's objects."""
    heat, keep = y_true[..., :-1], 1.0 - y_true[..., -1:]
    p = tf.clip_by_value(tf.sigmoid(logits), 1e-4, 1 - 1e-4)
    positive = tf.cast(heat >= 1.0 - 1e-6, tf.float32)
    pos = -tf.math.log(p) * (1 - p) ** 2 * positive
    neg = -tf.math.log(1 - p) * p**2 * (1 - heat) ** 4 * (1 - positive) * keep
    return tf.reduce_sum(pos + neg, axis=[1, 2, 3]) / _batch_objects(positive)


def box_loss(y_true, predicted):
    """L1 of size (weighted SIZE_WEIGHT) and offset at the centre cells, over the batch's
    objects."""
    at = y_true[..., 4:]
    error = tf.abs(predicted - y_true[..., :4]) * at
    weighted = SIZE_WEIGHT * tf.reduce_sum(error[..., :2], [1, 2, 3])
    weighted += tf.reduce_sum(error[..., 2:], [1, 2, 3])
    return weighted / _batch_objects(at)


def _batch_objects(centres):
    """The mean count of objects of a batch's images (at least 1): each image's loss divided by
    it, the batch's mean is CenterNet's loss over the batch's objects."""
    return tf.maximum(tf.reduce_mean(tf.reduce_sum(centres, axis=[1, 2, 3])), 1.0)


def compile_args(masks=False) -> dict:
    found = {HEATMAP: heatmap_loss, BOXES: box_loss}
    if masks:
        found[instance_masks.MASKS] = instance_masks.loss
    return {'loss': found}


def detect(outputs, max_detections=MAX_DETECTIONS):
    """Model outputs -> (boxes [B, M, 4] yxyx fractions of the canvas, scores [B, M], classes
    int32 [B, M], valid int32 [B]): peaks, then per-class NMS; padded after `valid`."""
    heat = tf.sigmoid(tf.cast(outputs[HEATMAP], tf.float32))
    regression = tf.cast(outputs[BOXES], tf.float32)
    shape = tf.shape(heat)
    batch, h, w, classes = shape[0], shape[1], shape[2], shape[3]
    peaks = tf.cast(heat == tf.nn.max_pool2d(heat, 3, 1, 'SAME'), tf.float32) * heat
    k = tf.minimum(max_detections, h * w * classes)
    scores, flat = tf.math.top_k(tf.reshape(peaks, [batch, -1]), k)
    cell_index, class_id = flat // classes, flat % classes
    ys, xs = tf.cast(cell_index // w, tf.float32), tf.cast(cell_index % w, tf.float32)
    found = tf.gather(tf.reshape(regression, [batch, -1, 4]), cell_index, batch_dims=1)
    cy, cx = ys + found[..., 2], xs + found[..., 3]
    half_h, half_w = tf.nn.relu(found[..., 0]) / 2, tf.nn.relu(found[..., 1]) / 2
    size = tf.cast(tf.stack([h, w, h, w]), tf.float32)
    boxes = tf.stack([cy - half_h, cx - half_w, cy + half_h, cx + half_w], -1) / size
    boxes = tf.clip_by_value(boxes, 0.0, 1.0)
    return suppress(boxes, scores, class_id, classes, max_detections)


def suppress(boxes, scores, class_id, classes, max_detections=MAX_DETECTIONS):
    """Candidates (boxes [B, K, 4] yxyx fractions, scores [B, K], class ids [B, K] of
    `classes`) -> (boxes [B, M, 4], scores [B, M], classes int32 [B, M], valid int32 [B]):
    per-class non-maximum suppression (IoU NMS_IOU, scores down to MIN_SCORE), padded after
    `valid` (trainer/retinanet.py's detections too)."""
    per_class = tf.one_hot(class_id, classes) * scores[..., None]
    nms = tf.image.combined_non_max_suppression(
        boxes[:, :, None, :],
        per_class,
        max_output_size_per_class=max_detections,
        max_total_size=max_detections,
        iou_threshold=NMS_IOU,
        score_threshold=MIN_SCORE,
        pad_per_class=False,
        clip_boxes=True,
    )
    return (
        nms.nmsed_boxes,
        nms.nmsed_scores,
        tf.cast(nms.nmsed_classes, tf.int32),
        nms.valid_detections,
    )
