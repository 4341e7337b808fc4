"""A COCO-like detection and instance-segmentation set of real-content images, and what is true
of it.

Each image is a cut of one of the real pictures bench/trusted_data.py cuts from (photographs,
a portrait, a terrain map), 320-640 px a side, with 0-12 objects pasted on it (6% have none):
shapes, handwritten digits on cards and photo patches of 10-200 px (log-uniform: many small,
as in COCO), drawn in bench/coco_objects.py through the mask of their own polygons, so every
polygon is exact. A tenth of the objects are in two parts (two polygons); 4% are crowds
(`iscrowd: 1`) whose segmentation is pycocotools' RLE of the pasted mask, half compressed
(`counts` a string), half uncompressed (`counts` a list). `area` and `bbox` are COCO's:
the area of the mask pycocotools makes of the segmentation, and the polygons' extent
(pycocotools' toBbox for a crowd). Category ids and image ids are not contiguous; a quarter of
the files lie in subfolders.

A few annotations are wrong on purpose (one per `--bad-every` images; none with 0), of the
kinds a build must reject or clip: PLANTED below. annotations/planted.json names each by
annotation id, so a build's report can be checked against it.

Model Garden's converter stops on a compressed RLE (pycocotools' frPyObjects takes every dict
for an uncompressed one), on an unknown category and on a two-point polygon. With `--peer-safe`
the set has none of them (every RLE uncompressed, as in COCO 2017's own instances files; the
planted kinds PEER_SAFE): the set both builds are timed on. Its images are the same.

    python -m bench.coco_like --out DIR --images 20000 --seed 0 [--bad-every 200] [--peer-safe]

writes DIR/images/..., DIR/annotations/instances.json and DIR/annotations/planted.json; an
existing set made with the same arguments is reused.
"""

import argparse
import io
import json
import math
import multiprocessing
import os
import time

import numpy as np
from PIL import Image
from pycocotools import mask as coco_mask

from bench import coco_objects
from bench import trusted_data

OBJECTS = 12  # at most, per image
EMPTY_SHARE = 0.06
PARTS_SHARE = 0.1
CROWD_SHARE = 0.04
# The wrong annotations a build must reject (all but one) or clip ('past_edge').
PLANTED = (
    'past_edge',  # a box 2 px past the right edge: clip it
    'outside',  # a box right of the image, none of it inside
    'left_of_image',  # a box left of the image (negative x), none of it inside
    'zero_size',  # width 0
    'negative_size',  # height below 0
    'short_polygon',  # a polygon of two points (4 numbers, which pycocotools takes for a box)
    'missing_image',  # an image_id that no image has
    'unknown_category',  # a category_id that no category has
)
# What Model Garden's converter survives: it stops on an unknown category (a KeyError) and on a
# two-point polygon (pycocotools' frPyObjects takes 4 numbers for a box, then wants an array).
PEER_SAFE = tuple(k for k in PLANTED if k not in ('unknown_category', 'short_polygon'))
_WORKER = {}


def image_id(index):
    """Image ids, like COCO's, are neither contiguous nor from 0."""
    return 100_003 + 7 * index


def file_name(index):
    name = f'{image_id(index):012d}.jpg'
    return f'part_{index % 8}/{name}' if index % 4 == 0 else name


def _start_worker():
    from sklearn.datasets import load_digits  # pylint: disable=import-outside-toplevel

    digits = load_digits()
    _WORKER['pictures'] = trusted_data.pictures()
    _WORKER['digits'] = [digits.images[digits.target == d] for d in range(10)]


def _background(rng, size):
    pictures = _WORKER['pictures']
    picture = pictures[int(rng.integers(0, len(pictures)))]
    scale = rng.uniform(0.35, 1.0)
    width = min(picture.width, picture.height * size[0] / size[1]) * scale
    height = width * size[1] / size[0]
    left = rng.uniform(0, picture.width - width)
    top = rng.uniform(0, picture.height - height)
    image = picture.resize(
        size, Image.Resampling.BILINEAR, box=(left, top, left + width, top + height)
    )
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return image


def _polygon_annotation(canvas, category, rng):
    """Pastes one object; its annotation (without ids)."""
    width, height = canvas.size
    name = coco_objects.NAMES[coco_objects.IDS.index(category)]
    size = math.exp(rng.uniform(math.log(10), math.log(200)))
    centre = rng.uniform(
        (size / 2 + 1, size / 2 + 1), (width - size / 2 - 1, height - size / 2 - 1)
    )
    polygons = [coco_objects.outline(name, centre, size, rng)]
    if size >= 30 and rng.random() < PARTS_SHARE:
        polygons = coco_objects.split(polygons[0], size * rng.uniform(0.1, 0.25)) or polygons
    polygons = [np.round(np.clip(p, 0, (width, height)), 2) for p in polygons]
    coco_objects.paste(canvas, name, polygons, _WORKER['pictures'], _WORKER['digits'], rng)
    flat = [[float(v) for v in p.ravel()] for p in polygons]
    rle = coco_mask.merge(coco_mask.frPyObjects(flat, height, width))
    every = np.concatenate(polygons)
    low, high = every.min(0), every.max(0)
    box = [float(low[0]), float(low[1]), float(high[0] - low[0]), float(high[1] - low[1])]
    return {
        'segmentation': flat,
        'area': float(coco_mask.area(rle)),
        'bbox': [round(v, 2) for v in box],
        'iscrowd': 0,
        'category_id': category,
    }


def _crowd_annotation(canvas, category, rng, compressed):
    width, height = canvas.size
    name = coco_objects.NAMES[coco_objects.IDS.index(category)]
    size = rng.uniform(40, min(200, width - 2, height - 2))
    centre = rng.uniform(
        (size / 2 + 1, size / 2 + 1), (width - size / 2 - 1, height - size / 2 - 1)
    )
    pixels = coco_objects.crowd_mask(
        canvas, name, centre, size, _WORKER['pictures'], _WORKER['digits'], rng
    )
    rle = coco_mask.encode(pixels)
    if compressed:
        segmentation = {'size': [height, width], 'counts': rle['counts'].decode('ascii')}
    else:
        segmentation = {'size': [height, width], 'counts': uncompressed_counts(pixels)}
    return {
        'segmentation': segmentation,
        'area': float(coco_mask.area(rle)),
        'bbox': [float(v) for v in coco_mask.toBbox(rle)],
        'iscrowd': 1,
        'category_id': category,
    }


def uncompressed_counts(pixels):
    """COCO's uncompressed RLE of a 0/1 mask: run lengths down the columns (Fortran order),
    the first a run of zeros (0 when the first pixel is set)."""
    flat = np.asarray(pixels, np.uint8).ravel(order='F')
    edges = np.flatnonzero(np.diff(flat)) + 1
    bounds = np.concatenate([[0], edges, [flat.size]])
    runs = np.diff(bounds).tolist()
    return [0, *runs] if flat[0] else runs


def make_image(job):
    """Writes image `index`; returns (its `images` entry, its annotations without ids)."""
    index, root, seed, compressed_rle = job
    rng = np.random.default_rng((seed, index))
    size = (int(rng.integers(320, 641)), int(rng.integers(320, 641)))
    canvas = _background(rng, size)
    count = 0 if rng.random() < EMPTY_SHARE else int(rng.integers(1, OBJECTS + 1))
    annotations = []
    for _ in range(count):
        category = int(coco_objects.IDS[int(rng.integers(0, len(coco_objects.IDS)))])
        if rng.random() < CROWD_SHARE:
            compressed = bool(rng.random() < 0.5) and compressed_rle
            annotations.append(_crowd_annotation(canvas, category, rng, compressed))
        else:
            annotations.append(_polygon_annotation(canvas, category, rng))
    name = file_name(index)
    buffer = io.BytesIO()
    canvas.save(buffer, format='JPEG', quality=90)
    path = os.path.join(root, 'images', name)
    with open(path, 'wb') as f:
        f.write(buffer.getvalue())
    entry = {'id': image_id(index), 'file_name': name, 'width': size[0], 'height': size[1]}
    return entry, annotations


def planted(kind, image, rng):
    """One wrong annotation of `kind` on `image`."""
    width, height = image['width'], image['height']
    w, h = float(rng.uniform(10, 40)), float(rng.uniform(10, 40))
    x, y = float(rng.uniform(0, width - w)), float(rng.uniform(0, height - h))
    category = coco_objects.IDS[int(rng.integers(0, len(coco_objects.IDS)))]
    image_id_ = image['id']
    if kind == 'past_edge':
        x = width - w + 2
    elif kind == 'outside':
        x = width + 5
    elif kind == 'left_of_image':
        x = -w - 5
    elif kind == 'zero_size':
        w = 0.0
    elif kind == 'negative_size':
        h = -h
    elif kind == 'missing_image':
        image_id_ = image_id(-1)  # 99,996: below every image's id
    elif kind == 'unknown_category':
        category = 2  # between COCO-like ids 1 and 3
    polygon = [x, y, x + w, y, x + w, y + h, x, y + h]
    if kind == 'short_polygon':
        polygon = polygon[:4]
    return {
        'segmentation': [[round(v, 2) for v in polygon]],
        'area': abs(w * h),
        'bbox': [round(v, 2) for v in (x, y, w, h)],
        'iscrowd': 0,
        'category_id': category,
        'image_id': image_id_,
    }


def _plant(images, annotations, kinds, every, seed):
    """Adds one wrong annotation (kinds in turn) per `every` images; {annotation id: kind}."""
    rng = np.random.default_rng((seed, 1 << 20))
    truth = {}
    if not every or not kinds:
        return truth
    for turn, image in enumerate(images[every // 2 :: every]):
        kind = kinds[turn % len(kinds)]
        annotation = planted(kind, image, rng)
        annotation['id'] = annotations[-1]['id'] + 1 if annotations else 1
        annotations.append(annotation)
        truth[annotation['id']] = kind
    return truth


def make(out, images, seed=0, bad_every=200, kinds=PLANTED, compressed_rle=True, processes=2):
    """Writes (or reuses) the set; returns its stamp: arguments, counts, seconds taken."""
    stamp_path = os.path.join(out, 'annotations', '.complete.json')
    wanted = {
        'images': images,
        'seed': seed,
        'bad_every': bad_every,
        'kinds': list(kinds),
        'compressed_rle': compressed_rle,
    }
    if os.path.exists(stamp_path):
        with open(stamp_path, encoding='utf-8') as f:
            done = json.load(f)
        if {key: done.get(key) for key in wanted} == wanted:
            return done
    start = time.perf_counter()
    for folder in ['annotations', 'images'] + [f'images/part_{i}' for i in range(8)]:
        os.makedirs(os.path.join(out, folder), exist_ok=True)
    entries, annotations = [], []
    jobs = ((index, out, seed, compressed_rle) for index in range(images))
    with multiprocessing.Pool(processes, initializer=_start_worker) as pool:
        for entry, found in pool.imap(make_image, jobs, chunksize=16):
            entries.append(entry)
            for annotation in found:
                annotation.update(id=2 * len(annotations) + 1, image_id=entry['id'])
                annotations.append(annotation)
    truth = _plant(entries, annotations, kinds, bad_every, seed)
    document = {
        'info': {'description': 'bench.coco_like', 'version': '1.0', 'year': 2026},
        'licenses': [{'id': 1, 'name': 'made by bench/coco_like.py', 'url': ''}],
        'images': entries,
        'annotations': annotations,
        'categories': coco_objects.categories(),
    }
    _write_json(os.path.join(out, 'annotations', 'instances.json'), document)
    _write_json(os.path.join(out, 'annotations', 'planted.json'), truth)
    crowds = sum(a['iscrowd'] for a in annotations)
    done = dict(
        wanted,
        annotations=len(annotations),
        crowds=crowds,
        planted=len(truth),
        empty_images=len({e['id'] for e in entries} - {a['image_id'] for a in annotations}),
        seconds=round(time.perf_counter() - start, 1),
    )
    _write_json(stamp_path, done)
    return done


def _write_json(path, document):
    with open(path + '.partial', 'w', encoding='utf-8') as f:
        json.dump(document, f, separators=(',', ':'))
    os.replace(path + '.partial', path)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--out', required=True)
    parser.add_argument('--images', type=int, default=20000)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--bad-every', type=int, default=200)
    parser.add_argument('--bad-kinds', default=None, help=f'a comma list of {PLANTED}')
    parser.add_argument(
        '--peer-safe',
        action='store_true',
        help="only what Model Garden's converter survives: uncompressed RLE, PEER_SAFE kinds",
    )
    parser.add_argument('--processes', type=int, default=2)
    args = parser.parse_args(argv)
    kinds = PEER_SAFE if args.peer_safe else PLANTED
    if args.bad_kinds is not None:
        kinds = tuple(k for k in args.bad_kinds.split(',') if k)
    unknown = set(kinds) - set(PLANTED)
    if unknown:
        parser.error(f'--bad-kinds: unknown {sorted(unknown)}; choose from {PLANTED}')
    done = make(
        args.out, args.images, args.seed, args.bad_every, kinds, not args.peer_safe, args.processes
    )
    print(json.dumps(done))


if __name__ == '__main__':
    main()
