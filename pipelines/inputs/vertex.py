"""Vertex AI's image classification import files, read as they are (a multi-label build).

    CSV, no header:  [ML_USE,]GCS_FILE_PATH[,LABEL1,...,LABELn]
    JSONL:           {"imageGcsUri": ..., "classificationAnnotations": [{"displayName": ...}],
                      "dataItemResourceLabels": {"aiplatform.googleapis.com/ml_use": ...}}
                     (`classificationAnnotation`, one object, as the single-label schema has it)

ML_USE (`training`, `validation`, `test`; AutoML's `TRAIN`, `VALIDATION`, `TEST`, any case)
becomes the row's split (`train`, `val`, `test`); `unassigned` or none leaves it to `--splits`.
An image listed on several rows gets the union of their labels, as Vertex AI imports it
(pipelines/inputs/manifests.py). Rows come out as the manifests' own: {path, labels, split}.

A JSONL file is read a block at a time (jsonl_lines.py), never a line whole before its length
is known: a line over 16 MiB stops the build in one line naming the file and the line
(vertex_objects.py reads the detection files so too).
"""

import csv
import io
import json

from imageshards import file_names
from pipelines.inputs import jsonl_lines
from pipelines.inputs.entries import IMAGE_EXTENSIONS
from pipelines.inputs.entries import MULTI_LABEL_COLUMN

CSV, JSONL = 'vertex-csv', 'vertex-jsonl'
ML_USE_KEY = 'aiplatform.googleapis.com/ml_use'
ML_USE = {
    'training': 'train',
    'train': 'train',
    'validation': 'val',
    'test': 'test',
    'unassigned': '',
    '': '',
}
_KNOWN_KEYS = (
    'imageGcsUri',
    'classificationAnnotations',
    'classificationAnnotation',
    'dataItemResourceLabels',
)


def is_vertex_row(row):
    """Whether a JSON object is a row of a Vertex AI JSONL import file."""
    return 'imageGcsUri' in row


def is_vertex_csv_row(fields):
    """Whether a CSV row (a manifest's first) reads as a Vertex AI import row: an ML_USE and a
    path, or a path to an image file."""
    if not fields:
        return False
    path = fields[1] if fields[0].strip().lower() in ML_USE and len(fields) > 1 else fields[0]
    path = path.strip().lower()
    return path.startswith('gs://') or path.endswith(tuple(IMAGE_EXTENSIONS))


def read_csv_rows(f, manifest, columns):
    """(row, problem, line) of each row of a Vertex AI CSV import file."""
    del manifest, columns
    for fields, problem, line in csv_cells(csv_reader(f)):
        if problem:
            yield None, problem, line
            continue
        if not any(field.strip() for field in fields):
            continue  # a blank line is no row
        if not all(file_names.is_utf8(field) for field in fields):
            yield None, 'row is not valid UTF-8', line
            continue
        use = fields[0].strip().lower()
        split, rest = (
            (ML_USE[use], fields[1:]) if use in ML_USE and len(fields) > 1 else ('', fields)
        )
        labels = [label for label in rest[1:] if label.strip()]  # trailing commas: no label
        yield {'path': rest[0], MULTI_LABEL_COLUMN: labels, 'split': split}, '', line


def read_jsonl_rows(f, manifest, columns):
    """(row, problem, line) of each line of a Vertex AI JSONL import file."""
    del columns
    for number, raw in jsonl_lines.lines(f, manifest):
        if raw.strip():
            yield *_jsonl_row(raw), number


def csv_reader(f):
    """A csv.reader over a binary file: UTF-8 with or without a BOM, bytes that are not UTF-8
    kept (surrogates) for the row's check to name."""
    text = io.TextIOWrapper(f, encoding='utf-8-sig', errors='surrogateescape', newline='')
    return csv.reader(text)


def csv_cells(reader):
    """(cells, '', line) of each row `reader` has left, or (None, problem, line) of a row the
    csv module cannot read (e.g. a field over its size limit); line: where the row ends."""
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            yield None, f'unreadable CSV row: {e}', reader.line_num
            continue
        yield cells, '', reader.line_num


def json_object(raw):
    """(the JSON object of a line, '') or (None, what is wrong with it)."""
    try:
        line = raw.decode('utf-8-sig')
    except UnicodeDecodeError as e:
        return None, f'line is not valid UTF-8: {e}'
    try:
        row = json.loads(line)
    except (ValueError, RecursionError) as e:
        return None, f'not valid JSON: {type(e).__name__}: {e}'
    if not isinstance(row, dict):
        return None, f'expected a JSON object, got {type(row).__name__}'
    if not all(_is_text(key) and (key == 'path' or _is_text(row[key])) for key in row):
        # `"\udce9"` escapes a byte of a file name that is not UTF-8: only a path may hold it
        return None, 'a string other than the path is not Unicode (an escaped lone surrogate)'
    return row, ''


def _is_text(value):
    """Whether every string in a JSON value is Unicode (no escaped lone surrogate)."""
    if isinstance(value, str):
        return file_names.is_utf8(value)
    if isinstance(value, list):
        return all(_is_text(item) for item in value)
    if isinstance(value, dict):
        return all(_is_text(key) and _is_text(item) for key, item in value.items())
    return True


def _jsonl_row(raw):
    row, problem = json_object(raw)
    if row is None:
        return None, problem
    unknown = sorted(key for key in row if key not in _KNOWN_KEYS)
    if unknown or not isinstance(row.get('imageGcsUri'), str):
        return (
            None,
            f'expected imageGcsUri (a string) and {list(_KNOWN_KEYS[1:])}; got {sorted(row)}',
        )
    annotations = row.get('classificationAnnotations', [])
    if 'classificationAnnotation' in row:
        annotations = [*annotations, row['classificationAnnotation']]
    if not isinstance(annotations, list) or not all(
        isinstance(a, dict) and isinstance(a.get('displayName'), str) for a in annotations
    ):
        return None, 'classificationAnnotations must be objects with a displayName string'
    resource_labels = row.get('dataItemResourceLabels') or {}
    use = str(resource_labels.get(ML_USE_KEY, '') if isinstance(resource_labels, dict) else '')
    if use.strip().lower() not in ML_USE:
        return None, f'{ML_USE_KEY} {use!r} is not one of training, validation, test'
    labels = [annotation['displayName'] for annotation in annotations]
    return {
        'path': row['imageGcsUri'],
        MULTI_LABEL_COLUMN: labels,
        'split': ML_USE[use.strip().lower()],
    }, ''
