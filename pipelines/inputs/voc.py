"""Pascal VOC folders as inputs: `--input VOCdevkit/VOC2012`.

    Annotations/<id>.xml        an image's objects: `name`, `bndbox` (1-based, inclusive pixel
                                corners), `difficult`, `truncated`; the image's `size`
    JPEGImages/<filename>       the images
    SegmentationClass/<id>.png  (where present) the class of each pixel: palette indices, 0
                                background, i the i-th class, 255 void
    SegmentationObject/<id>.png (where present) the object of each pixel: i for the i-th
                                object of the XML, 0 none, 255 void
    ImageSets/Main/<split>.txt  (where present) the ids of each split: they place the images,
                                as a manifest's split column does, unless --splits is given
    labelmap.txt                (where present, as CVAT exports it: `name:r,g,b::` lines) the
                                classes in index order, `background` first; else VOC's 20

XML is read with defusedxml, which refuses entity declarations (a billion laughs is one line,
not gigabytes) and external entities. A file that is not well-formed stops the build in one
line; an object that cannot be used (no name, a box that is not four numbers) is listed in
rejected_annotations.jsonl with its image.
"""

import posixpath
from xml.etree.ElementTree import ParseError  # the error defusedxml's parser raises

import defusedxml
import defusedxml.ElementTree as ElementTree

from imageshards import storage
from pipelines.core.settings import VOC
from pipelines.inputs import object_inputs

CLASSES = (
    'aeroplane', 'bicycle', 'bird', 'boat', 'bottle', 'bus', 'car', 'cat', 'chair', 'cow',
    'diningtable', 'dog', 'horse', 'motorbike', 'person', 'pottedplant', 'sheep', 'sofa',
    'train', 'tvmonitor',
)  # fmt: skip
BACKGROUND = 'background'
SPLITS = ('train', 'val', 'test')  # ImageSets/Main's lists that place images
MAX_XML_BYTES = 1 << 20


def scan(spec, inputs):
    """The InputScan of a Pascal VOC folder (see the module's docstring)."""
    root = storage.absolute(spec).rstrip('/')
    return read_set(object_inputs.StoredFolder(root), inputs, spec)


def read_set(folder, inputs, spec):
    """The InputScan of the VOC set in `folder` (a StoredFolder, or an archive's folder)."""
    if not folder.exists('Annotations'):
        raise ValueError(f'--input {spec}: a Pascal VOC folder holds Annotations/')
    found = object_inputs.new_scan(folder.where('JPEGImages'), VOC)  # keys: below JPEGImages/
    classes = labelmap(folder)
    found.classes = list(classes)
    found.kind_options = {'flags': True}
    places = (folder.images('JPEGImages', inputs), set(classes))
    found.entries = _entries(folder, places, found, classes, inputs.source_splits)
    return found


def labelmap(folder) -> tuple:
    """The classes of a VOC folder: its labelmap.txt's (CVAT's `name:r,g,b::` lines, without
    `background`), else VOC's 20."""
    if not folder.exists('labelmap.txt'):
        return CLASSES
    names = []
    for line in folder.read('labelmap.txt').decode('utf-8').splitlines():
        name = line.split(':', 1)[0].strip()
        if name and not line.lstrip().startswith('#') and name != BACKGROUND:
            names.append(name)
    if not names or len(set(names)) != len(names):
        raise ValueError(f'{folder.where("labelmap.txt")}: names no classes, or a class twice')
    return tuple(names)


def _split_of(folder):
    """{image id: split} of ImageSets/Main/<split>.txt where present."""
    placed = {}
    for split in SPLITS:
        relative = f'ImageSets/Main/{split}.txt'
        if folder.exists(relative):
            for line in folder.read(relative).decode('utf-8').split():
                placed.setdefault(line.strip(), split)
    return placed


def _entries(folder, places, found, classes, source_splits):
    names = sorted(name for name in folder.files('Annotations') if name.lower().endswith('.xml'))
    splits = _split_of(folder) if source_splits else {}
    masks = {
        where: set(folder.files(where)) if folder.exists(where) else set()
        for where in ('SegmentationClass', 'SegmentationObject')
    }
    if masks['SegmentationClass']:
        found.kind_options['class_maps'] = True
        found.kind_options['segmentation_classes'] = [BACKGROUND, *classes]
    if masks['SegmentationObject']:
        found.kind_options['masks'] = True
    for entry_id, name in enumerate(names):
        image_id = posixpath.splitext(name)[0]
        relative = f'Annotations/{name}'
        annotation, filename = read_annotation(folder, relative, image_id)
        files = {}
        for where, key in (('SegmentationClass', 'semantic'), ('SegmentationObject', 'instances')):
            if f'{image_id}.png' in masks[where]:
                files[key] = folder.file_ref(f'{where}/{image_id}.png')
        if files:
            annotation['files'] = files
        split = splits.get(image_id, '')
        entry = object_inputs.image_entry(entry_id, filename, places, annotation, split)
        for where in ('SegmentationClass', 'SegmentationObject'):
            problem = folder.problem(f'{where}/{image_id}.png')
            entry = object_inputs.unless_unreadable(entry, problem, f'its {where} mask')
        yield entry


def read_annotation(folder, relative, image_id):
    """(the annotation in the readers' form, the image's file name) of a VOC XML file."""
    path, data = folder.where(relative), folder.read(relative, MAX_XML_BYTES)
    try:
        tree = ElementTree.fromstring(data, forbid_dtd=True)
    except (ParseError, defusedxml.DefusedXmlException) as e:
        raise ValueError(f'{path} is not a usable VOC annotation: {e}') from None
    filename = (tree.findtext('filename') or '').strip() or f'{image_id}.jpg'
    annotation = {'objects': [], 'rejected': []}
    size = tree.find('size')
    if size is not None:
        try:
            annotation['size'] = [int(size.findtext('height')), int(size.findtext('width'))]
        except (TypeError, ValueError):
            pass  # no usable size: the image's own is taken
    for index, obj in enumerate(tree.iter('object')):
        annotation['objects'].append(_object(obj, index))
    return annotation, filename


def _object(obj, index):
    """An object of a VOC XML in the readers' form: its box from 1-based inclusive corners to
    pixel edges (xmin - 1 .. xmax)."""
    ref = f'object {index}'
    box = obj.find('bndbox')
    corners = None
    if box is not None:
        try:
            corners = [float(box.findtext(k)) for k in ('xmin', 'ymin', 'xmax', 'ymax')]
        except (TypeError, ValueError):
            corners = None
    found = {
        'ref': ref,
        'label': (obj.findtext('name') or '').strip() or None,
        'box': [corners[0] - 1, corners[1] - 1, corners[2], corners[3]] if corners else None,
    }
    for flag in ('difficult', 'truncated'):
        found[flag] = int((obj.findtext(flag) or '0').strip() in ('1', 'true'))
    return found
