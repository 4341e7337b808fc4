"""The assets of a build's tf.Transform graph: what in it depends on the build's data.

The graph (imageshards/tft_preprocessing.py) reads the label vocabulary and the pixel
statistics from these two files of `transform_fn/assets/` as it loads; everything else in it
depends only on the build's format, label levels, image size and number of labels. No
TensorFlow here: a build that reuses an earlier graph (pipelines/analysis/graph_cache.py) writes
them without it.
"""

LABEL_VOCABULARY = 'label'  # TFTransformOutput.vocabulary_by_name('label'): label names by id
PIXEL_STATISTICS = 'pixel_statistics'  # the mean of each channel, then its std, one a line
NAMES = (LABEL_VOCABULARY, PIXEL_STATISTICS)
# The graph's outputs the trainer normalizes pixels with, from the PIXEL_STATISTICS asset: named
# here so that the trainer reads them without importing Beam and tf.Transform's pipeline code.
PIXEL_MEAN = 'pixel_mean'
PIXEL_STD = 'pixel_std'
CHANNELS = 3


def vocabulary_text(names):
    """The LABEL_VOCABULARY asset: the label names, sorted (so by id), one a line."""
    return ''.join(f'{name}\n' for name in sorted(names)).encode('utf-8')


def statistics_text(analysis):
    """The PIXEL_STATISTICS asset of dataset.json's `analysis` (its `pixel_mean` and
    `pixel_std`)."""
    values = [*analysis['pixel_mean'], *analysis['pixel_std']]
    return ''.join(f'{float(value)!r}\n' for value in values).encode('ascii')
