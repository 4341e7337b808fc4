"""Augmentation of whole batches in graph ops: the write-ups' augmentations without py_function.

Every op takes a batch [batch, height, width, 3] of uint8 pixels (what the input pipeline
delivers) or of floats in [0, 1], returns the same dtype, and takes a stateless seed (a shape
[2] int tensor). It draws one random setting per image and works on the batch at once: flips
(one gather), an affine warp (rotation, shift, shear, zoom) through one
ImageProjectiveTransformV3, scale augmentation (resize then random crop) through
crop_and_resize, random erasing with a mask, brightness and contrast. The same seed gives the
same result, eagerly or inside tf.data.

The input pipeline applies them to each image as it is decoded instead (`augment_image`, and
`scale_window` for the scale): there each image is one core's small tensor, in cache, where a
whole batch's pass ran as one task per batch and capped the pipeline (on 16 cores, 'standard'
halved make_dataset's images/s as a batch stage, a rotation held it to 1,021 images/s; per
image the standard set costs under a tenth of decoding one).

Each is off unless asked for. `parse_augment('standard')` turns on a sensible set;
`parse_augment('standard,rotation_degrees=20,erasing_probability=0')` adjusts it, and
`parse_augment('flip_horizontal,zoom_range=0.2')` names ops one by one.
"""

import dataclasses
import math

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class AugmentConfig:
    flip_horizontal: bool = False
    flip_vertical: bool = False
    rotation_degrees: float = 0.0  # uniform in [-r, r]
    shift_fraction: float = 0.0  # of height and width, uniform in [-s, s]
    shear_degrees: float = 0.0  # uniform in [-s, s]
    zoom_range: float = 0.0  # sampling scale uniform in [1 - z, 1 + z]; below 1 zooms in
    scale_range: tuple = (1.0, 1.0)  # resize by s in range, then crop a random original-size part
    erasing_probability: float = 0.0  # chance that one random rectangle is replaced by noise
    erasing_area: tuple = (0.02, 0.25)  # of the image, for the erased rectangle
    brightness_delta: float = 0.0  # added, uniform in [-d, d]
    contrast_range: tuple = (1.0, 1.0)  # factor around each image's channel means
    fill_mode: str = 'reflect'  # what the affine warp shows outside the image

    @property
    def warps(self):
        return any(
            (self.rotation_degrees, self.shift_fraction, self.shear_degrees, self.zoom_range)
        )

    @property
    def active(self):
        return self != AugmentConfig(fill_mode=self.fill_mode)


PRESETS = {
    'none': AugmentConfig(),
    # On top of the random-resized crop cut while decoding (which already varies scale,
    # aspect ratio and position): the ImageNet recipe's horizontal flip, and random erasing.
    # The rest is there to add, e.g. 'standard,rotation_degrees=10,brightness_delta=0.1'.
    'standard': AugmentConfig(flip_horizontal=True, erasing_probability=0.25),
    # Detection and segmentation (trainer/objects_input.py): mirror half the images, scale
    # jitter with a random crop, and colour jitter (brightness, contrast and saturation by up
    # to brightness_delta); what `auto` is for those tasks.
    'objects': AugmentConfig(flip_horizontal=True, scale_range=(0.75, 1.33), brightness_delta=0.2),
    # The default: `none` for classification (whose random-resized crop is its own flag),
    # `objects` for detection and segmentation.
    'auto': AugmentConfig(),
}


def parse_augment(spec):
    """An AugmentConfig from None, an AugmentConfig, a preset name, or `name[=value],...`."""
    if spec is None or isinstance(spec, AugmentConfig):
        return spec or PRESETS['none']
    config = PRESETS['none']
    fields = {field.name: field for field in dataclasses.fields(AugmentConfig)}
    for part in filter(None, (p.strip() for p in str(spec).split(','))):
        name, has_value, value = part.partition('=')
        if name in PRESETS and not has_value:
            config = PRESETS[name]
            continue
        if name not in fields:
            raise ValueError(
                f'--augment: unknown {name!r}; presets {sorted(PRESETS)}, options {sorted(fields)}'
            )
        config = dataclasses.replace(config, **{name: _value(fields[name], value, has_value)})
    return config


def _value(field, text, has_value):
    if field.type is bool:
        return text.lower() not in ('0', 'false', 'no') if has_value else True
    if not has_value:
        raise ValueError(f'--augment: {field.name} needs a value, e.g. {field.name}=0.1')
    if field.type is tuple:
        low, _, high = text.partition(':')
        return (float(low), float(high or low))
    if field.type is str:
        return text
    return float(text)


def augment_batch(images, config, seed):
    """Applies `config` to a batch; a no-op when nothing is asked for."""
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=7)
    if config.flip_horizontal:
        images = random_flip(images, axis=2, seed=seeds[0])
    if config.flip_vertical:
        images = random_flip(images, axis=1, seed=seeds[1])
    if tuple(config.scale_range) != (1.0, 1.0):
        images = scale_crop(images, config.scale_range, seeds[2])
    if config.warps:
        images = affine_warp(images, config, seeds[3])
    if config.brightness_delta or tuple(config.contrast_range) != (1.0, 1.0):
        images = brightness_contrast(
            images, config.brightness_delta, config.contrast_range, seeds[4]
        )
    if config.erasing_probability:
        images = random_erasing(images, config.erasing_probability, config.erasing_area, seeds[5])
    return images


def scale_window(window, scale_range, seed):
    """Scale augmentation folded into a crop window [top, left, height, width]: the part of it
    that `scale_crop` would keep after enlarging the crop by a random factor in `scale_range`,
    so that one resize does both (and it costs nothing)."""
    u = tf.random.stateless_uniform([3], tf.cast(seed, tf.int64))
    side = 1.0 / (scale_range[0] + u[0] * (scale_range[1] - scale_range[0]))
    size = tf.cast(window[2:], tf.float32)
    kept = tf.maximum(tf.cast(tf.round(size * side), tf.int32), 1)
    offset = tf.cast(tf.floor(u[1:] * tf.cast(window[2:] - kept + 1, tf.float32)), tf.int32)
    return tf.concat([window[:2] + tf.minimum(offset, window[2:] - kept), kept], axis=0)


def augment_image(image, config, seed):
    """`config` on one image [height, width, 3] (uint8 or floats in [0, 1]), in augment_batch's
    order and with its chances and ranges, but for the scale, which the caller folds into its
    crop window (`scale_window`).

    Every random value of the small ops comes from one draw: per image, each small op costs
    about as much as the work it would do.
    """
    seed = tf.cast(seed, tf.int64)
    u = tf.unstack(tf.random.stateless_uniform([12], seed))
    if config.flip_horizontal:
        image = tf.cond(u[0] < 0.5, lambda: tf.reverse(image, [1]), lambda: image)
    if config.flip_vertical:
        image = tf.cond(u[1] < 0.5, lambda: tf.reverse(image, [0]), lambda: image)
    if config.warps:
        warp_seed = tf.random.experimental.stateless_fold_in(seed, 1)
        image = affine_warp(image[None], config, warp_seed)[0]
    if config.brightness_delta or tuple(config.contrast_range) != (1.0, 1.0):
        shift = (u[10] * 2.0 - 1.0) * config.brightness_delta
        low, high = config.contrast_range
        image = _adjust(image, shift, low + u[11] * (high - low), [0, 1])
    if config.erasing_probability:
        erase = lambda: _erase(image, u[3:], config.erasing_area)
        chosen = u[2] < config.erasing_probability
        image = tf.ensure_shape(tf.cond(chosen, erase, lambda: image), image.shape)
    return image


def _erase(image, u, area_range):
    """One rectangle of one colour, from seven uniform values, written as slices: no pass over
    the image's other pixels (a mask over all of them costs several times more)."""
    shape = tf.shape(image)
    top, h, left, w = _rectangle(u[:4], shape[0], shape[1], area_range)
    # The rows (columns) r with top <= r < top + h, as in random_erasing's mask.
    r0, r1 = tf.cast(tf.math.ceil(top), tf.int32), tf.cast(tf.math.ceil(top + h), tf.int32)
    c0, c1 = tf.cast(tf.math.ceil(left), tf.int32), tf.cast(tf.math.ceil(left + w), tf.int32)
    colour = _as(tf.stack(u[4:7]) * _scale(image.dtype), image.dtype)
    band = image[r0:r1]
    patch = tf.broadcast_to(colour, [r1 - r0, c1 - c0, 3])
    band = tf.concat([band[:, :c0], patch, band[:, c1:]], axis=1)
    return tf.concat([image[:r0], band, image[r1:]], axis=0)


def _rectangle(u, height, width, area_range):
    """(top, height, left, width) in pixels, as floats, of erased rectangles, from four
    uniform [0, 1) values (or vectors of them): area, aspect ratio, top, left."""
    area = area_range[0] + u[0] * (area_range[1] - area_range[0])
    aspect = tf.exp(math.log(0.3) + u[1] * (math.log(1 / 0.3) - math.log(0.3)))
    height, width = tf.cast(height, tf.float32), tf.cast(width, tf.float32)
    h = tf.minimum(tf.sqrt(area * aspect), 1.0) * height
    w = tf.minimum(tf.sqrt(area / aspect), 1.0) * width
    return u[2] * (height - h), h, u[3] * (width - w), w


def _uniform(shape, seed, low, high):
    return tf.random.stateless_uniform(shape, seed, minval=low, maxval=high)


def _scale(dtype):
    """What 1.0 (full intensity) is in `dtype`."""
    return 255.0 if dtype == tf.uint8 else 1.0


def _as(values, dtype):
    """Float pixel values back in the batch's dtype (rounded and saturated for uint8)."""
    if dtype == tf.uint8:
        return tf.saturate_cast(tf.round(values), tf.uint8)
    return tf.cast(values, dtype)


def random_flip(images, axis, seed):
    """Mirrors each image along `axis` (2: left-right, 1: up-down) with probability 1/2.

    One gather of reversed or identity indices per image: a single pass over the batch (where
    tf.image's flip reverses every image and then selects).
    """
    batch, size = tf.shape(images)[0], tf.shape(images)[axis]
    flip = tf.random.stateless_uniform([batch], seed) < 0.5
    forward = tf.range(size)
    indices = tf.where(flip[:, None], tf.reverse(forward, [0])[None, :], forward[None, :])
    return tf.gather(images, indices, axis=axis, batch_dims=1)


def affine_warp(images, config, seed):
    """Rotation, shear, zoom and shift about the centre, one random setting per image."""
    shape = tf.shape(images)
    batch = shape[0]
    height, width = tf.cast(shape[1], tf.float32), tf.cast(shape[2], tf.float32)
    s = tf.random.experimental.stateless_split(seed, num=5)
    angle = _uniform([batch], s[0], -1.0, 1.0) * math.radians(config.rotation_degrees)
    shear = _uniform([batch], s[1], -1.0, 1.0) * math.radians(config.shear_degrees)
    zoom = _uniform([batch], s[2], 1.0 - config.zoom_range, 1.0 + config.zoom_range)
    shift_x = _uniform([batch], s[3], -1.0, 1.0) * config.shift_fraction * width
    shift_y = _uniform([batch], s[4], -1.0, 1.0) * config.shift_fraction * height
    # The projective map takes each output pixel (x, y) to the input pixel it samples: a zoomed,
    # rotated, sheared copy of the offset from the centre, plus the shift.
    cos, sin, tan = tf.cos(angle), tf.sin(angle), tf.tan(shear)
    a00, a01 = zoom * cos, zoom * (cos * tan - sin)
    a10, a11 = zoom * sin, zoom * (sin * tan + cos)
    cx, cy = (width - 1) / 2, (height - 1) / 2
    a02 = cx - a00 * cx - a01 * cy + shift_x
    a12 = cy - a10 * cx - a11 * cy + shift_y
    zeros = tf.zeros_like(angle)
    transforms = tf.stack([a00, a01, a02, a10, a11, a12, zeros, zeros], axis=1)
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=images,
        transforms=transforms,
        output_shape=shape[1:3],
        fill_value=0.0,
        interpolation='BILINEAR',
        fill_mode=config.fill_mode.upper(),
    )


def scale_crop(images, scale_range, seed):
    """Scale augmentation: enlarge each image by a random factor, crop back a random part."""
    shape = tf.shape(images)
    batch = shape[0]
    s = tf.random.experimental.stateless_split(seed, num=3)
    side = 1.0 / _uniform([batch], s[0], scale_range[0], scale_range[1])  # of the original
    top = _uniform([batch], s[1], 0.0, 1.0) * (1.0 - side)
    left = _uniform([batch], s[2], 0.0, 1.0) * (1.0 - side)
    boxes = tf.stack([top, left, top + side, left + side], axis=1)
    cropped = tf.image.crop_and_resize(images, boxes, tf.range(batch), shape[1:3])
    return _as(cropped, images.dtype)


def brightness_contrast(images, delta, contrast_range, seed):
    """Per image: contrast scaled about its channel means by a factor, plus a brightness shift."""
    batch = tf.shape(images)[0]
    s = tf.random.experimental.stateless_split(seed, num=2)
    shift = _uniform([batch, 1, 1, 1], s[0], -delta, delta)
    factor = _uniform([batch, 1, 1, 1], s[1], contrast_range[0], contrast_range[1])
    return _adjust(images, shift, factor, [1, 2])


def _adjust(images, shift, factor, axes):
    """(x - mean) * factor + mean + shift (a share of full intensity), the means over `axes`,
    folded into one multiply-add over the pixels."""
    scale = _scale(images.dtype)
    values = tf.cast(images, tf.float32)
    means = tf.reduce_mean(values, axis=axes, keepdims=True)
    adjusted = tf.clip_by_value(
        values * factor + (means * (1.0 - factor) + shift * scale), 0.0, scale
    )
    return _as(adjusted, images.dtype)


def random_erasing(images, probability, area_range, seed):
    """Random erasing (Zhong et al.): in a `probability` share of the images, one random
    rectangle is filled with a random colour (per-pixel noise would cost more than decoding).

    Only the chosen images are masked and written back, so a pass over the batch costs about
    `probability` of one over every image.
    """
    shape = tf.shape(images)
    batch, height, width = shape[0], shape[1], shape[2]
    s = tf.random.experimental.stateless_split(seed, num=6)
    chosen = tf.where(_uniform([batch], s[4], 0.0, 1.0) < probability)[:, 0]
    count = tf.shape(chosen)[0]
    uniforms = [_uniform([batch], s[i], 0.0, 1.0) for i in range(4)]
    rectangles = _rectangle(uniforms, height, width, area_range)
    top, h, left, w = (tf.gather(values, chosen) for values in rectangles)
    rows = tf.cast(tf.range(height), tf.float32)[None, :]
    cols = tf.cast(tf.range(width), tf.float32)[None, :]
    in_rows = (rows >= top[:, None]) & (rows < (top + h)[:, None])  # [count, height]
    in_cols = (cols >= left[:, None]) & (cols < (left + w)[:, None])  # [count, width]
    mask = in_rows[:, :, None, None] & in_cols[:, None, :, None]
    colours = tf.gather(tf.random.stateless_uniform([batch, 1, 1, 3], s[5]), chosen)
    colour = _as(colours * _scale(images.dtype), images.dtype)
    erased = tf.where(mask, colour, tf.gather(images, chosen))
    return tf.tensor_scatter_nd_update(
        images, chosen[:, None], tf.reshape(erased, tf.concat([[count], shape[1:]], axis=0))
    )
