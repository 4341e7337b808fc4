"""COCO's box and mask mAP with pycocotools' `COCOeval`, over a split of a build.

The ground truth is the split's records as they are (boxes in pixels of the stored image,
crowd flags, COCO's `iscrowd` rule: a detection matched to a crowd is neither right nor wrong),
read once per split (`GroundTruth`). Detections are the model's on each image placed on the
canvas as evaluation places it, mapped back to the image's pixels.

Metric names (metrics.json): `map` (mAP@[.5:.95]), `map_50`, `map_75`, `map_small`,
`map_medium`, `map_large` (COCO's area ranges, by each object's `image/object/area`: its mask's
where it has one, in pixels of the stored image), `map_per_class`
{class name: mAP@[.5:.95]} (absent classes left out); prefixed `val_` or `test_` by the trainer.
Mask mAP (instance segmentation) has the same figures of the masks (`iou_type='segm'`: each
detection's mask pasted into the image, against the records' masks as COCO's RLE), named
`mask_map`, `mask_map_50`, ... by trainer/objects_evaluate.py.
"""

import contextlib
import dataclasses
import io

import numpy as np
import tensorflow as tf
from pycocotools import coco
from pycocotools import cocoeval
from pycocotools import mask as coco_mask

from imageshards.kinds import detection
from imageshards.kinds import features
from trainer import shard_reading
from trainer.input_options import InputOptions

# COCOeval's stats, in its order, by our names.
STATS = ('map', 'map_50', 'map_75', 'map_small', 'map_medium', 'map_large')


@dataclasses.dataclass(frozen=True)
class GroundTruth:
    """A split's images ([height, width] each, by record index) and objects, as COCO."""

    sizes: np.ndarray  # int [N, 2]
    dataset: dict  # COCO's images, annotations, categories

    def coco(self) -> coco.COCO:
        found = coco.COCO()
        found.dataset = self.dataset
        with contextlib.redirect_stdout(io.StringIO()):
            found.createIndex()
        return found


def ground_truth(info, split, labels, masks=False) -> GroundTruth:
    """The split's objects, read from its records in the order evaluation reads them (with
    `masks`, each object's mask as its `segmentation`, COCO's RLE)."""
    records = shard_reading.ordered_records(info, split, InputOptions())
    spec = {
        features.HEIGHT: tf.io.FixedLenFeature([], tf.int64),
        features.WIDTH: tf.io.FixedLenFeature([], tf.int64),
        detection.OBJECT_LABEL: tf.io.VarLenFeature(tf.int64),
        detection.IS_CROWD: tf.io.VarLenFeature(tf.int64),
        detection.AREA: tf.io.VarLenFeature(tf.float32),
        **{key: tf.io.VarLenFeature(tf.float32) for key in detection.BOX_KEYS},
    }
    if masks:
        spec[detection.MASK] = tf.io.VarLenFeature(tf.string)
    dense = lambda value: tf.sparse.to_dense(value) if isinstance(value, tf.SparseTensor) else value
    parsed = records.map(
        lambda r: {k: dense(v) for k, v in tf.io.parse_single_example(r, spec).items()},
        tf.data.AUTOTUNE,
    )
    images, annotations, sizes = [], [], []
    for index, example in enumerate(parsed.as_numpy_iterator()):
        height, width = int(example[features.HEIGHT]), int(example[features.WIDTH])
        sizes.append((height, width))
        images.append({'id': index, 'height': height, 'width': width})
        xmin, ymin, xmax, ymax = (example[key] for key in detection.BOX_KEYS)
        crowd, area = example[detection.IS_CROWD], example[detection.AREA]
        pngs = example.get(detection.MASK, ())
        for i, label in enumerate(example[detection.OBJECT_LABEL]):
            box = [xmin[i] * width, ymin[i] * height, (xmax[i] - xmin[i]) * width]
            box.append((ymax[i] - ymin[i]) * height)
            annotations.append(
                {
                    'id': len(annotations) + 1,
                    'image_id': index,
                    'category_id': int(label),
                    'bbox': [float(v) for v in box],
                    # COCO's area ranges go by the object's area (its mask's, where it has one)
                    'area': float(area[i] if i < len(area) else box[2] * box[3]),
                    'iscrowd': int(crowd[i]) if i < len(crowd) else 0,
                }
            )
            if masks:
                annotations[-1]['segmentation'] = _rle(pngs[i] if i < len(pngs) else None, box)
    categories = [{'id': i, 'name': name} for i, name in enumerate(labels)]
    dataset = {'images': images, 'annotations': annotations, 'categories': categories}
    return GroundTruth(np.array(sizes, np.int64).reshape(-1, 2), dataset)


def _rle(png, box):
    """COCO's RLE of a record's mask PNG (a box's polygon where the object has no mask)."""
    if png is None:
        x, y, w, h = box
        return [[x, y, x + w, y, x + w, y + h, x, y + h]]
    pixels = tf.io.decode_png(png, channels=1).numpy()[..., 0] > 0
    return encode(pixels)


def encode(pixels) -> dict:
    """COCO's RLE of a bool mask [H, W], its counts as text (as COCO's JSON has them)."""
    rle = coco_mask.encode(np.asfortranarray(pixels.astype(np.uint8)))
    return {'size': rle['size'], 'counts': rle['counts'].decode('ascii')}


def detections(index, boxes, scores, classes, sizes, masks=None) -> list:
    """COCO results of one image (`index`): boxes [M, 4] yxyx fractions of the image, and
    with `masks` (bool [M, H, W] of the image) their segmentations."""
    height, width = sizes[index]
    found = []
    for i, (box, score, label) in enumerate(zip(boxes, scores, classes)):
        ymin, xmin, ymax, xmax = box
        found.append(
            {
                'image_id': int(index),
                'category_id': int(label),
                'bbox': [
                    float(xmin * width),
                    float(ymin * height),
                    float((xmax - xmin) * width),
                    float((ymax - ymin) * height),
                ],
                'score': float(score),
            }
        )
        if masks is not None:
            found[-1]['segmentation'] = encode(masks[i])
    return found


def evaluate(truth, results, labels, iou_type='bbox') -> dict:
    """COCOeval's box (or, `iou_type='segm'`, mask) figures of `results` (COCO result dicts)
    against `truth`."""
    if not truth.dataset['annotations']:
        raise ValueError('the split has no objects: no box mAP to measure')
    if not results:
        return {**dict.fromkeys(STATS, 0.0), 'map_per_class': {}}
    if iou_type == 'segm':  # without their boxes, loadRes takes a result's area from its mask
        results = [{k: v for k, v in r.items() if k != 'bbox'} for r in results]
    gt = truth.coco()
    with contextlib.redirect_stdout(io.StringIO()):
        found = gt.loadRes(results)
        run = cocoeval.COCOeval(gt, found, iou_type)
        run.evaluate()
        run.accumulate()
        run.summarize()
    metrics = {name: max(float(value), 0.0) for name, value in zip(STATS, run.stats)}
    metrics['map_per_class'] = _per_class(run, labels)
    return metrics


def _per_class(run, labels) -> dict:
    """{class name: mAP@[.5:.95]} of the classes with objects in the split."""
    precision = run.eval['precision']  # [iou, recall, class, area, max detections]
    present = {a['category_id'] for a in run.cocoGt.dataset['annotations']}
    found = {}
    for position, class_id in enumerate(run.params.catIds):
        if class_id not in present:
            continue
        values = precision[:, :, position, 0, -1]
        values = values[values > -1]
        found[labels[class_id]] = float(values.mean()) if values.size else 0.0
    return found
