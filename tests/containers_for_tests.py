"""Real archives, arrays and record files for tests, made with tarfile, zipfile, struct, numpy and
gzip (TFRecords with imageshards' framing; tests that need TensorFlow's own writer use it)."""

import gzip
import io
import json
import os
import struct
import tarfile
import zipfile

import numpy as np

from imageshards.kinds import example_bytes
from imageshards.shard_formats import tfrecord


def tar_tree(root, path, arcname='.', compress=False):
    """A tar (or .tar.gz) of the folder `root`, its members named below `arcname`, in sorted
    order of their paths reversed (an archive's order is not the tree's)."""
    files = sorted(
        (
            os.path.relpath(os.path.join(folder, name), root)
            for folder, _, names in os.walk(root)
            for name in names
        ),
        reverse=True,
    )
    with tarfile.open(path, 'w:gz' if compress else 'w') as tar:
        for relative in files:
            tar.add(os.path.join(root, relative), arcname=os.path.join(arcname, relative))
    return str(path)


def zip_tree(root, path, prefix='', method=zipfile.ZIP_DEFLATED):
    """A zip of the folder `root`, its members named `prefix` + their relative path."""
    with zipfile.ZipFile(path, 'w', compression=method) as archive:
        for folder, _, names in sorted(os.walk(root)):
            for name in sorted(names, reverse=True):
                full = os.path.join(folder, name)
                archive.write(full, prefix + os.path.relpath(full, root))
    return str(path)


def tar_of(path, members, compress=False):
    """A tar of {name: bytes, or a TarInfo to add as it is}, in the given order."""
    with tarfile.open(path, 'w:gz' if compress else 'w') as tar:
        for name, content in members.items():
            if isinstance(content, tarfile.TarInfo):
                tar.addfile(content)
                continue
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return str(path)


def link(name, target, kind=tarfile.SYMTYPE):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def device(name):
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
    return info


def zip_of(path, members, method=zipfile.ZIP_DEFLATED):
    """A zip of {name: bytes}."""
    with zipfile.ZipFile(path, 'w', compression=method) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return str(path)


def webdataset_shard(path, samples):
    """A WebDataset shard: {sample key: {extension: bytes or str or a JSON-able dict}}."""
    members = {}
    for key, parts in samples.items():
        for ext, value in parts.items():
            if isinstance(value, dict):
                value = json.dumps(value)
            members[f'{key}.{ext}'] = value.encode() if isinstance(value, str) else value
    return tar_of(path, members)


def idx(path, array, compress=None):
    """An IDX file of a uint8 array (MNIST's format: big-endian dimensions after a magic)."""
    array = np.asarray(array, dtype=np.uint8)
    data = struct.pack('>BBBB', 0, 0, 8, array.ndim)
    data += struct.pack(f'>{array.ndim}I', *array.shape) + array.tobytes()
    compress = str(path).endswith('.gz') if compress is None else compress
    with open(path, 'wb') as f:
        f.write(gzip.compress(data, mtime=0) if compress else data)
    return str(path)


def mnist_like(folder, train=12, test=5, size=(8, 6), classes=3, compress=True, seed=0):
    """MNIST's four files in `folder`; returns {split: (images, labels)}."""
    rng = np.random.default_rng(seed)
    suffix = '.gz' if compress else ''
    made = {}
    for prefix, split, count in (('train', 'train', train), ('t10k', 'test', test)):
        images = rng.integers(0, 256, (count, *size), dtype=np.uint8)
        labels = (np.arange(count) % classes).astype(np.uint8)
        idx(os.path.join(folder, f'{prefix}-images-idx3-ubyte{suffix}'), images)
        idx(os.path.join(folder, f'{prefix}-labels-idx1-ubyte{suffix}'), labels)
        made[split] = (images, labels)
    return made


def example(image, label=None, text=None):
    """A serialized tf.train.Example with `image/encoded` and the given labels (lists too)."""
    example_class = example_bytes.example_class()
    message = example_class()
    feature = message.features.feature
    if image is not None:
        feature['image/encoded'].bytes_list.value.append(image)
    if label is not None:
        labels = label if isinstance(label, list) else [label]
        feature['image/class/label'].int64_list.value.extend(labels)
    if text is not None:
        texts = text if isinstance(text, list) else [text]
        feature['image/class/text'].bytes_list.value.extend(t.encode() for t in texts)
    return message.SerializeToString()


def tfrecord_file(path, serialized, compress=False):
    """A TFRecord file of the given records."""
    data = b''.join(tfrecord.frame(record) for record in serialized)
    with open(path, 'wb') as f:
        f.write(gzip.compress(data, mtime=0) if compress else data)
    return str(path)
