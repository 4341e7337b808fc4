"""COCO annotation files as inputs: `--input annotations/instances.json --image-root IMAGES`.

The file is read as a stream (ijson), never whole. Here, in the launcher: its categories, its
images (an InputEntry each, in the file's order, whatever its size), and its first annotations,
which decide whether the build keeps masks unless --masks/--no-masks says (`peek_masks`). Its
annotations are joined to their images in the pipeline, never here (pipelines/inputs/
coco_join.py: a worker streams them, and each work item of the listing gets its images'), so
that the launcher's work does not grow with them (Objects365: 1.7M images, 25M boxes). An
annotation of an image the file does not have is rejected (`unknown_image`) and listed; one of a
category the file does not name (`unknown_category`) is listed with its image.

Categories become the build's classes in the order of their ids (contiguous from 0; dataset.json
`category_ids` keeps the file's own where they differ). Polygons (several per object),
uncompressed and compressed RLE and `iscrowd` are kept as the file has them: the detection kind
checks them against the image and pycocotools makes the masks (imageshards/kinds/objects.py).
"""

import array
import contextlib
import itertools
import json
import os
import posixpath

import ijson
import numpy as np

from imageshards import storage
from pipelines.core.settings import COCO
from pipelines.inputs import json_guard
from pipelines.inputs import object_inputs

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
    gives its bytes as a stream (of a file, or of an archive's member: `source`, its encoded
    pipelines.core.sources.Source, by which the pipeline's workers read it too)."""

    def __init__(self, path, opener, source=''):
        self.path, self._opener, self.source = path, opener, source

    @classmethod
    def of(cls, join) -> 'AnnotationFile':
        """The file an InputScan's `annotation_join` names, opened where it is read."""
        if not join['source']:
            return cls(join['file'], storage.open_read)
        from pipelines.core import reading  # pylint: disable=import-outside-toplevel
        from pipelines.core import sources  # pylint: disable=import-outside-toplevel

        source = sources.Source.decode(join['source'])
        return cls(join['file'], lambda _: reading.SourceStream(source), join['source'])

    def open(self):
        return self._opener(self.path)

    def __str__(self):
        return self.path


def read_set(annotations, images, inputs):
    """The InputScan of the COCO file `annotations` (an AnnotationFile) whose images are below
    `images` (a StoredFolder, or an archive's folder)."""
    found = object_inputs.new_scan(images.where(), COCO)
    found.entries = _entries(annotations, images.images('', inputs), found, inputs.masks)
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
    categories, found = [], _categories_at_end(path)
    for item in _section(path, 'categories') if found is None else found:
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


def _categories_at_end(path):
    """The category records of a file that ends with them, as COCO's own files do (after the
    annotations), from its last TAIL_BYTES (`_tail`); None where it does not (its categories
    are then streamed from the file's start to their array's end). A `"categories"` there is
    the document's last key where only its array and the document's closing brace follow it;
    the rest of the file is checked as JSON where the pipeline reads its annotations."""
    tail = _tail(path)
    at = tail.rfind(b'"categories"')
    if at < 0 or tail[at - 1 : at] == b'\\':
        return None
    try:
        rest = tail[at + len(b'"categories"') :].decode('utf-8').lstrip()
        rest = rest[1:].lstrip() if rest.startswith(':') else ''
        found, end = json.JSONDecoder().raw_decode(rest)
    except ValueError:  # not UTF-8, or not JSON: no array of the last key
        return None
    return found if isinstance(found, list) and rest[end:].strip() == '}' else None


def _tail(path) -> bytes:
    """The file's last TAIL_BYTES: after a seek where one can seek in it, else (an archive's
    member) read through, its bytes let pass unparsed (parsing is 80 times the reading: a
    8 MB file's categories took 159 ms with ijson, its bytes 2 ms to read)."""
    if not path.source:
        with path.open() as f:
            try:
                f.seek(max(0, f.seek(0, os.SEEK_END) - TAIL_BYTES))
                return f.read()
            except (OSError, ValueError):  # io.UnsupportedOperation is both
                pass
    tail = b''
    with path.open() as f:
        while chunk := f.read(TAIL_BYTES):
            tail = (tail + chunk)[-TAIL_BYTES:]
    return tail


TAIL_BYTES = 1 << 20


def _items(path, prefix):
    """The items at `prefix` of a JSON file, streamed; a file that is not JSON is one line."""
    with _guarded(path) as f:
        yield from ijson.items(f, prefix, use_float=True)


def _section(path, name):
    """The items of the file's top-level array `name`, streamed, the file read no further than
    that array's end (a COCO file's images: its annotations, after them, are left unread); a
    file that is not JSON is one line."""
    with _guarded(path) as f:
        events = ijson.parse(f, use_float=True)
        yield from ijson.items(_until_end(events, name), f'{name}.item')


@contextlib.contextmanager
def _guarded(path):
    """The file's bytes, bounded as they stream (json_guard.Guarded); the parser's error where
    it is not JSON becomes one line naming the file and the byte (the launcher's reads and the
    pipeline's ReadAnnotations alike: its start and end may be whole, and its middle not)."""
    with path.open() as f:
        guarded = json_guard.Guarded(f, str(path))
        try:
            yield guarded
        except ijson.JSONError as e:
            raise ValueError(guarded.syntax_error(e)) from None


def _until_end(events, name):
    for prefix, event, value in events:
        yield prefix, event, value
        if event == 'end_array' and prefix == name:
            return


def _entries(path, confined, found, masks):
    """The entries of the file's images, without their annotations (the scan `found` learns
    its classes, options and how its annotations are joined first)."""
    categories = read_categories(path)
    found.classes = [name for _, name in categories]
    ids = [category for category, _ in categories]
    found.kind_options = {'category_ids': ids if ids != list(range(len(ids))) else []}
    masks = peek_masks(path) if masks is None else masks
    if masks:
        found.kind_options['masks'] = True
    found.annotation_join = {
        'form': COCO,
        'file': path.path,
        'source': path.source,
        'categories': [list(c) for c in categories],
        'masks': masks,
    }
    places, seen = (confined, set(found.classes)), set()  # hashes of the file names: 8 B each
    for position, image in enumerate(_image_records(path)):
        yield _once(_entry(position, image, places), seen)


PEEK = 1000  # the annotations whose segmentations decide a build's masks, unless --masks says


def peek_masks(path) -> bool:
    """Whether the file's first annotations have masks: a polygon of an object that is not a
    crowd, or an RLE. A COCO instances file gives every object that is not a crowd its polygon,
    so these decide as the whole file would, without reading it; a build without masks that
    meets one later keeps its box and counts the mask (coco_join.py)."""
    items = _items(path, 'annotations.item')
    try:
        for item in itertools.islice(items, PEEK):
            segmentation = item.get('segmentation') if isinstance(item, dict) else None
            crowd = isinstance(item, dict) and bool(item.get('iscrowd'))
            if isinstance(segmentation, dict) or (segmentation and not crowd):
                return True
    finally:
        items.close()
    return False


def _image_records(path):
    """The file's image records in file order; one larger than MAX_ITEM_BYTES as 'too large'."""
    for item in _section(path, 'images'):
        yield item if len(_put_bytes(item)) <= MAX_ITEM_BYTES else 'too large'


def image_index(path) -> tuple:
    """(the images' ids sorted, each one's position in the file): where an annotation's image
    is, in 16 bytes an image (an image without a usable id is one no annotation can name; of
    images of one id, the first)."""
    ids = array.array('q')
    for item in _section(path, 'images'):
        image_id = item.get('id') if isinstance(item, dict) else None
        if not isinstance(image_id, int) or isinstance(image_id, bool):
            image_id = -1 - len(ids)
        ids.append(image_id)
    ids = np.frombuffer(ids, np.int64)
    order = np.argsort(ids, kind='stable')
    return ids[order], order


def annotation_items(path):
    """The file's annotations, streamed, in file order."""
    return _items(path, 'annotations.item')


def positions(batch, index) -> tuple:
    """(position of each annotation's image, whether the file has it) of a batch of them."""
    sorted_ids, order = index
    wanted = np.array([_image_id(item) for item in batch], np.int64)
    at = np.searchsorted(sorted_ids, wanted).clip(0, max(len(sorted_ids) - 1, 0))
    if not len(sorted_ids):
        return at, np.zeros(len(batch), bool)
    return order[at], sorted_ids[at] == wanted


def unknown_image(item, obj) -> dict:
    """The rejected_annotations.jsonl line of an annotation of an image the file lacks (one
    that is not a JSON object names none)."""
    image_id = item.get('image_id') if isinstance(item, dict) else None
    return {
        'key': '',
        'annotation': obj['ref'],
        'reason': 'unknown_image',
        'detail': f"image_id {image_id!r} is none of the file's images",
    }


def _image_id(item):
    image_id = item.get('image_id') if isinstance(item, dict) else None
    return image_id if isinstance(image_id, int) and not isinstance(image_id, bool) else -(1 << 62)


def annotation_object(item, categories):
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


def too_large(obj):
    """An annotation refused for its size, in the readers' form."""
    return {'ref': obj['ref'], 'label': obj['label'], 'box': None, 'bad': 'over 16 MB'}


def _once(entry, seen):
    """The entry, refused as `duplicate_row` where an image record earlier in the file named
    its file (it is read once)."""
    if entry.reject:
        return entry
    if hash(entry.key) in seen:
        detail = 'an image record named earlier in the file names this file again'
        return entry._replace(reject='duplicate_row', detail=detail)
    seen.add(hash(entry.key))
    return entry


def _put_bytes(value):
    return json.dumps(value, separators=(',', ':')).encode('utf-8')


UNUSABLE = 'unusable_image_record'  # marks, until the join, an entry of an unusable record


def _entry(position, image, places):
    """The InputEntry of the image at `position` of the file, its objects still to be joined
    to it in the pipeline (coco_join.py)."""
    ref = f'image at position {position}'
    annotation = {'objects': [], 'rejected': []}
    if not isinstance(image, dict) or not isinstance(image.get('file_name'), str):
        entry = object_inputs.InputEntry(position, ref, ref, (), reject='bad_annotation')
        detail = 'the image record has no file_name' if isinstance(image, dict) else str(image)
        return entry._replace(detail=detail[:200], annotation={**annotation, UNUSABLE: True})
    # An image record without its width and height (some exporters leave them out) states no
    # size to check: the image's decoded size, as shown (EXIF applied), is then the truth, and
    # its boxes are checked against that, dropped or clipped with a reason (objects.check).
    width, height = image.get('width'), image.get('height')
    if _number(width) and _number(height):
        annotation['size'] = [int(height), int(width)]
    annotation['source_id'] = str(image.get('id', ''))
    return object_inputs.image_entry(position, image['file_name'], places, annotation)


def joined(entry, objs, classes):
    """`entry` (as listed: `_entry`'s) with the objects of its image (`objs`, in file order)
    joined: those of no class of the file, or unusable, refused; its label the classes of
    the rest. An entry of an unusable image record loses them all."""
    if entry.annotation is None and not objs:  # an archive's member the set did not name
        return entry
    rejected = [_refusal(o, classes) for o in objs if _refusal(o, classes)]
    objs = [o for o in objs if not _refusal(o, classes)]
    listed = entry.annotation or {}  # none: refused by its name's length
    if listed.get(UNUSABLE):
        return entry._replace(annotation={'objects': [], 'rejected': [*rejected, *_lost(objs)]})
    annotation = {**listed, 'objects': objs, 'rejected': rejected}
    if entry.reject and entry.reject != 'duplicate_row':  # refused by its path: no label
        return entry._replace(annotation=annotation)
    label = tuple(sorted({o['label'] for o in objs}))
    return entry._replace(label=label, annotation=annotation)


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
