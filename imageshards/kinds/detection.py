"""Detection and segmentation records (`Detection`): an image's objects, each a box, a class
and, where the source has them, an instance mask; and a per-pixel class map where the source
has one.

The keys are TF Model Garden's (its `TfExampleDecoder` and the TF Object Detection API read them
as they are):

    image/source_id                     the source's id of the image (COCO's), else image/id
    image/object/bbox/{xmin,ymin,xmax,ymax}   floats in [0, 1] of the stored image
    image/object/class/label, .../text  the object's class: its index in dataset.json labels
                                        (contiguous from 0; `category_ids` maps it back to a
                                        source's own ids), and its name
    image/object/is_crowd, image/object/area   COCO's iscrowd, and the area in pixels of the
                                        stored image (the mask's, or the box's where none)
    image/object/difficult, .../truncated      (Pascal VOC builds) VOC's flags
    image/object/mask                   (builds with instance masks) a 1-bit PNG per object,
                                        1 inside it (255 as TensorFlow decodes it), 0 elsewhere,
                                        at the image's size (imageshards/kinds/masks.py)
    image/segmentation/class/encoded    (builds with class maps) a PNG of class ids, VOID (255)
                                        where no class is; `segmentation_classes` names them

and TFDS's: `objects/bbox` ([ymin, xmin, ymax, xmax] per object, TFDS's BBoxFeature) and
`objects/label`, which `tfds.builder_from_directory` reads as `objects`. `image/class/label`
and `image/class/text` hold the classes an image's objects are of (a multi-label build's lists):
what splits and shards are stratified by, and what `class_counts` counts (images, not objects).

An image's annotation is checked with its size (imageshards/kinds/objects.py): objects that
cannot be used are dropped and listed in rejected_annotations.jsonl, boxes a few pixels past an
edge are clipped and counted. An image with no object is kept.
"""

import collections
import dataclasses
import typing

import numpy as np

from imageshards.kinds import features
from imageshards.kinds import objects
from imageshards.kinds.record_kind import Annotated
from imageshards.kinds.record_kind import RecordKind

SOURCE_ID = 'image/source_id'
BOX_KEYS = ('image/object/bbox/xmin', 'image/object/bbox/ymin')
BOX_KEYS += ('image/object/bbox/xmax', 'image/object/bbox/ymax')
OBJECT_LABEL = 'image/object/class/label'
OBJECT_TEXT = 'image/object/class/text'
IS_CROWD = 'image/object/is_crowd'
AREA = 'image/object/area'
DIFFICULT = 'image/object/difficult'
TRUNCATED = 'image/object/truncated'
MASK = 'image/object/mask'
CLASS_MAP = 'image/segmentation/class/encoded'
CLASS_MAP_FORMAT = 'image/segmentation/class/format'
TFDS_BBOX = 'objects/bbox'
TFDS_LABEL = 'objects/label'

_DOCS = {
    features.LABEL: "the classes of the image's objects: indices in dataset.json labels",
    features.LABEL_TEXT: "the classes of the image's objects, in the order of their indices",
    SOURCE_ID: "the source's id of the image (COCO's image id), else image/id",
    BOX_KEYS[0]: "left edge of each object's box, a fraction of the width",
    BOX_KEYS[1]: "top edge of each object's box, a fraction of the height",
    BOX_KEYS[2]: "right edge of each object's box, a fraction of the width",
    BOX_KEYS[3]: "bottom edge of each object's box, a fraction of the height",
    OBJECT_LABEL: "each object's class: its index in dataset.json labels",
    OBJECT_TEXT: "each object's class name",
    IS_CROWD: '1 where an object is a crowd region (COCO iscrowd)',
    AREA: "each object's area in pixels of the stored image",
    DIFFICULT: '1 where Pascal VOC marks an object difficult',
    TRUNCATED: '1 where Pascal VOC marks an object truncated',
    MASK: "each object's mask: a 1-bit PNG, set inside the object",
    CLASS_MAP: 'a PNG of class ids (segmentation_classes), 255 where no class is',
    CLASS_MAP_FORMAT: 'the encoding of the class map: png',
    TFDS_BBOX: "each object's box, [ymin, xmin, ymax, xmax] fractions (TFDS BBoxFeature)",
    TFDS_LABEL: "each object's class (TFDS ClassLabel)",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Detection(RecordKind):
    """Records of images and their objects (see the module's docstring).

    Attributes:
        masks: objects carry instance masks (image/object/mask).
        class_maps: images carry a per-pixel class map (image/segmentation/class/encoded).
        flags: objects carry Pascal VOC's difficult and truncated flags.
        category_ids: the source's id of each class, in class order, where they are not 0..K-1
            (COCO's non-contiguous category ids).
        segmentation_classes: the class map's class names, by pixel value.
    """

    name: typing.ClassVar[str] = 'detection'
    has_objects: typing.ClassVar[bool] = True
    levels: typing.ClassVar[tuple] = ()  # no label levels (what the analysis asks of a kind)
    masks: bool = False
    class_maps: bool = False
    flags: bool = False
    category_ids: tuple = ()
    segmentation_classes: tuple = ()

    @property
    def multi_label(self) -> bool:
        return True

    def own_schema(self) -> dict:
        float_list, int_list, bytes_list = (t + features.LIST for t in features.TYPES[::-1])
        schema = {features.LABEL: int_list, features.LABEL_TEXT: bytes_list, SOURCE_ID: 'bytes'}
        schema.update({key: float_list for key in BOX_KEYS})
        schema.update({OBJECT_LABEL: int_list, OBJECT_TEXT: bytes_list})
        schema.update({IS_CROWD: int_list, AREA: float_list})
        if self.flags:
            schema.update({DIFFICULT: int_list, TRUNCATED: int_list})
        if self.masks:
            schema[MASK] = bytes_list
        if self.class_maps:
            schema.update({CLASS_MAP: 'bytes', CLASS_MAP_FORMAT: 'bytes'})
        schema.update({TFDS_BBOX: float_list, TFDS_LABEL: int_list})
        return schema

    @property
    def binary_keys(self) -> tuple:
        return (*super().binary_keys, MASK, CLASS_MAP)

    def annotation(self, entry, height, width, label_ids, files=None) -> Annotated:
        packed = objects.check(entry.annotation, height, width, label_ids, files)
        return Annotated(packed.data, packed.dropped, packed.clipped, packed.labels)

    def annotation_files(self, entry) -> dict:
        annotation = entry.annotation
        return dict(annotation.get('files') or {}) if isinstance(annotation, dict) else {}

    def add_values(self, values, meta, names) -> None:
        found = objects.Objects.unpack(meta.annotation)
        height, width = meta.height, meta.width
        labels = names.labels
        values[features.LABEL] = meta.label
        values[features.LABEL_TEXT] = tuple(labels[i] for i in meta.label)
        values[SOURCE_ID] = found.source_id or str(meta.id)
        boxes = found.boxes
        for key, column in zip(BOX_KEYS, boxes.T if len(found) else np.zeros((4, 0))):
            values[key] = column.tolist()
        classes = found.classes.tolist()
        values[OBJECT_LABEL] = classes
        values[OBJECT_TEXT] = tuple(labels[i] for i in classes)
        values[IS_CROWD] = found.crowd.tolist()
        shown = (meta.original_height or height, meta.original_width or width)
        scale = (height * width) / (shown[0] * shown[1])
        values[AREA] = (found.areas * scale).tolist()
        if self.flags:
            values[DIFFICULT] = found.difficult.tolist()
            values[TRUNCATED] = found.truncated.tolist()
        if self.masks:
            values[MASK] = found.mask_pngs(height, width, shown)
        if self.class_maps:
            values[CLASS_MAP] = found.semantic_at(height, width) or _void_map(height, width)
            values[CLASS_MAP_FORMAT] = 'png'
        values[TFDS_BBOX] = boxes[:, [1, 0, 3, 2]].ravel().tolist()
        values[TFDS_LABEL] = classes

    def object_counts(self, meta) -> tuple:
        """(objects written, of them clipped, their class ids) of a record's image."""
        found = objects.Objects.unpack(meta.annotation)
        return len(found), found.clipped, found.classes.tolist()

    def feature_docs(self, names) -> dict:
        docs = super().feature_docs(names)
        return {**docs, **{key: _DOCS[key] for key in self.own_schema()}}

    def tfds_features(self, names) -> dict:
        import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

        connectors = super().tfds_features(names)
        docs = self.feature_docs(names)
        del connectors[TFDS_BBOX], connectors[TFDS_LABEL]
        connectors['objects'] = tfds.features.Sequence(
            {
                'bbox': tfds.features.BBoxFeature(doc=docs[TFDS_BBOX]),
                'label': tfds.features.ClassLabel(names=list(names.labels), doc=docs[TFDS_LABEL]),
            }
        )
        return connectors

    def tfds_feature(self, key, doc, names):
        import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

        if key in (features.LABEL, OBJECT_LABEL):
            return tfds.features.ClassLabel(names=list(names.labels), doc=doc)
        if key == CLASS_MAP:
            return tfds.features.Image(shape=(None, None, 1), doc=doc)
        return super().tfds_feature(key, doc, names)

    def facts(self) -> dict:
        facts = {'kind': self.name, 'objects': {'masks': self.masks, 'class_maps': self.class_maps}}
        if self.flags:
            facts['objects']['flags'] = ['difficult', 'truncated']
        if self.category_ids:
            facts['category_ids'] = list(self.category_ids)
        if self.segmentation_classes:
            facts['segmentation_classes'] = list(self.segmentation_classes)
        return facts

    @classmethod
    def listing_options(cls, listing) -> dict:
        return _options(listing.kind_options)

    @classmethod
    def dataset_options(cls, dataset) -> dict:
        found = dataset.get('objects') or {}
        return {
            'masks': bool(found.get('masks')),
            'class_maps': bool(found.get('class_maps')),
            'flags': bool(found.get('flags')),
            'category_ids': tuple(dataset.get('category_ids') or ()),
            'segmentation_classes': tuple(dataset.get('segmentation_classes') or ()),
        }

    def headline(self, scalar) -> list:
        classes = scalar(OBJECT_TEXT, listed=True)
        if classes is None:
            return super().headline(scalar)
        counted = collections.Counter(classes)
        found = ', '.join(f'{n} {name}' for name, n in sorted(counted.items()))
        words = f'{len(classes)} object{"" if len(classes) == 1 else "s"}'
        return [words + (f' ({found})' if found else '')] + super().headline(scalar)


def _options(given) -> dict:
    names = ('masks', 'class_maps', 'flags', 'category_ids', 'segmentation_classes')
    return {
        name: tuple(given[name]) if isinstance(given[name], list) else given[name]
        for name in names
        if name in (given or {})
    }


def _void_map(height, width):
    return objects.png_bytes(np.full((height, width), objects.VOID, np.uint8))
