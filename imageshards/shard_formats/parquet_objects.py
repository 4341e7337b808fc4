"""A detection record's objects as one Parquet column, `objects`: a struct of lists, one list per
per-object feature, each holding an entry per object (what Hugging Face `datasets` writes for a
`Sequence` of a dict, as its detection sets do: `ds[0]['objects']['bbox'][i]` is object i's box).

    bbox        [ymin, xmin, ymax, xmax] per object, fractions of the image (float32, TFDS's
                BBoxFeature order): the four image/object/bbox/* lists, one box per object
    label       `ClassLabel` of the build's names (image/object/class/label)
    text        the class names (image/object/class/text)
    is_crowd, area, difficult, truncated, mask   the other image/object/* features the schema
                has, named by their key's last part (mask: the 1-bit PNGs, binary)

TFDS's objects/bbox and objects/label are not stored again: they are the same boxes in the same
order, and the same classes, and a row gives them back from `bbox` and `label`. A record whose
copies differ (as float32, bit for bit) cannot be written this way, and writing it fails.

The file's `imageshards` metadata names where each key's values are: `objects.<field>` (the
field's lists; objects/bbox the boxes flattened) or `objects.bbox.<coordinate>`. A schema without
the four box keys (a classification build's) has no `objects` column.
"""

import numpy as np

from imageshards.kinds import detection

COLUMN = 'objects'
BBOX = 'bbox'
_PREFIX = f'{COLUMN}.'
_COORDINATES = ('ymin', 'xmin', 'ymax', 'xmax')  # a box's order in `bbox`, TFDS's
_BOXES = {key: key.rpartition('/')[2] for key in detection.BOX_KEYS}
_OBJECT = 'image/object/'
_UNCOMPRESSED = ('mask',)  # PNGs, which do not shrink


def columns(schema) -> dict:
    """{key: where its values are} of the keys the `objects` column holds; {} where the schema
    has no boxes."""
    if not all(key in schema for key in _BOXES):
        return {}
    found = {key: f'{_PREFIX}{BBOX}.{coordinate}' for key, coordinate in _BOXES.items()}
    for key, field in _fields(schema).items():
        found[key] = f'{_PREFIX}{field}'
    if detection.TFDS_BBOX in schema:
        found[detection.TFDS_BBOX] = f'{_PREFIX}{BBOX}'
    if detection.TFDS_LABEL in schema and detection.OBJECT_LABEL in schema:
        found[detection.TFDS_LABEL] = f'{_PREFIX}label'
    return found


def holds(column) -> bool:
    """Whether a stored column name is one of `objects`' (`columns`)."""
    return column.startswith(_PREFIX)


def first(columns):
    """The key of `columns` ({key: column}) at whose place the `objects` column goes, or None."""
    return next((key for key, column in columns.items() if holds(column)), None)


def _fields(schema):
    """{key: field} of the per-object keys other than the boxes, in the schema's order."""
    return {
        key: key.removeprefix(_OBJECT).removeprefix('class/').replace('/', '_')
        for key in schema
        if key.startswith(_OBJECT) and key not in _BOXES
    }


def arrow_type(schema, list_type):
    """The struct of the schema's objects; `list_type(key)` is a key's list type."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel

    fields = [(BBOX, pa.list_(pa.list_(pa.float32(), len(_COORDINATES))))]
    fields += [(field, list_type(key)) for key, field in _fields(schema).items()]
    return pa.struct(fields)


def hf_feature(schema, names, feature):
    """The `datasets` feature of `objects` (as `Features.to_dict()` writes a `Sequence` of a
    dict: a dict of lists); `feature(key)` is a key's own (a `List` of a `Value`)."""
    value = {'dtype': 'float32', '_type': 'Value'}
    box = {'feature': value, 'length': len(_COORDINATES), '_type': 'List'}
    found = {BBOX: {'feature': box, '_type': 'List'}}
    for key, field in _fields(schema).items():
        if key == detection.OBJECT_LABEL and names:
            label = {'names': list(names.labels), '_type': 'ClassLabel'}
            found[field] = {'feature': label, '_type': 'List'}
        else:
            found[field] = feature(key)
    return found


def leaf_names(struct_type):
    """The Parquet column paths of the struct's leaves, and of them those stored as they are
    (the masks' PNGs): what the writer's per-column settings name."""
    leaves, stored = [], []
    for child in struct_type:
        path = f'{COLUMN}.{child.name}.list.element'
        path += '.list.element' if child.name == BBOX else ''
        (stored if child.name in _UNCOMPRESSED else leaves).append(path)
    return leaves, stored


def array(data, struct_type):
    """The `objects` of rows, from `data` ({key: [each row's value]}); ValueError where a row's
    boxes do not make boxes, or TFDS's copies of them differ from them."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel

    children = [_boxes(data)]
    fields = {field: key for key, field in _fields(data).items()}
    for child in list(struct_type)[1:]:
        children.append(pa.array(data[fields[child.name]], child.type))
    if detection.TFDS_LABEL in data and detection.OBJECT_LABEL in data:
        for row, (theirs, ours) in enumerate(
            zip(data[detection.TFDS_LABEL], data[detection.OBJECT_LABEL])
        ):
            if list(theirs) != list(ours):
                raise ValueError(f"row {row}: {detection.TFDS_LABEL} is not the objects' labels")
    return pa.StructArray.from_arrays(children, fields=list(struct_type))


def _boxes(data):
    import pyarrow as pa  # pylint: disable=import-outside-toplevel

    by_coordinate = {coordinate: key for key, coordinate in _BOXES.items()}
    keys = [by_coordinate[coordinate] for coordinate in _COORDINATES]
    offsets, flat = [0], []
    for row, lists in enumerate(zip(*(data[key] for key in keys))):
        if len({len(values) for values in lists}) != 1:
            raise ValueError(f'row {row}: the box lists {keys} are of different lengths')
        boxes = np.asarray(lists, '<f4').T.ravel()
        if detection.TFDS_BBOX in data:
            theirs = np.asarray(data[detection.TFDS_BBOX][row], '<f4')
            if theirs.view('<u4').tolist() != boxes.view('<u4').tolist():
                raise ValueError(f"row {row}: {detection.TFDS_BBOX} is not the objects' boxes")
        flat.append(boxes)
        offsets.append(offsets[-1] + len(lists[0]))
    values = pa.array(np.concatenate(flat) if flat else np.zeros(0, '<f4'), pa.float32())
    each = pa.FixedSizeListArray.from_arrays(values, len(_COORDINATES))
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), each)


def values(table, columns) -> dict:
    """{key: [each row's values, a list]} of the keys `columns` ({key: column}, as stored)
    places in a table's `objects`; {} where it places none."""
    found, read, struct = {}, {}, None
    for key, column in columns.items():
        if not holds(column):
            continue
        field, _, coordinate = column.removeprefix(_PREFIX).partition('.')
        if struct is None:  # once: combining the chunks copies them, masks and all
            struct = table.column(COLUMN).combine_chunks()
        if field not in read:
            read[field] = struct.field(field).to_pylist()
        if coordinate:
            at = _COORDINATES.index(coordinate)
            found[key] = [[box[at] for box in boxes] for boxes in read[field]]
        elif field == BBOX:
            found[key] = [[v for box in boxes for v in box] for boxes in read[field]]
        else:
            found[key] = read[field]
    return found
