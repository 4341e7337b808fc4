"""Exporting a trained model as a SavedModel whose serving signature takes encoded images.

The signature decodes and crops with the very functions the evaluation input pipeline uses
(`preprocess.for_eval`), so a model served from raw JPEG/PNG bytes gets exactly the
preprocessing it was evaluated with.
"""

import keras
import tensorflow as tf

from trainer import preprocess


def serving_fn(model, labels, image_size):
    """tf.function: encoded images [batch] -> probabilities and class names."""
    names = tf.constant(list(labels))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name='image_bytes')])
    def serve(image_bytes):
        images = tf.map_fn(
            lambda encoded: preprocess.for_eval(encoded, image_size),
            image_bytes,
            fn_output_signature=tf.TensorSpec([*image_size, 3], tf.uint8),
        )
        probabilities = tf.cast(model(images, training=False), tf.float32)
        top = tf.argmax(probabilities, axis=-1)
        batch = tf.shape(image_bytes)[0]
        return {
            'probabilities': probabilities,
            'class_names': tf.tile(names[None, :], [batch, 1]),
            'top_class': tf.gather(names, top),
            'top_probability': tf.reduce_max(probabilities, axis=-1),
        }

    return serve


def export_saved_model(model, labels, image_size, path):
    """Writes a SavedModel at `path` with `serving_default` taking encoded image bytes."""
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint('serving_default', serving_fn(model, labels, tuple(image_size)))
    archive.write_out(path, verbose=False)
    return path
