"""Decoding parsed records into images: a batch per function call, or record by record.

A training or evaluation batch of an `examples` build is decoded in one call (`decode_batch`,
a `tf.map_fn` over its records): tf.data's map schedules each call on its thread pool and is
woken when it completes, which per image is a measurable share of the CPU (bench/RESULTS.md,
"Storing images at the size training uses", its phase 3). Record by record (`decode`) where
an undecodable image must drop alone (skip_bad_images, counted in `SkippedImages`), where
images are files read in parallel (a `paths` build), and for patches.
"""

import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE


class SkippedImages:
    """Counts images that could not be decoded when skip_bad_images is on."""

    def __init__(self):
        self.attempted = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.decoded = tf.Variable(0, dtype=tf.int64, trainable=False)

    @property
    def skipped(self) -> int:
        return int(self.attempted.numpy() - self.decoded.numpy())


def decodes_batches(parse, opts) -> bool:
    """Whether batches are decoded in one call each (decode_batch) rather than per image:
    not where an undecodable image must drop alone (skip_bad_images), where images are files
    read in parallel (a paths build), or where nothing is decoded."""
    return opts.decode_images and not opts.skip_bad_images and not parse.reads_files


def decode(parsed, to_image, opts, skipped) -> tf.data.Dataset:
    """Per-record decode in parallel; undecodable images fail the run unless skipped."""
    if not opts.decode_images:  # (label, id) where the image would be: the same order
        return parsed.map(lambda r: (r['label'], r['id']))

    def one(record):
        image = to_image(record['source'], record.get('position', tf.constant(0, tf.int64)))
        ids = (record['id'],) if opts.with_ids else ()
        return (image, record['label'], *ids)

    if opts.skip_bad_images and skipped is not None:
        parsed = parsed.map(lambda r: _count(skipped.attempted, r))
    images = parsed.map(one, num_parallel_calls=AUTOTUNE, deterministic=opts.deterministic)
    if opts.skip_bad_images:
        images = images.ignore_errors(log_warning=True)
        if skipped is not None:
            images = images.map(lambda *x: _count(skipped.decoded, x))
    return images


def decode_batch(batch, to_image, image_size, opts) -> tuple:
    """A parsed batch -> (images, labels[, ids]): the same images as decode's, decoded in one
    function call by a loop. tf.data's map schedules each call on its thread pool and is woken
    when it completes, a cost per call (bench/RESULTS.md, "Storing images at the size training
    uses"). An undecodable image fails the batch, so skip_bad_images keeps the per-image map."""
    positions = batch.get('position', tf.zeros_like(batch['id']))  # evaluation has none
    images = tf.map_fn(
        lambda record: to_image(*record),
        (batch['source'], positions),
        fn_output_signature=tf.TensorSpec([*image_size, 3], tf.uint8),
    )
    ids = (batch['id'],) if opts.with_ids else ()
    return (images, batch['label'], *ids)


def _count(variable, value):
    variable.assign_add(1)
    return value
