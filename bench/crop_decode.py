"""What a training crop's decode costs, option by option, and how close DCT-scaled crops are.

`time` (the default): CPU time per image of the random-resized crop that make_dataset cuts
(preprocess.random_window, cut while decoding, resized to --size), one variant at a time on
one thread in one process, over the same records held in memory, rounds alternated; CPU time
holds on a loaded machine where images/s do not. Variants: today's settings (integer fast
IDCT, fancy upsampling, the window widened to the iMCU grid and sliced, bilinear on float32
pixels), the exact window asked of TensorFlow, the resize on the uint8 pixels as before,
`fancy_upscaling=False`, the accurate IDCT, area and
nearest resizing, the DCT-scaled decode (preprocess.decode_scaled_window), the decode
alone (no resize), the 16 rows down to the crop's bottom alone (libjpeg entropy-decodes every
row above a crop's bottom edge, so this is about what no crop can save), and Keras'
image_dataset_from_directory's per-file work (the whole image decoded, resized on uint8); and
the harness alone (the window chosen, nothing decoded), to subtract from each.

`psnr`: per DCT ratio, the PSNR of for_training's scaled crops and of a plain bilinear resize
of the same window's full decode (before the scaling), each against that full decode resized
with an antialiasing filter (the reference).

    python -m bench.crop_decode --shards bench/out/shards-20000 --rounds 8 [--crop-area 0.5,1]
    python -m bench.crop_decode psnr --shards SHARDS --count 200
"""

import argparse
import collections
import statistics
import time

import numpy as np
import tensorflow as tf

from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from trainer import dataset_info
from trainer import preprocess

FAST = preprocess.TRAINING_DCT_METHOD


def _records(shards, count):
    spec = {
        features.ENCODED: kinds.Classification(features.EXAMPLES).feature_spec()[features.ENCODED]
    }
    files = dataset_info.load(shards).shard_paths('train')
    encoded = [
        tf.io.parse_single_example(record, spec)[features.ENCODED]
        for record in tf.data.TFRecordDataset(files).take(count)
    ]
    return tf.stack(encoded)


def _crop(
    size,
    area,
    fancy=True,
    method='bilinear',
    dct_method=FAST,
    scaled=False,
    resized=True,
    grid=True,
    rows=False,
):
    def crop(encoded, index):
        shape = tf.image.extract_jpeg_shape(encoded)[:2]
        seed = tf.stack([tf.constant(7, tf.int64), index])
        window = preprocess.random_window(shape, seed, area)
        if rows:  # the crop's last 16 rows, the width whole: what libjpeg entropy-decodes
            bottom = window[0] + window[2]
            window = tf.stack([tf.maximum(bottom - 16, 0), 0, tf.minimum(bottom, 16), shape[1]])
        if scaled:
            pixels = preprocess.decode_scaled_window(encoded, window, size, dct_method)
        elif grid:  # widened to the iMCU grid, then sliced (preprocess.decode_and_crop)
            pixels = preprocess.decode_and_crop(
                encoded, window, fancy_upscaling=fancy, dct_method=dct_method
            )
        else:
            pixels = tf.image.decode_and_crop_jpeg(
                encoded, window, channels=3, fancy_upscaling=fancy, dct_method=dct_method
            )
        if not resized:  # a constant of the output's size: the batch costs the same
            return tf.zeros([*size, 3], tf.uint8) + tf.cast(pixels[0, 0, 0] > 0, tf.uint8)
        if method == 'bilinear':
            return preprocess.resize(pixels, size)
        if method == 'bilinear, uint8 input':  # the resize before: the kernel reads uint8
            return tf.cast(tf.image.resize(pixels, size) + 0.5, tf.uint8)
        return tf.cast(tf.image.resize(pixels, size, method=method), tf.uint8)

    return crop


def _keras(size, decoded_only=False):
    """What keras.utils.image_dataset_from_directory does to each file: the whole image
    decoded (`tf.io.decode_image`, libjpeg's default IDCT), resized on its uint8 pixels."""

    def whole(encoded, unused_index):
        pixels = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        if decoded_only:
            return tf.zeros([*size, 3], tf.uint8) + tf.cast(pixels[0, 0, 0] > 0, tf.uint8)
        return tf.cast(tf.image.resize(pixels, size), tf.uint8)

    return whole


def _harness(size, area):
    """The window chosen and a constant of the output's size returned, nothing decoded: what
    every variant pays besides its decode and resize."""

    def nothing(encoded, index):
        shape = tf.image.extract_jpeg_shape(encoded)[:2]
        window = preprocess.random_window(shape, tf.stack([tf.constant(7, tf.int64), index]), area)
        return tf.zeros([*size, 3], tf.uint8) + tf.cast(window[0] > 0, tf.uint8)

    return nothing


def _cpu_per_image(encoded, crop):
    """CPU us per image of `crop` over every record, on one thread."""
    indices = tf.range(encoded.shape[0], dtype=tf.int64)
    dataset = tf.data.Dataset.from_tensor_slices((encoded, indices)).map(crop).batch(50)
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    options.threading.max_intra_op_parallelism = 1
    dataset = dataset.with_options(options)
    for _ in dataset.take(2):  # trace, warm
        pass
    start, images = time.process_time(), 0
    for batch in dataset:
        images += len(batch)
    return (time.process_time() - start) / images * 1e6


def time_variants(args):
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    size = (args.size, args.size)
    encoded = _records(args.shards, args.count)
    area = tuple(float(share) for share in args.crop_area.split(','))
    variants = {
        "today's (fast IDCT, fancy upsampling, bilinear on float32)": _crop(size, area),
        'bilinear on the uint8 pixels (before)': _crop(size, area, method='bilinear, uint8 input'),
        'the exact window (TensorFlow copies its rows)': _crop(size, area, grid=False),
        'fancy_upscaling=False': _crop(size, area, fancy=False),
        'accurate IDCT': _crop(size, area, dct_method=preprocess.DCT_METHOD),
        'area resize': _crop(size, area, method='area'),
        'nearest resize': _crop(size, area, method='nearest'),
        'DCT-scaled decode (switch over ratios)': _crop(size, area, scaled=True),
        'decode alone, no resize': _crop(size, area, resized=False),
        "the crop's last 16 rows alone (~ entropy decoding)": _crop(
            size, area, rows=True, resized=False
        ),
        "keras' whole image, resized on uint8": _keras(size),
        "keras' whole-image decode alone": _keras(size, decoded_only=True),
        'nothing decoded (the window and the harness)': _harness(size, area),
    }
    costs = collections.defaultdict(list)
    names = list(variants)
    for round_ in range(args.rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            costs[name].append(_cpu_per_image(encoded, variants[name]))
    print(f'{len(encoded)} records of {args.shards}, {size[0]}x{size[1]}, one thread')
    for name in names:
        each = ' '.join(f'{value:.0f}' for value in costs[name])
        print(f'{name:<48}{statistics.median(costs[name]):>7.0f} us CPU/image  ({each})')


def _psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 10 * np.log10(255**2 / max(mse, 1e-12))


def psnr(args):
    size = (args.size, args.size)
    scores = collections.defaultdict(list)
    for i, encoded in enumerate(_records(args.shards, args.count)):
        seed = tf.constant((11, i), tf.int64)
        shape = tf.image.extract_jpeg_shape(encoded)[:2]
        window = preprocess.random_window(shape, seed)
        ratio = preprocess.DCT_RATIOS[int(preprocess.dct_ratio(window, size))]
        # The window the scaled crop shows, in source pixels (within the image).
        shown = preprocess.scaled_window(window, ratio) * ratio
        shown = tf.minimum(shown, tf.concat([shown[:2], shape - shown[:2]], axis=0))
        full = tf.image.decode_and_crop_jpeg(encoded, shown, channels=3)
        reference = tf.image.resize(full, size, antialias=True)
        reference = tf.cast(tf.round(reference), tf.uint8).numpy()
        scaled = preprocess.for_training(encoded, size, seed, dct_scaling=True).numpy()
        plain = preprocess.resize(full, size).numpy()
        scores[ratio].append((_psnr(scaled, reference), _psnr(plain, reference)))
    print(f'PSNR (dB) against an antialiased resize of the full decode, {size[0]}x{size[1]}')
    for ratio in sorted(scores):
        values = np.array(scores[ratio])
        print(
            f'ratio {ratio}: {len(values):>4} crops   scaled: worst {values[:, 0].min():.1f} '
            f'mean {values[:, 0].mean():.1f}   plain bilinear: worst {values[:, 1].min():.1f} '
            f'mean {values[:, 1].mean():.1f}'
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('what', nargs='?', choices=('time', 'psnr'), default='time')
    parser.add_argument('--shards', required=True, help='an imageshards build of JPEGs')
    parser.add_argument('--count', type=int, default=600, help='records')
    parser.add_argument('--size', type=int, default=224, help='output side')
    parser.add_argument('--rounds', type=int, default=6)
    parser.add_argument(
        '--crop-area',
        default='0.08,1',
        help="time: the crops' area range (make_dataset's default below 1.28M images: 0.5,1)",
    )
    args = parser.parse_args(argv)
    if args.what == 'psnr':
        psnr(args)
    else:
        time_variants(args)


if __name__ == '__main__':
    main()
