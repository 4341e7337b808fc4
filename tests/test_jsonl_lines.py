"""JSONL manifests (pipelines/inputs/manifests.py, their columns chosen by name
manifest_columns.py, and --labels-file) read a block at a time (jsonl_lines.py): a line at the
bound (16 MiB) is a row like any other, a longer one stops the listing in one line naming the
file and the line, before the rest of it is read; local files and gs:// objects alike."""

import json

import pytest

from pipelines.core.settings import InputSettings
from pipelines.inputs import jsonl_lines
from pipelines.inputs import listing
from pipelines.inputs import manifest_columns
from pipelines.inputs import manifests
from pipelines.inputs.label_files import LabelsFile

import images_for_tests as imgs

pytest_plugins = ['gcs_emulator']

# How a manifest names its path and label, and the settings that read it so.
KEYS = {
    'own keys': (('path', 'label'), {}),
    'chosen columns': (('file', 'class'), {'path_column': 'file', 'label_column': 'class'}),
}
BOUND = jsonl_lines.MAX_LINE_BYTES
LONGER = BOUND + 4 * jsonl_lines.READ_BYTES


def _manifest_bytes(keys, long_line_bytes):
    """Three rows naming img/0.jpg to img/2.jpg, the second padded with spaces (valid JSON) to
    `long_line_bytes` (its line break not counted), and a fourth line that is not JSON."""
    path_key, label_key = keys
    rows = [json.dumps({path_key: f'img/{i}.jpg', label_key: 'daisy'}).encode() for i in range(3)]
    rows[1] += b' ' * (long_line_bytes - len(rows[1]))
    return b'\n'.join([*rows, b'{"path": "img/3.jpg",']) + b'\n'


def _images(folder):
    (folder / 'img').mkdir(exist_ok=True)
    for i in range(3):
        (folder / f'img/{i}.jpg').write_bytes(imgs.jpeg(i, i, size=(12, 16)))


def _listed(spec, settings):
    return [
        (entry.key, entry.label, entry.reject, entry.detail[:14])
        for entry in listing.list_inputs(spec, **settings).entries
    ]


@pytest.mark.parametrize('form', KEYS)
def test_a_manifest_line_at_the_bound_is_a_row_and_a_longer_one_is_refused_unread(tmp_path, form):
    keys, settings = KEYS[form]
    _images(tmp_path)
    path = tmp_path / 'manifest.jsonl'
    path.write_bytes(_manifest_bytes(keys, BOUND))
    assert _listed(str(path), settings) == [
        ('img/0.jpg', 'daisy', '', ''),
        ('img/1.jpg', 'daisy', '', ''),
        ('img/2.jpg', 'daisy', '', ''),
        (f'{path}#line=4', '', 'malformed_row', 'not valid JSON'),  # as before: a row's problem
    ]
    path.write_bytes(_manifest_bytes(keys, LONGER))
    words = f'manifest.jsonl: line 2 is longer than {BOUND:,} bytes'
    with pytest.raises(ValueError, match=words) as refused:
        listing.list_inputs(str(path), **settings)
    assert '\n' not in str(refused.value)
    read, where = _reader(form, settings)
    with open(path, 'rb') as f:  # refused once the bound is passed: the rest left unread
        with pytest.raises(ValueError, match='line 2 is longer'):
            list(read(f, str(path), where))
        assert f.tell() <= BOUND + 2 * jsonl_lines.READ_BYTES < LONGER


def _reader(form, settings):
    """The manifest reader of a form, and what it takes besides the file and its name."""
    if form == 'own keys':
        return manifests._read_jsonl_rows, manifest_columns.LevelColumns((), [])
    return manifest_columns.read_chosen_jsonl_rows, manifest_columns.Choice(
        InputSettings(**settings)
    )


def test_a_labels_file_line_over_the_bound_is_refused_naming_the_file_and_line(tmp_path):
    path = tmp_path / 'labels.jsonl'
    path.write_bytes(_manifest_bytes(('path', 'label'), BOUND))
    found = LabelsFile(str(path), InputSettings())
    assert [found.labels(f'img/{i}.jpg') for i in range(3)] == [('daisy', '', '')] * 3
    path.write_bytes(_manifest_bytes(('path', 'label'), LONGER))
    with pytest.raises(ValueError, match=f'labels.jsonl: line 2 is longer than {BOUND:,} bytes'):
        LabelsFile(str(path), InputSettings())


@pytest.mark.parametrize('form', KEYS)
def test_a_gs_manifest_is_read_so_too(gcs, tmp_path, form):
    keys, settings = KEYS[form]
    _images(tmp_path)
    gcs.upload_tree(tmp_path / 'img', f'{form}/img')
    manifest = gcs.upload(f'{form}/manifest.jsonl', _manifest_bytes(keys, BOUND))
    listed = _listed(manifest, settings)
    assert [row[:3] for row in listed[:3]] == [(f'img/{i}.jpg', 'daisy', '') for i in range(3)]
    assert listed[3][2:] == ('malformed_row', 'not valid JSON')
    manifest = gcs.upload(f'{form}/manifest.jsonl', _manifest_bytes(keys, LONGER))
    with pytest.raises(ValueError, match=f'^{manifest}: line 2 is longer than {BOUND:,} bytes'):
        listing.list_inputs(manifest, **settings)


@pytest.mark.parametrize('read_bytes', [1, 3, 1 << 20])
def test_lines_are_those_of_iterating_the_file_whatever_blocks_they_span(
    tmp_path, monkeypatch, read_bytes
):
    monkeypatch.setattr(jsonl_lines, 'READ_BYTES', read_bytes)
    data = b'{"a": 1}\n\n  \r\n{"b": "\r"}\n\xff\xfe\nlast, without a line break'
    (tmp_path / 'rows.jsonl').write_bytes(data)
    with open(tmp_path / 'rows.jsonl', 'rb') as f:
        found = list(jsonl_lines.lines(f, 'rows.jsonl'))
    with open(tmp_path / 'rows.jsonl', 'rb') as f:
        assert found == list(enumerate(f, start=1))  # as the readers read them before
    assert [number for number, _ in found] == [1, 2, 3, 4, 5, 6]


def test_a_text_stream_gives_its_lines_as_text_bounded_in_characters(tmp_path, monkeypatch):
    monkeypatch.setattr(jsonl_lines, 'READ_BYTES', 4)
    monkeypatch.setattr(jsonl_lines, 'MAX_LINE_BYTES', 7)  # {"é":1} is 7, in 8 bytes
    (tmp_path / 'rows.jsonl').write_text('{"é":1}\n\n[2]', encoding='utf-8')
    with open(tmp_path / 'rows.jsonl', encoding='utf-8', newline='') as f:
        assert list(jsonl_lines.lines(f, 'rows.jsonl')) == [(1, '{"é":1}\n'), (2, '\n'), (3, '[2]')]
    (tmp_path / 'rows.jsonl').write_text('[1]\n{"é": 22}\n', encoding='utf-8')
    with open(tmp_path / 'rows.jsonl', encoding='utf-8', newline='') as f:
        with pytest.raises(ValueError, match='rows.jsonl: line 2 is longer than 7 characters'):
            list(jsonl_lines.lines(f, 'rows.jsonl'))
