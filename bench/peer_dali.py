"""NVIDIA DALI's CPU pipeline reading an imageshards build, for bench/peer_reads.py.

What a DALI user writes for the same work as make_dataset(training=True): `fn.readers.tfrecord`
over the build's shards with the index file the build writes beside each (`index_files` makes
them with DALI's own `tfrecord2idx` for a build made before it did), shuffled in its reader's
buffer,
`fn.decoders.image_random_crop` (the Inception crop's area and aspect ranges, cut while
decoding, libjpeg-turbo on the CPU), `fn.resize` to 224x224 (bilinear without antialiasing, as
make_dataset; DALI's default antialiasing costs more), `device_id=None` (no GPU), one thread
per core. Needs the `dali` extra (`pip install -e .[dali]`).
"""

import contextlib
import io
import os
import runpy
import shutil
import sys

from imageshards.kinds import features

INDEX_TOOL = 'tfrecord2idx'  # installed by nvidia-dali beside the interpreter


def available():
    try:
        import nvidia.dali  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        return False
    return True


def index_files(shards, folder):
    """`<folder>/<shard name>.idx` for each shard, written by DALI's tfrecord2idx (once)."""
    tool = shutil.which(INDEX_TOOL, path=os.path.dirname(sys.executable)) or shutil.which(
        INDEX_TOOL
    )
    if tool is None:
        raise FileNotFoundError(f'{INDEX_TOOL} not found: pip install -e .[dali]')
    os.makedirs(folder, exist_ok=True)
    indexes = [os.path.join(folder, os.path.basename(shard) + '.idx') for shard in shards]
    for shard, index in zip(shards, indexes):
        if os.path.exists(index):
            continue
        partial = index + '.partial'
        # The tool is a script; run in this process, it imports TensorFlow once for all shards.
        argv, sys.argv = sys.argv, [tool, shard, partial]
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                runpy.run_path(tool, run_name='__main__')
        finally:
            sys.argv = argv
        os.replace(partial, index)
    return indexes


def batches(shards, indexes, batch, size, seed=0, threads=None):
    """Endless (images, labels) batches of DALI TensorLists (len() is the batch size)."""
    # pylint: disable=import-outside-toplevel
    import nvidia.dali.fn as fn
    import nvidia.dali.tfrecord as tfrec
    from nvidia.dali import pipeline_def
    from nvidia.dali import types

    @pipeline_def(batch_size=batch, num_threads=threads or os.cpu_count(), device_id=None)
    def crops():
        records = fn.readers.tfrecord(
            path=list(shards),
            index_path=list(indexes),
            features={
                features.ENCODED: tfrec.FixedLenFeature((), tfrec.string, ''),
                features.LABEL: tfrec.FixedLenFeature([1], tfrec.int64, -1),
            },
            random_shuffle=True,
            name='Reader',
        )
        images = fn.decoders.image_random_crop(
            records[features.ENCODED],
            device='cpu',
            output_type=types.RGB,
            random_area=[0.08, 1.0],
            random_aspect_ratio=[3 / 4, 4 / 3],
            num_attempts=10,
        )
        images = fn.resize(images, resize_y=size[0], resize_x=size[1], antialias=False)
        return images, records[features.LABEL]

    pipe = crops(seed=seed)
    pipe.build()
    while True:
        yield pipe.run()
