"""What a shard holds, counted as its records are written: the counts of its dataset.json entry.

    class_counts   {label name: records}; an image of several labels counts for each
    formats        {stored format: records}
    reencoded, resized   records that store a lossless re-encoding, or a resize, of their input
    unlabeled      (a build whose images have label sets) records of none
    level_counts, level_missing   (a build with label levels) {level: {name: records}}, and
                   {level: records without a value}

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
        multi_label: the images' label values are sets of ids (the build's RecordKind says).
        names: the build's LabelNames (imageshards/kinds/record_kind.py).
    """

    def __init__(self, multi_label, names):
        self._multi_label = multi_label
        self._names = names
        self.classes = collections.Counter()  # label id -> records
        self._levels = collections.Counter()  # (level index, id) -> records

    def add(self, meta) -> None:
        """Counts a record's label(s) by id, and its level values by (level index, id), a level
        without a value as features.MISSING_LEVEL; a multi-label record counts each of its ids."""
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
        return entry

    def _level_entry(self):
        """The entry's `level_counts` ({level: {name: records}}) and `level_missing`."""
        counts, level_counts, missing = self._levels, {}, {}
        for index, (level, names) in enumerate(self._names.levels):
            level_counts[level] = {
                names[i]: counts[(index, i)] for i in range(len(names)) if counts[(index, i)]
            }
            missing[level] = counts[(index, features.MISSING_LEVEL)]
        return {'level_counts': level_counts, 'level_missing': missing}
