"""Arrays of images as inputs: MNIST's IDX files and NumPy's .npz and .npy, read where they are.

Each image is a row of a uint8 array (HxW, HxWx1 or HxWx3), stored as a lossless PNG that decodes
to exactly its pixels (pipelines/core/reading.py makes it, the same bytes every time). Its key
names the file and the row (`train-images-idx3-ubyte.gz/00012`, `mnist.npz/x_train/00012`),
zero-padded so that keys sort in row order; its label is the row's integer (named by
--class-names: pipelines/inputs/class_names.py). The standard names decide the split, as a
manifest's split column does: IDX files named `train-...` and `t10k-...` (or `test-...`) are
`train` and `test`, arrays `x_<split>` with `y_<split>` are that split, `x`/`y` and
`images`/`labels` are left to --splits.

    IDX    an `*-images-idx3-ubyte[.gz]` file with its `*-labels-idx1-ubyte[.gz]` beside it (or
           a folder holding both pairs): its header (big-endian dimensions) must agree with its
           size, and its labels with its count, or the build stops in one line
    .npz   `x_train`/`y_train`/`x_test`/`y_test`, `x`/`y` or `images`/`labels` (np.savez: rows
           are ranges of the file; np.savez_compressed: one sequential stream per array)
    .npy   `x_<split>.npy` with `y_<split>.npy` beside it, or `images.npy` with `labels.npy`

A row of an uncompressed file is a byte range any worker reads on its own; a .gz IDX file and a
compressed .npz are read through, in one work item per array.
"""

import gzip
import io
import re
import struct
import typing
import zipfile

import numpy as np

from imageshards import storage
from pipelines.core import sources
from pipelines.core.sources import Source
from pipelines.core.sources import ZipEntry
from pipelines.inputs.class_names import UnknownClass
from pipelines.inputs.entries import IDX_IMAGES
from pipelines.inputs.entries import InputEntry

IDX_MAGIC = re.compile(rb'^\x00\x00\x08[\x01-\x04]')
_SPLITS = {'train': 'train', 't10k': 'test', 'test': 'test'}
_PAIRS = (('x', 'y'), ('images', 'labels'))
_CHANNELS = (1, 3)


class Images(typing.NamedTuple):
    """One array of images, and its labels."""

    name: str  # the key's prefix: `train-images-idx3-ubyte.gz`, `mnist.npz/x_train`
    container: str
    how: str  # sources.RANGE, GZIP or ZIP_STREAM
    offset: int  # of its first row, in the file or (GZIP, ZIP_STREAM) the decoded stream
    shape: tuple  # (height, width, channels) of a row
    labels: np.ndarray  # one integer per row
    split: str = ''
    zip_entry: tuple = ()
    member_prefix: str = ''  # before the row's number in `container!member`: `x_train/`


def array_entries(files, class_names):
    """InputEntry of every row of the arrays in `files` (IDX images files, .npz, .npy), file
    after file; raises ValueError, in one line, for an array that cannot be read as images."""
    next_id = 0
    for images in _all_images(files):
        width = len(str(max(len(images.labels) - 1, 0)))
        row_bytes = int(np.prod(images.shape))
        for row, label in enumerate(images.labels.tolist()):
            source = Source(
                images.container,
                f'{images.member_prefix}{row}',
                images.how,
                images.offset + row * row_bytes,
                row_bytes,
                sources.PIXELS,
                images.shape,
                images.zip_entry,
            )
            entry = InputEntry(
                next_id,
                source.display,
                f'{images.name}/{row:0{width}d}',
                '',
                images.split,
                size=row_bytes,
                source=source.encode(),
            )
            try:
                yield entry._replace(label=class_names.name(int(label)))
            except UnknownClass as e:
                yield entry._replace(reject='unknown_class', detail=str(e))
            next_id += 1


def _all_images(files):
    for path in files:
        name = path.rsplit('/', 1)[-1]
        if IDX_IMAGES.match(name):
            yield _idx_images(path)
        elif name.lower().endswith('.npz'):
            yield from _npz_images(path)
        elif name.lower().endswith('.npy') and _npy_labels_name(name):
            yield _npy_images(path)


def split_of(name) -> str:
    """The split an array's standard name gives: `train-images-idx3-ubyte` train,
    `t10k-images-idx3-ubyte` test, `x_val` val; else ''."""
    idx = IDX_IMAGES.match(name)
    if idx:
        token = re.split(r'[-_.]', idx.group('prefix'))[-1].lower() if idx.group('prefix') else ''
        return _SPLITS.get(token, '')
    stem = name.rsplit('.', 1)[0] if name.lower().endswith('.npy') else name
    for images, _ in _PAIRS:
        if stem.lower().startswith(images + '_'):
            split = stem[len(images) + 1 :]
            return _SPLITS.get(split.lower(), split)
    return ''


def _idx_labels_path(path):
    folder, name = path.rsplit('/', 1) if '/' in path else ('', path)
    found = IDX_IMAGES.match(name)
    start, end = found.span('prefix')
    rest = name[end:].replace('images', 'labels', 1).replace('idx3', 'idx1', 1)
    return f'{folder}/{name[start:end]}{rest}' if folder else name[start:end] + rest


def _idx_images(path):
    """The Images of an IDX images file, checked against its size and its labels file."""
    name = path.rsplit('/', 1)[-1]
    compressed = bool(IDX_IMAGES.match(name).group('gz'))
    with _opened(path, compressed) as f:
        dims, header = _idx_header(f, path, (3, 4))
        size = _rest_size(f) + header
    count, shape = dims[0], (*dims[1:3], dims[3] if len(dims) == 4 else 1)
    expected = header + count * int(np.prod(shape))
    if size != expected or shape[2] not in _CHANNELS:
        raise ValueError(
            f'{path}: its header says {count:,} images of {"x".join(map(str, shape))} '
            f'({expected:,} bytes), but it holds {size:,} bytes: cut short, or not an IDX '
            'file of images (uint8, HxW or HxWx1 or HxWx3)'
        )
    labels_path = _idx_labels_path(path)
    if not storage.exists(labels_path):  # the other of a compressed and a plain one
        other = labels_path[:-3] if labels_path.endswith('.gz') else labels_path + '.gz'
        if not storage.exists(other):
            raise ValueError(f'{path}: no labels file {labels_path} beside it (its standard name)')
        labels_path = other
    with _opened(labels_path, labels_path.endswith('.gz')) as f:
        label_dims, _ = _idx_header(f, labels_path, (1,))
        labels = np.frombuffer(f.read(), dtype=np.uint8)
    if label_dims[0] != count or len(labels) != count:
        raise ValueError(
            f'{labels_path} holds {len(labels):,} labels (its header says {label_dims[0]:,}) '
            f'for the {count:,} images of {path}: they must be as many'
        )
    how = sources.GZIP if compressed else sources.RANGE
    return Images(name, path, how, header, shape, labels, split_of(name))


def _idx_header(f, path, dimensions):
    """(dims, header bytes) of an IDX file of uint8 (type 0x08) with one of `dimensions`."""
    start = f.read(4)
    if not IDX_MAGIC.match(start) or start[3] not in dimensions:
        raise ValueError(
            f'{path} is not an IDX file of uint8 with {" or ".join(map(str, dimensions))} '
            f'dimensions (it starts {start.hex()}; expected 00000801 or 00000803)'
        )
    dims = struct.unpack(f'>{start[3]}I', f.read(4 * start[3]))
    return dims, 4 + 4 * start[3]


def _rest_size(f):
    size = 0
    while chunk := f.read(1 << 22):
        size += len(chunk)
    return size


class _opened:  # pylint: disable=invalid-name
    """A file's bytes, decompressed if it is gzipped."""

    def __init__(self, path, compressed):
        self._path, self._compressed = path, compressed
        self._raw = None

    def __enter__(self):
        self._raw = storage.open_read(self._path)
        return gzip.GzipFile(fileobj=self._raw) if self._compressed else self._raw

    def __exit__(self, *exc_info):
        self._raw.close()


def _npz_images(path):
    """The Images of an .npz's pairs of arrays."""
    name = path.rsplit('/', 1)[-1]
    with storage.open_read(path) as raw:
        try:
            archive = zipfile.ZipFile(raw)  # pylint: disable=consider-using-with
        except zipfile.BadZipFile as e:
            raise ValueError(f'{path} is not an .npz (a zip of .npy arrays): {e}') from None
        arrays = {info.filename[: -len('.npy')]: info for info in archive.infolist()}
        pairs = [(x, y) for x in sorted(arrays) for y in [_labels_name(x)] if y in arrays]
        if not pairs:
            raise ValueError(
                f'{path} holds {sorted(arrays)}: expected images and labels as x_train/y_train, '
                'x_test/y_test, x/y or images/labels'
            )
        for images, labels in pairs:
            info = arrays[images]
            with archive.open(info) as f:
                shape, header = _npy_header(f, f'{path}!{images}')
            stored = io.BytesIO(archive.read(arrays[labels]))
            labels = _labels(np.load(stored, allow_pickle=False), shape, path)
            entry = ZipEntry(
                info.header_offset, info.compress_size, info.file_size, info.CRC, info.compress_type
            )
            how, offset = sources.ZIP_STREAM, header
            if info.compress_type == zipfile.ZIP_STORED:
                how, offset, entry = sources.RANGE, _stored_data_offset(raw, info) + header, ()
            yield Images(
                f'{name}/{images}',
                path,
                how,
                offset,
                shape[1:],
                labels,
                split_of(images),
                entry,
                f'{images}/',
            )


def _labels_name(images):
    for x, y in _PAIRS:
        if images == x or images.startswith(x + '_'):
            return y + images[len(x) :]
    return None


def _stored_data_offset(raw, info):
    raw.seek(info.header_offset)
    header = raw.read(30)
    name_length, extra_length = struct.unpack('<HH', header[26:30])
    return info.header_offset + 30 + name_length + extra_length


def _npy_header(f, name):
    """((count, height, width, channels), header bytes) of a .npy of uint8 images."""
    try:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0
        if version != (1, 0):
            read = np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read(f)
    except ValueError as e:
        raise ValueError(f'{name} is not a .npy array: {e}') from None
    if dtype != np.uint8 or fortran or len(shape) not in (3, 4):
        raise ValueError(
            f'{name} is {dtype} of shape {shape}{" (Fortran order)" if fortran else ""}: '
            'images must be uint8 NxHxW, NxHxWx1 or NxHxWx3, in C order'
        )
    shape = (*shape, 1) if len(shape) == 3 else shape
    if shape[3] not in _CHANNELS:
        raise ValueError(f'{name} has {shape[3]} channels: images must have 1 or 3')
    return tuple(shape), f.tell()


def _labels(labels, shape, where):
    """The labels array as one integer per image, checked."""
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f'{where}: labels of shape {labels.shape} and type {labels.dtype}: expected one '
            'integer per image'
        )
    if len(labels) != shape[0]:
        raise ValueError(
            f'{where}: {len(labels):,} labels for {shape[0]:,} images: they must be as many'
        )
    return labels


def _npy_labels_name(name):
    stem = name[: -len('.npy')]
    labels = _labels_name(stem)
    return labels + '.npy' if labels else None


def _npy_images(path):
    """The Images of a .npy of images, with its labels .npy beside it."""
    folder, name = path.rsplit('/', 1)
    labels_path = f'{folder}/{_npy_labels_name(name)}'
    if not storage.exists(labels_path):
        raise ValueError(f'{path}: no labels array {labels_path} beside it')
    with storage.open_read(path) as f:
        shape, header = _npy_header(f, path)
    with storage.open_read(labels_path) as f:
        labels = _labels(np.load(io.BytesIO(f.read()), allow_pickle=False), shape, labels_path)
    return Images(name, path, sources.RANGE, header, shape[1:], labels, split_of(name))
