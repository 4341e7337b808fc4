"""A held-out near-duplicate dataset, made apart from bench/trusted_data.py (other photographs,
another generator), where what is a near-duplicate is decided by geometry alone.

Every image is a window of one of scikit-image's photographs (its `skimage/data` files: an
astronaut, a camera man, a cat, coffee, coins, the Hubble deep field, cells, a retina, a rocket,
grass, gravel, a brick wall, a page of text, ...), resized to 256-480 pixels wide at 4:3, 3:2,
1:1 or 3:4. Two images are near-duplicates when they are windows of one photograph whose
intersection over union is 0.7 or more (a crop of up to 8% from each border keeps 0.71); the
clusters are the connected components of that relation. Images of different clusters overlap
by less than 0.5, so that no pair is in between: a pair a hash joins across clusters is false.

What is planted, per original scene:
    border_crop   3-8% cut from each border independently, stored at the cut size or resized
                  back to the original's (half and half)
    pan           the frames of a clip: each window moved 2-6% of its size from the previous
                  one, one direction per clip (a camera pan, as consecutive video frames)
    reencoded, downscaled, brightened, blurred, text: as bench/trusted_data.py names them,
                  made here with other ranges (quality 25-60, scale 0.3-0.6, gamma, ...)
    lookalike     not a copy: the same scene cut 30-50% differently (overlap 0.25-0.5), its
                  own cluster, which no hash may join to the scene

    python -m bench.crop_data OUT [--scenes 700] [--seed 1]

writes OUT/images/<n>.jpg and OUT/truth.json (per image: its photograph, window and kind; the
clusters).
"""

import argparse
import io
import json
import os

import numpy as np
from PIL import Image
from PIL import ImageDraw
from PIL import ImageFilter
from PIL import ImageFont

PHOTOS = (
    'astronaut.png',
    'camera.png',
    'chelsea.png',
    'coffee.png',
    'coins.png',
    'hubble_deep_field.jpg',
    'ihc.png',
    'moon.png',
    'motorcycle_left.png',
    'retina.jpg',
    'rocket.jpg',
    'grass.png',
    'gravel.png',
    'brick.png',
    'cell.png',
    'microaneurysms.png',
    'page.png',
)
ASPECTS = (4 / 3, 3 / 2, 1.0, 3 / 4)
COPY_KINDS = ('border_crop', 'pan', 'reencoded', 'downscaled', 'brightened', 'blurred', 'text')
SAME, APART = 0.7, 0.5  # near-duplicates overlap this much at least; other pairs, less than APART


def photographs():
    """scikit-image's photographs, as RGB PIL images (read from its package's files: no
    download)."""
    import skimage  # pylint: disable=import-outside-toplevel

    folder = os.path.join(os.path.dirname(skimage.__file__), 'data')
    return [Image.open(os.path.join(folder, name)).convert('RGB') for name in PHOTOS]


def overlap(a, b):
    """Intersection over union of two windows (x0, y0, x1, y1)."""
    width = min(a[2], b[2]) - max(a[0], b[0])
    height = min(a[3], b[3]) - max(a[1], b[1])
    if width <= 0 or height <= 0:
        return 0.0
    inter = width * height
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def _render(photo, window, width, aspect):
    return photo.resize((width, round(width / aspect)), Image.Resampling.LANCZOS, box=window)


def _jpeg(image, quality=88):
    buffer = io.BytesIO()
    image.save(buffer, format='JPEG', quality=quality)
    return buffer.getvalue()


class _Maker:
    """Draws windows and writes images; keeps every image's truth."""

    def __init__(self, out, seed, photos=None):
        self.rng = np.random.default_rng(seed)
        self.photos = photographs() if photos is None else photos
        self.out = out
        self.images = []  # {'path', 'photo', 'window', 'kind', 'cluster'}
        os.makedirs(os.path.join(out, 'images'), exist_ok=True)

    def write(self, data, photo, window, kind, cluster):
        path = f'images/{len(self.images):06d}.jpg'
        with open(os.path.join(self.out, path), 'wb') as f:
            f.write(data)
        self.images.append(
            {'path': path, 'photo': photo, 'window': list(window), 'kind': kind, 'cluster': cluster}
        )

    def fits(self, photo, window, cluster=None, limit=APART):
        """Whether `window` overlaps every image of other clusters of `photo` less than
        `limit`."""
        return all(
            overlap(window, image['window']) < limit
            for image in self.images
            if image['photo'] == photo and image['cluster'] != cluster
        )

    def scene(self):
        """(photo, window, width, aspect) of a new scene apart from all others, with texture."""
        while True:
            photo = int(self.rng.integers(0, len(self.photos)))
            size = self.photos[photo].size
            aspect = float(self.rng.choice(ASPECTS))
            height = min(size[1], size[0] / aspect) * self.rng.uniform(0.3, 0.7)
            left = self.rng.uniform(0, size[0] - height * aspect)
            top = self.rng.uniform(0, size[1] - height)
            window = (left, top, left + height * aspect, top + height)
            if not self.fits(photo, window, limit=0.4):
                continue
            width = int(self.rng.integers(256, 481))
            image = _render(self.photos[photo], window, width, aspect)
            if float(np.asarray(image.convert('L'), np.float32).std()) >= 12:
                return photo, window, width, aspect, image

    def copies(self, cluster, scene):
        """Writes one to three planted copies of `scene`, of kinds drawn with crops first."""
        shares = np.array([0.3, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1])
        for _ in range(min(int(self.rng.zipf(2.2)), 3)):
            kind = str(self.rng.choice(COPY_KINDS, p=shares))
            if kind == 'pan':
                self.clip(cluster, scene)
            elif kind == 'border_crop':
                self.border_crop(cluster, scene)
            else:
                photo, window, _, _, image = scene
                self.write(pixel_copy(image, kind, self.rng), photo, window, kind, cluster)

    def border_crop(self, cluster, scene):
        photo, window, width, _, image = scene
        left, top, right, bottom = self.rng.uniform(0.03, 0.08, 4)
        w, h = image.size
        box = (round(left * w), round(top * h), w - round(right * w), h - round(bottom * h))
        cut = image.crop(box)
        if self.rng.random() < 0.5:
            cut = cut.resize(image.size, Image.Resampling.LANCZOS)
        scale = (window[2] - window[0]) / w
        place = (window[0] + box[0] * scale, window[1] + box[1] * scale)
        cut_window = (*place, window[0] + box[2] * scale, window[1] + box[3] * scale)
        self.write(_jpeg(cut), photo, cut_window, 'border_crop', cluster)

    def clip(self, cluster, scene):
        """Two to four more frames of a camera pan from the scene, 2-6% a frame."""
        photo, window, width, aspect, _ = scene
        angle = self.rng.uniform(0, 2 * np.pi)
        direction = np.array([np.cos(angle), np.sin(angle)])
        size = np.array([window[2] - window[0], window[3] - window[1]])
        bounds = self.photos[photo].size
        for _ in range(int(self.rng.integers(2, 5))):
            step = direction * size * self.rng.uniform(0.02, 0.06)
            window = (
                window[0] + step[0],
                window[1] + step[1],
                window[2] + step[0],
                window[3] + step[1],
            )
            inside = window[0] >= 0 and window[1] >= 0
            if not (inside and window[2] <= bounds[0] and window[3] <= bounds[1]):
                return
            if not self.fits(photo, window, cluster):
                return
            frame = _render(self.photos[photo], window, width, aspect)
            self.write(_jpeg(frame), photo, window, 'pan', cluster)

    def lookalike(self, cluster, scene):
        """The scene cut 30-50% differently (zoomed in or out, or moved), as its own cluster,
        where one fits."""
        photo, window, width, aspect, _ = scene
        size = np.array([window[2] - window[0], window[3] - window[1]])
        centre = np.array([window[0], window[1]]) + size / 2
        for _ in range(20):
            how = self.rng.integers(0, 3)
            if how == 0:
                new_size, new_centre = size * self.rng.uniform(0.55, 0.7), centre
            elif how == 1:
                new_size, new_centre = size * self.rng.uniform(1.45, 1.7), centre
            else:
                angle = self.rng.uniform(0, 2 * np.pi)
                move = np.array([np.cos(angle), np.sin(angle)]) * self.rng.uniform(0.35, 0.5)
                new_size, new_centre = size, centre + move * size
            new_centre = new_centre + size * self.rng.uniform(-0.1, 0.1, 2) * (how == 0)
            low, high = new_centre - new_size / 2, new_centre + new_size / 2
            new = (float(low[0]), float(low[1]), float(high[0]), float(high[1]))
            bounds = self.photos[photo].size
            if low.min() < 0 or new[2] > bounds[0] or new[3] > bounds[1]:
                continue
            if 0.25 <= overlap(new, window) < APART and self.fits(photo, new, cluster):
                image = _render(self.photos[photo], new, width, aspect)
                self.write(_jpeg(image), photo, new, 'lookalike', cluster)
                return


def pixel_copy(image, kind, rng):
    """The bytes of a copy of `image` (a PIL image) made the way `kind` says."""
    if kind == 'reencoded':
        return _jpeg(image, int(rng.integers(25, 61)))
    if kind == 'downscaled':
        scale = rng.uniform(0.3, 0.6)
        size = (round(image.width * scale), round(image.height * scale))
        return _jpeg(image.resize(size, Image.Resampling.BICUBIC), 80)
    if kind == 'brightened':
        gamma = rng.uniform(0.7, 1.4)
        pixels = 255 * (np.asarray(image, np.float32) / 255) ** gamma
        return _jpeg(Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)))
    if kind == 'blurred':
        return _jpeg(image.filter(ImageFilter.GaussianBlur(rng.uniform(0.8, 2.0))))
    if kind == 'text':
        copy = image.copy()
        draw = ImageDraw.Draw(copy)
        font = ImageFont.load_default(size=int(image.height * rng.uniform(0.05, 0.08)))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        xy = (rng.uniform(0.02, 0.4) * image.width, rng.uniform(0.02, 0.9) * image.height)
        draw.text(xy, f'IMG_{int(rng.integers(1000, 9999))}', fill=colour, font=font)
        return _jpeg(copy)
    raise ValueError(f'unknown kind {kind!r}')


def make(out, scenes=700, seed=1, photos=None, name=None):
    """Writes the dataset into `out` (reused where it is complete); returns truth.json's content.
    `photos` (RGB PIL images, called `name`) replace the photographs where given: the generator
    run on other pictures (bench/crop_calibration.py)."""
    stamp = os.path.join(out, 'truth.json')
    wanted = {'scenes': scenes, 'seed': seed} | ({'photos': name} if name else {})
    if os.path.exists(stamp):
        with open(stamp, encoding='utf-8') as f:
            truth = json.load(f)
        if truth['made_with'] == wanted:
            return truth
    maker = _Maker(out, seed, photos)
    for cluster in range(scenes):
        scene = maker.scene()
        photo, window, _, _, image = scene
        maker.write(_jpeg(image), photo, window, 'original', cluster)
        if maker.rng.random() < 0.45:
            maker.copies(cluster, scene)
        if maker.rng.random() < 0.12:
            maker.lookalike(scenes + cluster, scene)
    truth = {'made_with': wanted, 'images': maker.images}
    _check(maker.images)
    with open(stamp, 'w', encoding='utf-8') as f:
        json.dump(truth, f)
    return truth


def _check(images):
    """The clusters are the components of overlap >= SAME: every pair across clusters overlaps
    less than APART (each window was drawn so), every copy SAME or more with its original."""
    firsts = {}
    for image in images:
        first = firsts.setdefault(image['cluster'], image)
        if image['kind'] != 'pan':
            assert overlap(first['window'], image['window']) >= SAME, image


def clusters(truth):
    """{cluster: [paths]} of the clusters of two images or more."""
    found = {}
    for image in truth['images']:
        found.setdefault(image['cluster'], []).append(image['path'])
    return {cluster: paths for cluster, paths in found.items() if len(paths) > 1}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('out')
    parser.add_argument('--scenes', type=int, default=700)
    parser.add_argument('--seed', type=int, default=1)
    args = parser.parse_args(argv)
    truth = make(args.out, args.scenes, args.seed)
    kinds = {}
    for image in truth['images']:
        kinds[image['kind']] = kinds.get(image['kind'], 0) + 1
    print(f'{len(truth["images"])} images, {len(clusters(truth))} clusters, kinds {kinds}')


if __name__ == '__main__':
    main()
