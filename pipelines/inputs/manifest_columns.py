"""Which columns (JSONL keys) of a manifest hold what: the path and the label or labels, by
their own names or (Kaggle-style files: `id_code,diagnosis`) by --path-column, --label-column or
--labels-column, a path formed by --path-template; and the `label/<level>` columns of label
levels (pipelines/inputs/manifests.py reads the rows).
"""

import logging

from imageshards import file_names
from imageshards.kinds import features
from pipelines.inputs import jsonl_lines
from pipelines.inputs import vertex
from pipelines.inputs.entries import MULTI_LABEL_COLUMN

_LOG = logging.getLogger(__name__)
LEVEL_COLUMN = 'label/'  # prefix of a label level's column: label/<level>


class LevelColumns:
    """The label levels of a manifest: those declared, or those its columns or keys name."""

    def __init__(self, declared, levels):
        self._declared = tuple(declared)
        self.levels = levels  # the scan's list, which undeclared JSONL levels are added to

    def check_header(self, header, manifest):
        """Raises ValueError for unusable, repeated, missing or undeclared level columns."""
        found = [column[len(LEVEL_COLUMN) :] for column in header if self.is_level(column)]
        for level in found:
            features.check_level_name(level, f'{manifest}: column {LEVEL_COLUMN}{level}')
        repeated = sorted({column for column in header if header.count(column) > 1})
        if repeated:
            raise ValueError(f'{manifest}: columns {repeated} appear more than once')
        if self._declared:
            missing = [level for level in self._declared if level not in found]
            extra = [level for level in found if level not in self._declared]
            if missing or extra:
                raise ValueError(
                    f'{manifest}: --label-levels {",".join(self._declared)} does not match its '
                    f'columns: missing {[LEVEL_COLUMN + m for m in missing]}, not declared '
                    f'{[LEVEL_COLUMN + e for e in extra]}'
                )
        else:  # (a manifest read twice finds them twice)
            self.levels.extend(level for level in found if level not in self.levels)

    @staticmethod
    def is_level(key):
        return key.startswith(LEVEL_COLUMN)

    def key_problem(self, key):
        """Why a JSONL key `label/<level>` cannot be used ('' if it can); learns new levels."""
        level = key[len(LEVEL_COLUMN) :]
        if not features.LEVEL_NAME.match(level):
            return f'{key!r} does not name a usable label level'
        if level not in self.levels:
            if self._declared:
                return f'{key!r} is not one of --label-levels {",".join(self._declared)}'
            self.levels.append(level)
        return ''

    def values(self, row):
        """{level: the row's raw value} ('' where it has none)."""
        return {level: row.get(LEVEL_COLUMN + level) or '' for level in self.levels}


class Choice:
    """The columns (JSONL keys) a manifest's paths and labels come from: path, label or labels
    by default; others by name (--path-column, --label-column, --labels-column), a path formed
    by --path-template."""

    def __init__(self, inputs):
        self.given = bool(
            inputs
            and (
                inputs.path_column
                or inputs.label_column
                or inputs.labels_column
                or inputs.path_template
            )
        )
        self.path = (inputs and inputs.path_column) or 'path'
        self.label = inputs and inputs.label_column
        self.labels = inputs and inputs.labels_column
        self.template = inputs and inputs.path_template
        self._told = False

    def columns(self, header, manifest):
        """(path column, label column, whether it holds several) of a header; raises ValueError
        where it lacks them."""
        label = self.label or self.labels
        if not label:
            label = MULTI_LABEL_COLUMN if MULTI_LABEL_COLUMN in header else 'label'
        missing = [column for column in (self.path, label) if column not in header]
        if missing:
            raise ValueError(
                f'{manifest}: no column {", ".join(missing)} (its columns: {", ".join(header)}); '
                'name them with --path-column and --label-column (or --labels-column)'
            )
        return self.path, label, bool(self.labels) or label == MULTI_LABEL_COLUMN

    def row(self, found, columns, manifest):
        """The row as a manifest's own: {path, label or labels}; the other columns are named in
        the log once."""
        path, label, several = columns
        if not self._told:
            self._told = True
            ignored = [key for key in found if key not in (path, label)]
            if ignored:
                _LOG.info('%s: columns %s are not used', manifest, ', '.join(map(str, ignored)))
        value = found.get(path)
        if self.template and isinstance(value, str) and value.strip():
            value = self.template.replace('{}', value.strip())
        return {'path': value, MULTI_LABEL_COLUMN if several else 'label': found.get(label)}


def read_chosen_csv_rows(f, manifest, choice):
    """The rows of a CSV whose columns --path-column and the others choose."""
    reader = vertex.csv_reader(f)
    header = next(reader, [])
    columns = choice.columns(header, manifest)
    for cells, problem, line in vertex.csv_cells(reader):
        if problem:
            yield None, problem, line
        elif not cells:
            continue
        elif len(cells) != len(header):
            yield None, f'row has {len(cells)} fields, the header {len(header)}', line
        elif not all(file_names.is_utf8(cell) for cell in cells):
            yield None, 'row is not valid UTF-8', line
        else:
            yield choice.row(dict(zip(header, cells)), columns, manifest), '', line


def read_chosen_jsonl_rows(f, manifest, choice):
    """The rows of a JSONL file whose keys --path-column and the others choose, its lines read
    a block at a time (a line over 16 MiB: refused, unread)."""
    for number, raw in jsonl_lines.lines(f, manifest):
        if not raw.strip():
            continue
        found, problem = vertex.json_object(raw)
        if found is None:
            yield None, problem, number
            continue
        try:
            columns = choice.columns(list(found), manifest)
        except ValueError as e:
            yield None, str(e), number
            continue
        row = choice.row(found, columns, manifest)
        if isinstance(row['path'], (dict, list)):
            yield None, 'the path must be a string', number
        else:
            yield {key: text_of(value) for key, value in row.items()}, '', number


def text_of(value):
    if isinstance(value, list):
        return ['' if item is None else str(item) for item in value]
    return '' if value is None else str(value)


CSV, JSONL = 'csv', 'jsonl'
CHOSEN_READERS = {CSV: read_chosen_csv_rows, JSONL: read_chosen_jsonl_rows}
