"""The labels of a tree or archive taken from a CSV or JSONL file keyed by file name
(`--labels-file`), instead of its folders.

`--labels-file FILE` is read with the manifest's columns and flags (`--path-column`,
`--label-column` or `--labels-column`, `--path-template`): each row names an image by its path
below the tree's root (or inside the archive, as if extracted), or by its file name alone, as
ImageNet's validation labels and Kaggle's CSVs do. An image no row names is `no_label`; a row
that names no image is accounted for after the images, as `missing_file`.
"""

import logging
import posixpath

from imageshards import storage
from pipelines.inputs import manifests
from pipelines.inputs.class_names import ClassNames
from pipelines.inputs.class_names import UnknownClass
from pipelines.inputs.entries import InputEntry

_LOG = logging.getLogger(__name__)


class LabelsFile:
    """The labels of a tree's or archive's images, from --labels-file, by path or file name.

    Holds every row's path and labels (about 0.2 KB a row).
    """

    def __init__(self, path, columns, separator=None, class_names=None):
        self.path = storage.absolute(path)
        self._class_names = class_names or ClassNames()
        self._rows = {}  # path or file name -> (labels, line)
        self._unused = {}  # line -> path, of rows no image took yet
        self.multi_label = False
        self._read(columns, separator)

    def _read(self, columns, separator):
        if not storage.exists(self.path):
            raise ValueError(f'--labels-file does not exist: {self.path}')
        rows = manifests.label_rows(self.path, columns, separator)
        self.multi_label = rows.multi_label
        for row, problem, line in rows:
            if row is None or not (row.get('path') or '').strip():
                _LOG.warning('--labels-file %s line %s is not used: %s', self.path, line, problem)
                continue
            name = _normalized(row['path'])
            if name in self._rows:
                _LOG.warning(
                    '--labels-file %s line %s names %s again (first on line %s); the first '
                    'row holds',
                    self.path,
                    line,
                    name,
                    self._rows[name][1],
                )
                continue
            self._rows[name] = (row, line)
            self._unused[line] = name
        self._reader = rows

    def labels(self, key) -> tuple:
        """(label, reject, detail) of the image with this key: its row's labels, else a
        rejection (`no_label`, `unknown_class`, `empty_label`)."""
        found = self._rows.get(key) or self._rows.get(posixpath.basename(key))
        if found is None:
            return '', 'no_label', f'no row of --labels-file {self.path} names it'
        row, line = found
        self._unused.pop(line, None)
        try:
            labels, _ = self._reader.labels(row, self.multi_label)
        except ValueError as e:
            return '', 'empty_label', str(e)
        try:
            if self.multi_label:
                return tuple(sorted({self._class_names.name(n) for n in labels})), '', ''
            if not labels:
                return '', 'empty_label', f'line {line} of {self.path} has an empty label'
            return self._class_names.name(labels), '', ''
        except UnknownClass as e:
            return '', 'unknown_class', str(e)

    def unused_rows(self, first_id) -> list:
        """InputEntry of every row no image took (`missing_file`), ids from `first_id`."""
        return [
            InputEntry(
                first_id + i,
                f'{self.path}#line={line}',
                f'{self.path}#line={line}',
                '',
                reject='missing_file',
                detail=f'line {line} names {name}, which is not among the images of --input',
            )
            for i, (line, name) in enumerate(sorted(self._unused.items()))
        ]


def _normalized(path):
    parts = [part for part in path.strip().replace('\\', '/').split('/') if part not in ('', '.')]
    return '/'.join(parts)
