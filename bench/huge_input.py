"""One huge file among small images (issue 24): seconds and peak memory of a build of 60 small
images, with and without a sparse file of `--size-gb` named .jpg that starts as a JPEG does.

At filing, the 3 GB file cost minutes of CPU and gigabytes of memory, and was rejected as
`decode_error`; with --max-image-bytes it is `too_large` from its size, unread (bench/RESULTS.md,
"One huge input among small images"). `--checkout`
runs another checkout's code (e.g. main's) for the before figures.

    python -m bench.huge_input --size-gb 3 [--checkout /path/to/other/checkout]
"""

import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile

from bench import datasets
from bench.measure import measure

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
COMMAND = os.path.join(os.path.dirname(sys.executable), 'imageshards')


def _tree(root, size):
    """60 small photos in 3 classes (bench/datasets.py), and with `size`, a sparse file of that
    many bytes named .jpg that starts as one of them does."""
    datasets.photo_tree(str(root), 60, classes=3, size=(32, 24), processes=1)
    if size:
        first = min((root / 'class_000').glob('*.jpg'))
        with open(root / 'class_000' / 'disk_image.jpg', 'wb') as f:
            f.write(first.read_bytes()[:200])
            f.truncate(size)


def _build(root, out, checkout):
    env = dict(os.environ, PYTHONPATH=str(checkout))
    command = [COMMAND, 'build', '--input', str(root), '--output', str(out), '--no-analyze']
    measured = measure(command, env=env, interval=0.05, cwd=checkout)
    rejected = [
        json.loads(line)['reason']
        for line in (out / 'rejected.jsonl').read_text(encoding='utf-8').splitlines()
    ]
    return measured, rejected


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', 1)[0])
    parser.add_argument('--size-gb', type=float, default=3.0)
    parser.add_argument('--checkout', default=str(REPOSITORY))
    args = parser.parse_args(argv)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix='imageshards-huge-'))
    try:
        for label, size in (('60 images', 0), (f'+ {args.size_gb:g} GB file', args.size_gb)):
            root = scratch / f'in-{size}'
            _tree(root, int(size * (1 << 30)))
            measured, rejected = _build(root, scratch / f'out-{size}', args.checkout)
            largest = measured.process_peaks[0]
            print(
                f'{label:<16} {measured.seconds:6.1f} s  peak {measured.peak / 2**30:5.2f} GiB '
                f'(largest process {largest[1] / 2**30:.2f} GiB, {largest[0]})  '
                f'rejected {rejected}'
            )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == '__main__':
    main()
