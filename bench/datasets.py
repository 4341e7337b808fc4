"""Benchmark image trees made from real photos shipped with scikit-learn (no downloads).

`photo_tree` cuts `count` distinct JPEGs of about 500x375 from the two sample photographs
(china.jpg, flower.jpg, 427x640): a random crop at a random scale, a random flip and a small
brightness change each, in `classes` folders, stored label-sorted (class 0's files first).
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
    stamp = os.path.join(root, '.complete.json')
    wanted = {'count': count, 'classes': classes, 'size': list(size), 'quality': quality}
    if os.path.exists(stamp):
        with open(stamp, encoding='utf-8') as f:
            done = json.load(f)
        if {k: done.get(k) for k in wanted} == wanted:
            return done
    jobs = []
    per_class = -(-count // classes)
    for index in range(count):
        folder = os.path.join(root, f'class_{index // per_class:03d}')
        os.makedirs(folder, exist_ok=True)
        jobs.append((index, os.path.join(folder, f'{index:08d}.jpg'), size, quality))
    with multiprocessing.Pool(processes) as pool:
        total = sum(pool.imap_unordered(_make_one, jobs, chunksize=256))
    done = dict(wanted, bytes=total)
    with open(stamp, 'w', encoding='utf-8') as f:
        json.dump(done, f)
    return done


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
