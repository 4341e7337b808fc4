"""Exporting a trained model as a SavedModel whose serving signature takes encoded images.

The signature decodes and crops with the very functions the evaluation input pipeline uses
(`preprocess.for_eval`, with the same central crop: `--eval-crop`), so a model served from raw
JPEG/PNG bytes gets exactly the preprocessing it was evaluated with.

A single-label model returns `probabilities`, `class_names`, `top_class` and `top_probability`.
A multi-label model returns `scores` (float32 [N, C], one sigmoid per class in vocabulary
order), `classes` (the names, [N, C]) and `predicted` (bool [N, C]: the scores at or above
their class's threshold, chosen on the validation split and saved in the signature), from
which a client forms Vertex AI's `ids`/`displayNames`/`confidences`. A model with one head per
label level returns the same per level, named `<level>/probabilities`, ... or
`<level>/scores`, ...; a level derived from a finer one (trainer/hierarchy.py) answers with the
finer level's top class's coarse class, so the two never contradict each other.
"""

import keras
import numpy as np
import tensorflow as tf

from trainer import hierarchy
from trainer import preprocess
from trainer.heads import Head


def _outputs(probabilities, labels, prefix='', top=None):
    names = tf.constant(list(labels))
    probabilities = tf.cast(probabilities, tf.float32)
    batch = tf.shape(probabilities)[0]
    top = tf.argmax(probabilities, axis=-1) if top is None else top
    return {
        f'{prefix}probabilities': probabilities,
        f'{prefix}class_names': tf.tile(names[None, :], [batch, 1]),
        f'{prefix}top_class': tf.gather(names, top),
        f'{prefix}top_probability': tf.gather(probabilities, top, batch_dims=1),
    }


def _multi_label_outputs(scores, labels, thresholds, prefix=''):
    names = tf.constant(list(labels))
    scores = tf.cast(scores, tf.float32)
    return {
        f'{prefix}scores': scores,
        f'{prefix}classes': tf.tile(names[None, :], [tf.shape(scores)[0], 1]),
        f'{prefix}predicted': scores >= tf.constant(thresholds, tf.float32)[None, :],
    }


def _heads(labels, levels):
    """{output prefix: Head} of a model: its levels', or the primary label's ('')."""
    if levels:
        return {
            f'{level}/': head if isinstance(head, Head) else Head(tuple(head))
            for level, head in levels.items()
        }
    return {'': labels if isinstance(labels, Head) else Head(tuple(labels))}


def serving_fn(
    model, labels, image_size, levels=None, thresholds=None, crop=preprocess.EVAL_CROP_FRACTION
):
    """tf.function: encoded images [batch] -> the model's answers (see the module docstring).

    Args:
        labels: the primary label's names, or its Head (trainer/heads.py).
        levels: {level: names or Head} of a model with one head per label level.
        thresholds: {head ('' for the primary label, else the level): float [C]} of the
            multi-label heads (0.5 where not given).
        crop: the share of each side of the central crop (evaluation's).
    """
    heads = _heads(labels, levels)
    thresholds = {
        prefix: np.asarray(
            (thresholds or {}).get(prefix.rstrip('/'), np.full(head.num_classes, 0.5)), np.float32
        )
        for prefix, head in heads.items()
        if head.multi_label
    }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name='image_bytes')])
    def serve(image_bytes):
        images = tf.map_fn(
            lambda encoded: preprocess.for_eval(encoded, image_size, crop),
            image_bytes,
            fn_output_signature=tf.TensorSpec([*image_size, 3], tf.uint8),
        )
        predicted = model(images, training=False)
        if not levels:
            predicted = {'': predicted}
        else:
            predicted = {f'{level}/': value for level, value in predicted.items()}
        outputs = {}
        for prefix, head in heads.items():
            if head.multi_label:
                outputs.update(
                    _multi_label_outputs(
                        predicted[prefix], head.classes, thresholds[prefix], prefix
                    )
                )
                continue
            top = None
            if head.source:  # the finer level's top class's coarse class
                top = hierarchy.consistent_top(predicted[f'{head.source}/'], head.parents)
            outputs.update(_outputs(predicted[prefix], head.classes, prefix, top))
        return outputs

    return serve


def export_saved_model(
    model,
    labels,
    image_size,
    path,
    levels=None,
    thresholds=None,
    crop=preprocess.EVAL_CROP_FRACTION,
):
    """Writes a SavedModel at `path` with `serving_default` taking encoded image bytes
    (`serving_fn`'s arguments)."""
    archive = keras.export.ExportArchive()
    archive.track(model)
    serve = serving_fn(model, labels, tuple(image_size), levels, thresholds, crop)
    archive.add_endpoint('serving_default', serve)
    archive.write_out(path, verbose=False)
    return path
