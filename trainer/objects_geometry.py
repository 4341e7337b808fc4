"""Augmentation that moves boxes, masks and class maps with the pixels.

Boxes are TensorFlow's (and Model Garden's) `[ymin, xmin, ymax, xmax]`, fractions of the image
they lie on. Every step maps continuous image coordinates exactly: a pixel's edges at integers,
a resize by a factor s maps coordinate u to u * s (tf.image.resize's half-pixel centres do), a
crop at offset o maps u to u - o. The canvas an image ends on is the model's size: the image
scaled to fit it (times a random factor in training), cut at a random offset where it is larger,
padded at the bottom and right where it is smaller (`Placement` says where it went, so that
boxes found on the canvas go back to the image).

Random draws are stateless, from the seed given: the same (seed, epoch, position) makes the
same flip, scale, crop and colours, also after a resume.
"""

import dataclasses

import tensorflow as tf

VOID = 255  # a class map's value where no class is (the padding too)
MIN_BOX_PIXELS = 2.0  # a box narrower or lower than this on the canvas after a crop is dropped


@dataclasses.dataclass(frozen=True)
class Objects:
    """An image's objects as tensors: boxes float32 [N, 4] (yxyx fractions), classes int32
    [N], crowd flags bool [N], and instance masks uint8 [N, H, W] (or None)."""

    boxes: tf.Tensor
    classes: tf.Tensor
    crowd: tf.Tensor
    masks: tf.Tensor | None = None

    def where(self, keep) -> 'Objects':
        masks = None if self.masks is None else tf.boolean_mask(self.masks, keep)
        return Objects(
            tf.boolean_mask(self.boxes, keep),
            tf.boolean_mask(self.classes, keep),
            tf.boolean_mask(self.crowd, keep),
            masks,
        )

    def replace(self, **changes) -> 'Objects':
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where an image lies on the canvas: scaled to `scaled` (height, width) pixels, then
    shifted by -`offset` (pixels of the scaled image, [y, x])."""

    scaled: tf.Tensor  # float32 [2]
    offset: tf.Tensor  # float32 [2]

    def boxes_to_image(self, boxes, canvas) -> tf.Tensor:
        """Canvas boxes (fractions of `canvas`, [N, 4]) -> fractions of the image."""
        return canvas_to_image(boxes, self.scaled, self.offset, canvas)

    def covered(self, canvas) -> tf.Tensor:
        """float32 [canvas]: 1 where the image lies on the canvas, 0 in the padding."""
        rows, cols = tf.unstack(tf.cast(tf.minimum(self.scaled - self.offset, canvas), tf.int32))
        row = tf.cast(tf.range(canvas[0]) < rows, tf.float32)
        col = tf.cast(tf.range(canvas[1]) < cols, tf.float32)
        return row[:, None] * col[None, :]


def canvas_to_image(boxes, scaled, offset, canvas) -> tf.Tensor:
    """Boxes [..., M, 4] in fractions of `canvas` -> fractions of the images they were placed
    from (`scaled`, `offset`: [..., 2], a Placement's, one per image of the batch)."""
    pixels = boxes * tf.cast(tf.tile(tf.constant(canvas), [2]), tf.float32)
    shift = tf.concat([offset, offset], -1)[..., None, :]
    size = tf.concat([scaled, scaled], -1)[..., None, :]
    return tf.clip_by_value((pixels + shift) / size, 0.0, 1.0)


def flip(image, objects, class_map=None, *, flipped=True):
    """(image, Objects, class map) mirrored left to right where `flipped` (a bool tensor)."""

    def mirror(tensor, axis):
        return tf.cond(flipped, lambda: tf.reverse(tensor, [axis]), lambda: tensor)

    ymin, xmin, ymax, xmax = tf.unstack(objects.boxes, axis=-1)
    mirrored = tf.stack([ymin, 1.0 - xmax, ymax, 1.0 - xmin], axis=-1)
    boxes = tf.where(flipped, mirrored, objects.boxes)
    masks = None if objects.masks is None else mirror(objects.masks, 2)
    class_map = None if class_map is None else mirror(class_map, 1)
    return mirror(image, 1), objects.replace(boxes=boxes, masks=masks), class_map


def place(image, objects, canvas, scale_range=(1.0, 1.0), seed=None, class_map=None):
    """The image on a canvas of `canvas` (height, width) pixels, its objects with it.

    The image is scaled to fit the canvas times a factor drawn from `scale_range` (1: fit,
    as evaluation and serving do), cut at a random offset where larger, padded with zeros (a
    class map with VOID) at the bottom and right where smaller. Boxes are clipped to the
    canvas; those left under MIN_BOX_PIXELS on a side are dropped (a crowd stays a crowd).

    Returns:
        (image float32 [canvas, 3], Objects, class map uint8 [canvas, 1] or None, Placement).
    """
    out = tf.constant(canvas, tf.float32)
    size = tf.cast(tf.shape(image)[:2], tf.float32)
    factor = tf.constant(scale_range[0], tf.float32)
    if scale_range[0] != scale_range[1]:
        factor = tf.random.stateless_uniform([], seed, scale_range[0], scale_range[1])
    scale = tf.reduce_min(out / size) * factor
    scaled = tf.maximum(tf.round(size * scale), 1.0)
    room = tf.maximum(scaled - out, 0.0)
    offset = tf.zeros([2])
    if scale_range[1] > 1.0:
        draw = tf.random.stateless_uniform([2], tf.random.experimental.stateless_fold_in(seed, 1))
        offset = tf.floor(draw * (room + 1.0))
    placement = Placement(scaled, offset)
    image = _cut(tf.image.resize(image, tf.cast(scaled, tf.int32)), offset, canvas)
    if class_map is not None:
        class_map = _cut_nearest(class_map, scaled, offset, canvas, VOID)
    masks = objects.masks
    if masks is not None:
        masks = tf.squeeze(_cut_nearest(masks[..., None], scaled, offset, canvas, 0), -1)
    pixels = objects.boxes * tf.tile(scaled, [2]) - tf.tile(offset, [2])
    pixels = tf.clip_by_value(pixels, 0.0, tf.tile(out, [2]))
    keep = tf.reduce_all(pixels[:, 2:] - pixels[:, :2] >= MIN_BOX_PIXELS, axis=-1)
    placed = objects.replace(boxes=pixels / tf.tile(out, [2]), masks=masks).where(keep)
    return image, placed, class_map, placement


def _cut(image, offset, canvas):
    """`image` from `offset` on, cut and padded to `canvas`."""
    y, x = tf.unstack(tf.cast(offset, tf.int32))
    part = image[..., y : y + canvas[0], x : x + canvas[1], :]
    return tf.image.pad_to_bounding_box(part, 0, 0, *canvas)


def _cut_nearest(maps, scaled, offset, canvas, fill):
    """Maps (class ids or masks, [..., H, W, 1] uint8) scaled by nearest neighbour, cut and
    padded with `fill`."""
    resized = tf.image.resize(maps, tf.cast(scaled, tf.int32), method='nearest')
    flipped = tf.constant(fill, tf.uint8) - tf.cast(resized, tf.uint8)  # the padding 0 -> fill
    return tf.constant(fill, tf.uint8) - tf.cast(_cut(flipped, offset, canvas), tf.uint8)


def colour_jitter(image, seed, strength=0.2):
    """Brightness, contrast and saturation changed by up to `strength` (float32 0-255)."""
    seeds = [tf.random.experimental.stateless_fold_in(seed, i) for i in range(3)]
    image = image / 255.0
    image = tf.image.stateless_random_brightness(image, strength, seeds[0])
    image = tf.image.stateless_random_contrast(image, 1 - strength, 1 + strength, seeds[1])
    image = tf.image.stateless_random_saturation(image, 1 - strength, 1 + strength, seeds[2])
    return tf.clip_by_value(image, 0.0, 1.0) * 255.0
