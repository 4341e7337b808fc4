"""Classification records (`Classification`): a label per image, or a set of labels, and label
levels.

A single-label build stores `image/class/label` (the label's id) and `image/class/text` (its
name); a build with label levels (`label/<level>` manifest columns, or --label-levels for a
tree) adds `image/label/<level>` (int64 id, -1 where missing) and `image/label/<level>/text`
(the name, or empty) per level. A multi-label build (several labels per image: a `labels`
manifest column) stores each label and level feature as a list, as TF Model Garden's
multi-label decoder (`VarLenFeature(tf.int64)` on `image/class/label`) and TFDS's
`Sequence(ClassLabel)` read them: the image's label ids, sorted, and their names in the same
order; an image without a label has empty lists.

In the metadata the shuffle moves (ImageMeta), a label is an id, and a multi-label image's the
sorted tuple of its ids; the same for each level's value.
"""

import dataclasses
import typing

from imageshards.kinds import features
from imageshards.kinds.record_kind import RecordKind

_DOCS = {
    features.LABEL: "the label's index in dataset.json labels",
    features.LABEL_TEXT: 'the label',
}
_MULTI_DOCS = {
    features.LABEL: "the image's labels: their indices in dataset.json labels, sorted",
    features.LABEL_TEXT: "the image's labels, in the order of their indices",
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Classification(RecordKind):
    """Records of labeled images (see the module's docstring).

    Attributes:
        levels: the build's label level names, in order.
        multi_label: several labels per image: labels and levels are lists.
    """

    name: typing.ClassVar[str] = 'classification'
    levels: tuple = ()
    multi_label: bool = False

    def own_schema(self) -> dict:
        listed = features.LIST if self.multi_label else ''
        schema = {features.LABEL: 'int64' + listed, features.LABEL_TEXT: 'bytes' + listed}
        for level in self.levels:
            schema[features.level_label(level)] = 'int64' + listed
            schema[features.level_text(level)] = 'bytes' + listed
        return schema

    def add_values(self, values, meta, names) -> None:
        values[features.LABEL] = meta.label
        values[features.LABEL_TEXT] = _names(names.labels, meta.label, self.multi_label)
        for (level, level_names), level_id in zip(names.levels, meta.levels):
            values[features.level_label(level)] = level_id
            values[features.level_text(level)] = _names(level_names, level_id, self.multi_label)

    def feature_docs(self, names) -> dict:
        docs = {**super().feature_docs(names), **(_MULTI_DOCS if self.multi_label else _DOCS)}
        for level, _ in names.levels:
            docs[features.level_label(level)] = f'index in label_levels.{level}; -1: no value'
            docs[features.level_text(level)] = f'the name in label level {level}; empty: no value'
        return docs

    def tfds_feature(self, key, doc, names):
        import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

        classes = {features.LABEL: names.labels}
        classes.update((features.level_label(level), ids) for level, ids in names.levels)
        if key in classes:
            return tfds.features.ClassLabel(names=list(classes[key]), doc=doc)
        return super().tfds_feature(key, doc, names)

    @classmethod
    def listing_options(cls, listing) -> dict:
        return {'levels': tuple(listing.label_levels), 'multi_label': listing.multi_label}

    @classmethod
    def dataset_options(cls, dataset) -> dict:
        return {
            'levels': tuple(dataset.get('label_levels') or {}),
            'multi_label': bool(dataset.get('multi_label')),
        }

    def headline(self, scalar) -> list:
        text = scalar(features.LABEL_TEXT)
        return ([text] if text is not None else []) + super().headline(scalar)


def _names(names, ids, multi_label):
    """The name of an id ('' for a missing level, -1), or a multi-label image's names of its
    tuple of ids."""
    if multi_label:
        return tuple(names[i] for i in ids)
    return names[ids] if ids >= 0 else ''
