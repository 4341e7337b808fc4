"""The objects of a detection or segmentation record: checked against the image they annotate,
packed for the shuffle, and made into the record's boxes, classes and masks.

An input reader (pipelines/inputs/coco.py, voc.py, yolo.py) gives each image's annotation as
JSON data in one form, whatever its source:

    {"size": [height, width] or null,    the image's size as the annotation states it
     "normalized": false,                boxes and polygons in [0, 1] (YOLO), else pixels
     "objects": [{"label": name, "box": [x0, y0, x1, y1],
                  "crowd": 0|1, "polygons": [[x, y, ...], ...] | "rle": {"size", "counts"},
                  "difficult": 0|1, "truncated": 0|1, "ref": where it came from}, ...],
     "files": {"semantic": path, "instances": path},   VOC's segmentation PNGs, read by
                                                        validation and handed over as bytes
     "rejected": [{"ref", "reason", "detail"}, ...]}    what the reader could not use

`check` takes it with the image's size as shown (EXIF orientation applied): an object that
cannot be used is dropped with its reason (DroppedObject), a box a few pixels past the edge is
clipped and counted, and the rest are packed (`Packed`): boxes normalized to [0, 1], areas in
pixels, polygons in pixels of the image as shown (float64, as given), masks as COCO's compressed
RLE. The shuffle carries the packed bytes and never opens them; the writer makes the record's
features of them (`Objects`), masks rasterized by pycocotools (the COCO reference
implementation) at the stored image's size (imageshards/kinds/masks.py).
"""

import io
import math
import struct
import typing

import numpy as np

from imageshards.kinds import masks

CLIP_PIXELS = 4  # a box running at most this far past an edge is clipped, not dropped
MIN_SIDE = 1.0  # pixels: a box narrower or lower than this (after clipping) is dropped
VOID = 255  # a semantic mask's pixels that belong to no class

# objects, clipped, bytes of: the semantic PNG, the segmentations, the source id
_HEADER = struct.Struct('<IIIII')
_NONE, _POLYGONS, _RLE = 0, 1, 2


class DroppedObject(typing.NamedTuple):
    """An annotation that was not written: why, and where it came from."""

    ref: str
    reason: str
    detail: str


class SizeMismatch(ValueError):
    """The image's size as shown is not the size its annotation states."""


class Packed(typing.NamedTuple):
    """`check`'s outcome: the packed objects, those dropped, the number clipped, and the ids
    of the classes the objects kept are of (sorted: the image's label set)."""

    data: bytes
    dropped: list
    clipped: int
    labels: tuple


def check(annotation, height, width, label_ids, files=None) -> Packed:
    """The objects of `annotation` (the readers' form) on an image of `height` x `width`
    pixels as shown, checked and packed; `label_ids` maps class names to ids; `files` holds the
    bytes of `annotation["files"]` by name.

    Raises:
        SizeMismatch: the annotation states another size (the image is rejected).
        ValueError: the annotation is not of the readers' form.
    """
    if not isinstance(annotation, dict):
        raise ValueError(f'an annotation is an object, not {type(annotation).__name__}')
    size = annotation.get('size')
    if size and (int(size[0]), int(size[1])) != (height, width):
        raise SizeMismatch(
            f'the annotation says {size[1]}x{size[0]} pixels, the image shows {width}x{height}'
            + (' (after its EXIF rotation)' if (size[1], size[0]) == (height, width) else '')
        )
    dropped = [
        DroppedObject(str(r['ref']), r['reason'], r['detail']) for r in _rejected(annotation)
    ]
    scale = (width, height) if annotation.get('normalized') else (1.0, 1.0)
    kept, clipped = [], 0
    instances = _instance_masks(files, height, width)
    for index, obj in enumerate(annotation.get('objects') or ()):
        ref = str(obj.get('ref', index))
        try:
            packed, was_clipped = _object(obj, index, height, width, scale, label_ids, instances)
        except _Drop as e:
            dropped.append(DroppedObject(ref, e.reason, e.detail))
            continue
        kept.append(packed)
        clipped += was_clipped
    semantic = _semantic(files, height, width)
    source_id = str(annotation.get('source_id') or '').encode('utf-8')
    labels = tuple(sorted({o[0] for o in kept}))
    return Packed(_pack(kept, clipped, semantic, source_id), dropped, clipped, labels)


def _rejected(annotation):
    return annotation.get('rejected') or ()


class _Drop(Exception):
    def __init__(self, reason, detail):
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def _object(obj, index, height, width, scale, label_ids, instances):
    """((class, crowd, difficult, truncated, box, area, segmentation kind, bytes), clipped)."""
    label = obj.get('label')
    if label not in label_ids:
        raise _Drop('unknown_category', f"class {label!r} is not one of the build's classes")
    box = obj.get('box')
    if not isinstance(box, (list, tuple)) or len(box) != 4:
        raise _Drop('bad_box', f'a box is 4 numbers, not {box!r}')
    try:
        x0, y0, x1, y1 = (float(v) * s for v, s in zip(box, scale * 2))
    except (TypeError, ValueError) as e:
        raise _Drop('bad_box', f'box {box!r}: {e}') from None
    if not all(math.isfinite(v) for v in (x0, y0, x1, y1)):
        raise _Drop('bad_box', f'box {box!r} is not finite')
    if x1 - x0 <= 0 or y1 - y0 <= 0:
        raise _Drop('empty_box', f'box {box!r} has no width or height')
    if x0 >= width or y0 >= height or x1 <= 0 or y1 <= 0:
        raise _Drop('box_outside_image', f'box {box!r} lies outside the {width}x{height} image')
    slack = CLIP_PIXELS
    if x0 < -slack or y0 < -slack or x1 > width + slack or y1 > height + slack:
        raise _Drop(
            'box_outside_image',
            f'box {box!r} runs more than {slack} pixels past the {width}x{height} image',
        )
    clipped = x0 < 0 or y0 < 0 or x1 > width or y1 > height
    x0, y0, x1, y1 = max(x0, 0.0), max(y0, 0.0), min(x1, float(width)), min(y1, float(height))
    if x1 - x0 < MIN_SIDE or y1 - y0 < MIN_SIDE:
        raise _Drop('empty_box', f'box {box!r} is under {MIN_SIDE:g} pixel once clipped')
    kind, data = _segmentation(obj, index, height, width, scale, instances)
    area = obj.get('area')
    if not isinstance(area, (int, float)) or isinstance(area, bool) or not area > 0:
        area = (x1 - x0) * (y1 - y0)
    flags = (bool(obj.get('crowd')), bool(obj.get('difficult')), bool(obj.get('truncated')))
    box = (x0 / width, y0 / height, x1 / width, y1 / height)
    return (label_ids[label], *flags, box, float(area), kind, data), clipped


def _segmentation(obj, index, height, width, scale, instances):
    """(kind, packed bytes) of an object's mask: polygons in pixels, or compressed RLE."""
    if instances is not None:
        mask = instances == index + 1  # VOC: an object's pixels hold its position, from 1
        return (_RLE, _rle_of(mask)) if mask.any() else (_NONE, b'')
    polygons, rle = obj.get('polygons'), obj.get('rle')
    if polygons:
        return _POLYGONS, _pack_polygons(polygons, scale)
    if rle:
        return _RLE, _checked_rle(rle, height, width)
    return _NONE, b''


def _pack_polygons(polygons, scale):
    parts = []
    for polygon in polygons:
        try:
            points = np.asarray(polygon, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise _Drop('bad_polygon', f'a polygon of other than numbers: {e}') from None
        if points.ndim != 1 or len(points) % 2 or len(points) < 6:
            raise _Drop('bad_polygon', f'a polygon of {len(points) // 2} points: 3 at least')
        if not np.isfinite(points).all():
            raise _Drop('bad_polygon', 'a polygon with coordinates that are not finite')
        # Pixels of the image as shown, as given (float64): rasterized at that size, the mask
        # is the one COCO.annToMask makes of the same numbers.
        xy = (points.reshape(-1, 2) * scale).astype('<f8')
        parts.append(struct.pack('<I', len(xy)) + xy.tobytes())
    return struct.pack('<I', len(parts)) + b''.join(parts)


def _checked_rle(rle, height, width):
    """An RLE mask ({size, counts}, counts a list or COCO's string) as compressed counts."""
    from pycocotools import mask as coco_mask  # pylint: disable=import-outside-toplevel

    if not isinstance(rle, dict) or 'counts' not in rle or 'size' not in rle:
        raise _Drop('bad_mask', 'an RLE mask has `size` and `counts`')
    if [int(v) for v in rle['size']] != [height, width]:
        raise _Drop('bad_mask', f'an RLE mask of size {rle["size"]} on a {height}x{width} image')
    counts = rle['counts']
    try:
        if isinstance(counts, list):
            if sum(counts) != height * width or min(counts, default=0) < 0:
                raise _Drop('bad_mask', f'RLE counts sum to {sum(counts)}, not {height * width}')
            rle = {'size': [height, width], 'counts': counts}
            return coco_mask.frPyObjects(rle, height, width)['counts']
        counts = counts.encode('ascii') if isinstance(counts, str) else bytes(counts)
        coco_mask.area({'size': [height, width], 'counts': counts})  # decodes: raises if bad
        return counts
    except (TypeError, ValueError, UnicodeError) as e:
        raise _Drop('bad_mask', f'an RLE mask that does not decode: {e}') from None


def _rle_of(mask):
    from pycocotools import mask as coco_mask  # pylint: disable=import-outside-toplevel

    return coco_mask.encode(np.asfortranarray(mask.astype(np.uint8)))['counts']


def _png_pixels(data, height, width, what):
    from PIL import Image  # pylint: disable=import-outside-toplevel

    with Image.open(io.BytesIO(data)) as image:
        if image.mode not in ('P', 'L'):
            raise SizeMismatch(f'the {what} mask is a {image.mode} image, not one of indices')
        pixels = np.asarray(image)
    if pixels.shape != (height, width):
        raise SizeMismatch(
            f'the {what} mask is {pixels.shape[1]}x{pixels.shape[0]}, the image {width}x{height}'
        )
    return pixels


def _instance_masks(files, height, width):
    data = (files or {}).get('instances')
    return None if data is None else _png_pixels(data, height, width, 'instance')


def _semantic(files, height, width):
    data = (files or {}).get('semantic')
    if data is None:
        return b''
    return png_bytes(_png_pixels(data, height, width, 'class'))


def png_bytes(pixels) -> bytes:
    """A single-channel PNG of a uint8 array."""
    from PIL import Image  # pylint: disable=import-outside-toplevel

    out = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels, dtype=np.uint8), 'L').save(out, 'PNG')
    return out.getvalue()


def _pack(kept, clipped, semantic, source_id):
    n = len(kept)
    classes = np.array([o[0] for o in kept], '<i4')
    flags = np.array([o[1:4] for o in kept], np.uint8).reshape(n, 3)
    boxes = np.array([o[4] for o in kept], '<f4').reshape(n, 4)
    areas = np.array([o[5] for o in kept], '<f4')
    kinds = np.array([o[6] for o in kept], np.uint8)
    lengths = np.array([len(o[7]) for o in kept], '<u4')
    segments = b''.join(o[7] for o in kept)
    head = _HEADER.pack(n, clipped, len(semantic), len(segments), len(source_id))
    arrays = (classes, flags, boxes, areas, kinds, lengths)
    return head + b''.join(a.tobytes() for a in arrays) + segments + semantic + source_id


class Objects(typing.NamedTuple):
    """The objects of a packed annotation (`check`'s)."""

    classes: np.ndarray  # int32 ids
    crowd: np.ndarray  # uint8 0/1, and so difficult and truncated
    difficult: np.ndarray
    truncated: np.ndarray
    boxes: np.ndarray  # float32 (n, 4): xmin, ymin, xmax, ymax in [0, 1]
    areas: np.ndarray  # float32, pixels of the image as shown
    kinds: np.ndarray  # uint8: none, polygons, RLE
    segments: list  # bytes of each object's segmentation
    clipped: int
    semantic: bytes  # PNG of class ids, or b''
    source_id: str  # the source's id of the image (COCO's), or ''

    @classmethod
    def unpack(cls, data) -> 'Objects':
        data = data or _EMPTY
        n, clipped, semantic_bytes, _, source_bytes = _HEADER.unpack_from(data)
        at = _HEADER.size

        def take(dtype, count, shape=None):
            nonlocal at
            array = np.frombuffer(data, dtype, count, at)
            at += array.nbytes
            return array.reshape(shape) if shape else array

        classes, flags = take('<i4', n), take(np.uint8, 3 * n, (n, 3))
        boxes, areas = take('<f4', 4 * n, (n, 4)), take('<f4', n)
        kinds, lengths = take(np.uint8, n), take('<u4', n)
        segments = []
        for length in lengths:
            segments.append(bytes(data[at : at + int(length)]))
            at += int(length)
        semantic = bytes(data[at : at + semantic_bytes])
        at += semantic_bytes
        source_id = bytes(data[at : at + source_bytes]).decode('utf-8')
        crowd, difficult, truncated = flags.T
        return cls(
            classes,
            crowd,
            difficult,
            truncated,
            boxes,
            areas,
            kinds,
            segments,
            clipped,
            semantic,
            source_id,
        )

    def __len__(self):  # pylint: disable=invalid-length-returned
        return len(self.classes)

    def mask_pngs(self, height, width, shown) -> list:
        """Each object's mask at `height` x `width` (the stored image) as a 1-bit PNG
        (imageshards/kinds/masks.py); `shown` is the (height, width) its polygons and RLE
        were checked at (the image's size as shown). An object without one: an empty mask."""
        pngs = []
        for kind, segment in zip(self.kinds, self.segments):
            box = None
            if kind == _POLYGONS:
                scale = (width / shown[1], height / shown[0])
                polygons = [(p * scale).ravel().tolist() for p in _polygons(segment)]
                mask, box = masks.polygons_mask(polygons, height, width)
            elif kind == _RLE:
                mask, box = masks.rle_mask(segment, *shown)
                if mask.shape != (height, width):
                    mask, box = masks.resized(mask, height, width), None
            else:
                mask = np.zeros((height, width), bool)
            pngs.append(masks.png_of(mask, box))
        return pngs

    def semantic_at(self, height, width) -> bytes:
        """The class-id PNG at `height` x `width` (resized nearest where the image was)."""
        from PIL import Image  # pylint: disable=import-outside-toplevel

        if not self.semantic:
            return b''
        with Image.open(io.BytesIO(self.semantic)) as image:
            if image.size == (width, height):
                return self.semantic
            return png_bytes(np.asarray(image.resize((width, height), Image.Resampling.NEAREST)))


def _polygons(segment):
    (count,) = struct.unpack_from('<I', segment)
    at, polygons = 4, []
    for _ in range(count):
        (points,) = struct.unpack_from('<I', segment, at)
        at += 4
        polygons.append(np.frombuffer(segment, '<f8', 2 * points, at).reshape(-1, 2))
        at += 16 * points
    return polygons


_EMPTY = _HEADER.pack(0, 0, 0, 0, 0)


def count_objects(data) -> int:
    """The number of objects packed in `data` (0 for none)."""
    return _HEADER.unpack_from(data)[0] if data else 0
