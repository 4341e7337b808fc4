"""Sets to calibrate pipelines/assignment/alignment.py's constants on: bench/crop_data.py's
generator run on pictures apart from the held-out set's (scikit-image's photographs), so that
no constant is read off the set bench/near_duplicate_crops.py reports on.

    photos      bench/trusted_data.py's pictures (scikit-learn's two photographs, Grace Hopper,
                the terrain map), each in its 8 orientations (4 turns, mirrored or not): a
                remake of the set THRESHOLD was set on, whose script was not kept (at 300
                scenes, seed 7 this one draws 641 images where that drew 619)
    textures    16 repeated textures drawn here (seeded): brick walls in running bond, tiled
                floors, woven gratings and wallpapers (a patch of one of trusted_data's
                pictures tiled): pictures whose stretches look alike without sharing a pixel,
                which the photographs lack. Stricter than the held-out set's brick wall: most
                of their periods are exact, so two stretches differ only in noise and tone

    python -m bench.crop_calibration OUT [--pictures textures] [--scenes 300] [--seed 7]

writes OUT as bench/crop_data.py does (images/, truth.json), then prints what the build's
search joins there, as bench/near_duplicate_crops.py scores it (bench/RESULTS.md, "A uniqueness
test for repeated textures": `photos` at 300 scenes, seed 7; `textures` at 300, seed 8).
"""

import argparse
import collections

import numpy as np
from PIL import Image

from bench import crop_data
from bench import trusted_data

SIDE = 640  # of a texture, in pixels


def _finish(grey, rng):
    """A grey float image plus noise and a slow light, tinted, as an RGB PIL image."""
    ys, xs = np.mgrid[0:SIDE, 0:SIDE] / SIDE
    light = 1 + 0.15 * np.sin(2 * np.pi * (xs * rng.uniform(0.3, 1) + ys * rng.uniform(0.3, 1)))
    grey = grey * light + rng.normal(0, 5, grey.shape)
    tint = rng.uniform(0.75, 1.2, 3)
    return Image.fromarray(np.clip(grey[..., None] * tint, 0, 255).astype(np.uint8))


def brick(rng):
    """A wall in running bond: bricks of one size, each of its own tone, in mortar."""
    width, height = rng.uniform(36, 90), rng.uniform(16, 40)
    mortar = rng.uniform(2, 5)
    ys, xs = np.mgrid[0:SIDE, 0:SIDE].astype(float)
    row = np.floor(ys / height)
    shifted = xs + (row % 2) * width / 2
    column = np.floor(shifted / width)
    tones = rng.normal(130, 18, (int(SIDE / height) + 2, int(SIDE / width) + 3))
    grey = tones[row.astype(int), column.astype(int)]
    joint = (ys % height < mortar) | (shifted % width < mortar)
    grey = np.where(joint, rng.uniform(170, 220), grey)
    return _finish(grey if rng.random() < 0.5 else grey.T, rng)


def tiles(rng):
    """A floor of square tiles in grout, chequered or of random tones."""
    side, grout = rng.uniform(30, 70), rng.uniform(2, 4)
    ys, xs = np.mgrid[0:SIDE, 0:SIDE].astype(float)
    row, column = (ys // side).astype(int), (xs // side).astype(int)
    if rng.random() < 0.5:
        grey = np.where((row + column) % 2, 70.0, 180.0)
        grey += rng.normal(0, 8, (row.max() + 1, column.max() + 1))[row, column]
    else:
        grey = rng.normal(125, 25, (row.max() + 1, column.max() + 1))[row, column]
    joint = (ys % side < grout) | (xs % side < grout)
    return _finish(np.where(joint, 40.0, grey), rng)


def weave(rng):
    """Two crossed gratings, clipped: a woven or knitted cloth."""
    ys, xs = np.mgrid[0:SIDE, 0:SIDE].astype(float)
    grey = np.zeros((SIDE, SIDE))
    for _ in range(2):
        angle, period = rng.uniform(0, np.pi), rng.uniform(14, 45)
        grey += np.sin(2 * np.pi * (xs * np.cos(angle) + ys * np.sin(angle)) / period)
    return _finish(128 + 90 * np.tanh(1.5 * grey), rng)


def wallpaper(rng, picture):
    """A patch of `picture` tiled, every other row moved half a patch or not."""
    side = int(rng.uniform(40, 100))
    left = rng.uniform(0, picture.width - side)
    top = rng.uniform(0, picture.height - side)
    patch = np.asarray(picture.convert('L').crop((left, top, left + side, top + side)), float)
    reps = SIDE // side + 2
    grey = np.tile(patch, (reps, reps))
    if rng.random() < 0.5:
        for row in range(1, reps, 2):
            band = slice(row * side, (row + 1) * side)
            grey[band] = np.roll(grey[band], side // 2, 1)
    return _finish(grey[:SIDE, :SIDE], rng)


def textures(seed=0):
    """The 16 textures (RGB PIL images, SIDE a side): four of each kind."""
    rng = np.random.default_rng(seed)
    found = trusted_data.pictures()
    drawn = []
    for index in range(4):
        drawn += [brick(rng), tiles(rng), weave(rng), wallpaper(rng, found[index % len(found)])]
    return drawn


def pictures(name):
    """The pictures of the set `name` ('photos' or 'textures')."""
    if name == 'textures':
        return textures()
    turned = []
    for picture in trusted_data.pictures():
        for mirrored in (picture, picture.transpose(Image.Transpose.FLIP_LEFT_RIGHT)):
            turned += [mirrored.rotate(90 * turns, expand=True) for turns in range(4)]
    return turned


def main(argv=None):
    from bench import near_duplicate_crops  # pylint: disable=import-outside-toplevel

    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('out')
    parser.add_argument('--pictures', choices=('photos', 'textures'), default='textures')
    parser.add_argument('--scenes', type=int, default=300)
    parser.add_argument('--seed', type=int, default=7)
    args = parser.parse_args(argv)
    truth = crop_data.make(args.out, args.scenes, args.seed, pictures(args.pictures), args.pictures)
    counts = collections.Counter(image['kind'] for image in truth['images'])
    print(f'{len(truth["images"])} images: {dict(sorted(counts.items()))}')
    near_duplicate_crops.report(args.out, truth, ours_only=True)


if __name__ == '__main__':
    main()
