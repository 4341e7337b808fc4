"""The analysis of one split for dataset.json: exact counts of its images and the pixel
statistics of a fixed sample, measured as its shards are written.

    WriteShards, per shard of the split -> shard_summary (pipelines/writing/sample.py): counts
        of its images (sizes, labels) and the pixel sums of its first `sample_count` records,
        decoded at the analysis size
    -> AnalyzeShards: summed over the shards -> dataset.json `analysis`: the counts, pixel mean
        and standard deviation, and the standard error of each

Why a sample: the normalization a model needs is a per-channel mean and standard deviation, which a
thousand images estimate to a fraction of a grey level (the standard errors say how closely), while
measuring every image would cost a decode of each, the most expensive thing a build does. The sample
is the first records of each shard of the split, as many from each as the split's records are spread
over them (`sample_count`): a shard's records are a stratified random part of the split in a seeded
random order (pipelines/assignment/assign.py), so the sample is a random one, fixed by the seed
whatever the runner, and the writer, which has the records' bytes in hand, measures it without
reading anything again. A split with at most N images is measured whole, and its statistics are
exact.

Everything here is integer arithmetic until the last division: the sums of pixel values and of
their squares are exact, so the statistics are the same for any order of combining.
"""

import bisect
import collections
import math

import apache_beam as beam

from imageshards import layout
from pipelines.writing import sample

# Bins of width / height: [0, 0.5), [0.5, 0.75), ..., [2, inf). 3:4 portraits fall in
# [0.75, 0.95), squares in [0.95, 1.05), 4:3 in [1.05, 1.34), 3:2 in [1.5, 2), 16:9 too.
ASPECT_EDGES = (0.5, 0.75, 0.95, 1.05, 1.34, 1.5, 2.0)
SAMPLE_CHOSEN_BY = 'the first records of each shard of the split, in their seeded order'


def aspect_bin(height, width) -> int:
    return bisect.bisect_right(ASPECT_EDGES, width / height)


def median(counts) -> float | None:
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


class _SumSummaries(beam.CombineFn):
    """shard_summary of each shard of a split -> the split's."""

    def create_accumulator(self):
        return sample.empty_summary()

    def add_input(self, accumulator, summary):
        return self.merge_accumulators([accumulator, summary])

    def merge_accumulators(self, accumulators):
        merged = sample.empty_summary()
        for accumulator in accumulators:
            merged['images'] += accumulator['images']
            merged['sizes'].update(accumulator['sizes'])
            merged['labels'].update(accumulator['labels'])
            merged['pixels'] = [a + b for a, b in zip(merged['pixels'], accumulator['pixels'])]
        return merged

    def extract_output(self, accumulator):
        return accumulator


def pixel_statistics(sums, pixels_per_image, population) -> dict | None:
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


def summary_json(summary, settings) -> dict:
    """dataset.json's `analysis` entry of the split's summed shard summaries (`settings`: the
    build's AnalysisSettings)."""
    sums, split, size = summary['pixels'], settings.sample.split, settings.sample.image_size
    statistics = pixel_statistics(sums, size**2, summary['images'])
    if statistics is None:
        raise ValueError(
            f'--analysis-split {split}: the split has no images to analyse; name another '
            f'split with --analysis-split, or pass --no-analyze'
        )
    heights, widths = collections.Counter(), collections.Counter()
    aspect = [0] * (len(ASPECT_EDGES) + 1)
    for (height, width), n in summary['sizes'].items():
        heights[height] += n
        widths[width] += n
        aspect[aspect_bin(height, width)] += n

    def sizes(counter):
        return {'min': min(counter), 'median': median(counter), 'max': max(counter)}

    return {
        'split': split,
        'num_images': summary['images'],
        'sample': {
            'size': sums[0],
            'of': summary['images'],
            'chosen_by': SAMPLE_CHOSEN_BY,
        },
        'analysis_size': size,
        **statistics,
        'pixel_scale': '0..255 RGB',
        'height': sizes(heights),
        'width': sizes(widths),
        'aspect_ratio_histogram': {'edges': list(ASPECT_EDGES), 'counts': aspect},
        'label_counts': {
            name: summary['labels'][i]
            for i, name in enumerate(settings.labels)
            if summary['labels'][i]
        },
        'transform_image_size': settings.transform_image_size,
        'transform_fn': layout.TRANSFORM_FN_DIR,
        'transformed_metadata': layout.TRANSFORMED_METADATA_DIR,
        'raw_metadata': layout.RAW_METADATA_DIR,
    }


class AnalyzeShards(beam.PTransform):
    """WriteShards' shard summaries of the analysis split -> its dataset.json `analysis` entry
    (one element).

    Args:
        settings: the build's AnalysisSettings.
    """

    def __init__(self, settings):
        super().__init__()
        self._settings = settings

    def expand(self, summaries):
        return (
            summaries
            | 'SumSummaries' >> beam.CombineGlobally(_SumSummaries())
            | 'ToJson' >> beam.Map(summary_json, self._settings)
        )
