"""The tf.data input pipeline: shards listed in dataset.json -> batches of (images, labels).

Training, per epoch:
    shard list, shuffled with a seed of (seed, epoch)
    -> interleave TFRecordDatasets over several shards at once; with few shards, each shard
       starts at a record fixed by (seed, epoch, shard) and wraps around (see `rotate_shards`)
    -> record shuffle buffer, seeded by (seed, epoch)
    -> [a small split (trainer/small_splits.py): the epoch's records again, to fill its last batch]
    -> batch (drop_remainder) -> vectorized tf.io.parse_example (trainer/record_parser.py)
    -> batches decoded in parallel, each in one call: a random-resized crop of each image,
       cut while decoding the JPEG (general path for PNG), resized, augmented
       (trainer/augment.py)
       [skip_bad_images, paths builds (tf.io.read_file of image/path after the shuffle) and
       patches: unbatch, decode each record in parallel (or cut K random patches per image,
       reshuffled across many images), batch again]
    -> [patches: vectorized augmentation] -> prefetch

A random-access build (ArrayRecord) reads each training epoch as a new permutation of the whole
split instead of the shard list, interleave and shuffle buffer (trainer/random_access.py); the
steps after it are the same.

Everything random is a function of (seed, epoch, position), so an epoch's batches can be
rebuilt exactly, also from the middle (`start_epoch`, `skip_batches`) after a preemption;
with `deterministic=True` (the default) parallel steps keep that order.

Evaluation reads the shards in order, crops centrally and keeps every record; its batches
too are decoded in one call each (the last one partial).

With `decode_images=False` the same pipeline yields batches of (labels, ids) only, in exactly
the order it would deliver images (no step that decides the order looks at pixels):
`imageshards report` measures the shuffle that way.
"""

import dataclasses
import logging

import tensorflow as tf

from trainer import augment as augment_lib
from trainer import dataset_info
from trainer import preprocess
from trainer import record_decoding
from trainer import shard_reading
from trainer.input_options import IMAGE_SIZE
from trainer.input_options import InputOptions
from trainer.record_parser import RecordParser

_LOG = logging.getLogger(__name__)
AUTOTUNE = tf.data.AUTOTUNE

# The patches' own random stream (trainer/shard_reading.py's salts are 1 to 3).
PATCH_ORDER_SALT = 4  # the shuffle of patches across images
# Crops and the augmentation of batches of patches are fixed by (seed * MULTIPLIER + epoch,
# their position or batch index): primes that keep the two streams apart.
CROP_MULTIPLIER = 7919
PATCH_AUGMENT_MULTIPLIER = 104_729


@dataclasses.dataclass(frozen=True)
class _Plan(InputOptions):
    """The options of one make_dataset call (crops resolved) and what it reads."""

    with_ids: bool = False  # also yield image/id, for measuring the order
    decode_images: bool = True  # False: batches of (labels, ids) in the same order, no pixels
    start_epoch: int = 0
    epochs: int = 0  # 0: repeat without end
    skip_batches: int = 0  # batches of this dataset in start_epoch already trained on (resume)
    # Cut each epoch to this many batches (0: every full batch); more than its records make:
    # its records again fill them (shard_reading.filled).
    batches_per_epoch: int = 0


def make_dataset(
    data_dir,
    split,
    batch_size,
    *,
    training,
    seed=0,
    image_size=IMAGE_SIZE,
    options=None,
    label_levels=None,
    info=None,
    input_context=None,
    skipped=None,
    **settings,
) -> tf.data.Dataset:
    """Batches of (uint8 images, int64 labels) from a build's split.

    With `label_levels`, labels are a dict {level: int64 ids} (-1 where a value is missing)
    of those label levels of the build instead of the primary label. A multi-label build's
    labels (and multi-label levels) are multi-hot float32 vectors instead (trainer/labels.py).

    Args:
        data_dir: the build's output directory (local, gs://, or /gcs/...).
        split: a split in its dataset.json.
        batch_size: the global batch size (with `input_context`, each pipeline's per-replica share).
        training: shuffled, augmented, endless (or `epochs`) batches without remainder; else
            one ordered pass with central crops.
        seed: fixes shard order, record order, crops and augmentation.
        image_size: (height, width) of the output images.
        options: an InputOptions (trainer/input_options.py), such as the trainer's
            `TrainConfig.input`; `auto` crops are resolved for the build as the trainer does.
        label_levels: label level names of the build to yield instead of the primary label.
        info: the build (trainer/dataset_info.load), if already loaded.
        input_context: a tf.distribute.InputContext: read a disjoint subset of shards (in
            training on a random-access build: of each epoch's permutation).
        skipped: a SkippedImages to count undecodable images in (with skip_bad_images).
        **settings: InputOptions fields that replace those of `options`, and what this call
            reads (_Plan): start_epoch, epochs, skip_batches, batches_per_epoch, with_ids,
            decode_images (False: batches of (labels, ids) in the same order, none decoded).
    """
    info = info or dataset_info.load(data_dir)
    image_size = tuple(image_size)
    opts = _plan(info, split, image_size, options, settings)
    levels = tuple(label_levels or ())
    info.check_levels(levels)
    if input_context:
        batch_size = input_context.get_per_replica_batch_size(batch_size)
    parse = RecordParser(info, opts.parse_batch, levels, with_source=opts.decode_images)
    if not training:
        shards = shard_reading.split_shards(info, split, input_context, opts)
        batches = _evaluation(shards, batch_size, image_size, parse, opts, skipped)
        return _finish(batches, opts)
    source = shard_reading.training_source(info, split, input_context, opts)
    config = augment_lib.parse_augment(opts.augment)
    epoch_range = tf.data.Dataset.range(opts.start_epoch, opts.epochs or 2**62)
    per_epoch = lambda epoch: _training_epoch(
        source, epoch, batch_size, seed, image_size, config, parse, opts, skipped
    )
    return _finish(epoch_range.flat_map(per_epoch), opts)


def _plan(info, split, image_size, options, settings):
    """The _Plan of a make_dataset call: `options` with `settings` in place, `auto` crops and
    the decoding choices (preprocess.decoding) resolved for the build's split."""
    plan = _Plan(**dataclasses.asdict(options or InputOptions()))
    plan = dataclasses.replace(plan, **settings)
    plan = plan.resolved(info.num_records(split), info.multi_label)
    return dataclasses.replace(plan, **preprocess.decoding(info, split, image_size, plan))


def _evaluation(shards, batch_size, image_size, parse, opts, skipped):
    """One ordered pass over `shards`: central crops, every record (the last batch partial)."""
    files = tf.data.Dataset.from_tensor_slices(shards.paths)
    records = shard_reading.read(files, opts, deterministic=True, open_shard=shards.open_shard)
    num_records = sum(shards.counts)
    central = lambda encoded, _: preprocess.for_eval(
        encoded, image_size, opts.eval_crop, opts.jpeg_only
    )
    if record_decoding.decodes_batches(parse, opts):
        batches = parse.batches(records, batch_size, drop_remainder=False).map(
            lambda batch: record_decoding.decode_batch(batch, central, image_size, opts),
            num_parallel_calls=AUTOTUNE,
            deterministic=opts.deterministic,
        )
    else:
        batches = record_decoding.decode(parse(records), central, opts, skipped).batch(batch_size)
    if not opts.skip_bad_images:  # a known length lets Keras see the end of a pass
        batches = batches.apply(
            tf.data.experimental.assert_cardinality(-(-num_records // batch_size))
        )
    return batches


def _training_epoch(source, epoch, batch_size, seed, image_size, config, parse, opts, skipped):
    """One epoch's batches, rebuilt identically from (seed, epoch) (`source`: a
    shard_reading.Shards or a random_access.SplitReader)."""
    # Each crop and its augmentation are fixed by (seed, epoch, its position in the epoch), a
    # batch of patches' augmentation by (seed, epoch, its index), also when resuming mid-epoch.
    resumed = tf.cast(epoch == opts.start_epoch, tf.int64) * opts.skip_batches
    # Patches are shuffled across images: a resumed epoch skips batches of patches instead.
    start = tf.constant(0, tf.int64) if opts.patches_per_image else resumed * batch_size
    records = source.epoch_records(seed, epoch, start, opts)
    held = source.per_worker * max(1, opts.patches_per_image)
    if 0 < held < opts.batches_per_epoch * batch_size:
        records = shard_reading.filled(source, records, seed, epoch, opts)
    crop_seed = lambda position: tf.stack(
        [tf.cast(seed, tf.int64) * CROP_MULTIPLIER + epoch, position]
    )
    decoding = {'dct_scaling': opts.dct_scaling, 'jpeg_only': opts.jpeg_only}
    crop = lambda encoded, position: preprocess.for_training(
        encoded, image_size, crop_seed(position), opts.crop_area, config, **decoding
    )
    if opts.patches_per_image:
        images = _patches(parse(records), opts, crop_seed, skipped, epoch, seed)
        batches = images.batch(batch_size, drop_remainder=True).skip(resumed)
    elif record_decoding.decodes_batches(parse, opts):
        batches = parse.batches(records, batch_size).map(
            lambda batch: record_decoding.decode_batch(batch, crop, image_size, opts),
            num_parallel_calls=AUTOTUNE,
            deterministic=opts.deterministic,
        )
    else:
        batches = record_decoding.decode(parse(records), crop, opts, skipped).batch(
            batch_size, drop_remainder=True
        )
    if opts.batches_per_epoch:
        # Workers holding more records than others stop where the others must: their epochs
        # then line up with the trainer's, and a resume finds every epoch where it began.
        batches = batches.take(opts.batches_per_epoch - resumed)
    if opts.patches_per_image and config.active and opts.decode_images:
        batch_index = tf.data.Dataset.range(resumed, 2**62)
        batches = tf.data.Dataset.zip(batches, batch_index).map(
            lambda batch, index: _augment(
                batch,
                config,
                tf.stack([tf.cast(seed, tf.int64) * PATCH_AUGMENT_MULTIPLIER + epoch, index]),
            ),
            num_parallel_calls=AUTOTUNE,
            deterministic=opts.deterministic,
        )
    return batches


def _augment(batch, config, seed):
    images, *rest = batch
    return (augment_lib.augment_batch(images, config, seed), *rest)


def _patches(parsed, opts, crop_seed, skipped, epoch, seed):
    """K random patches per image, shuffled across `patch_shuffle_images` images."""
    k, size = opts.patches_per_image, opts.patch_size
    if size < 1:
        raise ValueError('--patches-per-image needs --patch-size')

    def cut(encoded, position):
        return preprocess.random_patches(encoded, k, size, crop_seed(position))

    def repeat(*values):
        # One element per image -> K patches, each with its image's label(s) and id.
        pixels = values[:1] if opts.decode_images else ()
        per_image = values[len(pixels) :]
        return (*pixels, *tf.nest.map_structure(lambda v: tf.repeat(v[None], k, 0), per_image))

    decoded = record_decoding.decode(parsed, cut, opts, skipped).map(
        repeat, num_parallel_calls=AUTOTUNE, deterministic=opts.deterministic
    )
    patches = decoded.unbatch()
    if not opts.patch_shuffle_images:  # the naive flatten: a batch holds few images' patches
        return patches
    return patches.shuffle(
        opts.patch_shuffle_images * k, seed=shard_reading.epoch_seed(seed, epoch, PATCH_ORDER_SALT)
    )


def _finish(dataset, opts):
    dataset = dataset.prefetch(AUTOTUNE)
    options = tf.data.Options()
    options.deterministic = opts.deterministic
    return dataset.with_options(options)


def steps_per_epoch(info, split, batch_size, num_pipelines=1, patches_per_image=0) -> int:
    """Full batches each pipeline yields per epoch (the same for every pipeline)."""
    per_pipeline = shard_reading.records_per_worker(info, split, num_pipelines)
    per_replica = batch_size // num_pipelines
    return min(per_pipeline) * max(1, patches_per_image) // per_replica
