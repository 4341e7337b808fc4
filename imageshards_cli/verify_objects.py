"""What `imageshards verify` checks of a detection or segmentation build's objects, record by
record: every object feature holds one value per object, every box lies in [0, 1] with its
corners in order, every class id is one of dataset.json's labels and matches its text, and
every mask a 1-bit PNG and every class map an 8-bit one, of the image's size. The objects are
counted per shard and class, for the shard's `objects` and `object_counts`."""

import collections
import io

from PIL import Image

from imageshards.kinds import detection
from imageshards.kinds import registry as kinds

_PER_OBJECT = (
    *detection.BOX_KEYS,
    detection.OBJECT_TEXT,
    detection.IS_CROWD,
    detection.AREA,
    detection.DIFFICULT,
    detection.TRUNCATED,
    detection.MASK,
    detection.TFDS_LABEL,
)


class ObjectChecker:
    """Checks the objects of each record of a build of objects (`check`)."""

    def __init__(self, dataset, problems):
        self._labels = dataset['labels']
        self._keys = [key for key in _PER_OBJECT if key in kinds.of_build(dataset).schema]
        self._problems = problems

    def check(self, where, offset, values):
        """(objects, Counter of their class names) of a record's checked values ({key: value},
        a tuple for a list feature); problems added where they are."""
        ids = values.get(detection.OBJECT_LABEL)
        if ids is None:
            return 0, collections.Counter()
        count = len(ids)
        add = self._problems.add
        for key in self._keys:
            if key in values and len(values[key]) != count:
                add(where, f'{key} holds {len(values[key])} values for {count} objects', offset)
        if len(values.get(detection.TFDS_BBOX, ())) != 4 * count:
            add(where, f'{detection.TFDS_BBOX} holds no 4 values per object', offset)
        self._check_boxes(where, offset, values, count)
        names = collections.Counter()
        texts = values.get(detection.OBJECT_TEXT, ())
        for i, class_id in enumerate(ids):
            if not 0 <= class_id < len(self._labels):
                add(where, f'object {i}: class {class_id} is not an index of labels', offset)
                continue
            names[self._labels[class_id]] += 1
            if i < len(texts) and texts[i].decode('utf-8', 'replace') != self._labels[class_id]:
                add(where, f'object {i}: class {class_id} is not its text {texts[i]!r}', offset)
        self._check_pngs(where, offset, values)
        return count, names

    def _check_boxes(self, where, offset, values, count):
        boxes = [values.get(key, ()) for key in detection.BOX_KEYS]
        if any(len(column) != count for column in boxes):
            return
        for i, (xmin, ymin, xmax, ymax) in enumerate(zip(*boxes)):
            if not (0 <= xmin < xmax <= 1 and 0 <= ymin < ymax <= 1):
                box = [round(v, 6) for v in (xmin, ymin, xmax, ymax)]
                self._problems.add(where, f'object {i}: box {box} is not inside [0, 1]', offset)

    def _check_pngs(self, where, offset, values):
        size = (values.get('image/width'), values.get('image/height'))
        pngs = [(f'mask {i}', png, '1') for i, png in enumerate(values.get(detection.MASK, ()))]
        if detection.CLASS_MAP in values:
            pngs.append(('class map', values[detection.CLASS_MAP], 'L'))
        for what, png, mode in pngs:
            try:
                with Image.open(io.BytesIO(png)) as image:
                    found = (image.format, image.mode, image.size)
            except (OSError, ValueError) as e:
                self._problems.add(where, f'{what} is no image: {e}', offset)
                continue
            if found != ('PNG', mode, size):
                self._problems.add(
                    where,
                    f'{what} is a {found[0]} {found[1]} {found[2]}, not PNG {mode} {size}',
                    offset,
                )
