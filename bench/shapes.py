"""Multi-label images made here: small coloured shapes at random places, each shape a label.

An image shows each of the SHAPES with probability `presence` (none at all is possible), each
shape small (a tenth of the image's side) and anywhere, edges included, on a noisy grey
background. Two shapes share each colour, so a model must see the shape, not only the colour.
A crop that cuts a shape out of the image leaves its label on an image that no longer shows it:
what bench/multilabel_crops.py measures.
"""

import io

import numpy as np
from PIL import Image
from PIL import ImageDraw

# (name, colour, outline): each a label.
SHAPES = (
    ('red_square', (220, 40, 40), 'square'),
    ('red_disc', (220, 40, 40), 'disc'),
    ('green_square', (40, 190, 60), 'square'),
    ('green_triangle', (40, 190, 60), 'triangle'),
    ('blue_disc', (50, 70, 220), 'disc'),
    ('blue_triangle', (50, 70, 220), 'triangle'),
)
NAMES = tuple(name for name, _, _ in SHAPES)


def image(index, size=64, presence=0.35):
    """(JPEG bytes, [label names]) of image `index`: the same for the same arguments."""
    rng = np.random.default_rng(index)
    background = rng.integers(90, 170, (size, size, 3), dtype=np.uint8)
    picture = Image.fromarray(background)
    draw = ImageDraw.Draw(picture)
    side = max(4, size // 10)
    labels = []
    for name, colour, outline in SHAPES:
        if rng.random() >= presence:
            continue
        labels.append(name)
        top, left = (int(v) for v in rng.integers(0, size - side + 1, 2))
        box = (left, top, left + side - 1, top + side - 1)
        if outline == 'square':
            draw.rectangle(box, fill=colour)
        elif outline == 'disc':
            draw.ellipse(box, fill=colour)
        else:
            draw.polygon(
                [
                    (left, top + side - 1),
                    (left + side - 1, top + side - 1),
                    (left + side // 2, top),
                ],
                fill=colour,
            )
    buffer = io.BytesIO()
    picture.save(buffer, format='JPEG', quality=92)
    return buffer.getvalue(), labels


def dataset(count, size=64, presence=0.35, start=0):
    """([JPEG bytes], [[label names]]) of images start .. start + count - 1."""
    made = [image(start + i, size, presence) for i in range(count)]
    return [encoded for encoded, _ in made], [labels for _, labels in made]
