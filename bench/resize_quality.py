"""What --resize-shorter-side stores, measured: JPEG quality against PSNR and size, and the
resampling filter against closeness and time (pipelines/validation/resize.py).

Quality: each image is resized as the build does (DCT-scaled decode, Lanczos) to a shorter side
of `--side`; those pixels are the reference, encoded at each quality (4:2:0, optimized Huffman
tables, as the build), decoded again with TensorFlow's decoder as training does, and compared:
PSNR (mean and worst over the images) and bytes per image.

Filters: the same resize with each Pillow filter after the DCT-scaled decode, and without the
DCT scaling, against a reference decoded in full and resized with Lanczos in float32 (Pillow's
'F' mode per channel), PSNR and CPU time per image (decode and resize, one thread).

    python -m bench.resize_quality --tree bench/out/photos-20000-500x375 --count 300
    python -m bench.resize_quality --tree bench/out/camera-2000-3000x2000 --count 60
"""

import argparse
import io
import os
import statistics
import time

import numpy as np
from PIL import Image

from pipelines.core.settings import ResizeSpec
from pipelines.validation import resize

QUALITIES = (70, 75, 80, 85, 90, 95, 100)
FILTERS = {
    'lanczos (the build)': Image.Resampling.LANCZOS,
    'bicubic': Image.Resampling.BICUBIC,
    'bilinear (antialiased)': Image.Resampling.BILINEAR,
    'box': Image.Resampling.BOX,
}


def _files(tree, count):
    found = sorted(
        os.path.join(folder, name)
        for folder, _, names in os.walk(tree)
        for name in names
        if name.lower().endswith(('.jpg', '.jpeg'))
    )
    step = max(1, len(found) // count)
    return found[::step][:count]


def _psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float('inf') if mse == 0 else 10 * np.log10(255**2 / mse)


def _decode_tf(data):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    return tf.io.decode_jpeg(data, channels=3, dct_method='INTEGER_ACCURATE').numpy()


def quality_table(files, side):
    spec = ResizeSpec(side)
    rows = {q: ([], []) for q in QUALITIES}
    for path in files:
        with open(path, 'rb') as f:
            data = f.read()
        image, _ = resize._resized(data, spec)  # pylint: disable=protected-access
        reference = np.asarray(image.convert('RGB'))
        for quality in QUALITIES:
            stored = resize._encode(image.copy(), 'jpeg', quality)  # pylint: disable=protected-access
            rows[quality][0].append(_psnr(_decode_tf(stored), reference))
            rows[quality][1].append(len(stored))
    print(
        f'\nquality at shorter side {side}, {len(files)} images (TensorFlow decode vs the pixels)'
    )
    print(f'{"quality":>8}{"PSNR mean":>11}{"worst":>8}{"KB/image":>10}{"vs 100":>8}')
    full = statistics.mean(rows[100][1])
    for quality, (psnrs, sizes) in rows.items():
        mean = statistics.mean(sizes)
        print(
            f'{quality:>8}{statistics.mean(psnrs):>11.1f}{min(psnrs):>8.1f}'
            f'{mean / 1e3:>10.1f}{mean / full:>8.2f}'
        )


def _float_lanczos(image, size):
    channels = [band.convert('F').resize(size, Image.Resampling.LANCZOS) for band in image.split()]
    return np.stack([np.asarray(c) for c in channels], axis=-1)


def filter_table(files, side):
    results = {name: ([], []) for name in [*FILTERS, 'lanczos, full decode (no DCT scaling)']}
    for path in files:
        with open(path, 'rb') as f:
            data = f.read()
        full = Image.open(io.BytesIO(data)).convert('RGB')
        size = resize.target_size(*full.size, side)
        reference = np.clip(np.round(_float_lanczos(full, size)), 0, 255)
        for name, method in FILTERS.items():
            started = time.process_time()
            image = Image.open(io.BytesIO(data))
            image.draft('RGB', size)
            out = np.asarray(image.convert('RGB').resize(size, method))
            results[name][1].append(time.process_time() - started)
            results[name][0].append(_psnr(out, reference))
        started = time.process_time()
        out = np.asarray(
            Image.open(io.BytesIO(data)).convert('RGB').resize(size, FILTERS['lanczos (the build)'])
        )
        name = 'lanczos, full decode (no DCT scaling)'
        results[name][1].append(time.process_time() - started)
        results[name][0].append(_psnr(out, reference))
    print(f'\nfilters at shorter side {side}, {len(files)} images (vs full decode + float Lanczos)')
    print(f'{"":<40}{"PSNR mean":>11}{"worst":>8}{"ms/image":>10}')
    for name, (psnrs, seconds) in results.items():
        print(
            f'{name:<40}{statistics.mean(psnrs):>11.1f}{min(psnrs):>8.1f}'
            f'{statistics.median(seconds) * 1e3:>10.2f}'
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--tree', required=True)
    parser.add_argument('--count', type=int, default=200)
    parser.add_argument('--side', type=int, default=256)
    args = parser.parse_args(argv)
    files = _files(args.tree, args.count)
    print(
        f'{len(files)} images of {args.tree}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}'
    )
    quality_table(files, args.side)
    filter_table(files, args.side)


if __name__ == '__main__':
    main()
