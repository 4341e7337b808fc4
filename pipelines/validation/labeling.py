"""What an input's listing gives its record beside its image, checked: its label level ids, its
group and its annotation (which its build's kind makes into its record's: boxes, masks,
weights; imageshards/kinds/), and the rejected.jsonl line of an input that cannot be used.

Levels and groups are checked before the image is read (a rejected row costs no read); the
annotation after, against the image's size as shown. What a kind drops of an annotation (an
object outside its image) goes to rejected_annotations.jsonl, one line each, with its reason.
"""

from imageshards import file_names
from imageshards import storage
from imageshards.kinds import features
from imageshards.kinds import objects
from imageshards.object_facts import ANNOTATION_KEY
from pipelines.core import reading
from pipelines.core.groups import MAX_GROUP_BYTES
from pipelines.core.groups import group_of

MISSING_LEVEL_REASON = 'missing_label_level'
INVALID_GROUP_REASON = 'invalid_group'
BAD_ANNOTATION_REASON = 'bad_annotation'  # an annotation the build's kind cannot use
SIZE_MISMATCH_REASON = 'size_mismatch'  # the image is not the size its annotation says


def rejection(entry, reason, detail) -> dict:
    """One line of rejected.jsonl (a path that is not UTF-8 with its bytes: file_names.py);
    an image that had annotations says how many were lost with it (`annotations`)."""
    row = {'id': entry.id, **file_names.to_json(entry.path), 'reason': reason, 'detail': detail}
    lost = annotations_of(entry)
    if lost:
        row['annotations'] = lost
    return row


def annotations_of(entry) -> int:
    """The annotations an input's reader found of it (its objects, and those it refused)."""
    annotation = entry.annotation
    if not isinstance(annotation, dict):
        return 0
    return len(annotation.get('objects') or ()) + len(annotation.get('rejected') or ())


def level_ids(entry, levels, allow_missing, multi_label=False) -> tuple:
    """The label level ids of an entry, in level order; raises MissingLevel where one has no
    value, unless `allow_missing` (then its id is -1). A `multi_label` build's entry has a
    sorted tuple of ids per level, empty where it has no value (as an image may have no label).

    Args:
        levels: [(level, {name: id})] in the build's level order.
    """
    if multi_label:  # ids per level, none where it has none
        return tuple(
            tuple(ids[name] for name in entry.levels.get(level, ())) for level, ids in levels
        )
    names = [level for level, _ in levels]
    missing = [level for level in names if not entry.levels.get(level)]
    if missing and not allow_missing:
        raise MissingLevel(
            f'no value for label level {", ".join(missing)} (of {", ".join(names)}); '
            f'pass --allow-missing-levels to keep such images with id -1'
        )
    return tuple(
        ids.get(entry.levels.get(level, ''), features.MISSING_LEVEL) for level, ids in levels
    )


def label_id(label_ids, label, multi_label=False) -> int | tuple:
    """An entry's label id; a `multi_label` build's entry's sorted tuple of ids."""
    if multi_label:
        return tuple(sorted(label_ids[name] for name in label))
    return label_ids[label]


def label_of(entry, settings, annotated) -> int | tuple:
    """A valid input's label id(s): as its annotation decides them where it does (the classes
    of a detection's objects kept), else its entry's."""
    if annotated.labels is not None:
        return annotated.labels
    return label_id(settings.label_ids, entry.label, settings.kind.multi_label)


class MissingLevel(ValueError):
    """An input without a value for a label level."""


def labeling(entry, settings):
    """(label level ids, group) of an entry, or its rejection."""
    if not (settings.levels or settings.group_pattern or entry.group):
        return (), ''  # most builds: no levels, no groups (a microsecond an image)
    try:
        levels = level_ids(
            entry, settings.levels, settings.allow_missing_levels, settings.kind.multi_label
        )
    except MissingLevel as e:
        return rejection(entry, MISSING_LEVEL_REASON, str(e))
    group = group_of(entry.key, entry.group, settings.group_pattern)
    if len(group.encode('utf-8', 'surrogateescape')) > MAX_GROUP_BYTES:
        detail = f'its group name is longer than {MAX_GROUP_BYTES} bytes'
        return rejection(entry, INVALID_GROUP_REASON, detail)
    return levels, group


class Annotated:
    """`annotated`'s outcome for an input without an annotation."""

    data = b''
    dropped = ()
    labels = None


def annotated(entry, settings, shown, reader):
    """The kind's Annotated of an entry's annotation on its image of `shown` size (an
    ImageInfo, as a viewer shows it), or its rejection: an annotation of another size, or one
    the kind cannot use. The files it names (a VOC mask) are read with `reader`."""
    if not entry.annotation:
        return Annotated
    kind = settings.kind
    try:
        files = {
            name: reader.read(*_where(found), settings.max_image_bytes)
            for name, found in kind.annotation_files(entry).items()
        }
    except (OSError, storage.TooLarge, reading.Unreadable) as e:
        return rejection(entry, BAD_ANNOTATION_REASON, f'its mask: {type(e).__name__}: {e}')
    try:
        return kind.annotation(entry, shown.height, shown.width, settings.label_ids, files)
    except objects.SizeMismatch as e:
        return rejection(entry, SIZE_MISMATCH_REASON, str(e))
    except ValueError as e:
        return rejection(entry, BAD_ANNOTATION_REASON, str(e))


def _where(found):
    """(path, encoded source) of a file an annotation names: a path, or (an archive's member)
    [path, source]."""
    return (found, '') if isinstance(found, str) else tuple(found)


def dropped_rows(entry, annotated_) -> list:
    """rejected_annotations.jsonl's lines of what the kind dropped of an entry's annotation."""
    return [
        {'id': entry.id, 'key': entry.key, ANNOTATION_KEY: d.ref}
        | {'reason': d.reason, 'detail': d.detail}
        for d in annotated_.dropped
    ]
