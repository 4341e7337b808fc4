"""A small labeled image tree from real images that a package ships: scikit-learn's digits.

1,797 handwritten digits (8x8, 16 grey levels, from UCI) scaled to 32x32 and written as PNG, or
as JPEG for a mixed tree, into `<out>/<digit name>/<index>.<ext>`: ten clearly learnable classes.
"""

import argparse
import logging
import os

import numpy as np
from PIL import Image

from imageshards import console

_LOG = logging.getLogger(__name__)

CLASS_NAMES = ('zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine')


def write_digits(out_dir, size=32, limit=None, jpeg_every=2):
    """Writes digits as images; every `jpeg_every`-th as JPEG, the rest PNG. Returns the count."""
    from sklearn.datasets import load_digits  # pylint: disable=import-outside-toplevel

    digits = load_digits()
    count = len(digits.images) if limit is None else min(limit, len(digits.images))
    for index in range(count):
        pixels = np.clip(digits.images[index] * (255 / 16), 0, 255).astype(np.uint8)
        image = Image.fromarray(pixels, mode='L').resize((size, size), Image.Resampling.BILINEAR)
        folder = os.path.join(out_dir, CLASS_NAMES[digits.target[index]])
        os.makedirs(folder, exist_ok=True)
        if jpeg_every and index % jpeg_every == 0:
            image.convert('RGB').save(os.path.join(folder, f'{index:04d}.jpg'), quality=95)
        else:
            image.save(os.path.join(folder, f'{index:04d}.png'))
    return count


def build_arg_parser():
    parser = argparse.ArgumentParser(prog='imageshards sample-data', description=__doc__)
    parser.add_argument('out_dir', help='folder to write <class>/<image> into')
    parser.add_argument('--size', type=int, default=32, help='image side in pixels')
    parser.add_argument('--limit', type=int, default=None, help='write only the first N digits')
    return parser


def main(argv=None):
    args = build_arg_parser().parse_args(argv)
    console.configure_logging()
    count = write_digits(args.out_dir, args.size, args.limit)
    _LOG.info('wrote %d digit images in 10 class folders under %s', count, args.out_dir)
    return 0
