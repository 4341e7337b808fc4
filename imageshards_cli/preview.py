"""`imageshards preview`: a 5x5 grid of training images as the model will see them.

The write-up's sanity check: the first 25 images that `make_dataset(training=True)` delivers
(random-resized crops and augmentation, or with --patches-per-image the random patches, mixed
across images as in training), each captioned with its label text and record id, so that wrong
labels, crops that miss the object or too strong augmentation show at a glance. A detection or
segmentation build's grid shows its first training examples as the trainer's input makes them
(trainer/objects_input.py: flipped, jittered, cropped onto the `--image-size` canvas), their
boxes, classes and masks moved with the pixels and drawn (imageshards_cli/report_objects.py;
`imageshards report` draws them as stored). Patches are
scaled up with nearest-neighbour sampling so that their pixels stay visible.

Its defaults are the trainer's (no augmentation, 224 px, `--crop-area auto` for the split's
size), and `--config` takes the trainer's YAML, so that the grid shows what that training sees.

Example:
    imageshards preview out/ --config configs/train_smoke.yaml --out grid.png
"""

import dataclasses
import io
import math
import posixpath
import sys

import numpy as np
from matplotlib.figure import Figure
from PIL import Image

from imageshards import console
from imageshards import dataset_json
from imageshards import flags
from imageshards_cli import report_objects
from trainer import config as config_lib

# TensorFlow (and the trainer's input pipeline) are imported where used, so that `--help` and
# argument errors come at once.
# pylint: disable=import-outside-toplevel

GRID = 5  # images per row and column
_MIN_SHOWN = 96  # pixels: smaller images (patches) are repeated up to at least this size


@dataclasses.dataclass(frozen=True)
class Grid:
    """The images shown, in training order, and what each is captioned with."""

    images: np.ndarray  # [count, height, width, 3] uint8
    labels: np.ndarray  # label id of each image (of the source image, for patches); in a
    # multi-label build, its multi-hot row
    ids: np.ndarray  # image/id of each (source) image
    captions: list


def training_images(data_dir, split='train', *, count=GRID * GRID, **dataset_args):
    """The first `count` images (or patches) of the training input pipeline, captioned.

    Args:
        data_dir: a build's output directory.
        split: the split to read.
        count: how many; fewer if the split yields fewer.
        **dataset_args: make_dataset's arguments and options (seed, image_size, augment,
            patches_per_image, patch_size, crop_area ...), as the trainer passes them; a
            `crop_area` of 'auto' is resolved for the split's size, as the trainer does.
    """
    from trainer import dataset_info
    from trainer import input_pipeline

    info = dataset_info.load(data_dir)
    available = info.num_records(split) * max(1, dataset_args.get('patches_per_image', 0))
    count = min(count, available)
    if not count:
        raise ValueError(f'split {split!r} of {data_dir} has no records to show')
    dataset = input_pipeline.make_dataset(
        data_dir, split, count, training=True, info=info, with_ids=True, epochs=1, **dataset_args
    )
    images, labels, ids = (tensor.numpy() for tensor in next(iter(dataset)))
    patches = dataset_args.get('patches_per_image', 0) > 0
    captions = [
        f'{_label_text(info, label)}\n{"patch of " if patches else ""}id {image_id}'
        for label, image_id in zip(labels, ids)
    ]
    return Grid(images, labels, ids, captions)


def _label_text(info, label):
    """A caption's label: the name, or every name of a multi-label image (`-` for none), three
    to a line."""
    if not info.multi_label:
        return info.labels[label]
    names = [info.labels[i] for i in np.nonzero(label)[0]] or ['-']
    return '\n'.join(', '.join(names[i : i + 3]) for i in range(0, len(names), 3))


def render(grid):
    """PNG bytes of the grid, each image over its caption."""
    figure = Figure(figsize=(GRID * 2.0, GRID * 2.3), dpi=100, layout='constrained')
    axes = figure.subplots(GRID, GRID).ravel()
    height, width = grid.images.shape[1:3]
    scale = math.ceil(_MIN_SHOWN / max(height, width))
    for ax, image, caption in zip(axes, grid.images, grid.captions):
        if scale > 1:
            # Nearest-neighbour by repeating pixels: small patches stay sharp, not blurred.
            image = np.repeat(np.repeat(image, scale, axis=0), scale, axis=1)
        ax.imshow(image, interpolation='nearest' if scale > 1 else 'antialiased')
        ax.set_title(caption, fontsize=9)
    for ax in axes:
        ax.set_axis_off()
    buffer = io.BytesIO()
    figure.savefig(buffer, format='png')
    return buffer.getvalue()


def build_arg_parser():
    parser = flags.ArgumentParser(prog='imageshards preview', description=__doc__)
    add = parser.add_argument
    add('build', help='output directory of `imageshards build`')
    add('--config', help="the trainer's YAML: its augmentation, image size, crops and patches")
    add('--split', default=config_lib.TrainConfig.train_split, help='the split to read')
    config_lib.add_trainer_flags(
        parser,
        (
            '--augment',
            '--seed',
            '--image-size',
            '--crop-area',
            '--patches-per-image',
            '--patch-size',
        ),
    )
    add('--out', help='PNG file to write (default BUILD/preview.png)')
    add('--verbose', action='store_true', help="also show TensorFlow's own log lines")
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    parser = build_arg_parser()
    args = config_lib.parse_with_trainer_yaml(parser, argv)
    if args.patches_per_image and args.patch_size < 1:
        parser.error('--patches-per-image needs --patch-size')
    console.configure_logging(args.verbose)
    out = args.out or posixpath.join(args.build.rstrip('/'), 'preview.png')
    try:
        build = dataset_json.Build.load(args.build)
        if build.kind.has_objects:  # as the trainer's input makes them, objects drawn
            shown = training_objects(args.build, args.split, args.image_size, args.seed)
            return _write(out, report_objects.records_grid_png(shown, build.labels, GRID))
        grid = training_images(
            args.build,
            args.split,
            seed=args.seed,
            image_size=args.image_size,
            augment=args.augment,
            crop_area=args.crop_area,
            patches_per_image=args.patches_per_image,
            patch_size=args.patch_size,
        )
    except (ValueError, FileNotFoundError) as e:
        return console.refuse('imageshards preview', e)
    return _write(out, render(grid))


def training_objects(data_dir, split, image_size, seed, count=GRID * GRID) -> list:
    """The first `count` training examples of a detection build as the trainer's input makes
    them (trainer/objects_input.py: flipped, scale-jittered, cropped onto the canvas of
    `image_size`, colour-jittered; boxes, classes and masks moved with the pixels), each as
    record values that report_objects.draw draws."""
    from trainer import dataset_info
    from trainer import objects_input

    info = dataset_info.load(data_dir)
    settings = objects_input.ObjectInput(canvas=tuple(image_size), masks=info.kind.masks)

    def example(image, objects, _class_map):
        found = {'image': image, 'boxes': objects.boxes, 'classes': objects.classes}
        found['crowd'] = objects.crowd
        if objects.masks is not None:
            found['masks'] = objects.masks
        return found

    data = objects_input.training_dataset(info, split, 1, settings, example, seed=seed, epochs=1)
    shown = []
    for index, batch in enumerate(data.take(count).as_numpy_iterator()):
        shown.append(_record_values(index, {key: value[0] for key, value in batch.items()}))
    return shown


def _record_values(index, example) -> dict:
    """A training example as the record values report_objects.draw reads (PNG bytes)."""
    from imageshards.kinds import detection
    from imageshards.kinds import features

    def png(pixels):
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, format='PNG')
        return out.getvalue()

    boxes = example['boxes']
    values = {features.ENCODED: [png(np.round(example['image']).astype(np.uint8))]}
    values.update(zip(detection.BOX_KEYS, (boxes[:, 1], boxes[:, 0], boxes[:, 3], boxes[:, 2])))
    values[detection.OBJECT_LABEL] = example['classes']
    values[detection.IS_CROWD] = example['crowd']
    values[features.ID] = [f'#{index + 1}']
    if 'masks' in example:
        values[detection.MASK] = [png(mask) for mask in example['masks']]
    return values


def _write(out, png):
    import tensorflow as tf

    with tf.io.gfile.GFile(out, 'wb') as f:
        f.write(png)
    print(out)
    return 0
