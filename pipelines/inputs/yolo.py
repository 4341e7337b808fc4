"""YOLO sets (the Ultralytics layout) as inputs: `--input data.yaml`.

    path: ../datasets/shapes     the set's root (relative to the yaml's folder; default: it)
    train: images/train          each split's images: a folder, a list of them, or a .txt
    val: images/val              file of image paths (relative to the root, or ./ of it)
    test: images/test            (optional)
    names: {0: circle, 1: square}   the classes by index (a list, or a mapping)

An image's labels are the text file at its path with the last `images` folder replaced by
`labels` and the extension by `.txt` (Ultralytics' own rule): one object per line, detection
`cls xc yc w h` or segmentation `cls x1 y1 ... xn yn`, all normalized to [0, 1]; an image with
no file or an empty one has no objects. The folders give the splits, unless --splits is given
(then every image is split, stratified by its classes). The yaml is read with
PyYAML's safe loader (a `!!python/object` tag is refused, never run); a line that cannot be used
is listed in rejected_annotations.jsonl with its image.
"""

import posixpath

import yaml

from imageshards import storage
from pipelines.core.settings import YOLO
from pipelines.inputs import object_inputs
from pipelines.inputs.entries import IMAGE_EXTENSIONS
from pipelines.inputs.entries import extension

SPLITS = ('train', 'val', 'test')
MAX_LABEL_BYTES = 16 << 20  # of one image's label file


def scan(spec, inputs):
    """The InputScan of a YOLO data.yaml (see the module's docstring)."""
    path = storage.absolute(spec)
    if not storage.exists(path):
        raise ValueError(f'--input data.yaml does not exist: {spec}')
    data = read_yaml(path, object_inputs.read_file(path))
    root = storage.join(posixpath.dirname(path), str(data.get('path') or '.'))
    root = posixpath.normpath(root) if not storage.is_uri(root) else root.rstrip('/')
    return read_set(object_inputs.StoredFolder(root), data, path, inputs)


def read_set(folder, data, path, inputs):
    """The InputScan of the YOLO set in `folder` (its root: a StoredFolder, or an archive's)
    that the data.yaml at `path` (read: `data`) describes."""
    names = class_names(data, path)
    found = object_inputs.new_scan(folder.where(), YOLO)
    found.classes = names
    splits = {split: _as_ultralytics(folder, data[split]) for split in SPLITS if data.get(split)}
    if not splits:
        raise ValueError(f'{path} names no split (train, val, test) of images')
    places = (folder.images('', inputs), set(names))
    found.entries = _entries(folder, splits, places, names, found, inputs.source_splits)
    return found


def read_yaml(path, data) -> dict:
    """A data.yaml (`data`, its bytes), read with the safe loader; ValueError in one line where
    it is not one."""
    try:
        data = yaml.safe_load(data.decode('utf-8'))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ValueError(f'{path} is not a usable YAML file: {" ".join(str(e).split())}') from None
    if not isinstance(data, dict):
        raise ValueError(f'{path} is not a YOLO data file (a mapping with names and splits)')
    return data


def class_names(data, path) -> list:
    """The classes of a data.yaml by index: `names` as a list, or a mapping of 0..n-1."""
    names = data.get('names')
    if isinstance(names, dict):
        if sorted(names) != list(range(len(names))):
            raise ValueError(f'{path}: names must map 0..{len(names) - 1}, not {sorted(names)}')
        names = [names[i] for i in range(len(names))]
    if not isinstance(names, list) or not names:
        raise ValueError(f'{path}: `names` gives no classes')
    names = [str(name).strip() for name in names]
    if len(set(names)) != len(names) or not all(names):
        raise ValueError(f'{path}: a class name is empty or named twice in {names}')
    return names


def _images_of(folder, given):
    """The image paths (relative to the set's root) a split names: folders, or .txt lists of
    images."""
    images = []
    for item in given if isinstance(given, list) else [given]:
        where = posixpath.normpath(str(item))
        if where.lower().endswith('.txt'):
            text = folder.read(where).decode('utf-8')
            listed = (line.strip() for line in text.splitlines() if line.strip())
            images += [posixpath.normpath(p.removeprefix('./')) for p in listed]
        else:
            images += [posixpath.join(where, f) for f in folder.files(where)]
    return sorted(p for p in images if extension(p) in IMAGE_EXTENSIONS)


def _as_ultralytics(folder, given):
    """A split's folders as Ultralytics finds them: one named `../x` that is not there is `x`
    (Roboflow's exports name `../train/images` beside their data.yaml)."""
    items = given if isinstance(given, list) else [given]
    found = [
        item[3:]
        if isinstance(item, str)
        and item.startswith('../')
        and not folder.exists(item)
        and folder.exists(item[3:])
        else item
        for item in items
    ]
    return found if isinstance(given, list) else found[0]


def label_path(image):
    """Ultralytics' rule: the last /images/ of an image's path becomes /labels/, and its
    extension .txt."""
    head, marker, tail = f'/{image}'.rpartition('/images/')
    path = f'{head}/labels/{tail}' if marker else f'/{image}'
    return posixpath.splitext(path[1:])[0] + '.txt'


def _entries(folder, splits, places, names, found, source_splits):
    entry_id = 0
    for split, given in splits.items():
        for image in _images_of(folder, given):
            annotation = read_labels(folder, label_path(image), names)
            if any('polygons' in obj for obj in annotation['objects']):
                found.kind_options['masks'] = True
            placed = split if source_splits else ''
            entry = object_inputs.image_entry(entry_id, image, places, annotation, placed)
            problem = folder.problem(label_path(image))
            yield object_inputs.unless_unreadable(entry, problem, 'its label file')
            entry_id += 1


def read_labels(folder, relative, names) -> dict:
    """The annotation (readers' form) of a YOLO label file; none where there is no file."""
    annotation = {'normalized': True, 'objects': [], 'rejected': []}
    if not folder.exists(relative):
        return annotation
    path = folder.where(relative)
    try:
        data = folder.read(relative, MAX_LABEL_BYTES)
    except object_inputs.TooLarge:
        detail = f'more than {MAX_LABEL_BYTES:,} bytes of labels; not read past them'
        annotation['rejected'].append({'ref': path, 'reason': 'bad_annotation', 'detail': detail})
        return annotation
    for number, line in enumerate(data.decode('utf-8', 'replace').splitlines(), 1):
        if line.strip():
            _line(line, f'line {number}', names, annotation)
    return annotation


def _line(line, ref, names, annotation):
    """Adds one label line's object to `annotation`, or its rejection."""
    fields = line.split()
    try:
        values = [float(v) for v in fields[1:]]
        cls = int(fields[0])
    except ValueError:
        cls, values = None, []
    if cls is None or (len(values) != 4 and (len(values) < 6 or len(values) % 2)):
        detail = f'{line.strip()[:80]!r} is neither `cls xc yc w h` nor `cls x1 y1 ... xn yn`'
        annotation['rejected'].append({'ref': ref, 'reason': 'bad_line', 'detail': detail})
        return
    if not 0 <= cls < len(names):
        detail = f'class {cls} is not one of the {len(names)} in names'
        annotation['rejected'].append({'ref': ref, 'reason': 'unknown_category', 'detail': detail})
        return
    obj = {'ref': ref, 'label': names[cls]}
    if len(values) == 4:
        xc, yc, w, h = values
        obj['box'] = [xc - w / 2, yc - h / 2, xc + w / 2, yc + h / 2]
    else:
        xs, ys = values[0::2], values[1::2]
        obj['box'] = [min(xs), min(ys), max(xs), max(ys)]
        obj['polygons'] = [values]
    annotation['objects'].append(obj)
