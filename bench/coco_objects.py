"""The objects of bench/coco_like.py's images: their categories, outlines and pixels.

Twenty categories under COCO-like, non-contiguous ids (1, 3, 7, ..., 90): six shapes (regular
polygons, a star, a disc as a 32-gon) filled with a colour and grain, ten digits (scikit-learn's
handwritten 8x8 digits enlarged onto a turned card) and four photo patches (irregular polygons
cut from one of the real pictures bench/trusted_data.py cuts from). Each object is pasted
through the mask of its own polygons, so its annotation's polygons are exact; a tenth are in
two parts (the polygon clipped either side of a vertical gap, as an object behind a pole). A
crowd is a cluster of small objects of one category, annotated as one run-length mask.
"""

import math

import numpy as np
from PIL import Image
from PIL import ImageDraw

SHAPES = ('triangle', 'square', 'pentagon', 'hexagon', 'star', 'disc')
DIGITS = ('zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine')
PATCHES = ('city', 'flower', 'portrait', 'terrain')  # the order of trusted_data.pictures()
NAMES = SHAPES + DIGITS + PATCHES
# COCO's ids run 1..90 with gaps; these do too, so that an id is never an index.
IDS = (1, 3, 7, 8, 13, 18, 22, 27, 31, 34, 40, 44, 47, 52, 59, 61, 70, 77, 81, 90)
_SIDES = {'triangle': 3, 'square': 4, 'pentagon': 5, 'hexagon': 6, 'disc': 32}
_COLOURS = ((220, 40, 40), (40, 190, 60), (50, 70, 220), (230, 200, 30), (200, 60, 200))


def categories():
    """COCO's `categories` list: id, name, supercategory."""
    kinds = {**dict.fromkeys(SHAPES, 'shape'), **dict.fromkeys(DIGITS, 'digit')}
    return [
        {'id': i, 'name': name, 'supercategory': kinds.get(name, 'photo')}
        for i, name in zip(IDS, NAMES)
    ]


def outline(name, centre, size, rng):
    """The polygon (an (n, 2) float array) of a `name` object about `size` px across."""
    radius = size / 2
    turn = rng.uniform(0, 2 * math.pi)
    if name in _SIDES:
        angles = turn + np.arange(_SIDES[name]) * 2 * math.pi / _SIDES[name]
        radii = np.full(len(angles), radius)
    elif name == 'star':
        angles = turn + np.arange(10) * math.pi / 5
        radii = np.where(np.arange(10) % 2 == 0, radius, radius * 0.45)
    elif name in DIGITS:  # a card, a little taller than wide
        angles = turn + np.array([0.6, math.pi - 0.6, math.pi + 0.6, 2 * math.pi - 0.6])
        radii = np.full(4, radius)
    else:  # a photo patch: an irregular polygon
        count = int(rng.integers(5, 12))
        angles = turn + np.sort(rng.uniform(0, 2 * math.pi, count))
        radii = radius * rng.uniform(0.55, 1.0, count)
    return np.stack([centre[0] + radii * np.cos(angles), centre[1] + radii * np.sin(angles)], 1)


def split(points, gap):
    """The parts of a polygon either side of a vertical gap `gap` px wide at its middle, those
    of a square pixel or more (none, one or two)."""
    middle = (points[:, 0].min() + points[:, 0].max()) / 2
    parts = [_clip(points, middle - gap / 2, -1), _clip(points, middle + gap / 2, 1)]
    return [part for part in parts if len(part) >= 3 and _area(part) >= 1]


def _area(points):
    x, y = points[:, 0], points[:, 1]
    return abs(float(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1)))) / 2


def _clip(points, x, side):
    """Sutherland-Hodgman: the polygon's part where side * (px - x) >= 0."""
    kept = []
    for i, current in enumerate(points):
        previous = points[i - 1]
        inside_now, inside_before = side * (current[0] - x) >= 0, side * (previous[0] - x) >= 0
        if inside_now != inside_before:
            t = (x - previous[0]) / (current[0] - previous[0])
            kept.append(previous + t * (current - previous))
        if inside_now:
            kept.append(current)
    return np.array(kept).reshape(-1, 2)


def texture(name, box, pictures, digits, rng):
    """An RGB image of the box's size (left, top, right, bottom) that fills a `name` object."""
    width, height = box[2] - box[0], box[3] - box[1]
    if name in PATCHES:
        picture = pictures[PATCHES.index(name)]
        side = rng.uniform(0.2, 0.6) * min(picture.size)
        left = rng.uniform(0, picture.width - side)
        top = rng.uniform(0, picture.height - side)
        cut = (left, top, left + side, top + side)
        return picture.resize((width, height), Image.Resampling.BILINEAR, box=cut)
    colour = np.array(_COLOURS[int(rng.integers(0, len(_COLOURS)))], np.float32)
    if name in DIGITS:
        glyphs = digits[DIGITS.index(name)]
        glyph = glyphs[int(rng.integers(0, len(glyphs)))] / 16.0  # 8x8, ink 0..1
        ink = np.asarray(Image.fromarray((glyph * 255).astype(np.uint8)).resize((width, height)))
        paper = np.array([235, 230, 215], np.float32)
        share = (ink[..., None] / 255.0).astype(np.float32)
        pixels = paper * (1 - share) + colour * 0.4 * share
    else:
        pixels = np.broadcast_to(colour, (height, width, 3))
    grain = rng.normal(0, 12, (height, width, 1))
    return Image.fromarray(np.clip(pixels + grain, 0, 255).astype(np.uint8))


def paste(canvas, name, polygons, pictures, digits, rng):
    """Pastes one object through its polygons' mask; its (left, top, right, bottom) box."""
    every = np.concatenate(polygons)
    left, top = np.floor(every.min(0)).astype(int)
    right, bottom = np.ceil(every.max(0)).astype(int) + 1
    box = (int(left), int(top), int(right), int(bottom))
    mask = Image.new('L', (box[2] - box[0], box[3] - box[1]))
    draw = ImageDraw.Draw(mask)
    for polygon in polygons:
        draw.polygon([(x - left, y - top) for x, y in polygon], fill=255)
    canvas.paste(texture(name, box, pictures, digits, rng), box[:2], mask)
    return box


def crowd_mask(canvas, name, centre, size, pictures, digits, rng):
    """Pastes a crowd of 5-15 small `name` objects about `size` px across; their union as an
    (height, width) uint8 mask of the whole canvas, in Fortran order (pycocotools' layout)."""
    mask = Image.new('L', canvas.size)
    draw = ImageDraw.Draw(mask)
    for _ in range(int(rng.integers(5, 16))):
        small = rng.uniform(0.12, 0.3) * size
        spot = centre + rng.uniform(-0.5, 0.5, 2) * (size - small)
        polygon = outline(name, spot, small, rng)
        paste(canvas, name, [polygon], pictures, digits, rng)
        draw.polygon([tuple(point) for point in polygon], fill=1)
    return np.asfortranarray(np.asarray(mask, np.uint8))
