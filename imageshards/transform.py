"""The tf.Transform preprocessing: one `preprocessing_fn` for the build's analysis, training and
serving.

The build analyses the train split without decoding any image a second time: validation has
already decoded each image (JPEGs at a reduced scale), resized it to the analysis size and kept
its per-channel pixel mean and variance (pipelines/images.py). An analysis instance is one image:

    pixel       float32 [3]  the image's mean R, G, B (0..255)
    pixel_var   float32 [3]  the variance of R, G, B over the image's pixels (0..255 squared)
    label       string  []   the image's label name

At transform time (training and serving), an instance is one RGB pixel in `pixel` (0..255):
the trainer reshapes a batch of images [N, H, W, 3] to [N*H*W, 3] pixels, so any image size
works with the fixed-shape schema. `pixel_var` is an analysis-only input: TFT prunes the
outputs of inputs that are not fed, so the trainer feeds `pixel` (or `label`) alone.

All analysis images have the same number of pixels, so the global per-channel mean is the mean
of the images' means, and by the law of total variance the global variance is the mean of the
images' variances plus the variance of their means; both are numerically stable (a mean of
squares minus a squared mean is not, in float32).

Labels: `tft.vocabulary` orders by frequency, but label ids must be those of dataset.json
(sorted names, as Keras' `image_dataset_from_directory`). A PTransform analyzer writes the
vocabulary sorted by name, holding every label of the build (a class may have no image in the
train split and still keeps its id); `label_id` is its line number.

This module imports TensorFlow and tensorflow_transform: the build imports it only when it runs
the analysis (pipelines/analyze.py), so that a `--no-analyze` build's workers never do.
"""

import os

import apache_beam as beam
import tensorflow as tf
import tensorflow_transform as tft
from apache_beam.io.filesystems import FileSystems
from tensorflow_transform.beam import experimental as tft_beam_experimental

PIXEL = 'pixel'
PIXEL_VAR = 'pixel_var'
LABEL = 'label'
# Outputs of the transform.
PIXEL_NORMALIZED = 'pixel_normalized'
LABEL_ID = 'label_id'
LABEL_VOCABULARY = 'label'  # the vocabulary's name: TFTransformOutput.vocabulary_by_name(...)
CHANNELS = 3
MIN_STD = 1e-3  # a constant channel (all pixels equal) is centred, not divided by ~0


def raw_feature_spec():
    """The feature spec of an analysis instance (and of a transform-time pixel)."""
    return {
        PIXEL: tf.io.FixedLenFeature([CHANNELS], tf.float32),
        PIXEL_VAR: tf.io.FixedLenFeature([CHANNELS], tf.float32),
        LABEL: tf.io.FixedLenFeature([], tf.string),
    }


def make_preprocessing_fn(labels):
    """The preprocessing_fn of a build whose labels (dataset.json `labels`) are `labels`."""
    labels = tuple(labels)

    def preprocessing_fn(inputs):
        mean = tft.mean(inputs[PIXEL], reduce_instance_dims=False, name='pixel_mean')
        variance = tft.mean(
            inputs[PIXEL_VAR], reduce_instance_dims=False, name='within_image_variance'
        ) + tft.var(inputs[PIXEL], reduce_instance_dims=False, name='between_image_variance')
        std = tf.sqrt(tf.maximum(variance, 0.0))
        normalized = (inputs[PIXEL] - mean) / tf.maximum(std, MIN_STD)
        (vocabulary,) = tft.experimental.ptransform_analyzer(
            [inputs[LABEL]],
            SortedLabelVocabulary(labels),
            output_dtypes=[tf.string],
            output_shapes=[[]],
            # What TFT traces with before the analysis (an empty file fails the table's
            # initialization): the build's own labels.
            output_asset_default_values=[_vocabulary_text(labels)],
            name='label_vocabulary',
        )
        tft.annotate_asset(LABEL_VOCABULARY, LABEL_VOCABULARY)
        label_id = tft.apply_vocabulary(inputs[LABEL], vocabulary, default_value=-1)
        return {PIXEL_NORMALIZED: normalized, LABEL_ID: label_id}

    return preprocessing_fn


def sorted_labels(known, seen):
    """Every label name, sorted: the build's own (`known`) and any the analysis saw."""
    return sorted(set(known) | set(seen))


class SortedLabelVocabulary(tft_beam_experimental.PTransformAnalyzer):
    """Batches of label names -> the path of a vocabulary file sorted by name (one element)."""

    def __init__(self, known_labels):
        super().__init__()
        self._known = tuple(known_labels)

    def expand(self, batches):
        # (ndarray of label names,) per batch
        return (
            batches
            | 'Names' >> beam.FlatMap(lambda batch: {_text(name) for name in batch[0].tolist()})
            | 'Distinct' >> beam.Distinct()
            | 'Collect' >> beam.combiners.ToList()
            | 'WriteSorted' >> beam.Map(_write_vocabulary, self._known, self.base_temp_dir)
        )


def _text(name):
    return name.decode('utf-8') if isinstance(name, bytes) else str(name)


def _write_vocabulary(seen, known, temp_dir):
    names = sorted_labels(known, seen)
    path = FileSystems.join(temp_dir, LABEL_VOCABULARY)
    if FileSystems.get_scheme(path) is None:
        os.makedirs(temp_dir, exist_ok=True)
    with FileSystems.create(path) as f:
        f.write(_vocabulary_text(names))
    return path.encode('utf-8')


def _vocabulary_text(names):
    return ''.join(f'{name}\n' for name in sorted(names)).encode('utf-8')
