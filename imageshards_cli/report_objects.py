"""What `imageshards report` and `preview` say of a build of objects (a detection or
segmentation build): objects per class and split, objects per image, box sizes in COCO's
classes (small under 32x32 pixels, medium under 96x96, large), and a grid of images with their
boxes, classes and masks drawn, read from the build's own records as stored."""

import collections
import io

import numpy as np
from matplotlib.figure import Figure
from PIL import Image
from PIL import ImageDraw

from imageshards import dataset_json
from imageshards import records
from imageshards.kinds import detection
from imageshards.kinds import features

SMALL, MEDIUM = 32 * 32, 96 * 96  # COCO's areas (pixels) between small, medium and large
GRID = 4  # images per side of report's grid
_COLOURS = [(230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48)]
_COLOURS += [(145, 30, 180), (70, 240, 240), (240, 50, 230), (210, 245, 60), (0, 128, 128)]


def size_class(area) -> str:
    """COCO's size of an object of `area` pixels."""
    return 'small' if area < SMALL else 'medium' if area < MEDIUM else 'large'


def split_records(build, split, limit=None):
    """{key: values} of a split's records in stored order (`limit` of them at most)."""
    count = 0
    for path in build.shard_paths(split):
        for _, record in records.shard_records(path, build.shard_format):
            example = records.parse_example(record)
            yield {key: values for key, (_, values) in records.example_values(example).items()}
            count += 1
            if limit is not None and count >= limit:
                return


def measures(build) -> dict:
    """The object figures of every split of a build, read from its records."""
    found = {}
    for split in build.splits:
        per_image, sizes = collections.Counter(), collections.Counter()
        by_class = collections.Counter()
        crowds = 0
        for values in split_records(build, split):
            per_image[len(values[detection.OBJECT_LABEL])] += 1
            by_class.update(v.decode('utf-8', 'replace') for v in values[detection.OBJECT_TEXT])
            crowds += sum(values[detection.IS_CROWD])
            sizes.update(size_class(area) for area in values[detection.AREA])
        images = sum(per_image.values())
        objects = sum(n * count for n, count in per_image.items())
        found[split] = {
            'images': images,
            'objects': objects,
            'crowds': crowds,
            'objects_per_image': round(objects / max(images, 1), 3),
            'images_by_objects': {str(n): per_image[n] for n in sorted(per_image)},
            'object_counts': {label: by_class[label] for label in build.labels if by_class[label]},
            'box_sizes': {name: sizes[name] for name in ('small', 'medium', 'large')},
        }
    return found


def draw(values, labels) -> np.ndarray:
    """A record's image (RGB array) with its masks tinted and its boxes and classes drawn."""
    image = Image.open(io.BytesIO(values[features.ENCODED][0])).convert('RGB')
    width, height = image.size
    pixels = np.asarray(image).astype(np.float32)
    ids = values[detection.OBJECT_LABEL]
    for i, png in enumerate(values.get(detection.MASK, ())):
        mask = np.asarray(Image.open(io.BytesIO(png))) > 0
        if mask.shape == pixels.shape[:2]:
            pixels[mask] = 0.55 * pixels[mask] + 0.45 * np.array(_COLOURS[ids[i] % len(_COLOURS)])
    image = Image.fromarray(pixels.astype(np.uint8))
    pen = ImageDraw.Draw(image)
    boxes = zip(*(values[key] for key in detection.BOX_KEYS))
    for i, (xmin, ymin, xmax, ymax) in enumerate(boxes):
        colour = _COLOURS[ids[i] % len(_COLOURS)]
        corners = [xmin * width, ymin * height, xmax * width - 1, ymax * height - 1]
        pen.rectangle(corners, outline=colour, width=max(1, round(min(width, height) / 150)))
        crowd = ' (crowd)' if values[detection.IS_CROWD][i] else ''
        pen.text((corners[0] + 2, corners[1] + 1), labels[ids[i]] + crowd, fill=colour)
    return np.asarray(image)


def grid_png(build, split, side=GRID) -> bytes:
    """PNG of a split's first side x side images with their objects drawn."""
    return records_grid_png(list(split_records(build, split, side * side)), build.labels, side)


def records_grid_png(shown, labels, side=GRID) -> bytes:
    """PNG of records' values ({key: values}, as split_records gives) with objects drawn."""
    figure = Figure(figsize=(side * 2.6, side * 2.6), dpi=100, layout='constrained')
    axes = np.asarray(figure.subplots(side, side)).ravel()
    for ax, values in zip(axes, shown):
        ax.imshow(draw(values, labels))
        count = len(values[detection.OBJECT_LABEL])
        ax.set_title(
            f'id {values[features.ID][0]}: {count} object{"" if count == 1 else "s"}', fontsize=8
        )
    for ax in axes:
        ax.set_axis_off()
    out = io.BytesIO()
    figure.savefig(out, format='png')
    return out.getvalue()


def add(data_dir, out_dir, metrics, write) -> list:
    """Adds a build of objects' measures to `metrics` and writes its grid (objects.png) into
    `out_dir` with `write(path, data)`; returns report.md's lines ([] for another build)."""
    build = dataset_json.Build.load(data_dir)
    if not build.kind.has_objects:
        return []
    found = measures(build)
    metrics['objects'] = found
    first = next(iter(build.splits))
    write(f'{out_dir.rstrip("/")}/objects.png', grid_png(build, first))
    return markdown(found, first)


def markdown(found, first) -> list:
    lines = ['', '## Objects', '']
    lines.append('| split | images | objects | per image | crowds | small | medium | large |')
    lines.append('|---|---|---|---|---|---|---|---|')
    for split, info in found.items():
        sizes = ' | '.join(f'{n:,}' for n in info['box_sizes'].values())
        lines.append(
            f'| {split} | {info["images"]:,} | {info["objects"]:,} | {info["objects_per_image"]} '
            f'| {info["crowds"]:,} | {sizes} |'
        )
    lines += ['', '| class | ' + ' | '.join(found) + ' |', '|---|' + '---|' * len(found)]
    classes = sorted({label for info in found.values() for label in info['object_counts']})
    for label in classes:
        counts = ' | '.join(f'{info["object_counts"].get(label, 0):,}' for info in found.values())
        lines.append(f'| {label} | {counts} |')
    lines += ['', f'![the first images of {first}, objects drawn](objects.png)']
    return lines


def headline(found) -> list:
    """What the report prints of the objects."""
    return [
        f'objects in {split}: {info["objects"]:,} in {info["images"]:,} images '
        f'({info["objects_per_image"]} per image; small {info["box_sizes"]["small"]:,}, '
        f'medium {info["box_sizes"]["medium"]:,}, large {info["box_sizes"]["large"]:,})'
        for split, info in found.items()
    ]
