"""The tf.Transform preprocessing of a build: one `preprocessing_fn` over the records' own
features, for TFX-style code, for the trainer and for serving.

Raw features are exactly the records' (`imageshards/kinds/features.py`, `raw_feature_spec`), so code
that does what TFX's Trainer does works unchanged on a build:

    output = tft.TFTransformOutput(OUT)
    raw = tf.io.parse_example(serialized_records, output.raw_feature_spec())
    transformed = output.transform_features_layer()(raw)

and gets, per record:

    image       float32 [S, S, 3]  the image resized to S x S (bilinear, antialiased; S is the
                                   build's --transform-image-size, 224 by default), each channel
                                   minus the split's pixel mean, divided by its pixel std
    label       int64   []         the label id, by the vocabulary (dataset.json `labels`)
    label/<level> int64 []         each label level's id, as recorded (-1 where missing)
    pixel_mean  float32 [3]        the normalization constants, for code that crops and resizes
    pixel_std   float32 [3]        images its own way (the trainer does, see trainer/tft_output.py)

Analyzers: the pixel statistics and the label vocabulary are PTransform analyzers. The build
measures the statistics itself, exactly, over a fixed sample of the analysis split
(pipelines/analysis/analyze.py: dataset.json `analysis`); `PixelStatistics` carries them into the
graph as the `pixel_statistics` asset. The vocabulary holds every label of the build sorted by name,
so its ids are those of dataset.json (a class with no image in the analysed split keeps its id).
Both are assets, read as the graph loads, so that the graph itself depends only on the format, the
label levels and the image size (pipelines/analysis/graph_cache.py reuses it). TFT's analysis
evaluates only the analyzers' inputs - here `image/class/label` and `image/class/text` - so
analysing the sample decodes no image; images are decoded when the graph transforms records.

A record whose `image/encoded` (or `image/path`) is empty transforms to a zero image: TFT feeds
empty values for the features a caller leaves out, which is how the trainer reads
`pixel_mean` and `pixel_std` alone.

This module imports TensorFlow and tensorflow_transform: a build imports it only where the
tf.Transform output is written (pipelines/analysis/tft_pipeline.py), never in its Beam workers
on the local runner.
"""

import os

import apache_beam as beam
import tensorflow as tf
import tensorflow_transform as tft
from apache_beam.io.filesystems import FileSystems
from tensorflow_transform.beam import experimental as tft_beam_experimental

from imageshards import decode
from imageshards import tft_assets
from imageshards.kinds import features

# Outputs of the transform.
IMAGE = 'image'
LABEL = 'label'
PIXEL_MEAN = tft_assets.PIXEL_MEAN
PIXEL_STD = tft_assets.PIXEL_STD
LABEL_VOCABULARY = tft_assets.LABEL_VOCABULARY  # TFTransformOutput.vocabulary_by_name
PIXEL_STATISTICS = tft_assets.PIXEL_STATISTICS
CHANNELS = tft_assets.CHANNELS
MIN_STD = 1e-3  # a constant channel (all pixels equal) is centred, not divided by ~0
# What TFT traces with, and the statistics of the graph a local build's process writes
# (pipelines/analysis/tft_pipeline.py).
NEUTRAL = {'pixel_mean': [0.0] * CHANNELS, 'pixel_std': [1.0] * CHANNELS}


def level_output(level):
    """The transform output of label level `level`."""
    return f'label/{level}'


def raw_feature_spec(kind):
    """The feature spec of the build's records (their RecordKind as the graph reads them:
    `RecordKind.core`): the transform's raw inputs."""
    return kind.core().feature_spec()


def make_preprocessing_fn(labels, statistics, kind, image_size):
    """The preprocessing_fn of a build.

    Args:
        labels: the build's label names, by id (dataset.json `labels`).
        statistics: a PCollection holding dataset.json's `analysis` entry (its `pixel_mean` and
            `pixel_std`), in the pipeline that runs the analysis.
        kind: the build's RecordKind (imageshards/kinds/classification.py): its format (a
            `paths` build's images are read from `image/path`), label levels, and whether it is
            multi-label (its labels and levels arrive as SparseTensors, and the `label` output
            is a SparseTensor of each record's label ids).
        image_size: S of the `image` output (the build's --transform-image-size).
    """
    labels, levels, multi_label = tuple(labels), kind.levels, kind.multi_label

    def preprocessing_fn(inputs):
        texts, ids = inputs[features.LABEL_TEXT], inputs[features.LABEL]
        names = texts.values if multi_label else texts
        (statistics_file,) = tft.experimental.ptransform_analyzer(
            [ids.values if multi_label else ids],
            PixelStatistics(statistics),
            output_dtypes=[tf.string],
            output_shapes=[[]],
            output_asset_default_values=[tft_assets.statistics_text(NEUTRAL)],
            name='pixel_statistics',
        )
        tft.annotate_asset(PIXEL_STATISTICS, PIXEL_STATISTICS)
        mean, std = _read_statistics(statistics_file)
        std = tf.maximum(std, MIN_STD)
        (vocabulary,) = tft.experimental.ptransform_analyzer(
            [names],
            SortedLabelVocabulary(labels),
            output_dtypes=[tf.string],
            output_shapes=[[]],
            # What TFT traces with before the analysis (an empty file fails the table's
            # initialization): the build's own labels.
            output_asset_default_values=[tft_assets.vocabulary_text(labels)],
            name='label_vocabulary',
        )
        tft.annotate_asset(LABEL_VOCABULARY, LABEL_VOCABULARY)
        # The constants depend on the label alone, so that a caller asking for them feeds it
        # alone (trainer/tft_output.py): no record is decoded.
        batch = ids.dense_shape[0] if multi_label else tf.shape(ids)[0]
        source = inputs[kind.payload_key]
        images = tf.map_fn(
            lambda value: _resized(value, image_size, kind.format == features.PATHS),
            source,
            fn_output_signature=tf.TensorSpec([image_size, image_size, CHANNELS], tf.float32),
        )
        outputs = {
            IMAGE: (images - mean) / std,
            LABEL: tft.apply_vocabulary(texts, vocabulary, default_value=-1),
            PIXEL_MEAN: tf.broadcast_to(mean, [batch, CHANNELS]),
            PIXEL_STD: tf.broadcast_to(std, [batch, CHANNELS]),
        }
        for level in levels:
            outputs[level_output(level)] = inputs[features.level_label(level)]
        return outputs

    return preprocessing_fn


def _resized(value, size, is_path):
    """One encoded image (or its path) -> float32 RGB pixels at size x size; empty -> zeros."""

    def pixels():
        encoded = tf.io.read_file(value) if is_path else value
        image = tf.image.resize(decode.decode(encoded), [size, size], antialias=True)
        return tf.ensure_shape(image, [size, size, CHANNELS])

    return tf.cond(tf.strings.length(value) > 0, pixels, lambda: tf.zeros([size, size, CHANNELS]))


class PixelStatistics(tft_beam_experimental.PTransformAnalyzer):
    """The pixel mean and standard deviation the build measured (dataset.json `analysis`), as
    the path of the PIXEL_STATISTICS asset (one element)."""

    def __init__(self, statistics):
        super().__init__()
        self._statistics = statistics

    def expand(self, batches):
        # The values come from the build's exact measurement of its sample, not from the
        # batches; waiting for them keeps the analyzer's place in TFT's graph.
        seen = batches | 'Count' >> beam.combiners.Count.Globally()
        return seen | 'WriteStatistics' >> beam.Map(
            _write_statistics, beam.pvalue.AsSingleton(self._statistics), self.base_temp_dir
        )


def _write_statistics(unused_count, statistics, temp_dir):
    return _write_asset(temp_dir, PIXEL_STATISTICS, tft_assets.statistics_text(statistics))


def _read_statistics(path):
    """The PIXEL_STATISTICS asset at `path` -> (mean, std), float32 [CHANNELS] each.

    The values are an asset, read as the graph is loaded, not constants in it: the graph is the
    same for every build of one format, label levels and image size, and a build can reuse one
    written before (pipelines/analysis/graph_cache.py)."""
    initializer = tf.lookup.TextFileInitializer(
        path,
        tf.int64,
        tf.lookup.TextFileIndex.LINE_NUMBER,
        tf.string,
        tf.lookup.TextFileIndex.WHOLE_LINE,
    )
    table = tf.lookup.StaticHashTable(initializer, default_value='nan')
    values = tf.strings.to_number(
        table.lookup(tf.range(2 * CHANNELS, dtype=tf.int64)), out_type=tf.float32
    )
    return values[:CHANNELS], values[CHANNELS:]


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


def sorted_labels(known, seen):
    """Every label name, sorted: the build's own (`known`) and any the analysis saw."""
    return sorted(set(known) | set(seen))


def _text(name):
    return name.decode('utf-8') if isinstance(name, bytes) else str(name)


def _write_vocabulary(seen, known, temp_dir):
    return _write_asset(
        temp_dir, LABEL_VOCABULARY, tft_assets.vocabulary_text(sorted_labels(known, seen))
    )


def _write_asset(temp_dir, name, content):
    path = FileSystems.join(temp_dir, name)
    if FileSystems.get_scheme(path) is None:
        os.makedirs(temp_dir, exist_ok=True)
    with FileSystems.create(path) as f:
        f.write(content)
    return path.encode('utf-8')
