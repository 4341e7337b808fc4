"""Listing a CSV or JSONL manifest in row order, as untrusted input.

Forms (`detect` tells them apart by the file's first row):
    CSV with a header `path,label[,split][,group][,label/<level>...]`: one label per image
        (a `group` names the image's group: a patient, a video; its images share a split);
    CSV with `labels` in place of `label`: zero or more labels in one cell, separated by
        `--label-separator` (default: whitespace, as Kaggle's Planet writes its tags), and each
        `label/<level>` cell likewise: a multi-label build;
    JSONL with `{"path", "label", "split", "label/<level>"}` per line, or `"labels": [...]` (and
        level values as lists): multi-label;
    Vertex AI's image classification import files (pipelines/inputs/vertex.py): multi-label.
An image with no label is valid in a multi-label build. There, an image listed on several rows
(Vertex AI and AutoML append rows) gets the union of their labels: the manifest is read twice,
and the later rows are accounted for as `merged_row`. Elsewhere a repeated path is a
`duplicate_row`. A row of the other form than the manifest's first is `mixed_label_forms`.

Kaggle-style columns chosen by name: pipelines/inputs/manifest_columns.py. A row may name a
member of an archive, `data/train.tar!cats/1.jpg` (pipelines/inputs/manifest_members.py).

Relative paths resolve against the manifest's folder; where a row may lead is
pipelines/inputs/confinement.py's. Rows that cannot be used (malformed, empty label or path,
duplicate) are rejected with a reason, so every row is accounted for.
"""

import csv
import io
import json

from imageshards import file_names
from imageshards import layout
from imageshards import storage
from imageshards.storage import absolute
from pipelines.inputs import class_names as class_names_lib
from pipelines.inputs import confinement as confinement_lib
from pipelines.inputs import jsonl_lines
from pipelines.inputs import manifest_columns
from pipelines.inputs import manifest_members
from pipelines.inputs import vertex
from pipelines.inputs.confinement import Confinement
from pipelines.inputs.confinement import Refused
from pipelines.inputs.entries import MANIFEST_COLUMNS
from pipelines.inputs.entries import MULTI_LABEL_COLUMN
from pipelines.inputs.entries import InputEntry
from pipelines.inputs.entries import InputScan
from pipelines.inputs.manifest_columns import CSV
from pipelines.inputs.manifest_columns import JSONL
from pipelines.inputs.manifest_columns import LEVEL_COLUMN
from pipelines.inputs.manifest_columns import Choice
from pipelines.inputs.manifest_columns import LevelColumns
from pipelines.inputs.manifest_columns import text_of

PATH_B64 = 'path' + file_names.B64_SUFFIX  # a JSONL row's path as its bytes (file_names.py)


def scan_manifest(spec, inputs):
    """Starts listing a .csv or .jsonl manifest, read as `inputs` (the build's InputSettings,
    pipelines/core/settings.py) say: the columns chosen by name, a path template, class names,
    the label levels it must have (by default those of its `label/<level>` columns, CSV, or
    keys, JSONL, in order of first appearance), what separates labels in a multi-label CSV cell,
    the folders its rows may name.

    Returns an InputScan whose entries are read from the manifest row by row, and whose
    `multi_label` says the manifest's form.
    """
    levels = tuple(inputs.label_levels)
    roots = [confinement_lib.normalize_root(root) for root in inputs.allow_roots]
    manifest = absolute(spec)
    if not storage.exists(manifest):
        raise ValueError(f'--input manifest does not exist: {manifest}')
    choice = Choice(inputs)
    kind, multi_label = detect(manifest, choice)
    if kind in (vertex.CSV, vertex.JSONL) and levels:
        raise ValueError(f'{manifest}: a Vertex AI import file has no label levels')
    folder = manifest.rsplit('/', 1)[0]
    scan = InputScan(
        folder, iter(()), levels=list(levels), multi_label=multi_label, form='manifest'
    )
    separator = inputs.label_separator
    rows = _Rows(manifest, kind, LevelColumns(levels, scan.levels), separator, choice)
    rows.multi_label = multi_label
    confinement = Confinement(folder, roots, inputs.follow_symlinks)
    class_names = class_names_lib.ClassNames(inputs.class_names)
    scan.entries = _manifest_entries(rows, confinement, multi_label, class_names)
    return scan


def label_rows(path, inputs, separator=None):
    """The rows of a CSV or JSONL file of labels (--labels-file), with the columns `inputs`
    chooses; iterate for (row, problem, line), and `labels(row, multi_label)`."""
    choice = Choice(inputs)
    kind, multi_label = detect(path, choice)
    if kind not in (CSV, JSONL):
        raise ValueError(f'--labels-file {path}: a CSV or JSONL file of paths and labels')
    rows = _Rows(path, kind, LevelColumns((), []), separator, choice)
    rows.multi_label = multi_label
    return rows


def detect(manifest, choice=None):
    """(kind, multi_label) of a manifest, from its first row: CSV or JSONL, ours or Vertex AI's
    (vertex.CSV, vertex.JSONL)."""
    with storage.open_read(manifest, guess_compression=True) as f:
        first = b''
        for _, raw in jsonl_lines.lines(f, manifest):  # a first line over 16 MiB: refused, unread
            if raw.strip():
                first = raw
                break
    text = first.decode('utf-8-sig', errors='replace')
    if manifest.lower().endswith('.jsonl'):
        try:
            keys = json.loads(text) if text.strip() else {}
        except ValueError:
            keys = {}  # its row is rejected as it is read
        if choice and choice.given and isinstance(keys, dict):
            return JSONL, choice.columns(list(keys), manifest)[2]
        if isinstance(keys, dict) and vertex.is_vertex_row(keys):
            return vertex.JSONL, True
        return JSONL, isinstance(keys, dict) and MULTI_LABEL_COLUMN in keys
    header = next(csv.reader([text]), [])
    if choice and choice.given:
        return CSV, choice.columns(header, manifest)[2]
    if 'path' in header:
        return CSV, MULTI_LABEL_COLUMN in header
    if vertex.is_vertex_csv_row(header):
        return vertex.CSV, True
    raise ValueError(
        f'{manifest}: expected a header path,label[,split][,group][,label/<level>...] (or '
        f'labels for several labels per image), or a Vertex AI import file '
        f'[ML_USE,]GCS_FILE_PATH,LABEL...; the first row is {header[:4]}'
    )


class _Rows:
    """A manifest's rows, as (row dict, problem, line), each time it is iterated."""

    def __init__(self, manifest, kind, columns, separator, choice=None):
        self.manifest, self.kind, self.columns, self.separator = manifest, kind, columns, separator
        self.choice = choice if choice and choice.given else None
        self.multi_label = False

    def __iter__(self):
        if self.choice:
            read = {
                CSV: manifest_columns.read_chosen_csv_rows,
                JSONL: manifest_columns.read_chosen_jsonl_rows,
            }[self.kind]
            with storage.open_read(self.manifest, guess_compression=True) as f:
                yield from read(f, self.manifest, self.choice)
            return
        read = {
            CSV: _read_csv_rows,
            JSONL: _read_jsonl_rows,
            vertex.CSV: vertex.read_csv_rows,
            vertex.JSONL: vertex.read_jsonl_rows,
        }[self.kind]
        with storage.open_read(self.manifest, guess_compression=True) as f:
            yield from read(f, self.manifest, self.columns)

    def labels(self, row, multi_label):
        """(labels, {level: values}) of a usable row: a name and names (single-label), or
        sorted tuples of names (multi-label). Raises ValueError for an empty label in a cell."""
        if not multi_label:
            levels = self.columns.values(row)
            return (row.get('label') or '').strip(), {k: v.strip() for k, v in levels.items()}
        labels = split_labels(row.get(MULTI_LABEL_COLUMN), self.separator, 'labels')
        levels = {
            level: split_labels(value, self.separator, f'{LEVEL_COLUMN}{level}')
            for level, value in self.columns.values(row).items()
        }
        return labels, levels


def split_labels(value, separator, what):
    """The sorted, distinct names of a multi-label cell (split by `separator`, None:
    whitespace) or JSON list. Raises ValueError for a name that is empty after splitting."""
    if isinstance(value, (list, tuple)):
        names = [name.strip() for name in value]
    else:
        value = (value or '').strip()
        names = [name.strip() for name in value.split(separator)] if value else []
    if any(not name for name in names):
        raise ValueError(f'{what} {value!r} holds an empty label (separated by {separator!r})')
    return tuple(sorted(set(names)))


def _read_csv_rows(f, manifest, columns):
    text = io.TextIOWrapper(f, encoding='utf-8-sig', errors='surrogateescape', newline='')
    reader = csv.DictReader(text)
    header = reader.fieldnames or []
    _check_columns(header, manifest)
    columns.check_header(header, manifest)
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:  # e.g. a field over the csv module's size limit
            yield None, f'unreadable CSV row: {e}', reader.line_num
            continue
        # The file's line where the row ends: its line, but for quoted line breaks.
        line = reader.line_num
        if None in row:
            yield None, f'row has more fields than the header ({len(header)})', line
        elif None in row.values():
            yield None, f'row has fewer fields than the header ({len(header)})', line
        elif not all(file_names.is_utf8(value) for value in row.values()):
            yield None, 'row is not valid UTF-8', line
        else:
            yield row, '', line


def _read_jsonl_rows(f, manifest, columns):
    for number, raw in jsonl_lines.lines(f, manifest):  # a line over 16 MiB: refused, unread
        if raw.strip():  # blank lines are no rows
            yield *_jsonl_row(raw, columns), number


def _jsonl_row(raw, columns):
    """(row, '') of a usable JSONL line, or (None, what is wrong with it)."""
    row, problem = vertex.json_object(raw)
    if row is None:
        return None, problem
    known = (*MANIFEST_COLUMNS, MULTI_LABEL_COLUMN)
    unknown = sorted(
        key for key in row if key not in (*known, PATH_B64) and not columns.is_level(key)
    )
    if unknown:
        return None, f'unknown keys {unknown}; expected {list(known)}, label/<level>'
    if PATH_B64 in row:  # a name that is not UTF-8, as rejected.jsonl and the others give it
        if not isinstance(row[PATH_B64], str):
            return None, f'{PATH_B64} must be a string of base64'
        try:
            row['path'] = file_names.from_json(row)
        except ValueError as e:
            return None, str(e)
        del row[PATH_B64]
    lists = MULTI_LABEL_COLUMN in row  # a multi-label row's labels and levels are lists
    nested = sorted(
        key
        for key, value in row.items()
        if isinstance(value, dict)
        or (isinstance(value, list) and not (lists and key not in _TEXT_KEYS))
    )
    if nested:
        return None, f'{nested} must be strings, not JSON objects or arrays'
    level_problems = [columns.key_problem(key) for key in row if columns.is_level(key)]
    if any(level_problems):
        return None, '; '.join(problem for problem in level_problems if problem)
    if lists and not all(isinstance(row[k], list) for k in row if k not in _TEXT_KEYS):
        return None, 'in a row with "labels", labels and label levels are JSON arrays of names'
    return {key: text_of(value) for key, value in row.items()}, ''


_TEXT_KEYS = ('path', 'split', 'group')  # a row's keys that hold text, never lists


def _check_columns(header, manifest):
    label = [column for column in ('label', MULTI_LABEL_COLUMN) if column in header]
    missing = [column for column in ('path',) if column not in header] + (
        [] if label else ['label (or labels)']
    )
    unknown = [
        column
        for column in header
        if column not in (*MANIFEST_COLUMNS, MULTI_LABEL_COLUMN)
        and not LevelColumns.is_level(column)
    ]
    if missing or unknown:
        raise ValueError(
            f'{manifest}: header must be path,label[,split][,group][,label/<level>...] (labels for '
            f'several per image); missing {missing}, unknown {unknown}'
        )
    if len(label) == 2:
        raise ValueError(
            f'{manifest}: has both a label and a labels column; a build is single-label '
            '(label) or multi-label (labels), not both'
        )


def _manifest_entries(rows, confinement, multi_label, class_names):
    """The manifest's rows as InputEntry, in row order.

    Finding repeated rows keeps each row's path until the end (about 0.1 KB per row); a
    multi-label manifest is read twice, the first time for the labels of repeated paths.
    """
    merged = _merged_labels(rows, confinement) if multi_label else {}
    first_line_of = {}
    places = (confinement, manifest_members.MemberIndex())
    for entry_id, (row, problem, line) in enumerate(rows):
        context = (entry_id, line, rows.manifest, multi_label)
        entry = _manifest_entry(context, row, problem, places, first_line_of)
        if row is None or entry.reject in ('malformed_row', 'mixed_label_forms'):
            yield entry
            continue
        try:
            labels, levels = rows.labels(row, multi_label)
            labels = class_names.named(labels)
        except class_names_lib.UnknownClass as e:
            yield entry if entry.reject else entry._replace(reject='unknown_class', detail=str(e))
            continue
        except ValueError as e:
            yield entry if entry.reject else entry._replace(reject='empty_label', detail=str(e))
            continue
        if multi_label and entry.path in merged and not entry.reject:
            labels, levels = _union((labels, levels), merged[entry.path])
        yield entry._replace(label=labels, levels=levels if rows.columns.levels else {})


def _merged_labels(rows, confinement):
    """{path: (labels, {level: values})} of the later rows of each path listed more than once
    (their union), from a first reading of a multi-label manifest."""
    seen, merged = set(), {}
    for row, problem, _ in rows:
        if row is None or problem or _form_problem(row, True):
            continue
        raw = (row.get('path') or '').strip()
        path = confinement.located(raw)[0]  # cheap: only a repeated path is checked whole
        if path not in seen:
            seen.add(path)
            continue
        try:
            confinement.resolve(raw)
            labels = rows.labels(row, True)
        except (Refused, ValueError):
            continue
        merged[path] = _union(merged.get(path, ((), {})), labels)
    return merged


def _union(first, second):
    labels = tuple(sorted(set(first[0]) | set(second[0])))
    levels = {
        level: tuple(sorted(set(first[1].get(level, ())) | set(second[1].get(level, ()))))
        for level in {**first[1], **second[1]}
    }
    return labels, levels


def _form_problem(row, multi_label):
    """Why a row's form is not the manifest's ('' where it is)."""
    if multi_label and 'label' in row:
        return 'a row with "label" in a manifest of "labels" (several labels per image)'
    if not multi_label and MULTI_LABEL_COLUMN in row:
        return 'a row with "labels" in a manifest of "label" (one label per image)'
    return ''


def _manifest_entry(context, row, problem, places, first_line_of):
    """One manifest row as an InputEntry (its labels still raw); rows that cannot be used
    carry a reason.

    Args:
        context: (the row's id: rows count from 0, after a CSV's header; the file's line number
            of the row, from 1, which messages name; the manifest; whether it is multi-label).
        places: (the Confinement of rows' paths, the manifest_members.MemberIndex of their
            archives).
    """
    entry_id, line, manifest, multi_label = context
    confinement, members = places
    row_ref = f'{manifest}#line={line}'
    if row is None:
        return InputEntry(entry_id, row_ref, row_ref, '', reject='malformed_row', detail=problem)
    if _form_problem(row, multi_label):
        detail = _form_problem(row, multi_label)
        return InputEntry(entry_id, row_ref, row_ref, '', reject='mixed_label_forms', detail=detail)
    raw_path = (row.get('path') or '').strip()
    split = (row.get('split') or '').strip()
    if not raw_path:
        return InputEntry(
            entry_id, row_ref, row_ref, '', reject='empty_path', detail='the row has no path'
        )
    try:
        entry = manifest_members.located(
            InputEntry(entry_id, '', '', '', split), raw_path, confinement, members
        )
    except Refused as refused:
        return InputEntry(
            entry_id, refused.path, refused.path, '', split, refused.reason, refused.detail
        )
    path = entry.path
    if entry.reject:
        return entry
    entry = entry._replace(group=(row.get('group') or '').strip())
    if not multi_label and not (row.get('label') or '').strip():
        return entry._replace(reject='empty_label', detail=f'line {line} has an empty label')
    if split and not layout.SPLIT_NAME.match(split):
        return entry._replace(
            reject='invalid_split', detail=f'split {split!r} is not a usable folder name'
        )
    if path in first_line_of:
        if multi_label:
            return entry._replace(
                reject='merged_row',
                detail=f'same image as line {first_line_of[path]}, which takes its labels',
            )
        return entry._replace(
            reject='duplicate_row', detail=f'same path as line {first_line_of[path]}'
        )
    first_line_of[path] = line
    return entry
