"""KerasHub's RetinaNet as the trainer's library detector (`--model retinanet`).

The model is the library's (`keras_hub.models.RetinaNetObjectDetector`: a feature pyramid on
levels 3-7 of KerasHub's `ResNetBackbone` in ResNet-18's layout, trainer/deeplab.py's, and its
box and class heads over 9 anchors a cell, with group normalization: the library's option,
without which the heads of random weights answer logits of +-35 at the first step), its
anchors (`AnchorGenerator`: 3 scales and 3 aspect ratios a level) and its label encoder
(`RetinaNetLabelEncoder`: an anchor is an object's where their IoU is 0.5 or more, background
under 0.4, ignored between). What is the trainer's: the input (trainer/objects_input.py: each
image's targets encoded by the library's label encoder in the input pipeline from its first
MAX_BOXES objects, crowd regions left out), the loss (RetinaNet's: sigmoid focal loss over the
anchors that are not ignored and smooth L1 on the matched anchors' box deltas, each over the
batch's matched anchors), the detections (the library's box decoding, then the 1,000 best
scores and per-class non-maximum suppression as trainer/centernet.py's), and the checkpoints,
evaluation and export. keras-hub 0.32's own `predict()` suppression needs a fixed batch; this
decoding does not.

Images arrive as uint8 and are normalized as KerasHub's ResNet converter does (trainer/deeplab.py),
so the weights of a KerasHub ResNet start the encoder through `--init-from`; the frozen phase
keeps the encoder (`conv1_*`, `stack*`), the class head (`classification_head`) is copied only
from a job on the same classes.

The canvas must be a multiple of MULTIPLE, 128 (the pyramid's level 7). A RetinaNet is no
model for a CPU smoke run (the compact CenterNet is): it is here for GPUs and larger sets.
"""

import keras
import tensorflow as tf

from trainer import centernet
from trainer import deeplab

NAME = 'retinanet'
CLASSES = 'cls_logits'  # the library's output names
BOXES = 'bbox_regression'
HEADS = ('classification_head',)
DETECTOR = 'retinanet_detector'  # the library's model, inside the trainer's
LEVELS = (3, 7)
MULTIPLE = 2 ** LEVELS[1]  # of the canvas's sides: the pyramid's coarsest level
ALPHA, GAMMA = 0.25, 2.0  # the focal loss's, as RetinaNet's paper and KerasHub's
PRE_NMS = 1000  # the best scores of an image kept before suppression
BACKGROUND, IGNORED = -1.0, -2.0  # the label encoder's class targets
PRIOR = 0.01  # the class head's initial probability, as RetinaNet's paper
MAX_BOXES = 100  # an image's objects matched to anchors, as Model Garden's RetinaNet parser


def _library():
    import keras_hub  # noqa: PLC0415 (heavy, and only the library's models need it)

    return keras_hub


def build(num_classes, canvas, name=NAME) -> keras.Model:
    """uint8 images [B, *canvas, 3] -> {CLASSES: logits [B, A, C], BOXES: deltas [B, A, 4]}
    (float32), A the anchors of the canvas."""
    if any(side % MULTIPLE for side in canvas):
        raise ValueError(f'--image-size {list(canvas)}: a {NAME} needs multiples of {MULTIPLE}')
    hub = _library()
    encoder = hub.models.ResNetBackbone(**deeplab.RESNET_18, image_shape=(*canvas, 3))
    backbone = hub.models.RetinaNetBackbone(
        image_encoder=encoder,
        min_level=LEVELS[0],
        max_level=LEVELS[1],
        use_p5=False,
        image_shape=(*canvas, 3),
    )
    detector = hub.models.RetinaNetObjectDetector(
        backbone=backbone,
        num_classes=num_classes,
        bounding_box_format='yxyx',
        use_prediction_head_norm=True,
        name=DETECTOR,
    )
    # keras-hub 0.32 starts the box head's output at RetinaNet's prior and the class head's at
    # zero (a probability of 0.5 at every anchor): swapped back, as RetinaNet's paper has them, or
    # the background's loss would swamp the first steps.
    prior = -float(tf.math.log((1 - PRIOR) / PRIOR))
    for head, value in ((detector.classification_head, prior), (detector.box_head, 0.0)):
        bias = head.prediction_layer.bias
        bias.assign(tf.fill(bias.shape, value))
    images = keras.Input((*canvas, 3), dtype='uint8', name='images')
    x = keras.layers.Rescaling(1 / 255.0, name='input_scale')(images)
    variance = [s * s for s in deeplab.STD]
    x = keras.layers.Normalization(mean=deeplab.MEAN, variance=variance, name='input_norm')(x)
    found = detector(x)
    outputs = {
        key: keras.layers.Activation('linear', dtype='float32', name=key)(found[key])
        for key in (CLASSES, BOXES)
    }
    return keras.Model(images, outputs, name=name)


def _anchors():
    """The library's anchor generator (yxyx pixels of the images it is given)."""
    return _library().layers.AnchorGenerator(
        'yxyx', min_level=LEVELS[0], max_level=LEVELS[1], num_scales=3,
        aspect_ratios=[0.5, 1.0, 2.0], anchor_size=4,
    )  # fmt: skip


def anchor_boxes(canvas) -> tf.Tensor:
    """[A, 4] yxyx pixels: every anchor of the canvas, in the order of the model's outputs."""
    found = _anchors()(tf.zeros([1, *canvas, 3]))
    return tf.concat(list(found.values()), axis=0)


def targets(canvas):
    """A function (image, geometry.Objects, class map) -> (image uint8, {CLASSES: [A, 1] class
    ids, BACKGROUND or IGNORED; BOXES: [A, 5] box deltas and 1 at matched anchors}), encoded
    by the library's RetinaNetLabelEncoder from an image's first MAX_BOXES objects, padded to
    that many (its matching needs a fixed count). Crowd regions are left out of the matching."""
    from keras_hub.src.models.retinanet import retinanet_label_encoder  # noqa: PLC0415

    encoder = retinanet_label_encoder.RetinaNetLabelEncoder(
        _anchors(), bounding_box_format='yxyx', encoding_format='center_xywh'
    )
    scale = tf.constant([canvas[0], canvas[1], canvas[0], canvas[1]], tf.float32)
    blank = tf.zeros([1, *canvas, 3])

    def make(image, objects, _class_map=None):
        solid = tf.logical_not(objects.crowd)
        boxes = (tf.boolean_mask(objects.boxes, solid) * scale)[:MAX_BOXES]
        classes = tf.cast(tf.boolean_mask(objects.classes, solid), tf.float32)[:MAX_BOXES]
        # Padded as the library's batches are: no box, class BACKGROUND, matched by no anchor.
        padding = MAX_BOXES - tf.shape(classes)[0]
        boxes = tf.pad(boxes, [[0, padding], [0, 0]], constant_values=-1.0)
        classes = tf.pad(classes, [[0, padding]], constant_values=BACKGROUND)
        boxes.set_shape([MAX_BOXES, 4])
        classes.set_shape([MAX_BOXES])
        deltas, labels = encoder(images=blank, gt_boxes=boxes[None], gt_classes=classes[None])
        deltas, labels = deltas[0], tf.reshape(labels[0], [-1, 1])
        matched = tf.cast(labels >= 0, tf.float32)
        found = {CLASSES: labels, BOXES: tf.concat([deltas * matched, matched], -1)}
        return tf.cast(tf.round(image), tf.uint8), found

    return make


def _matched(matched):
    """The mean count of matched anchors (`matched`: [B, A, 1], 1 at them) of a batch's images
    (at least 1): each image's loss divided by it, the batch's mean is the loss over the
    batch's matched anchors."""
    return tf.maximum(tf.reduce_mean(tf.reduce_sum(matched, axis=[1, 2])), 1.0)


def class_loss(y_true, logits):
    """Sigmoid focal loss per image over the anchors that are not ignored."""
    logits = tf.cast(logits, tf.float32)
    labels = y_true[..., 0]
    truth = tf.one_hot(tf.cast(labels, tf.int32), tf.shape(logits)[-1])  # none for -1, -2
    entropy = tf.nn.sigmoid_cross_entropy_with_logits(labels=truth, logits=logits)
    p = tf.sigmoid(logits)
    p_true = truth * p + (1 - truth) * (1 - p)
    alpha = truth * ALPHA + (1 - truth) * (1 - ALPHA)
    focal = alpha * (1 - p_true) ** GAMMA * entropy
    kept = tf.cast(labels != IGNORED, tf.float32)[..., None]
    matched = tf.cast(y_true >= 0, tf.float32)
    return tf.reduce_sum(focal * kept, axis=[1, 2]) / _matched(matched)


def box_loss(y_true, deltas):
    """Smooth L1 (cut-off 1) of the box deltas at the matched anchors, per image."""
    matched = y_true[..., 4:]
    error = tf.abs(tf.cast(deltas, tf.float32) - y_true[..., :4])
    smooth = tf.where(error < 1.0, 0.5 * error**2, error - 0.5) * matched
    return tf.reduce_sum(smooth, axis=[1, 2]) / _matched(matched)


def compile_args() -> dict:
    return {'loss': {CLASSES: class_loss, BOXES: box_loss}}


def detect(outputs, canvas, max_detections=centernet.MAX_DETECTIONS):
    """Model outputs -> (boxes [B, M, 4] yxyx fractions of the canvas, scores [B, M], classes
    int32 [B, M], valid int32 [B]): the library's box decoding, the PRE_NMS best scores, then
    per-class NMS as centernet.detect's."""
    logits = tf.cast(outputs[CLASSES], tf.float32)
    deltas = tf.cast(outputs[BOXES], tf.float32)
    boxes = keras.utils.bounding_boxes.decode_deltas_to_boxes(
        anchors=anchor_boxes(canvas),
        boxes_delta=deltas,
        anchor_format='yxyx',
        encoded_format='center_xywh',
        box_format='yxyx',
        image_shape=(*canvas, 3),
    )
    scale = tf.constant([canvas[0], canvas[1], canvas[0], canvas[1]], tf.float32)
    boxes = tf.clip_by_value(boxes / scale, 0.0, 1.0)
    shape = tf.shape(logits)
    batch, count, classes = shape[0], shape[1], shape[2]
    k = tf.minimum(PRE_NMS, count * classes)
    scores, flat = tf.math.top_k(tf.reshape(tf.sigmoid(logits), [batch, -1]), k)
    anchor, class_id = flat // classes, flat % classes
    return centernet.suppress(
        tf.gather(boxes, anchor, batch_dims=1), scores, class_id, classes, max_detections
    )
