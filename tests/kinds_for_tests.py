"""A record kind made for the tests alone: what a new kind of dataset takes, in one module.

`Weighted` is a classification whose records also hold a float, `image/weight`, given by each
input's annotation (InputEntry.annotation `{"weight": w}`): its feature, its value from the
packed annotation the shuffle carries, its check of the annotation, its words for TFDS. Nothing
else of imageshards knows it: the writer, dataset.json, verify, inspect, TFDS metadata and the
trainer's parse spec follow its schema.
"""

import dataclasses
import math
import struct
import typing

from imageshards.kinds import registry as kinds
from imageshards.kinds.classification import Classification
from imageshards.kinds.record_kind import Annotated

WEIGHT = 'image/weight'
_PACKED = struct.Struct('<f')


@kinds.register
@dataclasses.dataclass(frozen=True, kw_only=True)
class Weighted(Classification):
    """Classification records with a weight per image (1 where its input gives none)."""

    name: typing.ClassVar[str] = 'weighted-for-tests'

    def own_schema(self) -> dict:
        return {**super().own_schema(), WEIGHT: 'float'}

    def add_values(self, values, meta, names) -> None:
        super().add_values(values, meta, names)
        values[WEIGHT] = _PACKED.unpack(meta.annotation)[0] if meta.annotation else 1.0

    def annotation(self, entry, height, width, label_ids, files=None) -> Annotated:
        weight = entry.annotation.get('weight') if isinstance(entry.annotation, dict) else None
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise ValueError(f'the annotation {entry.annotation!r} gives no number "weight"')
        if not math.isfinite(weight) or weight < 0:
            raise ValueError(f'weight {weight!r} is not a finite number of at least 0')
        return Annotated(_PACKED.pack(weight))

    def feature_docs(self, names) -> dict:
        return {**super().feature_docs(names), WEIGHT: 'how much the image counts in the loss'}
