"""Vertex AI JSONL import files (pipelines/inputs/vertex.py, vertex_objects.py) read a block at
a time (jsonl_lines.py): a line at the bound (16 MiB) is a row like any other, a longer one stops
the listing in one line naming the file and the line, before the rest of it is read."""

import json

import pytest

from pipelines.inputs import jsonl_lines
from pipelines.inputs import listing

import images_for_tests as imgs


def _row(form, name):
    row = {'imageGcsUri': name}
    if form == 'classification':
        row['classificationAnnotations'] = [{'displayName': 'daisy'}]
    else:
        box = {'displayName': 'daisy', 'xMin': 0.1, 'yMin': 0.2, 'xMax': 0.5, 'yMax': 0.6}
        row['boundingBoxAnnotations'] = [box]
    return json.dumps(row).encode()


def _import_file(tmp_path, form, long_line_bytes):
    """import.jsonl of three rows whose second is padded with spaces (valid JSON) to
    `long_line_bytes`, its line break not counted."""
    (tmp_path / 'img').mkdir(exist_ok=True)
    names = [f'img/{i}.jpg' for i in range(3)]
    for i, name in enumerate(names):
        (tmp_path / name).write_bytes(imgs.jpeg(i, i, size=(12, 16)))
    rows = [_row(form, name) for name in names]
    rows[1] += b' ' * (long_line_bytes - len(rows[1]))
    path = tmp_path / 'import.jsonl'
    path.write_bytes(b'\n'.join(rows) + b'\n')
    return path


@pytest.mark.parametrize('form', ['classification', 'detection'])
def test_a_line_at_the_bound_is_a_row_and_a_longer_one_is_refused_unread(tmp_path, form):
    path = _import_file(tmp_path, form, jsonl_lines.MAX_LINE_BYTES)
    entries = listing.list_inputs(str(path)).entries
    assert [(entry.key, entry.reject) for entry in entries] == [
        (f'img/{i}.jpg', '') for i in range(3)
    ]
    assert entries[1].label == ('daisy',)
    longer = jsonl_lines.MAX_LINE_BYTES + 4 * jsonl_lines.READ_BYTES
    path = _import_file(tmp_path, form, longer)
    words = f'import.jsonl: line 2 is longer than {jsonl_lines.MAX_LINE_BYTES:,} bytes'
    with pytest.raises(ValueError, match=words) as refused:
        listing.list_inputs(str(path))
    assert '\n' not in str(refused.value)
    with open(path, 'rb') as f:  # refused once the bound is passed: the rest left unread
        with pytest.raises(ValueError, match='line 2 is longer'):
            list(jsonl_lines.lines(f, str(path)))
        assert f.tell() <= jsonl_lines.MAX_LINE_BYTES + 2 * jsonl_lines.READ_BYTES < longer
