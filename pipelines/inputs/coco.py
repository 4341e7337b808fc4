"""COCO annotation files as inputs: `--input annotations/instances.json --image-root IMAGES`.

The file is read as a stream (ijson), never whole: its categories first, then its images, whose
ids are kept in one NumPy array, then its annotations, each written to a spill file of the
images it can belong to (by the image's position in the file). Each image then becomes an
InputEntry with its annotations, in the file's order; memory holds the ids and one spill file's
annotations, however large the file (Objects365: 1.7M images, 25M boxes). An annotation of an
image the file does not have is rejected (`unknown_image`) and listed; one of a category the
file does not name (`unknown_category`) is listed with its image.

Categories become the build's classes in the order of their ids (contiguous from 0; dataset.json
`category_ids` keeps the file's own where they differ). Polygons (several per object),
uncompressed and compressed RLE and `iscrowd` are kept as the file has them: the detection kind
checks them against the image and pycocotools makes the masks (imageshards/kinds/objects.py).
"""

import array
import json
import os
import posixpath
import shutil
import struct
import tempfile

import ijson
import numpy as np

from imageshards import storage
from pipelines.core.settings import COCO
from pipelines.inputs import object_inputs

IMAGES_PER_SPILL = 20_000  # images whose annotations one spill file holds (its memory, read)
MAX_ITEM_BYTES = 16 << 20  # an image or annotation record larger than this is refused


def scan(spec, inputs):
    """The InputScan of a COCO annotation file (see the module's docstring)."""
    path = storage.absolute(spec)
    if not storage.exists(path):
        raise ValueError(f'--input annotation file does not exist: {spec}')
    root = image_root(path, inputs.image_root)
    images = object_inputs.StoredFolder(root)
    return read_set(AnnotationFile(path, storage.open_read), images, inputs)


class AnnotationFile:
    """A COCO annotation file: where it is (`str` of it, in messages), and `open(path)`, which
    gives its bytes as a stream (of a file, or of an archive's member)."""

    def __init__(self, path, opener):
        self.path, self._opener = path, opener

    def open(self):
        return self._opener(self.path)

    def __str__(self):
        return self.path


def read_set(annotations, images, inputs):
    """The InputScan of the COCO file `annotations` (an AnnotationFile) whose images are below
    `images` (a StoredFolder, or an archive's folder)."""
    found = object_inputs.new_scan(images.where(), COCO)
    found.entries = _entries(annotations, images.images('', inputs), found)
    return found


def image_root(path, given):
    """Where a COCO file's images are: --image-root, else `images/` beside the file's folder
    (annotations/instances.json and images/), else the file's own folder."""
    if given:
        root = storage.absolute(given).rstrip('/')
        if not storage.exists(root) and not storage.is_uri(root):
            raise ValueError(f'--image-root does not exist: {given}')
        return root
    folder = posixpath.dirname(path)
    sibling = storage.join(posixpath.dirname(folder), 'images')
    if not storage.is_uri(sibling) and os.path.isdir(sibling):
        return sibling
    return folder


def read_categories(path) -> list:
    """[(id, name)] of a COCO file's categories (`path`: an AnnotationFile), by id; ValueError
    in one line where they are missing or do not name their classes once each."""
    categories = []
    for item in _items(path, 'categories.item'):
        category_id, name = item.get('id'), item.get('name')
        if not isinstance(category_id, int) or isinstance(category_id, bool):
            raise ValueError(f'{path}: a category has no integer id: {_short(item)}')
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f'{path}: category {category_id} has no name')
        categories.append((category_id, name.strip()))
    if not categories:
        raise ValueError(f'{path}: no categories: a COCO detection file names its classes')
    categories.sort()
    for what, values in (('id', [c for c, _ in categories]), ('name', [n for _, n in categories])):
        repeated = sorted({v for v in values if values.count(v) > 1}, key=str)
        if repeated:
            raise ValueError(f'{path}: category {what}s {repeated[:5]} appear more than once')
    return categories


def _items(path, prefix):
    """The items at `prefix` of a JSON file, streamed; a file that is not JSON is one line."""
    try:
        with path.open() as f:
            yield from ijson.items(f, prefix, use_float=True)
    except ijson.JSONError as e:
        raise ValueError(f'{path} is not valid JSON: {str(e).splitlines()[0][:200]}') from None


def _entries(path, confined, found):
    """The entries of the file's images (the scan `found` learns its classes first)."""
    categories = read_categories(path)
    found.classes = [name for _, name in categories]
    ids = [category for category, _ in categories]
    found.kind_options = {'category_ids': ids if ids != list(range(len(ids))) else []}
    places, categories = (confined, set(found.classes)), dict(categories)
    spill = tempfile.mkdtemp(prefix='imageshards-coco-')
    try:
        ids, images = _spill_images(path, spill)
        chunks = _spill_annotations(path, ids, categories, spill, found)
        yield from _joined(images, chunks, places, found)
    finally:
        shutil.rmtree(spill, ignore_errors=True)


def _spill_images(path, spill):
    """(the images' ids in file order, the spill file of their records)."""
    ids = array.array('q')
    images = os.path.join(spill, 'images')
    with open(images, 'wb') as out:
        for item in _items(path, 'images.item'):
            image_id = item.get('id') if isinstance(item, dict) else None
            if not isinstance(image_id, int) or isinstance(image_id, bool):
                image_id = -1 - len(ids)  # no usable id: an image no annotation can name
            ids.append(image_id)
            _put(out, item if len(_put_bytes(item)) <= MAX_ITEM_BYTES else 'too large')
    order = np.argsort(np.frombuffer(ids, np.int64), kind='stable')
    return (np.frombuffer(ids, np.int64)[order], order), images


def _spill_annotations(path, ids, categories, spill, found):
    """Writes each annotation (in the readers' form) to the spill file of its image's position;
    returns the number of spill files. Annotations of no image are rejected on `found`."""
    sorted_ids, positions = ids
    files = {}
    try:
        batch = []
        for item in _items(path, 'annotations.item'):
            batch.append(item)
            if len(batch) == 65_536:
                _spill_batch(batch, sorted_ids, positions, categories, files, spill, found)
                batch = []
        _spill_batch(batch, sorted_ids, positions, categories, files, spill, found)
    finally:
        for f in files.values():
            f.close()
    return -(-len(sorted_ids) // IMAGES_PER_SPILL)


def _spill_batch(batch, sorted_ids, positions, categories, files, spill, found):
    if not batch:
        return
    wanted = np.array([_image_id(item) for item in batch], np.int64)
    at = np.searchsorted(sorted_ids, wanted).clip(0, max(len(sorted_ids) - 1, 0))
    known = (sorted_ids[at] == wanted) if len(sorted_ids) else np.zeros(len(batch), bool)
    for item, position, is_known in zip(batch, positions[at] if len(at) else at, known):
        obj = _object(item, categories)
        if not is_known:
            found.annotation_rejections.append(
                {
                    'key': '',
                    'annotation': obj['ref'],
                    'reason': 'unknown_image',
                    'detail': f"image_id {item.get('image_id')!r} is none of the file's images",
                }
            )
            continue
        chunk = int(position) // IMAGES_PER_SPILL
        if chunk not in files:
            files[chunk] = open(  # pylint: disable=consider-using-with
                os.path.join(spill, str(chunk)), 'wb'
            )
        data = _put_bytes(obj)
        data = data if len(data) <= MAX_ITEM_BYTES else _put_bytes(_too_large(obj))
        files[chunk].write(_LENGTH.pack(int(position), len(data)) + data)


def _image_id(item):
    image_id = item.get('image_id') if isinstance(item, dict) else None
    return image_id if isinstance(image_id, int) and not isinstance(image_id, bool) else -(1 << 62)


def _object(item, categories):
    """An annotation in the readers' form (imageshards/kinds/objects.py)."""
    if item.__class__ is not dict:
        return {'ref': 'annotation ?', 'label': None, 'box': None, 'bad': 'not an object'}
    get = item.get
    category = get('category_id')
    obj = {'ref': f'annotation {get("id")}', 'label': categories.get(category)}
    obj['category_id'] = category
    box = get('bbox')
    # Numbers only (bool is an int, and a string would concatenate); the kind checks the rest.
    if box.__class__ is list and len(box) == 4 and {v.__class__ for v in box} <= _NUMBERS:
        x, y, w, h = box
        obj['box'] = [x, y, x + w, y + h]
    else:
        obj['box'] = box
    obj['crowd'] = int(bool(get('iscrowd')))
    area = get('area')
    if area.__class__ in _NUMBERS:
        obj['area'] = area
    segmentation = get('segmentation')
    if isinstance(segmentation, list) and segmentation:
        obj['polygons'] = segmentation
    elif isinstance(segmentation, dict):
        obj['rle'] = segmentation
    return obj


_NUMBERS = {int, float}


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _too_large(obj):
    return {'ref': obj['ref'], 'label': obj['label'], 'box': None, 'bad': 'over 16 MB'}


def _joined(images, chunks, places, found):
    """The InputEntry of every image in file order, with its annotations; an image named
    twice is read once (`duplicate_row`)."""
    seen = set()  # hashes of the file names: a few bytes an image
    with open(images, 'rb') as records:
        position = 0
        for chunk in range(chunks):
            by_image = _chunk_objects(os.path.join(os.path.dirname(images), str(chunk)))
            for _ in range(min(IMAGES_PER_SPILL, chunks * IMAGES_PER_SPILL - position)):
                image = _get(records)
                if image is _END:
                    return
                objs = [json.loads(data) for data in by_image.pop(position, ())]
                yield _once(_entry(position, image, objs, places, found), seen)
                position += 1


def _once(entry, seen):
    if entry.reject:
        return entry
    if hash(entry.key) in seen:
        detail = 'an image record named earlier in the file names this file again'
        return entry._replace(reject='duplicate_row', detail=detail)
    seen.add(hash(entry.key))
    return entry


def _chunk_objects(path):
    """{position: [each annotation's JSON bytes]} of a spill file: bytes, not objects, until
    its image's entry is made (a spill file's annotations in a fraction of the memory)."""
    by_image = {}
    if not os.path.exists(path):
        return by_image
    with open(path, 'rb') as f:
        data = f.read()
    at, head = 0, _LENGTH.size
    while at < len(data):
        position, length = _LENGTH.unpack_from(data, at)
        by_image.setdefault(position, []).append(data[at + head : at + head + length])
        at += head + length
    return by_image


# The spill files: each record's compact JSON after its image's position and its length (data
# is parsed as data, never unpickled: tests/test_untrusted.py).
_LENGTH = struct.Struct('<qI')
_END = object()


def _put_bytes(value):
    return json.dumps(value, separators=(',', ':')).encode('utf-8')


def _put(out, value):
    data = _put_bytes(value)
    out.write(_LENGTH.pack(0, len(data)) + data)


def _get(f):
    head = f.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return _END
    _, length = _LENGTH.unpack(head)
    return json.loads(f.read(length))


def _entry(position, image, objs, places, found):
    """The InputEntry of the image at `position` of the file."""
    _, classes = places
    ref = f'image at position {position}'
    rejected = [_refusal(o, classes) for o in objs if _refusal(o, classes)]
    objs = [o for o in objs if not _refusal(o, classes)]
    if any('polygons' in o or 'rle' in o for o in objs):
        found.kind_options['masks'] = True
    annotation = {'objects': objs, 'rejected': rejected}
    if not isinstance(image, dict) or not isinstance(image.get('file_name'), str):
        annotation = {'objects': [], 'rejected': [*rejected, *_lost(objs)]}
        entry = object_inputs.InputEntry(position, ref, ref, (), reject='bad_annotation')
        detail = 'the image record has no file_name' if isinstance(image, dict) else str(image)
        return entry._replace(detail=detail[:200], annotation=annotation)
    # An image record without its width and height (some exporters leave them out) states no
    # size to check: the image's decoded size, as shown (EXIF applied), is then the truth, and
    # its boxes are checked against that, dropped or clipped with a reason (objects.check).
    width, height = image.get('width'), image.get('height')
    if _number(width) and _number(height):
        annotation['size'] = [int(height), int(width)]
    annotation['source_id'] = str(image.get('id', ''))
    return object_inputs.image_entry(position, image['file_name'], places, annotation)


def _refusal(obj, classes):
    if obj.get('bad'):
        return {'ref': obj['ref'], 'reason': 'bad_annotation', 'detail': obj['bad']}
    if obj.get('label') not in classes:
        detail = f"category_id {obj.get('category_id')!r} is none of the file's categories"
        return {'ref': obj['ref'], 'reason': 'unknown_category', 'detail': detail}
    return None


def _lost(objs):
    return [
        {'ref': o['ref'], 'reason': 'bad_annotation', 'detail': 'its image record is unusable'}
        for o in objs
    ]


def _short(item):
    return json.dumps(item)[:120]
