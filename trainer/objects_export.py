"""The SavedModel of a detector or a segmenter, whose serving signature takes encoded images.

Each image is decoded and placed on the canvas exactly as evaluation places it
(trainer/objects_geometry.py, no jitter). A detector answers, per image, after its peaks and
per-class non-maximum suppression (trainer/centernet.py), in the TF Object Detection API's and
Model Garden's names:
    detection_boxes        float32 [N, 100, 4]: [ymin, xmin, ymax, xmax], fractions of the image
    detection_scores       float32 [N, 100]
    detection_classes      int32 [N, 100]: indices of dataset.json `labels`
    detection_class_names  string [N, 100]
    num_detections         int32 [N]: how many of the 100 are detections (the rest padding)
An instance segmenter adds `detection_masks` (float32 [N, 100, 28, 28]: each box's mask,
probabilities over the box, as Model Garden's Mask R-CNN serves them; paste one into the image
by resizing it onto its box and keeping what is >= 0.5, trainer/instance_masks.py `paste`).
A segmenter answers `class_map` (int32 [N, H, W] on the canvas: a class index per pixel),
`class_names` (string [C]) and `image_size` (int32 [N, 2]: the canvas pixels the image covers,
from the top left; the rest is padding).
"""

import keras
import tensorflow as tf

from trainer import objects_evaluate
from trainer import objects_geometry as geometry
from trainer import objects_input
from trainer import segmenter


def placed(encoded, canvas):
    """Encoded image bytes -> (uint8 image on the canvas, scaled size [2], offset [2])."""
    image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
    none = geometry.Objects(tf.zeros([0, 4]), tf.zeros([0], tf.int32), tf.zeros([0], tf.bool))
    image, _, _, placement = geometry.place(tf.cast(image, tf.float32), none, canvas)
    return tf.cast(tf.round(image), tf.uint8), placement.scaled, placement.offset


def serving_fn(model, task):
    canvas = tuple(task.settings.canvas)
    names = tf.constant(list(task.classes))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name='image_bytes')])
    def serve(image_bytes):
        images, scaled, offset = tf.map_fn(
            lambda encoded: placed(encoded, canvas),
            image_bytes,
            fn_output_signature=(
                tf.TensorSpec([*canvas, 3], tf.uint8),
                tf.TensorSpec([2], tf.float32),
                tf.TensorSpec([2], tf.float32),
            ),
        )
        outputs = model(images, training=False)
        if task.name == objects_input.SEMANTIC:
            return {
                'class_map': segmenter.class_map(outputs, canvas),
                'class_names': names,
                'image_size': tf.cast(tf.minimum(scaled - offset, canvas), tf.int32),
            }
        boxes, scores, classes, valid, masks = objects_evaluate.detected(
            outputs, scaled, offset, canvas
        )
        found = {
            'detection_boxes': boxes,
            'detection_scores': scores,
            'detection_classes': classes,
            'detection_class_names': tf.gather(names, classes),
            'num_detections': valid,
        }
        if masks is not None:
            found['detection_masks'] = masks
        return found

    return serve


def export_saved_model(model, task, path) -> str:
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint('serving_default', serving_fn(model, task))
    archive.write_out(path, verbose=False)
    return path
