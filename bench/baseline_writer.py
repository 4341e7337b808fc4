"""The one-process baseline of the original write-ups: list, random.shuffle, read, write.

No validation: the files' bytes go into tf.train.Examples as they are, 1,000 per shard. With
--validate, each image is also decoded with Pillow first (at 1/8 scale, as imageshards does), to
show what validation costs one process.
Usage: python -m bench.baseline_writer INPUT_ROOT OUTPUT_DIR [--validate]
"""

import io
import os
import random
import sys

import tensorflow as tf
from PIL import Image


def _bytes(value):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int64(value):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def _validate(data):
    image = Image.open(io.BytesIO(data))
    image.draft(image.mode, (image.width // 8, image.height // 8))
    image.load()


def main(root, out_dir, validate=False, per_shard=1000, seed=0):
    files = []
    for folder, _, names in os.walk(root):
        files += [os.path.join(folder, n) for n in names if n.lower().endswith('.jpg')]
    files.sort()
    labels = sorted({os.path.relpath(f, root).split(os.sep)[0] for f in files})
    label_ids = {name: i for i, name in enumerate(labels)}
    random.Random(seed).shuffle(files)
    os.makedirs(out_dir, exist_ok=True)
    for start in range(0, len(files), per_shard):
        path = os.path.join(out_dir, f'train-{start // per_shard:05d}.tfrecord')
        with tf.io.TFRecordWriter(path) as writer:
            for name in files[start : start + per_shard]:
                with open(name, 'rb') as f:
                    data = f.read()
                if validate:
                    _validate(data)
                label = os.path.relpath(name, root).split(os.sep)[0]
                example = tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            'image/encoded': _bytes(data),
                            'image/format': _bytes(b'jpeg'),
                            'image/class/label': _int64(label_ids[label]),
                            'image/class/text': _bytes(label.encode()),
                            'image/filename': _bytes(name.encode()),
                        }
                    )
                )
                writer.write(example.SerializeToString())
    print(f'wrote {len(files)} records')


if __name__ == '__main__':
    main(sys.argv[1], sys.argv[2], validate='--validate' in sys.argv[3:])
