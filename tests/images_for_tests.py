"""Real JPEG/PNG (and other) bytes for tests, made with Pillow: small, distinct, learnable."""

import io

import numpy as np
from PIL import Image

# One colour per class so that a model can tell classes apart; noise makes every image unique.
CLASS_COLOURS = [
    (220, 40, 40),
    (40, 200, 60),
    (50, 70, 220),
    (230, 200, 40),
    (160, 60, 200),
    (40, 200, 200),
    (240, 120, 20),
    (120, 120, 120),
]


def pixels(index, class_index=0, size=(24, 32)):
    """An RGB array (height, width, 3): the class colour, a noisy block placed by `index`."""
    rng = np.random.default_rng(index)
    height, width = size
    image = np.empty((height, width, 3), np.uint8)
    image[:] = CLASS_COLOURS[class_index % len(CLASS_COLOURS)]
    noise = rng.integers(0, 256, (height // 2, width // 2, 3), dtype=np.uint8)
    top, left = index % (height // 2), (index * 7) % (width // 2)
    image[top : top + height // 2, left : left + width // 2] = noise
    return image


def encode(array_or_image, fmt='JPEG', **params):
    image = (
        array_or_image
        if isinstance(array_or_image, Image.Image)
        else Image.fromarray(array_or_image)
    )
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **params)
    return buffer.getvalue()


def jpeg(index, class_index=0, size=(24, 32), **params):
    return encode(pixels(index, class_index, size), 'JPEG', quality=90, **params)


def png(index, class_index=0, size=(24, 32)):
    return encode(pixels(index, class_index, size), 'PNG')


def exif_rotated_jpeg(index, orientation=6):
    image = Image.fromarray(pixels(index, 0, (20, 36)))
    exif = image.getexif()
    exif[0x0112] = orientation
    return encode(image, 'JPEG', quality=90, exif=exif)


def sixteen_bit_png(index):
    grey = pixels(index)[..., 0].astype(np.uint16) * 257
    return encode(Image.fromarray(grey), 'PNG')


def decompression_bomb_png(side=20_000):
    """A tiny file that declares side x side pixels (a 1-bit image compresses to almost nothing)."""
    return encode(Image.new('1', (side, side)), 'PNG')


def write_tree(root, per_class, classes=('cat', 'dog', 'fish'), start=0):
    """Writes `<root>/<class>/img_NNNN.(jpg|png)`, alternating formats; returns the paths."""
    paths = []
    for class_index, name in enumerate(classes):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            index = start + class_index * 10_000 + i
            if i % 3 == 2:
                path, data = folder / f'img_{i:04d}.png', png(index, class_index)
            else:
                path, data = folder / f'img_{i:04d}.jpg', jpeg(index, class_index)
            path.write_bytes(data)
            paths.append(path)
    return paths
