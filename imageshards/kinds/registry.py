"""The record kinds by name: the ones imageshards has, and any `register`ed (the kind of a
build, dataset.json's `kind`, is looked up here)."""

import dataclasses

from imageshards.kinds.classification import Classification
from imageshards.kinds.detection import Detection
from imageshards.kinds.record_kind import RecordKind

DEFAULT = Classification.name
_KINDS = {Classification.name: Classification, Detection.name: Detection}


def register(kind_class) -> type:
    """Makes a RecordKind subclass known by its name (a class decorator)."""
    if not (isinstance(kind_class, type) and issubclass(kind_class, RecordKind)):
        raise TypeError(f'{kind_class!r} is not a RecordKind subclass')
    _KINDS[kind_class.name] = kind_class
    return kind_class


def named(name) -> type:
    """The RecordKind subclass of a kind's name; ValueError naming the known ones."""
    if name not in _KINDS:
        raise ValueError(f'unknown record kind {name!r}; known: {", ".join(sorted(_KINDS))}')
    return _KINDS[name]


def to_json(kind) -> dict:
    """A kind as JSON-ready data (`from_json` makes it again): its name and options."""
    options = {field.name: getattr(kind, field.name) for field in dataclasses.fields(kind)}
    listed = {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()}
    return {'name': kind.name, **listed}


def from_json(data) -> RecordKind:
    """The kind of `to_json`'s data."""
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k != 'name'}
    return named(data['name'])(**options)


def of_build(dataset) -> RecordKind:
    """The kind of a build's records, from its dataset.json (a dict)."""
    return named(dataset.get('kind', DEFAULT)).from_dataset(dataset)
