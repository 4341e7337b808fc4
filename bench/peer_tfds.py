"""A peer build: TensorFlow Datasets' own `GeneratorBasedBuilder` over an image tree.

What a TFDS user writes for a folder of labeled images: an `Image` and a `ClassLabel` feature,
one split, examples yielded as (key, {'image': path, 'label': name}), then
`download_and_prepare` with a fixed shard count. TFDS shuffles records by a hash of their key
and writes TFRecord shards (or, with `--file-format array_record`, ArrayRecord shards through its
own writer: `group_size:1`, zstd); `Image` given a path stores the file's bytes without decoding
them.

    python -m bench.peer_tfds ROOT OUT [--num-shards 16] [--file-format array_record]
"""

import argparse
import os

import tensorflow_datasets as tfds

# TFDS finds a builder through its module's package: the class may not live in __main__.
from bench import tfds_image_tree


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('root')
    parser.add_argument('out')
    parser.add_argument('--num-shards', type=int, default=16)
    parser.add_argument('--file-format', default='tfrecord', choices=('tfrecord', 'array_record'))
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    labels = sorted(name for name in os.listdir(root) if os.path.isdir(os.path.join(root, name)))
    builder = tfds_image_tree.ImageTree(
        root=root, labels=labels, data_dir=args.out, file_format=args.file_format
    )
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(num_shards=args.num_shards)
    )
    print(f'wrote {builder.info.splits["train"].num_examples} records')


if __name__ == '__main__':
    main()
