"""Instance masks as the records store them: rasterized by pycocotools (the COCO reference
implementation, so that a mask equals `COCO.annToMask` of its annotation) and written as 1-bit
single-channel PNGs (1 inside the object; TensorFlow's `decode_png` gives 255 there, Pillow
mode `1`; Model Garden's and the Object Detection API's decoders take any value above 0).

A mask's PNG is made here without an image library: its rows packed 8 pixels to a byte, each
after PNG's `None` filter byte, deflated at zlib's level 1 (a mask is mostly runs of zeros,
which every level shrinks alike), in the chunks PNG requires. An object's mask costs about a
tenth of what Pillow's 8-bit PNG of it does (bench/RESULTS.md, "Detection builds (COCO)").
"""

import struct
import zlib

import numpy as np

_SIGNATURE = b'\x89PNG\r\n\x1a\n'
_LEVEL = 1


def png_of(mask, box=None) -> bytes:
    """The 1-bit PNG of a mask (any 2-D array, nonzero inside; C or Fortran order); `box`
    (x0, y0, x1, y1), where given, bounds what is nonzero: only its rows and columns are read."""
    height, width = mask.shape
    x0, y0, x1, y1 = box or (0, 0, width, height)
    x0, y0, x1, y1 = max(0, x0), max(0, y0), min(width, x1), min(height, y1)
    raw = np.zeros((height, (width + 7) // 8 + 1), np.uint8)  # each row after its filter byte 0
    if x1 > x0 and y1 > y0:
        rows = np.zeros((y1 - y0, width), bool)
        rows[:, x0:x1] = mask[y0:y1, x0:x1]
        raw[y0:y1, 1:] = np.packbits(rows, axis=1)  # 8 pixels a byte, the first the highest bit
    header = struct.pack('>IIBBBBB', width, height, 1, 0, 0, 0, 0)  # 1 bit, grey
    return b''.join(
        (
            _SIGNATURE,
            _chunk(b'IHDR', header),
            _chunk(b'IDAT', zlib.compress(raw.tobytes(), _LEVEL)),
            _chunk(b'IEND', b''),
        )
    )


def _chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))


def polygons_mask(polygons, height, width) -> tuple:
    """(mask, box) of an object's polygons (lists of pixel x, y, ...) on a `height` x `width`
    image: the mask as `COCO.annToMask` makes it (Fortran order), and (x0, y0, x1, y1) around
    what it holds."""
    from pycocotools import mask as coco_mask  # pylint: disable=import-outside-toplevel

    rle = coco_mask.merge(coco_mask.frPyObjects(polygons, height, width))
    return coco_mask.decode(rle), _box(coco_mask.toBbox(rle))


def rle_mask(counts, height, width) -> tuple:
    """(mask, box) of COCO's compressed RLE `counts` of a `height` x `width` image."""
    from pycocotools import mask as coco_mask  # pylint: disable=import-outside-toplevel

    rle = {'size': [height, width], 'counts': counts}
    return coco_mask.decode(rle), _box(coco_mask.toBbox(rle))


def _box(xywh):
    x, y, w, h = (int(v) for v in xywh)
    return x, y, x + w, y + h


def resized(mask, height, width) -> np.ndarray:
    """A mask resized to `height` x `width` with nearest neighbours (a resized image's)."""
    from PIL import Image  # pylint: disable=import-outside-toplevel

    image = Image.fromarray(np.ascontiguousarray(mask, np.uint8))
    return np.asarray(image.resize((width, height), Image.Resampling.NEAREST))
