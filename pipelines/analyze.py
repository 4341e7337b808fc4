"""AnalyzeSplit: statistics of one split for dataset.json, from its metadata and a fixed sample.

    ((split, shard), block ref) -> the split's blocks -> SummariseSplit: exact counts of every image
        (sizes, aspect ratios, labels) and the sample, the N images of smallest sample hash
    sample, in chunks -> MeasureSample: read each image, check it, sum its pixels at the
        analysis size (Pillow), encode its record as the shards hold it
    pixel sums -> SumPixels -> dataset.json "analysis": pixel mean and standard deviation, and
        the standard error of each
    sample records -> the tf.Transform output (pipelines/transform_output.py)

Why a sample: the normalization a model needs is a per-channel mean and standard deviation,
which a thousand images estimate to a fraction of a grey level (the standard errors say how
closely), while measuring every image would cost a decode of each, the most expensive thing a
build does. The sample is a pure function of (seed, key): the N images of the split whose
SHA-256 of (seed, 'sample', key) is smallest, whatever the runner. A split with at most N images
is measured whole, and its statistics are exact.

Everything here is integer arithmetic until the last division: the sums of pixel values and of
their squares are exact, so the statistics are the same for any order of combining.
"""

import bisect
import collections
import heapq
import math
import typing

import apache_beam as beam
from PIL import Image

from imageshards import layout
from imageshards import storage
from imageshards import tfrecord
from pipelines import blocks
from pipelines import images
from pipelines import transform_output
from pipelines.assign import shuffle_hash
from pipelines.encode import read_checked
from pipelines.encode import stored_bytes
from pipelines.inputs import source_path

# Bins of width / height: [0, 0.5), [0.5, 0.75), ..., [2, inf). 3:4 portraits fall in
# [0.75, 0.95), squares in [0.95, 1.05), 4:3 in [1.05, 1.34), 3:2 in [1.5, 2), 16:9 too.
ASPECT_EDGES = (0.5, 0.75, 0.95, 1.05, 1.34, 1.5, 2.0)
SAMPLE_PURPOSE = 'sample'
_CHUNK = 64  # sample images per work item of MeasureSample
SAMPLE_RECORDS = 'sample-{chunk:05d}.tfrecord'  # in the hand-over folder of the local runner


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


def sample_key(seed, meta):
    """Sort key of the sample: the smallest are measured."""
    return shuffle_hash(seed, SAMPLE_PURPOSE, meta.key), meta.key


class _SummariseSplit(beam.CombineFn):
    """Blocks of a split -> exact counts of its images, and its sample (a sorted list)."""

    def __init__(self, store, seed, sample_size):
        self._store, self._seed, self._sample_size = store, seed, sample_size

    def create_accumulator(self):
        return {
            'images': 0,
            'heights': collections.Counter(),
            'widths': collections.Counter(),
            'aspect': [0] * (len(ASPECT_EDGES) + 1),
            'labels': collections.Counter(),
            'sample': [],  # (sample key, ImageMeta)
        }

    def add_input(self, accumulator, ref):
        metas = blocks.unpack(self._store.get(ref))
        accumulator['images'] += len(metas)
        for meta in metas:
            accumulator['heights'][meta.height] += 1
            accumulator['widths'][meta.width] += 1
            accumulator['aspect'][aspect_bin(meta.height, meta.width)] += 1
            accumulator['labels'][meta.label] += 1
        candidates = accumulator['sample'] + [(sample_key(self._seed, m), m) for m in metas]
        accumulator['sample'] = heapq.nsmallest(self._sample_size, candidates)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for accumulator in accumulators:
            merged['images'] += accumulator['images']
            for key in ('heights', 'widths', 'labels'):
                merged[key].update(accumulator[key])
            merged['aspect'] = [a + b for a, b in zip(merged['aspect'], accumulator['aspect'])]
            merged['sample'] = heapq.nsmallest(
                self._sample_size, merged['sample'] + accumulator['sample']
            )
        return merged

    def extract_output(self, accumulator):
        return {**accumulator, 'sample': [meta for _, meta in sorted(accumulator['sample'])]}


def _chunks(summary):
    sample = summary['sample']
    for chunk, start in enumerate(range(0, len(sample), _CHUNK)):
        yield chunk, sample[start : start + _CHUNK]


class _MeasureSample(beam.DoFn):
    """(chunk, [ImageMeta]) -> each image's pixel sums; with `records`, its records to the
    RECORDS output, or, with `records_dir`, to a TFRecord file of the chunk there."""

    RECORDS = 'records'

    def __init__(self, encoder, input_base, analysis_size, records_dir=None, records=True):
        self._encoder = encoder
        self._keep_records = records
        self._input_base = input_base
        self._analysis_size = analysis_size
        self._records_dir = records_dir

    def setup(self):
        Image.MAX_IMAGE_PIXELS = None  # validated images only, checked against --max-pixels

    def process(self, element):
        chunk, metas = element
        records = []
        for meta in metas:
            source = source_path(self._input_base, meta.key)
            data = read_checked(source, meta)
            yield images.pixel_sums(data, self._analysis_size)
            if self._keep_records:
                records.append(self._encoder.encode(meta, stored_bytes(data, meta, source), source))
        if not self._keep_records:
            return
        if self._records_dir is None:
            for record in records:
                yield beam.pvalue.TaggedOutput(self.RECORDS, record)
        else:
            path = storage.join(self._records_dir, SAMPLE_RECORDS.format(chunk=chunk))
            storage.make_parent(path)
            storage.write_atomically(path, b''.join(map(tfrecord.frame, records)))


class _SumPixels(beam.CombineFn):
    """Pixel sums of images -> exact sums over them: n, and per channel the sums of S1, S2,
    S1², S2² and S1·S2 (S1, S2: an image's sum of values and of squares)."""

    def create_accumulator(self):
        return [0] + [0] * 15

    def add_input(self, accumulator, sums):
        accumulator[0] += 1
        for c in range(3):
            s1, s2 = sums[c], sums[3 + c]
            for i, value in enumerate((s1, s2, s1 * s1, s2 * s2, s1 * s2)):
                accumulator[1 + 5 * c + i] += value
        return accumulator

    def merge_accumulators(self, accumulators):
        return [sum(values) for values in zip(*accumulators)]

    def extract_output(self, accumulator):
        return accumulator


def pixel_statistics(sums, pixels_per_image, population):
    """Mean and standard deviation per channel over every pixel of the measured images (at the
    analysis size), and the standard error of each as an estimate for the whole split.

    Args:
        sums: _SumPixels' output.
        pixels_per_image: P, the analysis size squared.
        population: images in the split the sample was drawn from (finite population
            correction: a sample of the whole split has no error).
    """
    n = sums[0]
    if not n:
        return None
    fpc = (population - n) / (population - 1) if population > 1 else 0.0
    stats = {'pixel_mean': [], 'pixel_std': [], 'pixel_mean_se': [], 'pixel_std_se': []}
    for c in range(3):
        s1, s2, s1s1, s2s2, s1s2 = sums[1 + 5 * c : 6 + 5 * c]
        total = n * pixels_per_image
        mean = s1 / total
        variance = max(s2 * total - s1 * s1, 0) / (total * total)  # exact numerator
        std = math.sqrt(variance)
        stats['pixel_mean'].append(mean)
        stats['pixel_std'].append(std)
        if n < 2:
            stats['pixel_mean_se'].append(None)
            stats['pixel_std_se'].append(None)
            continue
        # Per-image means m1 = S1 / P and second moments m2 = S2 / P: their sample
        # (co)variances, the error of mean(m1), and of std = sqrt(mean(m2) - mean(m1)^2) by the
        # delta method.
        scale = pixels_per_image * pixels_per_image * n * (n - 1)
        var_m1 = (s1s1 * n - s1 * s1) / scale
        var_m2 = (s2s2 * n - s2 * s2) / scale
        cov = (s1s2 * n - s1 * s2) / scale
        stats['pixel_mean_se'].append(math.sqrt(max(var_m1, 0) * fpc / n))
        if std > 0:
            da, db = -mean / std, 1 / (2 * std)
            spread = da * da * var_m1 + db * db * var_m2 + 2 * da * db * cov
            stats['pixel_std_se'].append(math.sqrt(max(spread, 0) * fpc / n))
        else:
            stats['pixel_std_se'].append(0.0)
    return {key: [_rounded(v) for v in values] for key, values in stats.items()}


def _rounded(value):
    return None if value is None else round(value, 6)


def summary_json(sums, summary, split, config, labels):
    """dataset.json's `analysis` entry."""
    statistics = pixel_statistics(sums, config.analysis_size**2, summary['images'])
    if statistics is None:
        raise ValueError(
            f'--analysis-split {split}: the split has no images to analyse; name another '
            f'split with --analysis-split, or pass --no-analyze'
        )

    def sizes(counter):
        return {'min': min(counter), 'median': median(counter), 'max': max(counter)}

    return {
        'split': split,
        'num_images': summary['images'],
        'sample': {
            'size': sums[0],
            'of': summary['images'],
            'chosen_by': f'smallest sha256 of (seed, {SAMPLE_PURPOSE!r}, key)',
        },
        'analysis_size': config.analysis_size,
        **statistics,
        'pixel_scale': '0..255 RGB',
        'height': sizes(summary['heights']),
        'width': sizes(summary['widths']),
        'aspect_ratio_histogram': {
            'edges': list(ASPECT_EDGES),
            'counts': list(summary['aspect']),
        },
        'label_counts': {
            name: summary['labels'][i] for i, name in enumerate(labels) if summary['labels'][i]
        },
        'transform_image_size': config.transform_image_size,
        'transform_fn': layout.TRANSFORM_FN_DIR,
        'transformed_metadata': layout.TRANSFORMED_METADATA_DIR,
        'raw_metadata': layout.RAW_METADATA_DIR,
    }


def _in_split(placed, split):
    (placed_split, _), ref = placed
    return [ref] if placed_split == split else []


class Analyzed(typing.NamedTuple):
    """AnalyzeSplit's outputs."""

    analysis: beam.PCollection  # the one dataset.json `analysis` entry
    records: beam.PCollection  # the sample's serialized records (if asked, and no `handover_dir`)
    handed_over: beam.PCollection  # one element once handed over; None without `handover_dir`


class AnalyzeSplit(beam.PTransform):
    """((split, shard), block ref) -> Analyzed.

    With `handover_dir` (the local runner), the sample's records go to files there, with what
    the tf.Transform helper process needs (pipelines/transform_output.py), instead of to
    `records`.

    Args:
        config: the BuildConfig (its seed, format, analysis_split, analysis_sample,
            analysis_size and transform_image_size).
        encoder: the RecordEncoder of the build's records (its labels, levels and input base).
        store: the BlockStore of the blocks.
        handover_dir: a local folder to hand the sample's records and the analysis over in, or
            None.
        records: whether to emit the sample's records, where there is no `handover_dir`.
    """

    def __init__(self, config, encoder, *, store, handover_dir=None, records=True):
        super().__init__()
        self._config = config
        self._encoder = encoder
        self._labels = tuple(encoder.label_names)
        self._levels = tuple(level for level, _ in encoder.label_levels)
        self._store = store
        self._handover_dir = handover_dir
        self._records = records

    def expand(self, placed):
        config = self._config
        summary = (
            placed
            | 'SelectSplit' >> beam.FlatMap(_in_split, config.analysis_split)
            # block ref of ImageMeta of the split
            | 'SummariseSplit'
            >> beam.CombineGlobally(
                _SummariseSplit(self._store, config.seed, config.analysis_sample)
            )
        )
        measure = _MeasureSample(
            self._encoder,
            self._encoder.input_base,
            config.analysis_size,
            self._handover_dir,
            records=self._records or self._handover_dir is not None,
        )
        measured = (
            summary
            | 'ChunkSample' >> beam.FlatMap(_chunks)
            # (chunk, [ImageMeta]): spread, so that every worker decodes some
            | 'SpreadSample' >> beam.Reshuffle()
            | 'MeasureSample' >> beam.ParDo(measure).with_outputs(measure.RECORDS, main='sums')
        )
        analysis = (
            measured.sums
            | 'SumPixels' >> beam.CombineGlobally(_SumPixels())
            | 'ToJson'
            >> beam.Map(
                summary_json,
                beam.pvalue.AsSingleton(summary),
                config.analysis_split,
                config,
                self._labels,
            )
        )
        return Analyzed(analysis, measured[measure.RECORDS], self._hand_over(analysis))

    def _hand_over(self, analysis):
        if not self._handover_dir:
            return None
        return analysis | 'HandOver' >> beam.Map(transform_output.hand_over, self._handover_dir)
