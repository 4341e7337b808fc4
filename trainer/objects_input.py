"""The input pipeline of detection and segmentation: a build's records -> images and objects.

Training reads an epoch's records as classification does (trainer/shard_reading.py: the
shard list shuffled per epoch, interleaved, a record shuffle buffer; a random-access build's
permutation of the whole split), then, one record at a time, in parallel:

    parse -> decode -> flip (half the images) -> scale jitter and a random crop onto the
    model's canvas, padded where the image is smaller (trainer/objects_geometry.py: boxes
    clipped, those left too small dropped, masks and class maps moved alike) -> colour jitter
    -> the model's targets (`targets`, its own function) -> batch (drop the remainder)

Every random draw is a function of (seed, epoch, the record's position in the epoch): an epoch
is rebuilt exactly, also from the middle after a preemption. Evaluation reads the shards in
order and places each image on the canvas without jitter (as the serving signature does),
yielding what maps the model's boxes back to the image (`Placement`) and the record's index.
"""

import dataclasses

import tensorflow as tf

from imageshards.kinds import detection
from imageshards.kinds import features
from trainer import augment as augment_lib
from trainer import objects_geometry as geometry
from trainer import shard_reading
from trainer.input_options import AUTO
from trainer.input_options import InputOptions

AUTOTUNE = tf.data.AUTOTUNE
SEED_MULTIPLIER = 7919  # an image's draws: (seed * this + epoch, its position)
DETECTION = 'detection'
SEMANTIC = 'semantic_segmentation'
INSTANCE = 'instance_segmentation'  # boxes, and a mask for each (trainer/instance_masks.py)
TASKS = (DETECTION, INSTANCE, SEMANTIC)
_DEFAULT = augment_lib.PRESETS['objects']  # what `--augment auto` does here
# The parts of an --augment spec these tasks apply (ObjectInput's flip, scale_range, colour).
APPLIED = ('flip_horizontal', 'scale_range', 'brightness_delta')


@dataclasses.dataclass(frozen=True)
class ObjectInput:
    """How records become a model's examples.

    Attributes:
        task: DETECTION (boxes), INSTANCE (boxes and their masks) or SEMANTIC (a class per
            pixel: the build's class maps, else drawn from its instance masks, class index + 1
            with 0 the background).
        canvas: (height, width) of the model's input.
        scale_range: training's scale jitter, a factor on the size that fits the canvas.
        flip: mirror half the training images.
        colour: colour jitter's strength (0: none).
        class_maps: the build carries class maps (else SEMANTIC draws them from masks).
    """

    task: str = DETECTION
    canvas: tuple = (320, 320)
    scale_range: tuple = _DEFAULT.scale_range
    flip: bool = _DEFAULT.flip_horizontal
    colour: float = _DEFAULT.brightness_delta
    class_maps: bool = False
    masks: bool = False  # keep the instance masks in the Objects (what `imageshards preview` draws)

    @property
    def keeps_masks(self) -> bool:
        return self.masks or self.task == INSTANCE

    @property
    def reads_masks(self) -> bool:
        return self.keeps_masks or (self.task == SEMANTIC and not self.class_maps)


def augmentation(spec) -> dict:
    """ObjectInput's `flip`, `scale_range` and `colour` from an `--augment` spec
    (trainer/augment.py): `auto` (the default) is the `objects` preset, and e.g.
    `auto,flip_horizontal=0` keeps it without flips, as digits or text want (a mirrored 2 is no
    2). The spec's `brightness_delta` is the colour jitter's strength. A spec asking for more
    than these is refused, not ignored: the other ops do not move boxes and masks."""
    parts = [part.strip() for part in str(spec or AUTO).split(',')]
    config = augment_lib.parse_augment(','.join('objects' if p == AUTO else p for p in parts))
    plain = augment_lib.AugmentConfig(fill_mode=config.fill_mode)
    others = [
        field.name
        for field in dataclasses.fields(config)
        if field.name not in APPLIED and getattr(config, field.name) != getattr(plain, field.name)
    ]
    if others:
        raise ValueError(
            f'--augment {spec}: detection and segmentation apply {", ".join(APPLIED)} '
            f"(the colour jitter's strength), not {', '.join(others)}"
        )
    return {
        'flip': config.flip_horizontal,
        'scale_range': tuple(config.scale_range),
        'colour': config.brightness_delta,
    }


def parse(serialized, settings) -> dict:
    """One record -> its encoded image, boxes (yxyx fractions), classes, crowd flags, and the
    masks or class map `settings` needs."""
    floats = tf.io.VarLenFeature(tf.float32)
    spec = {key: floats for key in detection.BOX_KEYS}
    spec[features.ENCODED] = tf.io.FixedLenFeature([], tf.string)
    spec[detection.OBJECT_LABEL] = tf.io.VarLenFeature(tf.int64)
    spec[detection.IS_CROWD] = tf.io.VarLenFeature(tf.int64)
    if settings.reads_masks:
        spec[detection.MASK] = tf.io.VarLenFeature(tf.string)
    if settings.task == SEMANTIC and settings.class_maps:
        spec[detection.CLASS_MAP] = tf.io.FixedLenFeature([], tf.string)
    example = tf.io.parse_single_example(serialized, spec)
    dense = {
        key: tf.sparse.to_dense(value) if isinstance(value, tf.sparse.SparseTensor) else value
        for key, value in example.items()
    }
    xmin, ymin, xmax, ymax = (dense[key] for key in detection.BOX_KEYS)
    dense['boxes'] = tf.stack([ymin, xmin, ymax, xmax], axis=-1)
    return dense


def decode(parsed, settings):
    """(image float32 [H, W, 3], geometry.Objects, class map uint8 [H, W, 1] or None)."""
    image = tf.io.decode_image(parsed[features.ENCODED], channels=3, expand_animations=False)
    image = tf.cast(image, tf.float32)
    classes = tf.cast(parsed[detection.OBJECT_LABEL], tf.int32)
    crowd = tf.cast(parsed[detection.IS_CROWD], tf.bool)
    objects = geometry.Objects(parsed['boxes'], classes, crowd)
    class_map = None
    if settings.task == SEMANTIC and settings.class_maps:
        class_map = tf.io.decode_png(parsed[detection.CLASS_MAP], channels=1)
    if settings.reads_masks:
        size = tf.shape(image)[:2]
        pngs = parsed[detection.MASK]
        masks = tf.cond(  # an image without objects has no masks to decode (map_fn needs one)
            tf.size(pngs) > 0,
            lambda: tf.map_fn(
                lambda png: tf.io.decode_png(png, channels=1)[..., 0],
                pngs,
                fn_output_signature=tf.TensorSpec([None, None], tf.uint8),
            ),
            lambda: tf.zeros(tf.concat([[0], size], 0), tf.uint8),
        )
        masks = tf.reshape(masks, tf.concat([[-1], size], 0))
        if settings.task == SEMANTIC and not settings.class_maps:
            class_map = classes_of_masks(masks, classes)
        if settings.keeps_masks:
            objects = objects.replace(masks=masks)
    return image, objects, class_map


def classes_of_masks(masks, classes):
    """A class map [H, W, 1] from instance masks [N, H, W]: each pixel the class + 1 of the
    last object covering it (as objects drawn in order would be), 0 where none does."""
    covered = tf.cast(masks > 0, tf.int32)
    order = tf.range(1, tf.shape(masks)[0] + 1)  # later objects on top
    none = tf.zeros(tf.concat([[1], tf.shape(masks)[1:]], 0), tf.int32)  # none: background
    top = tf.reduce_max(tf.concat([none, covered * order[:, None, None]], 0), axis=0)
    values = tf.concat([[0], classes + 1], 0)
    return tf.cast(tf.gather(values, top), tf.uint8)[..., None]


def augmented(record, seed, settings):
    """A training example: one record decoded, flipped, placed with jitter, colour-jittered;
    (image float32 [canvas, 3], Objects, class map or None)."""
    image, objects, class_map = decode(parse(record, settings), settings)
    if settings.flip:
        flipped = tf.random.stateless_uniform([], seed) < 0.5
        image, objects, class_map = geometry.flip(image, objects, class_map, flipped=flipped)
    image, objects, class_map, placement = geometry.place(
        image, objects, settings.canvas, settings.scale_range, _salted(seed, 1), class_map
    )
    if settings.colour:  # the padding stays 0, as evaluation and serving have it
        jittered = geometry.colour_jitter(image, _salted(seed, 2), settings.colour)
        image = jittered * placement.covered(settings.canvas)[..., None]
    return image, objects, class_map


def _salted(seed, salt):
    """A seed of its own for each draw of an image (adding to a seed would give one image's
    draw another's)."""
    return tf.random.experimental.stateless_fold_in(seed, salt)


def training_dataset(info, split, batch_size, settings, targets, *, seed=0, **reading):
    """Endless (or `epochs`) batches of `targets(image, objects, class_map)`, the model's
    (inputs, targets), from `split` of the build `info`.

    Args:
        reading: start_epoch, epochs (0: no end), skip_batches (of start_epoch, already
            trained on), batches_per_epoch (0: every full batch), input_context, options (an
            InputOptions: cycle length, shuffle buffer, determinism).
    """
    opts = reading.get('options') or InputOptions()
    source = shard_reading.training_source(info, split, reading.get('input_context'), opts)
    start_epoch = reading.get('start_epoch', 0)
    per_epoch_batches = reading.get('batches_per_epoch', 0)

    def epoch_batches(epoch):
        resumed = tf.cast(epoch == start_epoch, tf.int64) * reading.get('skip_batches', 0)
        records = source.epoch_records(seed, epoch, resumed * batch_size, opts)
        if 0 < source.per_worker < per_epoch_batches * batch_size:
            # A worker's share of uneven shards (or a split) short of the epoch's batches: its
            # records again fill them, or it would run out before the others and leave them
            # waiting in their next collective.
            records = shard_reading.filled(source, records, seed, epoch, opts)
        image_seed = lambda position: tf.stack(
            [tf.cast(seed, tf.int64) * SEED_MULTIPLIER + epoch, position]
        )
        examples = records.map(
            lambda record, position: targets(*augmented(record, image_seed(position), settings)),
            num_parallel_calls=AUTOTUNE,
            deterministic=opts.deterministic,
        )
        batches = examples.batch(batch_size, drop_remainder=True)
        if per_epoch_batches:
            batches = batches.take(per_epoch_batches - resumed)
        return batches

    epochs = tf.data.Dataset.range(start_epoch, reading.get('epochs') or 2**62)
    return _finish(epochs.flat_map(epoch_batches), opts)


def evaluation_dataset(info, split, batch_size, settings, options=None, input_context=None):
    """One ordered pass over `split`: batches of (images uint8 [canvas, 3], a dict of
    `index` (the record's position in the split), `scaled` and `offset` (its Placement) and,
    for SEMANTIC, `class_map` [canvas] (VOID in the padding))."""
    opts = options or InputOptions()
    records = shard_reading.ordered_records(info, split, opts, input_context)
    examples = tf.data.Dataset.zip(records, tf.data.Dataset.range(2**62)).map(
        lambda record, index: evaluation_example(record, index, settings),
        num_parallel_calls=AUTOTUNE,
    )
    return _finish(examples.batch(batch_size), opts)


def evaluation_example(record, index, settings):
    """(image uint8 on the canvas, {index, scaled, offset[, class_map]}) of one record."""
    if settings.task == INSTANCE:  # scored against the records' own masks (coco_metrics.py)
        settings = dataclasses.replace(settings, task=DETECTION, masks=False)
    image, objects, class_map = decode(parse(record, settings), settings)
    image, _, class_map, placement = geometry.place(
        image, objects, settings.canvas, class_map=class_map
    )
    found = {'index': index, 'scaled': placement.scaled, 'offset': placement.offset}
    if class_map is not None:
        found['class_map'] = class_map[..., 0]
    return tf.cast(tf.round(image), tf.uint8), found


def _finish(dataset, opts):
    options = tf.data.Options()
    options.deterministic = opts.deterministic
    return dataset.prefetch(AUTOTUNE).with_options(options)
