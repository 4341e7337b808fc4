"""Untrusted manifests and trees: paths confined to allowed roots, symlinks, special files,
undecodable names and credentials, at the listing and through real builds."""

import json
import logging
import os
import pathlib
import re

import pytest

from pipelines import launcher
from pipelines.inputs import listing

import images_for_tests as imgs

SECRET = 's3cr3t-t0ken'


def _write(path, data):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _jsonl_manifest(path, rows):
    path.write_text(''.join(json.dumps(row) + '\n' for row in rows), encoding='utf-8')
    return str(path)


def _by_key(entries):
    return {entry.id: entry for entry in entries}


@pytest.fixture
def layout(tmp_path):
    """data/ holds a manifest's images; other/ and secret/ lie beside it."""
    for name in ('a', 'b'):
        _write(tmp_path / 'data' / 'imgs' / f'{name}.jpg', imgs.jpeg(ord(name)))
    _write(tmp_path / 'other' / 'c.jpg', imgs.jpeg(3))
    _write(tmp_path / 'secret' / 'key.jpg', imgs.jpeg(4))
    return tmp_path


MANIFEST_ROWS = [
    # (path, reason without --allow-root, reason with --allow-root other/)
    ('imgs/a.jpg', '', ''),
    ('{root}/data/imgs/b.jpg', '', ''),
    ('../other/c.jpg', 'path_traversal', ''),
    ('{root}/other/c.jpg', 'outside_allowed_roots', 'duplicate_row'),
    ('imgs/../../secret/key.jpg', 'path_traversal', 'path_traversal'),
    ('{root}/secret/key.jpg', 'outside_allowed_roots', 'outside_allowed_roots'),
    ('/etc/passwd', 'outside_allowed_roots', 'outside_allowed_roots'),
    ('imgs/nul\x00.jpg', 'nul_in_path', 'nul_in_path'),
    (f'https://user:{SECRET}@images.example.com/x.jpg', *['credentials_in_path'] * 2),
    (f'https://images.example.com/x.jpg?X-Goog-Signature={SECRET}', *['unsupported_scheme'] * 2),
    ('file:///etc/passwd', 'unsupported_scheme', 'unsupported_scheme'),
    ('ftp://example.com/x.jpg', 'unsupported_scheme', 'unsupported_scheme'),
    ('gs://bucket/x.jpg', 'outside_allowed_roots', 'outside_allowed_roots'),
]


def _rows(root):
    return [{'path': path.format(root=root), 'label': 'cat'} for path, _, _ in MANIFEST_ROWS]


@pytest.mark.parametrize('allowed', [False, True])
def test_manifest_paths_are_confined_to_its_folder_and_allowed_roots(layout, allowed):
    manifest = _jsonl_manifest(layout / 'data' / 'm.jsonl', _rows(layout))
    roots = [str(layout / 'other')] if allowed else []
    entries = listing.list_inputs(manifest, allow_roots=roots).entries
    column = 2 if allowed else 1
    assert [e.reject for e in entries] == [row[column] for row in MANIFEST_ROWS]
    assert all(e.detail for e in entries if e.reject)
    if allowed:  # a path out of the manifest's folder has its whole path as key
        assert entries[2].key == entries[2].path == str(layout / 'other' / 'c.jpg')


def test_credentials_and_signed_urls_are_redacted(layout):
    manifest = _jsonl_manifest(layout / 'data' / 'm.jsonl', _rows(layout))
    entries = listing.list_inputs(manifest).entries
    credentials, signed = entries[8], entries[9]
    assert credentials.path == 'https://***@images.example.com/x.jpg'
    assert signed.path == 'https://images.example.com/x.jpg?***'
    assert not any(SECRET in field for e in entries for field in e if isinstance(field, str))
    assert entries[7].path == str(layout / 'data' / 'imgs' / 'nul\\x00.jpg')


def test_uris_under_an_allowed_root_are_kept_and_dot_segments_refused(tmp_path):
    manifest = tmp_path / 'm.csv'
    manifest.write_text(
        'path,label\ngs://bucket/x.jpg,cat\ngs://bucket/a/../y.jpg,cat\ngs://other/z.jpg,cat\n'
    )
    entries = listing.list_inputs(str(manifest), allow_roots=['gs://bucket/']).entries
    assert [e.reject for e in entries] == ['', 'path_traversal', 'outside_allowed_roots']
    assert entries[0].key == entries[0].path == 'gs://bucket/x.jpg'


def test_csv_rows_that_break_the_csv_module_are_malformed_not_fatal(tmp_path):
    _write(tmp_path / 'a.jpg', imgs.jpeg(1))
    manifest = tmp_path / 'm.csv'
    manifest.write_bytes(
        b'path,label\n'
        + b'x' * 200_000
        + b',big\n'
        + b'nul\x00.jpg,cat\n'
        + b'bad\xff.jpg,cat\n'
        + b'a.jpg,cat\n'
    )
    entries = listing.list_inputs(str(manifest)).entries
    assert [e.reject for e in entries] == ['malformed_row', 'nul_in_path', 'malformed_row', '']


def test_jsonl_lines_that_are_not_utf8_or_too_deep_are_malformed(tmp_path):
    _write(tmp_path / 'a.jpg', imgs.jpeg(1))
    manifest = tmp_path / 'm.jsonl'
    manifest.write_bytes(
        b'{"path": "bad\xff.jpg", "label": "cat"}\n'
        + b'[' * 100_000
        + b'\n{"path": {"nested": 1}, "label": "cat"}\n'
        + b'{"path": "a.jpg", "label": "cat"}\n'
    )
    entries = listing.list_inputs(str(manifest)).entries
    assert [e.reject for e in entries] == ['malformed_row'] * 3 + ['']


@pytest.mark.parametrize(
    'flag, value',
    [('--input', f'https://user:{SECRET}@host/m.csv'), ('--allow-root', f'gs://u:{SECRET}@b')],
)
def test_credentials_in_flags_are_refused_without_being_logged(tmp_path, caplog, flag, value):
    manifest = tmp_path / 'm.csv'
    manifest.write_text('path,label\n')
    args = {'--input': str(manifest), '--output': str(tmp_path / 'out'), flag: value}
    argv = [item for pair in args.items() for item in pair]
    with caplog.at_level(logging.INFO):
        assert launcher.main(argv) == 2
    assert 'credentials' in caplog.text and SECRET not in caplog.text
    assert not (tmp_path / 'out').exists()


def test_an_allowed_root_must_be_readable_by_beam():
    with pytest.raises(ValueError, match='no filesystem'):
        listing.list_inputs('unused.csv', allow_roots=['https://example.com/images'])


def test_a_manifest_build_rejects_escapes_and_keeps_credentials_out_of_every_output(
    layout, tmp_path, caplog, capsys
):
    manifest = _jsonl_manifest(layout / 'data' / 'm.jsonl', _rows(layout))
    out = tmp_path / 'out'
    with caplog.at_level(logging.INFO):
        dataset = launcher.run(
            ['--direct_running_mode=in_memory', '--input', manifest, '--output', str(out)]
        )
    rows = [json.loads(line) for line in (out / 'rejected.jsonl').read_text().splitlines()]
    assert [row['reason'] for row in rows] == [reason for _, reason, _ in MANIFEST_ROWS if reason]
    assert dataset['counts']['written'] == 2
    assert dataset['counts']['inputs'] == dataset['counts']['written'] + len(rows)
    outputs = [caplog.text, capsys.readouterr().out, (out / 'dataset.json').read_text()]
    outputs.append((out / 'rejected.jsonl').read_text())
    assert not [text for text in outputs if SECRET in text]


def _symlink_tree(root, outside):
    """A tree with symlinks of every kind, a FIFO and a name that is not UTF-8 (a good image:
    kept, imageshards/file_names.py)."""
    for i, name in enumerate(['cat/a.jpg', 'cat/b.jpg', 'dog/c.jpg']):
        _write(root / name, imgs.jpeg(i))
    _write(outside / 'far.jpg', imgs.jpeg(10))
    _write(outside / 'folder' / 'd.jpg', imgs.jpeg(11))
    (root / 'cat' / 'inside_link.jpg').symlink_to(root / 'dog' / 'c.jpg')
    (root / 'cat' / 'outside_link.jpg').symlink_to(outside / 'far.jpg')
    (root / 'cat' / 'dangling.jpg').symlink_to(root / 'nowhere.jpg')
    (root / 'bird').symlink_to(outside / 'folder', target_is_directory=True)
    (root / 'dog' / 'loop').symlink_to(root, target_is_directory=True)
    os.mkfifo(root / 'dog' / 'pipe.jpg')  # reading it would block the build forever
    with open(os.fsencode(root / 'dog') + b'/bad\xff.jpg', 'wb') as f:
        f.write(imgs.jpeg(12))


def test_tree_symlinks_fifos_and_undecodable_names(tmp_path):
    _symlink_tree(tmp_path / 'in', tmp_path / 'outside')
    result = listing.list_inputs(str(tmp_path / 'in'))
    assert {e.key: e.reject for e in result.entries} == {
        'cat/a.jpg': '',
        'cat/b.jpg': '',
        'cat/dangling.jpg': 'broken_symlink',
        'cat/inside_link.jpg': '',
        'cat/outside_link.jpg': 'symlink_outside_root',
        'dog/bad\udcff.jpg': '',  # the name's bytes b'bad\xff.jpg', as Python lists them
        'dog/c.jpg': '',
        'dog/pipe.jpg': 'not_a_regular_file',
    }
    # Symlinked folders are not descended into: `bird` leads outside, `dog/loop` to the root.
    assert result.skipped == {'symlinked_dir': 2}


def test_follow_symlinks_reads_links_everywhere_and_walks_each_folder_once(tmp_path):
    _symlink_tree(tmp_path / 'in', tmp_path / 'outside')
    result = listing.list_inputs(str(tmp_path / 'in'), follow_symlinks=True)
    rejects = {e.key: e.reject for e in result.entries}
    assert rejects['cat/outside_link.jpg'] == '' and rejects['bird/d.jpg'] == ''
    assert not any(key.startswith('dog/loop/') for key in rejects)
    assert result.skipped == {'symlink_loop': 1}


def test_glob_rejects_symlinks_that_leave_its_base(tmp_path):
    _symlink_tree(tmp_path / 'in', tmp_path / 'outside')
    result = listing.list_inputs(str(tmp_path / 'in' / '*' / '*.jpg'))
    assert {e.key: e.reject for e in result.entries}['cat/outside_link.jpg'] == (
        'symlink_outside_root'
    )


def test_manifest_paths_no_file_can_have_are_rejected_and_escaped_bytes_are_read(layout):
    data = layout / 'data'
    with open(os.fsencode(data / 'imgs') + b'/latin1_\xe9.jpg', 'wb') as f:
        f.write(imgs.jpeg(7))
    rows = [
        {'path': 'imgs/\ud800.jpg', 'label': 'x'},  # a lone surrogate: no name's bytes
        {'path': 'imgs/a.jpg', 'label': 'x\ud800'},  # nor a label's text
        {'path': 'imgs/latin1_\udce9.jpg', 'label': 'x'},  # the byte 0xe9, as Python escapes it
    ]
    entries = listing.list_inputs(_jsonl_manifest(data / 'm.jsonl', rows)).entries
    assert [e.reject for e in entries] == ['invalid_file_name', 'malformed_row', '']
    assert os.fsencode(entries[2].path).endswith(b'/latin1_\xe9.jpg')


def test_manifest_symlinks_out_of_the_allowed_roots_are_rejected(layout):
    data = layout / 'data'
    (data / 'imgs' / 'link.jpg').symlink_to(layout / 'secret' / 'key.jpg')
    (data / 'linked_folder').symlink_to(layout / 'secret', target_is_directory=True)
    (data / 'imgs' / 'inside.jpg').symlink_to(data / 'imgs' / 'a.jpg')
    rows = [{'path': p, 'label': 'x'} for p in ('imgs/link.jpg', 'linked_folder/key.jpg')]
    rows.append({'path': 'imgs/inside.jpg', 'label': 'x'})
    manifest = _jsonl_manifest(data / 'm.jsonl', rows)
    assert [e.reject for e in listing.list_inputs(manifest).entries] == [
        'symlink_outside_root',
        'symlink_outside_root',
        '',
    ]
    followed = listing.list_inputs(manifest, follow_symlinks=True).entries
    assert [e.reject for e in followed] == ['', '', '']


@pytest.mark.parametrize('follow', [False, True])
def test_a_tree_build_with_hostile_files_finishes_and_accounts_for_them(tmp_path, follow):
    _symlink_tree(tmp_path / 'in', tmp_path / 'outside')
    out = tmp_path / 'out'
    flags = ['--follow-symlinks'] if follow else []
    dataset = launcher.run(
        ['--direct_running_mode=in_memory', '--input', str(tmp_path / 'in'), '--output', str(out)]
        + flags
    )
    counts = dataset['counts']
    assert counts['inputs'] == counts['written'] + counts['rejected']
    rejected = {json.loads(line)['reason'] for line in (out / 'rejected.jsonl').open()}
    if follow:
        assert counts['written'] == 7  # a, b, c, bad\xff, inside_link, outside_link, bird/d
        assert rejected == {'broken_symlink', 'not_a_regular_file'}
    else:
        assert counts['written'] == 5
        assert 'symlink_outside_root' in rejected


def test_no_module_unpickles_or_evaluates_data():
    """Inputs, manifests, listings and configs are parsed as data, never unpickled."""
    repository = pathlib.Path(__file__).resolve().parent.parent
    forbidden = re.compile(
        r'\b(?:pickle|dill|cloudpickle|marshal)\.loads?\(|allow_pickle=True|yaml\.(?:unsafe_)?load\('
        r'|shelve\.open\(|(?<![.\w])(?:eval|exec)\('
    )
    found = [
        f'{path.relative_to(repository)}: {match.group(0)}'
        for package in ('imageshards', 'pipelines', 'trainer')
        for path in sorted((repository / package).rglob('*.py'))
        for match in forbidden.finditer(path.read_text(encoding='utf-8'))
    ]
    assert not found


def test_credentials_in_input_or_output_are_refused_without_repeating_them(tmp_path, caplog):
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    for flags in (
        ['--input', 'https://user:s3cr3t@host/data', '--output', str(tmp_path / 'o')],
        ['--input', str(tmp_path), '--output', 'gs://user:s3cr3t@bucket/out'],
    ):
        assert launcher.main(flags) == 2
    assert 'carries credentials' in caplog.text
    assert 's3cr3t' not in caplog.text
