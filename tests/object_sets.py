"""Detection and segmentation sets made in the tests: real JPEG images of coloured shapes on
textured backgrounds, and their COCO, Pascal VOC and YOLO annotations, each shape's polygon
and box exact (the pixels are drawn from them)."""

import json
import os

import numpy as np
from PIL import Image
from PIL import ImageDraw

CLASSES = ('circle', 'square', 'triangle')
COCO_IDS = (1, 3, 7)  # non-contiguous, as COCO's are


def shape_polygon(shape, x, y, size):
    """The polygon (pixel corners, x, y, ...) of a shape whose box is x, y, size, size."""
    if shape == 'square':
        return [x, y, x + size, y, x + size, y + size, x, y + size]
    if shape == 'triangle':
        return [x + size / 2, y, x + size, y + size, x, y + size]
    angles = np.linspace(0, 2 * np.pi, 24, endpoint=False)
    r = size / 2
    return [v for a in angles for v in (x + r + r * np.cos(a), y + r + r * np.sin(a))]


def make_image(rng, width, height, count):
    """(JPEG bytes, [(class, polygon, box [x, y, w, h])]) of an image with `count` shapes."""
    noise = rng.integers(60, 200, (height // 8 + 1, width // 8 + 1, 3), dtype=np.uint8)
    image = Image.fromarray(noise).resize((width, height), Image.Resampling.BILINEAR)
    draw = ImageDraw.Draw(image)
    shapes = []
    for _ in range(count):
        shape = CLASSES[int(rng.integers(len(CLASSES)))]
        size = int(rng.integers(12, max(13, min(width, height) // 3)))
        x, y = int(rng.integers(0, width - size)), int(rng.integers(0, height - size))
        polygon = [float(v) for v in shape_polygon(shape, x, y, size)]
        colour = tuple(int(c) for c in rng.integers(0, 255, 3))
        draw.polygon(polygon, fill=colour)
        xs, ys = polygon[0::2], polygon[1::2]
        box = [min(xs), min(ys), max(xs) - min(xs), max(ys) - min(ys)]
        shapes.append((shape, polygon, box))
    return _jpeg(image), shapes


def _jpeg(image):
    import io

    out = io.BytesIO()
    image.save(out, 'JPEG', quality=90)
    return out.getvalue()


def write_coco(folder, images=12, seed=0, sizes=((96, 64), (80, 120))):
    """A COCO set in `folder` (images/ and annotations/instances.json); returns the JSON."""
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(folder, 'images', 'sub'), exist_ok=True)
    os.makedirs(os.path.join(folder, 'annotations'), exist_ok=True)
    coco = {'images': [], 'annotations': [], 'categories': []}
    coco['categories'] = [{'id': i, 'name': n} for i, n in zip(COCO_IDS, CLASSES)]
    ids = dict(zip(CLASSES, COCO_IDS))
    for index in range(images):
        width, height = sizes[index % len(sizes)]
        data, shapes = make_image(rng, width, height, index % 4)
        name = f'sub/img{index:03d}.jpg' if index % 3 == 0 else f'img{index:03d}.jpg'
        with open(os.path.join(folder, 'images', name), 'wb') as f:
            f.write(data)
        image_id = 1000 + index
        coco['images'].append({'id': image_id, 'file_name': name, 'width': width, 'height': height})
        for shape, polygon, box in shapes:
            coco['annotations'].append(
                {
                    'id': len(coco['annotations']) + 1,
                    'image_id': image_id,
                    'category_id': ids[shape],
                    'bbox': box,
                    'area': box[2] * box[3],
                    'iscrowd': 0,
                    'segmentation': [polygon],
                }
            )
    path = os.path.join(folder, 'annotations', 'instances.json')
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(coco, f)
    return coco


def _mask_png(path, pixels):
    image = Image.fromarray(pixels.astype(np.uint8), 'P')
    image.putpalette([v for i in range(256) for v in (i * 7 % 256, i * 13 % 256, i * 29 % 256)])
    image.save(path)


def write_voc(folder, images=8, seed=1, segmented=(0, 1, 2)):
    """A Pascal VOC folder (Annotations, JPEGImages, ImageSets/Main, and segmentation PNGs of
    the images numbered in `segmented`), its classes ours: [(id, [(class, box), ...])]."""
    rng = np.random.default_rng(seed)
    for sub in ('Annotations', 'JPEGImages', 'ImageSets/Main', 'SegmentationClass',
                'SegmentationObject'):  # fmt: skip
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    with open(os.path.join(folder, 'labelmap.txt'), 'w', encoding='utf-8') as f:
        f.write('# label:color_rgb:parts:actions\nbackground:0,0,0::\n')
        f.writelines(f'{name}:{i * 40},0,0::\n' for i, name in enumerate(CLASSES, 1))
    made = []
    for index in range(images):
        image_id = f'2008_{index:06d}'
        width, height = (100, 70) if index % 2 else (72, 96)
        data, shapes = make_image(rng, width, height, 1 + index % 3)
        with open(os.path.join(folder, 'JPEGImages', f'{image_id}.jpg'), 'wb') as f:
            f.write(data)
        objects = ''.join(
            f'<object><name>{shape}</name><difficult>{int(i == 1)}</difficult>'
            f'<truncated>0</truncated><bndbox><xmin>{int(box[0]) + 1}</xmin>'
            f'<ymin>{int(box[1]) + 1}</ymin><xmax>{int(box[0] + box[2])}</xmax>'
            f'<ymax>{int(box[1] + box[3])}</ymax></bndbox></object>'
            for i, (shape, _, box) in enumerate(shapes)
        )
        xml = (
            f'<annotation><folder>VOC2012</folder><filename>{image_id}.jpg</filename>'
            f'<size><width>{width}</width><height>{height}</height><depth>3</depth></size>'
            f'{objects}</annotation>'
        )
        with open(os.path.join(folder, 'Annotations', f'{image_id}.xml'), 'w') as f:
            f.write(xml)
        if index in segmented:
            classes = np.zeros((height, width), np.uint8)
            instances = np.zeros((height, width), np.uint8)
            for i, (shape, polygon, _) in enumerate(shapes):
                mask = Image.new('L', (width, height))
                ImageDraw.Draw(mask).polygon(polygon, fill=1)
                inside = np.asarray(mask) > 0
                classes[inside] = CLASSES.index(shape) + 1
                instances[inside] = i + 1
            classes[0, :] = 255  # a void border row, as VOC's outlines are
            _mask_png(os.path.join(folder, 'SegmentationClass', f'{image_id}.png'), classes)
            _mask_png(os.path.join(folder, 'SegmentationObject', f'{image_id}.png'), instances)
        made.append((image_id, [(s, b) for s, _, b in shapes]))
    half = len(made) // 2
    for split, part in (('train', made[:half]), ('val', made[half:])):
        with open(os.path.join(folder, 'ImageSets', 'Main', f'{split}.txt'), 'w') as f:
            f.writelines(f'{image_id}\n' for image_id, _ in part)
    return made


def write_yolo(folder, per_split=5, seed=2):
    """A YOLO set (data.yaml, images/<split>, labels/<split>): boxes on the even images'
    objects, polygons on the odd ones'; returns {split: [(name, shapes)]}."""
    rng = np.random.default_rng(seed)
    made = {}
    for split in ('train', 'val'):
        os.makedirs(os.path.join(folder, 'images', split), exist_ok=True)
        os.makedirs(os.path.join(folder, 'labels', split), exist_ok=True)
        made[split] = []
        for index in range(per_split):
            width, height = 90, 60
            data, shapes = make_image(rng, width, height, index % 3)
            name = f'{split}_{index}.jpg'
            with open(os.path.join(folder, 'images', split, name), 'wb') as f:
                f.write(data)
            lines = []
            for shape, polygon, (x, y, w, h) in shapes:
                cls = CLASSES.index(shape)
                if index % 2:
                    points = [v / (width if i % 2 == 0 else height) for i, v in enumerate(polygon)]
                    lines.append(' '.join([str(cls), *(f'{v:.6f}' for v in points)]))
                else:
                    xc, yc = (x + w / 2) / width, (y + h / 2) / height
                    lines.append(f'{cls} {xc:.6f} {yc:.6f} {w / width:.6f} {h / height:.6f}')
            if lines:
                with open(os.path.join(folder, 'labels', split, f'{split}_{index}.txt'), 'w') as f:
                    f.write('\n'.join(lines) + '\n')
            made[split].append((name, shapes))
    with open(os.path.join(folder, 'data.yaml'), 'w', encoding='utf-8') as f:
        f.write('path: .\ntrain: images/train\nval: images/val\nnames:\n')
        f.writelines(f'  {i}: {name}\n' for i, name in enumerate(CLASSES))
    return made
