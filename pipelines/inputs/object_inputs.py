"""What the readers of detection and segmentation sets share: COCO annotation files
(pipelines/inputs/coco.py), Pascal VOC folders (voc.py) and YOLO data.yaml files (yolo.py),
each named after its --input-form. Each reader gives, per image, an
InputEntry whose `annotation` holds its objects in the one form the detection kind checks
(imageshards/kinds/objects.py), whose label is the set of its objects' classes (what splits and
shards are stratified by), and whose path is confined to the set's image root as a manifest's
rows are. The set's classes, in its own order, are the build's labels.
"""

from imageshards.kinds.detection import Detection
from pipelines.inputs import confinement as confinement_lib
from pipelines.inputs.confinement import Confinement
from pipelines.inputs.confinement import Refused
from pipelines.inputs.entries import InputEntry
from pipelines.inputs.entries import InputScan

MAX_NAME_BYTES = 4096  # of an image's file name in an annotation file


def new_scan(base, form) -> InputScan:
    """The InputScan of a set of objects, read from `base`."""
    return InputScan(base, iter(()), multi_label=True, form=form, kind=Detection.name)


def confinement(root, inputs) -> Confinement:
    """Where a set's image paths may lead: below `root`, or an --allow-root."""
    roots = [confinement_lib.normalize_root(r) for r in inputs.allow_roots]
    return Confinement(root.rstrip('/'), roots, inputs.follow_symlinks)


def image_entry(entry_id, raw, places, annotation, split='') -> InputEntry:
    """The InputEntry of an image at `raw` (a path below the set's image root), its label the
    classes of its objects that are the set's; refused where its path may not be read."""
    confined, classes = places
    if len(raw.encode('utf-8', 'surrogateescape')) > MAX_NAME_BYTES:
        reason, detail = 'invalid_file_name', f'a file name over {MAX_NAME_BYTES} bytes'
        return InputEntry(entry_id, raw[:200], raw[:200], (), split, reason, detail)
    try:
        path, key, size = confined.resolve(raw)
    except Refused as e:
        entry = InputEntry(entry_id, e.path, e.path, (), split, e.reason, e.detail)
        return entry._replace(annotation=annotation)
    label = tuple(sorted({o['label'] for o in annotation['objects'] if o.get('label') in classes}))
    return InputEntry(entry_id, path, key, label, split, size=size, annotation=annotation)
