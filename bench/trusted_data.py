"""A benchmark dataset for trustworthy splits: real-content images in groups of skewed sizes,
with near-duplicates planted the ways they arise (a re-encode, a downscale, a border crop, a
brighter copy, a blurred copy, a copy with text on it), and what is true of them.

Images are cuts of real pictures shipped with scikit-learn and matplotlib (two photographs, a
portrait, a terrain elevation map shown in colour): a random box of 15-45% of the picture's
side, turned by a multiple of 90 degrees, mirrored or not, each colour channel scaled, at
320x240. A cut whose 16x16 grey thumbnail correlates above 0.8 with an earlier one's is drawn
again, so that no two distinct images are near-duplicates by accident: the pairs that are
near-duplicates are exactly the planted ones (measured at the pixels, not by any hash).

Groups ("patients") have sizes drawn from a Zipf law (most of one to three images, a few of
dozens); a group's images mostly share its label (classes of skewed frequencies). A planted
copy joins its original's group or, one time in three, another group (a copy filed under the
wrong patient) or none.

    python -m bench.trusted_data OUT [--images 3000]

writes OUT/images/<id>.jpg, OUT/manifest.csv (path,label,group) and OUT/truth.json: the clusters
(lists of paths: an original and its copies), the kind of each copy, and the groups.
"""

import argparse
import csv
import io
import json
import os

import numpy as np
from PIL import Image
from PIL import ImageDraw
from PIL import ImageEnhance
from PIL import ImageFilter
from PIL import ImageFont

SIZE = (320, 240)
KINDS = ('reencoded', 'downscaled', 'border_cropped', 'brightened', 'blurred', 'text')
CLASS_SHARES = (0.4, 0.25, 0.15, 0.12, 0.08)
_WORDS = ('sample', 'copy', '2024', 'draft', 'lab 3', 'scan', 'left', 'ID 0042', 'note', 'x')


def pictures():
    """The real pictures images are cut from, as RGB PIL images."""
    # pylint: disable=import-outside-toplevel
    import matplotlib
    from matplotlib import cbook
    from matplotlib import colormaps
    from sklearn.datasets import load_sample_images

    found = [Image.fromarray(array) for array in load_sample_images().images]
    with cbook.get_sample_data('grace_hopper.jpg') as f:
        found.append(Image.open(f).convert('RGB'))
    dem = cbook.get_sample_data('jacksboro_fault_dem.npz')['elevation']
    span = (dem - dem.min()) / max(float(np.ptp(dem)), 1e-9)
    terrain = (colormaps['gist_earth'](span)[..., :3] * 255).astype(np.uint8)
    found.append(Image.fromarray(terrain).resize((dem.shape[1] * 2, dem.shape[0] * 2)))
    del matplotlib
    return found


def _cut(picture, rng):
    """(a cut of `picture`, where it was cut: (box, turns, mirrored))."""
    side = min(picture.size) * rng.uniform(0.15, 0.45)
    width, height = side * 4 / 3, side
    if width > picture.width:
        width, height = picture.width, picture.width * 3 / 4
    left = rng.uniform(0, picture.width - width)
    top = rng.uniform(0, picture.height - height)
    box = (left, top, left + width, top + height)
    image = picture.resize(SIZE, Image.Resampling.BILINEAR, box=box)
    turns = int(rng.integers(0, 4))
    if turns:
        image = image.rotate(90 * turns, expand=True).resize(SIZE, Image.Resampling.BILINEAR)
    mirrored = bool(rng.random() < 0.5)
    if mirrored:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    gains = rng.uniform(0.7, 1.3, 3)
    pixels = np.clip(np.asarray(image, dtype=np.float32) * gains, 0, 255).astype(np.uint8)
    return Image.fromarray(pixels), (box, turns, mirrored)


def _overlap(a, b):
    """Intersection over union of two boxes."""
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _thumbnail(image):
    grey = np.asarray(image.convert('L').resize((16, 16), Image.Resampling.BOX), np.float32)
    grey = grey.ravel() - grey.mean()
    return grey / max(float(np.linalg.norm(grey)), 1e-6)


def _mosaic(sources, rng):
    """Four cuts of random pictures, side by side two by two, at SIZE."""
    image = Image.new('RGB', SIZE)
    half = (SIZE[0] // 2, SIZE[1] // 2)
    for corner in range(4):
        cut, _ = _cut(sources[int(rng.integers(0, len(sources)))], rng)
        image.paste(cut.resize(half), ((corner % 2) * half[0], (corner // 2) * half[1]))
    return image


def distinct_cuts(count, seed=0, limit=0.6):
    """`count` images, each with some texture (a grey standard deviation of 20 levels or more),
    whose thumbnails correlate at most `limit` with each other's: a third single cuts (none cut
    from where an earlier cut of the same picture, turned and mirrored alike, was: overlap 0.3
    or more), the others mosaics of four cuts (the pictures hold too few distinct cuts)."""
    rng = np.random.default_rng(seed)
    sources = pictures()
    cuts, thumbs, places = [], np.zeros((count, 256), np.float32), []
    while len(cuts) < count:
        source = int(rng.integers(0, len(sources)))
        place = None
        if rng.random() < 1 / 3:
            image, (box, turns, mirrored) = _cut(sources[source], rng)
            place = (source, turns, mirrored, box)
            if any(p[:3] == place[:3] and _overlap(p[3], box) >= 0.3 for p in places):
                continue
        else:
            image = _mosaic(sources, rng)
        if float(np.asarray(image.convert('L'), np.float32).std()) < 20:
            continue
        thumb = _thumbnail(image)
        if cuts and float(np.max(thumbs[: len(cuts)] @ thumb)) > limit:
            continue
        thumbs[len(cuts)] = thumb
        if place:
            places.append(place)
        cuts.append(image)
    return cuts


def _jpeg(image, quality=90):
    buffer = io.BytesIO()
    image.save(buffer, format='JPEG', quality=quality)
    return buffer.getvalue()


def planted_copy(original, kind, rng):
    """The bytes of a near-duplicate of `original` (a PIL image) made the way `kind` says."""
    if kind == 'reencoded':
        return _jpeg(original, int(rng.integers(40, 71)))
    if kind == 'downscaled':
        scale = rng.uniform(0.4, 0.7)
        size = (round(original.width * scale), round(original.height * scale))
        return _jpeg(original.resize(size, Image.Resampling.LANCZOS), 85)
    if kind == 'border_cropped':
        w, h = original.size
        left, right = (rng.uniform(0.01, 0.03, 2) * w).round()
        top, bottom = (rng.uniform(0.01, 0.03, 2) * h).round()
        return _jpeg(original.crop((int(left), int(top), int(w - right), int(h - bottom))))
    if kind == 'brightened':
        return _jpeg(ImageEnhance.Brightness(original).enhance(rng.uniform(1.1, 1.3)))
    if kind == 'blurred':
        return _jpeg(original.filter(ImageFilter.GaussianBlur(rng.uniform(1.0, 2.5))))
    if kind == 'text':
        image = original.copy()
        draw = ImageDraw.Draw(image)
        font = ImageFont.load_default(size=int(original.height * rng.uniform(0.06, 0.09)))
        text = ' '.join(rng.choice(_WORDS, 2))
        xy = (rng.uniform(0.02, 0.5) * original.width, rng.uniform(0.02, 0.85) * original.height)
        draw.text(xy, text, fill=(255, 255, 255), font=font, stroke_width=2, stroke_fill=(0, 0, 0))
        return _jpeg(image)
    raise ValueError(f'unknown kind {kind!r}')


def _group_sizes(images, rng):
    sizes, total = [], 0
    while total < images:
        size = min(int(rng.zipf(2.0)), 60, images - total)
        sizes.append(size)
        total += size
    return sizes


def make(out, images=3000, seed=0, copy_share=0.2):
    """Writes the dataset into `out` (reused where it is complete); returns truth.json's
    content. About `copy_share` of the images are planted copies."""
    stamp = os.path.join(out, 'truth.json')
    wanted = {'images': images, 'seed': seed, 'copy_share': copy_share}
    if os.path.exists(stamp):
        with open(stamp, encoding='utf-8') as f:
            truth = json.load(f)
        if truth['made_with'] == wanted:
            return truth
    rng = np.random.default_rng(seed)
    copies = int(images * copy_share)
    originals = distinct_cuts(images - copies, seed)
    sizes = _group_sizes(len(originals), rng)
    os.makedirs(os.path.join(out, 'images'), exist_ok=True)
    writer = _Writer(out)
    _write_originals(writer, originals, sizes, rng)
    clusters, kinds = _plant_copies(writer, originals, copies, len(sizes), rng)
    with open(os.path.join(out, 'manifest.csv'), 'w', newline='', encoding='utf-8') as f:
        csv_writer = csv.writer(f)
        csv_writer.writerow(['path', 'label', 'group'])
        csv_writer.writerows(writer.rows)
    truth = {
        'made_with': wanted,
        'clusters': clusters,
        'kinds': kinds,
        'images': len(writer.rows),
        'groups': len(sizes),
    }
    with open(stamp, 'w', encoding='utf-8') as f:
        json.dump(truth, f)
    return truth


class _Writer:
    """Writes images as OUT/images/<n>.jpg and keeps their manifest rows."""

    def __init__(self, out):
        self._out, self.rows = out, []

    def write(self, data, label, group):
        path = f'images/{len(self.rows):06d}.jpg'
        with open(os.path.join(self._out, path), 'wb') as f:
            f.write(data)
        self.rows.append((path, f'class_{label}', group))
        return path


def _write_originals(writer, originals, sizes, rng):
    """The originals, group by group; a group's images mostly share its label."""
    group_of = np.repeat(np.arange(len(sizes)), sizes)
    group_label = rng.choice(len(CLASS_SHARES), len(sizes), p=CLASS_SHARES)
    for index, image in enumerate(originals):
        group = int(group_of[index])
        label = group_label[group] if rng.random() < 0.8 else rng.choice(len(CLASS_SHARES))
        writer.write(_jpeg(image), label, f'patient_{group:05d}')


def _plant_copies(writer, originals, copies, groups, rng):
    """([[original, its copies...]] per cluster, {copy: kind}): one to four copies of an
    original, mostly one, in its group or (one time in three) another or none."""
    clusters, kinds, planted = {}, {}, 0
    while planted < copies:
        index = int(rng.integers(0, len(originals)))
        original, label, group = writer.rows[index]
        if original in clusters:
            continue
        members = [original]
        for _ in range(min(int(rng.zipf(2.5)), 4, copies - planted)):
            kind = str(rng.choice(KINDS))
            copy_group = group
            if rng.random() < 1 / 3:  # filed elsewhere: another group, or none
                other = int(rng.integers(-groups // 4, groups))
                copy_group = f'patient_{other:05d}' if other >= 0 else ''
            data = planted_copy(originals[index], kind, rng)
            path = writer.write(data, label[len('class_') :], copy_group)
            members.append(path)
            kinds[path] = kind
            planted += 1
        clusters[original] = members
    return list(clusters.values()), kinds


def truth_pairs(truth):
    """Every pair of paths (sorted) that the planted clusters make near-duplicates."""
    pairs = set()
    for members in truth['clusters']:
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                pairs.add(tuple(sorted((a, b))))
    return pairs


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('out')
    parser.add_argument('--images', type=int, default=3000)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args(argv)
    truth = make(args.out, args.images, args.seed)
    print(
        f'{truth["images"]} images, {truth["groups"]} groups, {len(truth["clusters"])} clusters '
        f'({len(truth_pairs(truth))} near-duplicate pairs)'
    )


if __name__ == '__main__':
    main()
