"""What a shard holds, counted as its records are written: the counts of its dataset.json entry.

    class_counts   {label name: records}; an image of several labels counts for each
    formats        {stored format: records}
    reencoded, resized   records that store a lossless re-encoding, or a resize, of their input
    unlabeled      (a build whose images have label sets) records of none
    level_counts, level_missing   (a build with label levels) {level: {name: records}}, and
                   {level: records without a value}
    objects, clipped, object_counts   (a kind of objects: detection) the objects written,
                   those clipped to their image, and {class name: objects}

The writer frames and writes the records (the build's shard format,
imageshards/shard_formats/), `ShardTally` counts them, and dataset.json's shard entry is made of
the two (pipelines/writing/write.py).
"""

import collections

from imageshards.dataset_json import FORMATS_KEY
from imageshards.dataset_json import format_counts
from imageshards.kinds import features


class ShardTally:
    """Counts the records of one shard (`add` each image's ImageMeta as it is written).

    Args:
        kind: the build's RecordKind.
        names: the build's LabelNames (imageshards/kinds/record_kind.py).
    """

    def __init__(self, kind, names):
        self._multi_label = kind.multi_label
        self._kind = kind
        self._names = names
        self.classes = collections.Counter()  # label id -> records
        self._levels = collections.Counter()  # (level index, id) -> records
        self._objects = None  # a kind of objects: [objects, clipped], and class id -> objects
        self._object_classes = collections.Counter()

    def add(self, meta) -> None:
        """Counts a record's label(s) by id, and its level values by (level index, id), a level
        without a value as features.MISSING_LEVEL; a multi-label record counts each of its ids;
        a record of objects, its objects."""
        counted = self._kind.object_counts(meta)
        if counted is not None:
            self._count_objects(*counted)
        if not self._multi_label:
            self.classes[meta.label] += 1
            if meta.levels:  # Counter.update costs as much as the rest, even given nothing
                self._levels.update(enumerate(meta.levels))
            return
        self.classes.update(meta.label)
        for index, ids in enumerate(meta.levels):
            self._levels.update((index, i) for i in ids or (features.MISSING_LEVEL,))

    def entry(self, metas) -> dict:
        """The counts of a shard's entry in dataset.json, in its order, once every one of its
        records (`metas`, their ImageMeta) was added."""
        labels = self._names.labels
        entry = {
            'class_counts': {labels[label]: self.classes[label] for label in sorted(self.classes)},
            FORMATS_KEY: format_counts(meta.format for meta in metas),
            'reencoded': sum(meta.reencoded for meta in metas),
            'resized': sum(meta.resized for meta in metas),
        }
        if self._multi_label:
            entry['unlabeled'] = sum(not meta.label for meta in metas)
        if self._names.levels:
            entry.update(self._level_entry())
        if self._objects is not None:
            classes = self._object_classes
            entry['objects'], entry['clipped'] = self._objects
            entry['object_counts'] = {labels[i]: classes[i] for i in sorted(classes)}
        return entry

    def _count_objects(self, objects, clipped, classes):
        if self._objects is None:
            self._objects = [0, 0]
        self._objects[0] += objects
        self._objects[1] += clipped
        self._object_classes.update(classes)

    def _level_entry(self):
        """The entry's `level_counts` ({level: {name: records}}) and `level_missing`."""
        counts, level_counts, missing = self._levels, {}, {}
        for index, (level, names) in enumerate(self._names.levels):
            level_counts[level] = {
                names[i]: counts[(index, i)] for i in range(len(names)) if counts[(index, i)]
            }
            missing[level] = counts[(index, features.MISSING_LEVEL)]
        return {'level_counts': level_counts, 'level_missing': missing}
