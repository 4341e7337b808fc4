"""Exporting a trained model as a SavedModel whose serving signature takes encoded images.

The signature decodes and crops with the very functions the evaluation input pipeline uses
(`preprocess.for_eval`), so a model served from raw JPEG/PNG bytes gets exactly the
preprocessing it was evaluated with.

A single-label model returns `probabilities`, `class_names`, `top_class` and `top_probability`.
A model with one head per label level returns the same four per level, named
`<level>/probabilities`, `<level>/class_names`, `<level>/top_class`, `<level>/top_probability`.
"""

import keras
import tensorflow as tf

from trainer import preprocess


def _outputs(probabilities, labels, prefix=''):
    names = tf.constant(list(labels))
    probabilities = tf.cast(probabilities, tf.float32)
    batch = tf.shape(probabilities)[0]
    return {
        f'{prefix}probabilities': probabilities,
        f'{prefix}class_names': tf.tile(names[None, :], [batch, 1]),
        f'{prefix}top_class': tf.gather(names, tf.argmax(probabilities, axis=-1)),
        f'{prefix}top_probability': tf.reduce_max(probabilities, axis=-1),
    }


def serving_fn(model, labels, image_size, levels=None):
    """tf.function: encoded images [batch] -> probabilities and class names (per level, with
    `levels`: {level: names} of a model with one head per label level)."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name='image_bytes')])
    def serve(image_bytes):
        images = tf.map_fn(
            lambda encoded: preprocess.for_eval(encoded, image_size),
            image_bytes,
            fn_output_signature=tf.TensorSpec([*image_size, 3], tf.uint8),
        )
        predicted = model(images, training=False)
        if not levels:
            return _outputs(predicted, labels)
        outputs = {}
        for level, names in levels.items():
            outputs.update(_outputs(predicted[level], names, f'{level}/'))
        return outputs

    return serve


def export_saved_model(model, labels, image_size, path, levels=None):
    """Writes a SavedModel at `path` with `serving_default` taking encoded image bytes."""
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint('serving_default', serving_fn(model, labels, tuple(image_size), levels))
    archive.write_out(path, verbose=False)
    return path
