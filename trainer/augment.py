"""Augmentation of whole batches in graph ops: the write-ups' augmentations without py_function.

Every op takes a float32 batch [batch, height, width, 3] in [0, 1] and a stateless seed (a
shape [2] int tensor), draws one random setting per image, and works on the batch at once:
flips, an affine warp (rotation, shift, shear, zoom) through one ImageProjectiveTransformV3,
scale augmentation (resize then random crop) through crop_and_resize, random erasing with masks,
brightness and contrast. The same seed gives the same result, eagerly or inside tf.data.

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
    'standard': AugmentConfig(
        flip_horizontal=True,
        rotation_degrees=10.0,
        shift_fraction=0.1,
        zoom_range=0.1,
        brightness_delta=0.1,
        contrast_range=(0.9, 1.1),
        erasing_probability=0.25,
    ),
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
        images = tf.image.stateless_random_flip_left_right(images, seeds[0])
    if config.flip_vertical:
        images = tf.image.stateless_random_flip_up_down(images, seeds[1])
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


def _uniform(shape, seed, low, high):
    return tf.random.stateless_uniform(shape, seed, minval=low, maxval=high)


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
    # The transform maps each output pixel (x, y) to the input pixel it samples: a zoomed,
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
    return tf.image.crop_and_resize(images, boxes, tf.range(batch), shape[1:3])


def brightness_contrast(images, delta, contrast_range, seed):
    batch = tf.shape(images)[0]
    s = tf.random.experimental.stateless_split(seed, num=2)
    shift = _uniform([batch, 1, 1, 1], s[0], -delta, delta)
    factor = _uniform([batch, 1, 1, 1], s[1], contrast_range[0], contrast_range[1])
    means = tf.reduce_mean(images, axis=[1, 2], keepdims=True)
    return tf.clip_by_value((images - means) * factor + means + shift, 0.0, 1.0)


def random_erasing(images, probability, area_range, seed):
    """Random erasing (Zhong et al.): a random rectangle of noise in a `probability` share."""
    shape = tf.shape(images)
    batch, height, width = shape[0], shape[1], shape[2]
    s = tf.random.experimental.stateless_split(seed, num=6)
    area = _uniform([batch], s[0], area_range[0], area_range[1])
    aspect = tf.exp(_uniform([batch], s[1], math.log(0.3), math.log(1 / 0.3)))
    h = tf.minimum(tf.sqrt(area * aspect), 1.0) * tf.cast(height, tf.float32)
    w = tf.minimum(tf.sqrt(area / aspect), 1.0) * tf.cast(width, tf.float32)
    top = _uniform([batch], s[2], 0.0, 1.0) * (tf.cast(height, tf.float32) - h)
    left = _uniform([batch], s[3], 0.0, 1.0) * (tf.cast(width, tf.float32) - w)
    rows = tf.cast(tf.range(height), tf.float32)[None, :, None]
    cols = tf.cast(tf.range(width), tf.float32)[None, None, :]
    inside = (
        (rows >= top[:, None, None])
        & (rows < (top + h)[:, None, None])
        & (cols >= left[:, None, None])
        & (cols < (left + w)[:, None, None])
    )
    chosen = _uniform([batch], s[4], 0.0, 1.0) < probability
    mask = (inside & chosen[:, None, None])[..., None]
    noise = tf.random.stateless_uniform(shape, s[5])
    return tf.where(mask, noise, images)
