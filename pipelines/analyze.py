"""AnalyzeSplit: the tf.Transform analysis of one split, from metadata the build already has.

Validation measured every image it decoded (ImageMeta `pixel_stats`, at the analysis size), so
the analysis reads no image again: it takes the split's placed blocks, turns each into one
Arrow RecordBatch of analysis instances (imageshards/transform.py) and runs TFT's
`AnalyzeDataset` on them, in the same pipeline and on the same runner. Alongside, one Beam
combine summarises the same images exactly for dataset.json (pixel mean and standard deviation,
min/median/max height and width, an aspect-ratio histogram, images per label).

    ((split, shard), block) -> [split's blocks] -> RecordBatch -> AnalyzeDataset
        -> WriteTransformFn(OUT/.imageshards-tmp/transform/)   moved into OUT by Finalize
    ((split, shard), block) -> [split's blocks] -> SummariseImages -> dataset.json "analysis"

TensorFlow and tensorflow_transform are imported when the step is built, never by this
module's import: a `--no-analyze` build does not load them.
"""

import bisect
import collections

import apache_beam as beam
import numpy as np

from pipelines import blocks

# Bins of width / height: [0, 0.5), [0.5, 0.75), ..., [2, inf). 3:4 portraits fall in
# [0.75, 0.95), squares in [0.95, 1.05), 4:3 in [1.05, 1.34), 3:2 in [1.5, 2), 16:9 too.
ASPECT_EDGES = (0.5, 0.75, 0.95, 1.05, 1.34, 1.5, 2.0)


def aspect_bin(height, width):
    return bisect.bisect_right(ASPECT_EDGES, width / height)


def median(counts):
    """The median of values given as {value: count} (the mean of the middle two, as NumPy)."""
    total = sum(counts.values())
    if not total:
        return None
    middle = [(total - 1) // 2, total // 2]
    found, seen = [], 0
    for value in sorted(counts):
        seen += counts[value]
        while middle and middle[0] < seen:
            found.append(value)
            middle.pop(0)
    return (found[0] + found[1]) / 2


class _SummariseImages(beam.CombineFn):
    """Exact statistics of the images of some blocks; label counts by label id.

    Equal-sized analysis images weigh the same: the pixel mean is the mean of image means, and
    the variance the mean of image variances plus the variance of image means.
    """

    def __init__(self, store):
        self._store = store

    def create_accumulator(self):
        return {
            'images': 0,
            'sums': np.zeros(9),  # sum of means [3], of variances [3], of squared means [3]
            'heights': collections.Counter(),
            'widths': collections.Counter(),
            'aspect': [0] * (len(ASPECT_EDGES) + 1),
            'labels': collections.Counter(),
        }

    def add_input(self, accumulator, ref):
        metas = blocks.unpack(self._store.get(ref))
        stats = np.array([meta.pixel_stats for meta in metas], dtype=np.float64).reshape(-1, 6)
        accumulator['images'] += len(metas)
        accumulator['sums'] += np.concatenate([stats.sum(axis=0), (stats[:, :3] ** 2).sum(axis=0)])
        for meta in metas:
            accumulator['heights'][meta.height] += 1
            accumulator['widths'][meta.width] += 1
            accumulator['aspect'][aspect_bin(meta.height, meta.width)] += 1
            accumulator['labels'][meta.label] += 1
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for accumulator in accumulators:
            merged['images'] += accumulator['images']
            merged['sums'] += accumulator['sums']
            for key in ('heights', 'widths', 'labels'):
                merged[key].update(accumulator[key])
            merged['aspect'] = [a + b for a, b in zip(merged['aspect'], accumulator['aspect'])]
        return merged

    def extract_output(self, accumulator):
        return accumulator


def summary_json(accumulator, split, analysis_size, labels):
    """dataset.json's `analysis` entry from the combined statistics."""
    n = accumulator['images']
    mean = accumulator['sums'][:3] / max(n, 1)
    within = accumulator['sums'][3:6] / max(n, 1)
    between = np.maximum(accumulator['sums'][6:] / max(n, 1) - mean**2, 0)
    std = np.sqrt(within + between)

    def sizes(counter):
        if not counter:
            return None
        return {'min': min(counter), 'median': median(counter), 'max': max(counter)}

    return {
        'split': split,
        'num_images': n,
        'analysis_size': analysis_size,
        'pixel_mean': [round(float(v), 6) for v in mean] if n else None,
        'pixel_std': [round(float(v), 6) for v in std] if n else None,
        'pixel_scale': '0..255 RGB',
        'height': sizes(accumulator['heights']),
        'width': sizes(accumulator['widths']),
        'aspect_ratio_histogram': {
            'edges': list(ASPECT_EDGES),
            'counts': list(accumulator['aspect']),
        },
        'label_counts': {
            name: accumulator['labels'][i]
            for i, name in enumerate(labels)
            if accumulator['labels'][i]
        },
        'transform_fn': 'transform_fn',
        'transformed_metadata': 'transformed_metadata',
    }


class _ToRecordBatch(beam.DoFn):
    """Block -> one Arrow RecordBatch of analysis instances (label, pixel, pixel_var)."""

    def __init__(self, store, labels, arrow_schema):
        self._store = store
        self._labels = [name.encode('utf-8') for name in labels]
        self._schema = arrow_schema

    def process(self, ref):
        import pyarrow as pa  # pylint: disable=import-outside-toplevel

        metas = blocks.unpack(self._store.get(ref))
        if not metas:
            return
        stats = np.array([meta.pixel_stats for meta in metas], dtype=np.float32).reshape(-1, 6)
        offsets = pa.array(np.arange(0, 3 * len(metas) + 1, 3, dtype=np.int64))
        names = pa.array([self._labels[meta.label] for meta in metas], type=pa.large_binary())
        columns = {
            'label': pa.LargeListArray.from_arrays(
                pa.array(np.arange(len(metas) + 1, dtype=np.int64)), names
            ),
            'pixel': pa.LargeListArray.from_arrays(offsets, pa.array(stats[:, :3].ravel())),
            'pixel_var': pa.LargeListArray.from_arrays(offsets, pa.array(stats[:, 3:].ravel())),
        }
        yield pa.RecordBatch.from_arrays(
            [columns[field.name] for field in self._schema], schema=self._schema
        )


def _in_split(piece, split):
    (piece_split, _), ref = piece
    return [ref] if piece_split == split else []


class AnalyzeSplit(beam.PTransform):
    """((split, shard), block) pieces -> (summary, written).

    `summary` holds one dataset.json `analysis` entry; `written` gets one element once the TFT
    output is complete under `staging_dir` (transform_fn/ and transformed_metadata/).

    Args:
        split: the split to analyse (the train split).
        labels: every label name, by id (dataset.json `labels`).
        store: the BlockStore of the pieces.
        temp_dir: TFT's own temporary folder.
        staging_dir: where the TFT output waits for Finalize.
        analysis_size: the side images were measured at.
    """

    def __init__(self, split, labels, store, temp_dir, staging_dir, analysis_size):
        super().__init__()
        self._split = split
        self._labels = tuple(labels)
        self._store = store
        self._temp_dir = temp_dir
        self._staging_dir = staging_dir
        self._analysis_size = analysis_size

    def expand(self, pieces):
        # pylint: disable=import-outside-toplevel
        import tensorflow_transform.beam as tft_beam
        from tensorflow_transform.tf_metadata import schema_utils
        from tfx_bsl.tfxio import tf_example_record

        from imageshards import transform

        refs = pieces | 'SelectSplit' >> beam.FlatMap(_in_split, self._split)
        # block of ImageMeta of the split
        summary = (
            refs
            | 'SummariseImages' >> beam.CombineGlobally(_SummariseImages(self._store))
            | 'ToJson' >> beam.Map(summary_json, self._split, self._analysis_size, self._labels)
        )
        tfxio = tf_example_record.TFExampleBeamRecord(
            physical_format='inmem',
            telemetry_descriptors=['imageshards'],
            schema=schema_utils.schema_from_feature_spec(transform.raw_feature_spec()),
        )
        batches = refs | 'ToRecordBatches' >> beam.ParDo(
            _ToRecordBatch(self._store, self._labels, tfxio.ArrowSchema())
        )
        # pyarrow.RecordBatch of analysis instances
        with tft_beam.Context(temp_dir=self._temp_dir):
            transform_fn = (
                batches,
                tfxio.TensorAdapterConfig(),
            ) | 'AnalyzeDataset' >> tft_beam.AnalyzeDataset(
                transform.make_preprocessing_fn(self._labels)
            )
            written = transform_fn | 'WriteTransformFn' >> tft_beam.WriteTransformFn(
                self._staging_dir
            )
        return summary, written
