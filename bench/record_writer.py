"""The writer's work per record, timed in one process: `RecordEncoder.encode` of a typical
record (a small JPEG of the 200,000-image tree, a single-label classification) and its TFRecord
framing, N times; the best of several runs.

    python -m bench.record_writer bench/out/photos-200000-64x64/class_3/000123.jpg
"""

import argparse
import hashlib
import sys
import time

from imageshards.kinds.classification import Classification
from imageshards.kinds.record_kind import LabelNames
from imageshards.shard_formats import registry as shard_formats
from imageshards.shard_formats import tfrecord
from pipelines.core.blocks import ImageMeta
from pipelines.core.settings import WriteSettings
from pipelines.writing.encode import RecordEncoder


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('image', help='a JPEG, stored as the record holds it')
    parser.add_argument('--records', type=int, default=100_000)
    parser.add_argument('--runs', type=int, default=5)
    args = parser.parse_args(argv)
    with open(args.image, 'rb') as f:
        data = f.read()
    digest = hashlib.sha256(data).digest()
    meta = ImageMeta(
        7, 'class_3/000123.jpg', 3, '', 'jpeg', 64, 64, 3, digest, len(data), b'', 0, False
    )
    labels = tuple(f'class_{i}' for i in range(10))
    settings = WriteSettings(
        Classification(), LabelNames(labels), shard_formats.named('tfrecord'), '/in', '/out', '/tmp'
    )
    encoder = RecordEncoder(settings)
    runs = []
    for _ in range(args.runs):
        start = time.perf_counter()
        for _ in range(args.records):
            tfrecord.frame(encoder.encode(meta, data))
        runs.append((time.perf_counter() - start) / args.records * 1e6)
    shown = ', '.join(f'{run:.2f}' for run in runs)
    print(f'{min(runs):.2f} us a record (best of {args.runs} runs of {args.records:,}: {shown})')


if __name__ == '__main__':
    sys.exit(main())
