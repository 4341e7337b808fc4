"""Multi-label builds for tests, of real small JPEGs: several colours per image, each a label.

Built by `imageshards build` from a `labels` manifest of the images (bench/labelled_build.py).

Image i shows the colours `colour_labels(i)` as blocks in fixed places on a grey noise
background: clearly learnable, and a label set of zero to four colours.
"""

import numpy as np

from bench import labelled_build

import images_for_tests

COLOURS = ('blue', 'green', 'red', 'yellow')
_RGB = {
    'blue': (50, 70, 220),
    'green': (40, 200, 60),
    'red': (220, 40, 40),
    'yellow': (230, 200, 40),
}
WARM = ('red', 'yellow')


def colour_labels(index):
    """The colours image `index` shows: each with a chance of one half, fixed by `index`."""
    rng = np.random.default_rng(10_000 + index)
    return [colour for colour in COLOURS if rng.random() < 0.5]


def mood(colours):
    """A single-valued level: 'warm' with a warm colour, 'cool' with only cool ones, none
    (missing) without colours."""
    if not colours:
        return []
    return ['warm'] if set(colours) & set(WARM) else ['cool']


def colour_jpeg(index, colours, size=(32, 32)):
    """A JPEG of grey noise with a block of each colour of `colours` in the colour's quadrant."""
    rng = np.random.default_rng(index)
    height, width = size
    pixels = rng.integers(100, 160, (height, width, 3), dtype=np.uint8)
    for colour in colours:
        quadrant = COLOURS.index(colour)
        top, left = (quadrant // 2) * height // 2, (quadrant % 2) * width // 2
        pixels[top + 2 : top + height // 2 - 2, left + 2 : left + width // 2 - 2] = _RGB[colour]
    return images_for_tests.encode(pixels, 'JPEG', quality=90)


def write_colour_build(
    out,
    count=64,
    splits=(('train', 0.75), ('val', 0.25)),
    levels=False,
    num_shards=2,
    analyze=True,
):
    """A multi-label build of `count` colour images in `out` (a pathlib.Path); returns `out`.

    Args:
        splits: (name, share) pairs: the first images go to the first split, and so on.
        levels: also the label levels `colour` (multi-label: the colours) and `mood`
            (single-valued, missing without colours).
        analyze: with the tf.Transform analysis (the build's default).
    """
    labels = [colour_labels(i) for i in range(count)]
    images = [colour_jpeg(i, names) for i, names in enumerate(labels)]
    names, bounds = [], []
    total = 0.0
    for name, share in splits:
        total += share
        names.append(name)
        bounds.append(round(total * count))
    split_of = [names[next(k for k, bound in enumerate(bounds) if i < bound)] for i in range(count)]
    by_level = {'colour': labels, 'mood': [mood(names) for names in labels]} if levels else None
    return labelled_build.write(
        str(out), images, labels, split_of, levels=by_level, num_shards=num_shards, analyze=analyze
    )
