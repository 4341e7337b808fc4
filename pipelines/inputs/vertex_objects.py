"""Vertex AI's object detection import files (JSONL), read as they are: a detection build.

    {"imageGcsUri": "gs://bucket/a.jpg",
     "boundingBoxAnnotations": [{"displayName": "Tomato", "xMin": 0.3, "yMin": 0.3,
                                 "xMax": 0.7, "yMax": 0.6}, ...],
     "dataItemResourceLabels": {"aiplatform.googleapis.com/ml_use": "training"}}

Coordinates are fractions of the image (numbers, or numbers as strings, as Vertex AI exports
them). ML_USE becomes the row's split (`training` train, `validation` val, `test` test;
`unassigned` or none leaves it to --splits), unless --splits is given. The classes are the
display names, sorted. A row that is not JSON, or names an image an earlier row named, is
rejected with its reason; an image's path is confined as a manifest's rows are (below the
file's folder or an --allow-root). Lines are read a block at a time (jsonl_lines.py): one over
16 MiB stops the build in one line, unread.
"""

import json
import posixpath

from imageshards import storage
from pipelines.inputs import jsonl_lines
from pipelines.inputs import object_inputs
from pipelines.inputs import vertex
from pipelines.inputs.entries import InputEntry

BOXES = 'boundingBoxAnnotations'


def is_detection_file(manifest) -> bool:
    """Whether a .jsonl manifest is a Vertex AI object detection import file (its first row
    has bounding box annotations)."""
    if not manifest.lower().endswith('.jsonl'):
        return False
    with storage.open_read(manifest, guess_compression=True) as f:
        for _, raw in jsonl_lines.lines(f, manifest):
            if raw.strip():
                try:
                    row = json.loads(raw)
                except ValueError:
                    return False
                return isinstance(row, dict) and vertex.is_vertex_row(row) and BOXES in row
    return False


def scan(spec, inputs):
    """The InputScan of a Vertex AI object detection import file."""
    manifest = storage.absolute(spec)
    folder = posixpath.dirname(manifest)
    found = object_inputs.new_scan(folder, 'manifest')
    places = (object_inputs.confinement(folder, inputs), None)
    found.entries = _entries(manifest, places, inputs.source_splits)
    return found


def _entries(manifest, places, source_splits):
    seen = {}
    with storage.open_read(manifest, guess_compression=True) as f:
        entry_id = 0
        for line, raw in jsonl_lines.lines(f, manifest):
            if not raw.strip():
                continue
            yield _entry(entry_id, line, raw, manifest, places, seen, source_splits)
            entry_id += 1


def _entry(entry_id, line, raw, manifest, places, seen, source_splits):
    ref = f'{manifest}#line={line}'
    try:
        row = json.loads(raw)
    except ValueError as e:
        return InputEntry(entry_id, ref, ref, (), reject='malformed_row', detail=str(e)[:200])
    if not isinstance(row, dict) or not isinstance(row.get('imageGcsUri'), str):
        detail = 'the row has no imageGcsUri'
        return InputEntry(entry_id, ref, ref, (), reject='malformed_row', detail=detail)
    labels = row.get('dataItemResourceLabels') or {}
    use = str(labels.get(vertex.ML_USE_KEY, '')).strip().lower() if isinstance(labels, dict) else ''
    split = vertex.ML_USE.get(use, '') if source_splits else ''
    annotation = {'normalized': True, 'objects': [], 'rejected': []}
    for index, box in enumerate(row.get(BOXES) or ()):
        annotation['objects'].append(_object(box, f'line {line} box {index}'))
    names = {o['label'] for o in annotation['objects'] if o['label']}
    confined, _ = places
    entry = object_inputs.image_entry(
        entry_id, row['imageGcsUri'], (confined, names), annotation, split
    )
    if entry.reject:
        return entry
    if entry.path in seen:
        detail = f'line {seen[entry.path]} names this image; its boxes are not merged'
        return entry._replace(reject='duplicate_row', detail=detail)
    seen[entry.path] = line
    return entry


def _object(box, ref):
    if not isinstance(box, dict):
        return {'ref': ref, 'label': None, 'box': None}
    try:
        corners = [float(box[key]) for key in ('xMin', 'yMin', 'xMax', 'yMax')]
    except (KeyError, TypeError, ValueError):
        corners = None
    name = box.get('displayName')
    return {'ref': ref, 'label': name.strip() if isinstance(name, str) else None, 'box': corners}
