"""Decoding and cropping one encoded image: the part of preprocessing shared by training,
evaluation and the exported serving signature.

Every function takes an encoded image (JPEG, PNG, or anything `tf.io.decode_image` reads) and
returns uint8 RGB pixels: the input pipeline moves a quarter of the bytes that float32 would,
and the model scales them on the accelerator. JPEGs are decoded with the accurate integer
IDCT, which gives exactly the pixels Pillow shows (the build checks that against what it
stores); training crops are cut while decoding (`decode_and_crop_jpeg`), so only the pixels
kept are decoded, and a crop at least twice the output size is decoded at a DCT scale.
"""

import dataclasses

import tensorflow as tf

from imageshards.decode import DCT_METHOD  # evaluation and serving: exactly Pillow's pixels
from imageshards.decode import decode  # noqa: F401  (all pixels, uint8 RGB)
from trainer import augment as augment_lib
from trainer.input_options import CENTRAL_CROP
from trainer.input_options import IMAGENET_CROP_AREA

TRAINING_DCT_METHOD = 'INTEGER_FAST'  # training crops: a few levels off, 6% faster to decode
EVAL_CROP_FRACTION = CENTRAL_CROP  # the central crop of the Inception/ResNet evaluation recipe
DCT_RATIOS = (1, 2, 4, 8)  # the scales libjpeg decodes at in the DCT domain: 1/1 ... 1/8
NOT_JPEG = (
    'a record that is not a JPEG, in a split whose dataset.json counts JPEGs alone: '
    '`imageshards verify` the build, or read it with jpeg_only=False'
)
# libjpeg decodes whole iMCU columns: 16 pixels wide with 4:2:0 or 4:2:2 colour, 8 with 4:4:4.
IMCU_WIDTH = 16


def decode_window(
    encoded, choose_window, dct_method=DCT_METHOD, output_size=None, jpeg_only=False
) -> tf.Tensor:
    """The pixels of the window [top, left, height, width] that `choose_window(shape)` picks.

    JPEGs are measured from their header and only the window is decoded; other formats are
    decoded whole, once, then cropped. With `output_size` (training crops), a JPEG window at
    least twice (4, 8 times) that size is decoded at 1/2 (1/4, 1/8) scale in the DCT domain
    (`dct_ratio`): fewer pixels to transform and resize, never fewer than `output_size`.

    With `jpeg_only` (a split whose dataset.json counts JPEGs alone), the JPEG path runs
    without the `tf.cond` on the format, whose branch functions cost about 20 us an image in
    tf.data (4% of a 341x256 crop in make_dataset, bench/RESULTS.md); anything else stops the
    pipeline with NOT_JPEG.
    """

    def jpeg():
        window = choose_window(tf.image.extract_jpeg_shape(encoded)[:2])
        if output_size is None:
            return decode_and_crop(encoded, window, dct_method=dct_method)
        return decode_scaled_window(encoded, window, output_size, dct_method)

    def general():
        image = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        window = choose_window(tf.shape(image)[:2])
        return tf.image.crop_to_bounding_box(image, window[0], window[1], window[2], window[3])

    if jpeg_only:
        checked = tf.debugging.Assert(tf.io.is_jpeg(encoded), [NOT_JPEG])
        with tf.control_dependencies([checked]):
            return jpeg()
    return tf.cond(tf.io.is_jpeg(encoded), jpeg, general)


def decode_and_crop(encoded, window, **options) -> tf.Tensor:
    """`tf.image.decode_and_crop_jpeg(encoded, window, channels=3, **options)`'s pixels, for less.

    libjpeg decodes whole iMCU columns from the one that holds the window's left edge; unless
    that edge is on the iMCU grid, TensorFlow decodes each row into a buffer and copies the
    window's part out of it. Asking for the window widened left to the grid writes the rows
    in place; slicing the extra columns off costs less than those copies (a 224 crop of a
    341x256 JPEG: 541 -> 520 us of CPU with its resize, bench/crop_decode.py). The pixels are
    the same: libjpeg decoded those columns either way.
    """
    extra = window[1] % IMCU_WIDTH
    widened = tf.stack([window[0], window[1] - extra, window[2], window[3] + extra])
    return tf.image.decode_and_crop_jpeg(encoded, widened, channels=3, **options)[:, extra:]


def dct_ratio(window, output_size) -> tf.Tensor:
    """The index in DCT_RATIOS of the largest ratio r whose 1/r-scaled window still covers
    `output_size` (height, width) in both directions: downscaled, never enlarged."""
    fits = [
        (window[2] >= ratio * output_size[0]) & (window[3] >= ratio * output_size[1])
        for ratio in DCT_RATIOS[1:]
    ]
    return tf.add_n([tf.cast(fit, tf.int32) for fit in fits])  # each implies the ones before


def scaled_window(window, ratio) -> tf.Tensor:
    """The window [top, left, height, width] in the pixels of a 1/ratio-scale decode: each edge
    at the nearest scaled pixel boundary (off by at most ratio/2 source pixels), the far edges
    within the scaled image (libjpeg scales a side s to ceil(s / ratio))."""
    edges = tf.stack([window[0], window[1], window[0] + window[2], window[1] + window[3]])
    scaled = (edges + ratio // 2) // ratio
    return tf.concat([scaled[:2], scaled[2:] - scaled[:2]], axis=0)


def decode_scaled_window(encoded, window, output_size, dct_method=DCT_METHOD) -> tf.Tensor:
    """A JPEG's window decoded at the smallest DCT scale (1, 1/2, 1/4, 1/8) that still covers
    `output_size`: libjpeg's reduced inverse DCTs average each 2x2 (4x4, 8x8) block of pixels,
    so the decode also filters the way down that a plain bilinear resize would alias.

    It saves work per pixel of the crop (a smaller inverse DCT, colour conversion, resize);
    libjpeg still Huffman-decodes every row down to the crop's bottom edge, so on 3000x2000
    photos a 224 crop costs 6.2 instead of 8.6 ms of CPU (bench/RESULTS.md). The reduced
    transforms ignore `dct_method`; with 4:2:0 colour, libjpeg decodes the chroma at twice the
    scale instead of upsampling it, so `fancy_upscaling` does not matter either.

    `ratio` is an attribute of the op, not an input: one decode op per ratio, one of them run.
    """

    def decode_at(ratio):  # the iMCU grid of a 1/ratio decode is in scaled pixels too
        return lambda: decode_and_crop(
            encoded, scaled_window(window, ratio), ratio=ratio, dct_method=dct_method
        )

    branches = [decode_at(ratio) for ratio in DCT_RATIOS]
    return tf.switch_case(dct_ratio(window, output_size), branches)


def resize(image, image_size) -> tf.Tensor:
    """uint8 pixels resized (bilinear, rounded) to image_size, still uint8.

    Without antialiasing, as in the Inception/ResNet recipes: crops shrink by at most a few
    times, and the antialiasing kernel would cost more than decoding the crop (measured: 544
    against 1,482 images/s for crop, decode and resize on 2 cores).

    The pixels go in as float32: TensorFlow's bilinear kernel reads uint8 input element by
    element, and float32 input makes the same values faster (a 224 crop of a 341x256 JPEG:
    547 -> 457 us of CPU with its decode; bench/RESULTS.md).
    """
    resized = tf.image.resize(tf.cast(image, tf.float32), image_size, method='bilinear')
    if isinstance(image_size, (tuple, list)):  # a static size (patches resize to a tensor)
        resized.set_shape([image_size[0], image_size[1], 3])
    # Bilinear values of uint8 pixels stay within [0, 255]: adding 0.5 and truncating rounds,
    # in one op where round-and-saturate takes three.
    return tf.cast(resized + 0.5, tf.uint8)


def central_window(shape, fraction=EVAL_CROP_FRACTION) -> tf.Tensor:
    """The centred square-ish window covering `fraction` of each side."""
    height, width = shape[0], shape[1]
    crop_h = tf.maximum(1, tf.cast(tf.cast(height, tf.float32) * fraction, tf.int32))
    crop_w = tf.maximum(1, tf.cast(tf.cast(width, tf.float32) * fraction, tf.int32))
    return tf.stack([(height - crop_h) // 2, (width - crop_w) // 2, crop_h, crop_w])


def for_eval(encoded, image_size, crop_fraction=EVAL_CROP_FRACTION, jpeg_only=False) -> tf.Tensor:
    """Evaluation and serving: a central crop resized to image_size (deterministic)."""
    window = decode_window(
        encoded, lambda shape: central_window(shape, crop_fraction), jpeg_only=jpeg_only
    )
    return resize(window, image_size)


def random_window(
    shape, seed, area_range=IMAGENET_CROP_AREA, aspect_ratio_range=(3 / 4, 4 / 3)
) -> tf.Tensor:
    """A random-resized-crop window (the Inception recipe), fixed by a stateless seed."""
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.stack([shape[0], shape[1], 3]),
        bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
        seed=seed,
        min_object_covered=0.1,
        aspect_ratio_range=aspect_ratio_range,
        area_range=area_range,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    return tf.stack([begin[0], begin[1], size[0], size[1]])


def dct_scaling_applies(setting, largest_sides, image_size) -> bool:
    """Whether training crops go through `decode_scaled_window`: `setting` (the input option)
    if given, else whether a crop of an image of at most `largest_sides` (height, width; None:
    unknown) can be at least twice `image_size`, so that it ever decodes less.

    Where it cannot, the ratio's switch is left out: in make_dataset it costs about 4% of the
    CPU time of a 500x375 crop (bench/input_variants.py: 860 against 824 us) for nothing.
    """
    if setting is not None:
        return setting
    if largest_sides is None:
        return True
    return all(side >= 2 * size for side, size in zip(largest_sides, image_size))


def decoding(build, split, image_size, options) -> dict:
    """{'dct_scaling', 'jpeg_only'} of a build's split: each as `options` (InputOptions) set
    it, or where None, as the build allows (dct_scaling_applies, Build.jpeg_only)."""
    return {
        'dct_scaling': dct_scaling_applies(options.dct_scaling, build.largest_sides(), image_size),
        'jpeg_only': build.jpeg_only(split) if options.jpeg_only is None else options.jpeg_only,
    }


def for_training(
    encoded,
    image_size,
    seed,
    area_range=IMAGENET_CROP_AREA,
    augment=None,
    dct_scaling=True,
    jpeg_only=False,
) -> tf.Tensor:
    """Training: a random-resized crop, decoded from the JPEG's crop window only (with
    `dct_scaling`, at the smallest DCT scale that covers `image_size`), then augmented by
    `augment` (a trainer/augment.py AugmentConfig), if any: its scale narrows the window
    before the one resize, the rest follows it (`augment_image`). `jpeg_only`: see
    decode_window."""
    augment = augment or augment_lib.AugmentConfig()
    # Streams of their own (salts 1, 2): the crop's seed would draw the crop's numbers again.
    fold = tf.random.experimental.stateless_fold_in

    def choose(shape):
        window = random_window(shape, seed, area_range)
        if tuple(augment.scale_range) == (1.0, 1.0):
            return window
        return augment_lib.scale_window(window, augment.scale_range, fold(seed, 2))

    output_size = image_size if dct_scaling else None
    pixels = decode_window(encoded, choose, TRAINING_DCT_METHOD, output_size, jpeg_only)
    image = resize(pixels, image_size)
    if not dataclasses.replace(augment, scale_range=(1.0, 1.0)).active:
        return image
    return augment_lib.augment_image(image, augment, fold(seed, 1))


def random_patches(encoded, patches, patch_size, seed) -> tf.Tensor:
    """`patches` random patch_size x patch_size patches of one image, decoded once.

    Images smaller than a patch are first resized up so that their short side fits one.
    """
    image = decode(encoded)
    shape = tf.shape(image)
    short = tf.minimum(shape[0], shape[1])
    scale = tf.maximum(1.0, patch_size / tf.cast(short, tf.float32))
    new_size = tf.cast(tf.math.ceil(tf.cast(shape[:2], tf.float32) * scale), tf.int32)
    image = tf.cond(scale > 1.0, lambda: resize(image, new_size), lambda: image)
    max_top = tf.cast(new_size[0] - patch_size + 1, tf.float32)
    max_left = tf.cast(new_size[1] - patch_size + 1, tf.float32)
    offsets = tf.random.stateless_uniform([patches, 2], seed=seed)
    tops = tf.cast(tf.floor(offsets[:, 0] * max_top), tf.int32)
    lefts = tf.cast(tf.floor(offsets[:, 1] * max_left), tf.int32)
    rows = tops[:, None] + tf.range(patch_size)[None, :]  # [patches, patch_size]
    cols = lefts[:, None] + tf.range(patch_size)[None, :]
    by_rows = tf.gather(image, rows)  # [patches, patch_size, width, 3]
    cut = tf.gather(by_rows, cols, axis=2, batch_dims=1)  # [patches, patch_size, patch_size, 3]
    cut.set_shape([patches, patch_size, patch_size, 3])
    return cut
