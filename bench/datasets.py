"""Benchmark image trees made from real photos shipped with scikit-learn (no downloads).

`photo_tree` cuts `count` distinct JPEGs of about 500x375 from the two sample photographs
(china.jpg, flower.jpg, 427x640): a random crop at a random scale, a random flip and a small
brightness change each, in `classes` folders, stored label-sorted (class 0's files first).

`camera_tree` makes camera-sized JPEGs (3000x2000 by default) with a camera's detail: tiles of
the same photos at their native resolution (no enlargement, so edges and texture stay sharp),
each at a random offset and flip, plus sensor-like noise, saved at quality 92 with 4:2:0 colour
as cameras do: their DCT coefficients and file sizes (~0.3 byte per pixel) are a camera's, not
those of an enlarged, smooth photo.

`region_tree` makes learnable photo classes that a small model does not get all right: class =
(photo, cell of a 4x4 grid), each image a random crop around its cell's centre (wider than the
cell, so neighbouring classes overlap), flipped or not, brightness jittered, at 500x375.
"""

import json
import multiprocessing
import os

import numpy as np
from PIL import Image
from PIL import ImageEnhance

_PHOTOS = None


def _photos():
    global _PHOTOS
    if _PHOTOS is None:
        from sklearn.datasets import load_sample_images  # pylint: disable=import-outside-toplevel

        _PHOTOS = [Image.fromarray(array) for array in load_sample_images().images]
    return _PHOTOS


def _make_one(job):
    index, path, size, quality = job
    rng = np.random.default_rng(index)
    photo = _photos()[index % 2]
    scale = rng.uniform(0.55, 1.0)
    crop_w, crop_h = int(photo.width * scale), int(photo.height * scale)
    left = int(rng.integers(0, photo.width - crop_w + 1))
    top = int(rng.integers(0, photo.height - crop_h + 1))
    image = photo.crop((left, top, left + crop_w, top + crop_h)).resize(size, Image.BILINEAR)
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    image = ImageEnhance.Brightness(image).enhance(rng.uniform(0.8, 1.2))
    image.save(path, format='JPEG', quality=quality)
    return os.path.getsize(path)


def photo_tree(root, count, classes=10, size=(500, 375), quality=90, processes=None):
    """Writes (or reuses) the tree; returns {'count', 'bytes'}."""
    return _tree(root, count, classes, size, quality, processes, _make_one)


def _tree(root, count, classes, size, quality, processes, make, kind=None):
    stamp = os.path.join(root, '.complete.json')
    wanted = {'count': count, 'classes': classes, 'size': list(size), 'quality': quality}
    if kind:
        wanted['kind'] = kind
    if os.path.exists(stamp):
        with open(stamp, encoding='utf-8') as f:
            done = json.load(f)
        if {k: done.get(k) for k in wanted} == wanted:
            return done
    jobs = []
    per_class = -(-count // classes)
    for index in range(count):
        label = index % classes if kind == 'region' else index // per_class
        folder = os.path.join(root, f'class_{label:03d}')
        os.makedirs(folder, exist_ok=True)
        jobs.append((index, os.path.join(folder, f'{index:08d}.jpg'), size, quality))
    with multiprocessing.Pool(processes) as pool:
        total = sum(pool.imap_unordered(make, jobs, chunksize=8 if kind else 256))
    done = dict(wanted, bytes=total)
    with open(stamp, 'w', encoding='utf-8') as f:
        json.dump(done, f)
    return done


def _make_camera_image(job):
    index, path, size, quality = job
    rng = np.random.default_rng(1_000_003 + index)
    width, height = size
    canvas = np.empty((height, width, 3), np.uint8)
    tile_w, tile_h = 600, 400  # native-resolution crops of the 640x427 photos
    for top in range(0, height, tile_h):
        for left in range(0, width, tile_w):
            photo = np.asarray(_photos()[int(rng.integers(0, 2))])
            y = int(rng.integers(0, photo.shape[0] - tile_h + 1))
            x = int(rng.integers(0, photo.shape[1] - tile_w + 1))
            tile = photo[y : y + tile_h, x : x + tile_w]
            if rng.random() < 0.5:
                tile = tile[:, ::-1]
            h, w = min(tile_h, height - top), min(tile_w, width - left)
            canvas[top : top + h, left : left + w] = tile[:h, :w]
    noise = rng.normal(0.0, 3.0, canvas.shape)
    pixels = np.clip(canvas + noise * float(rng.uniform(0.7, 1.3)), 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path, format='JPEG', quality=quality, subsampling=2)
    return os.path.getsize(path)


def _make_region_image(job):
    index, path, size, quality = job
    rng = np.random.default_rng(2_000_003 + index)
    label = index % REGION_CLASSES
    photo = _photos()[label // 16]
    cell = label % 16
    centre_x = photo.width * (1 + 2 * (cell % 4)) / 8 + rng.uniform(-30, 30)
    centre_y = photo.height * (1 + 2 * (cell // 4)) / 8 + rng.uniform(-20, 20)
    crop_w = photo.width * rng.uniform(0.25, 0.4)
    crop_h = crop_w * 3 / 4
    left = min(max(centre_x - crop_w / 2, 0), photo.width - crop_w)
    top = min(max(centre_y - crop_h / 2, 0), photo.height - crop_h)
    box = (left, top, left + crop_w, top + crop_h)
    image = photo.resize(size, Image.BILINEAR, box=box)
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    image = ImageEnhance.Brightness(image).enhance(rng.uniform(0.8, 1.2))
    image.save(path, format='JPEG', quality=quality)
    return os.path.getsize(path)


REGION_CLASSES = 32


def region_tree(root, count, size=(500, 375), quality=90, processes=None):
    """Writes (or reuses) 32 learnable classes of photo crops; returns {'count', 'bytes'}."""
    return _tree(
        root, count, REGION_CLASSES, size, quality, processes, _make_region_image, 'region'
    )


def camera_tree(root, count, classes=10, size=(3000, 2000), quality=92, processes=None):
    """Writes (or reuses) a tree of camera-sized JPEGs; returns {'count', 'bytes'}."""
    return _tree(root, count, classes, size, quality, processes, _make_camera_image, 'camera')


def evict_page_cache(root):
    """Drops every file's pages from the page cache (POSIX_FADV_DONTNEED; no root needed), so
    that every contender reads the images from the disk, as a first pass over a dataset larger
    than memory does; libraries and interpreters stay cached."""
    count = 0
    for folder, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY | os.O_NONBLOCK)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            count += 1
    return count


def warm_page_cache(root):
    """Reads every file once, so that every contender starts with the same warm cache."""
    total = 0
    for folder, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(folder, name), 'rb') as f:
                total += len(f.read())
    return total
