import json

import pytest

from pipelines.inputs import listing

import images_for_tests as imgs


def _write(path, data=b'x'):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_tree_lists_images_sorted_by_relative_path_and_skips_others(tmp_path):
    for relative in [
        'dog/b.jpg',
        'cat/z.PNG',
        'cat/sub/a.jpeg',
        'dog/a.JPG',
        'cat/notes.txt',
        'cat/.hidden.jpg',
        '.git/x.png',
        'loose.jpg',
    ]:
        _write(tmp_path / relative)
    result = listing.list_inputs(str(tmp_path))
    keys = [entry.key for entry in result.entries]
    assert keys == ['cat/sub/a.jpeg', 'cat/z.PNG', 'dog/a.JPG', 'dog/b.jpg', 'loose.jpg']
    assert [entry.id for entry in result.entries] == [0, 1, 2, 3, 4]
    assert [entry.label for entry in result.entries] == ['cat', 'cat', 'dog', 'dog', '']
    assert result.entries[-1].reject == 'no_label'
    assert result.labels == ['cat', 'dog']
    assert result.skipped == {'hidden': 2, 'not_image': 1}
    assert result.entries[0].path == str(tmp_path / 'cat/sub/a.jpeg')


def test_glob_takes_the_class_from_the_folder_below_the_wildcard_base(tmp_path):
    for relative in ['data/cat/1.jpg', 'data/dog/2.png', 'data/dog/3.gif', 'other/x.jpg']:
        _write(tmp_path / relative)
    result = listing.list_inputs(str(tmp_path / 'data' / '*' / '*.[jp]*g'))
    assert [(e.key, e.label) for e in result.entries] == [
        ('cat/1.jpg', 'cat'),
        ('dog/2.png', 'dog'),
    ]


def test_csv_manifest_in_row_order_with_relative_paths_and_reasons(tmp_path):
    _write(tmp_path / 'imgs' / 'a.jpg')
    manifest = tmp_path / 'm.csv'
    manifest.write_text(
        'path,label,split\n'
        'imgs/a.jpg,cat,\n'
        'imgs/../imgs/b.jpg,dog,val\n'
        'imgs/a.jpg,cat,\n'
        ',cat,\n'
        'imgs/c.jpg,,\n'
        'imgs/d.jpg,dog,bad/split\n'
        'imgs/e.jpg,dog,train,extra\n'
        'gs://bucket/f.jpg,cat,test\n'
    )
    result = listing.list_inputs(str(manifest), allow_roots=['gs://bucket'])
    entries = result.entries
    assert [e.id for e in entries] == list(range(8))
    assert entries[0].path == str(tmp_path / 'imgs' / 'a.jpg')
    assert entries[0].key == 'imgs/a.jpg'
    assert (entries[1].key, entries[1].split) == ('imgs/b.jpg', 'val')
    assert [e.reject for e in entries] == [
        '',
        '',
        'duplicate_row',
        'empty_path',
        'empty_label',
        'invalid_split',
        'malformed_row',
        '',
    ]
    # Named by the file's line (the header is line 1), as an editor shows it.
    assert entries[2].detail == 'same path as line 2'
    assert (
        entries[3].path == f'{manifest}#line=5' and entries[4].detail == 'line 6 has an empty label'
    )
    assert entries[7].path == 'gs://bucket/f.jpg'
    assert result.labels == ['cat', 'dog']
    # Without --allow-root, a manifest reads only below its own folder.
    unconfined = listing.list_inputs(str(manifest)).entries[7]
    assert (unconfined.reject, unconfined.path) == ('outside_allowed_roots', 'gs://bucket/f.jpg')


def test_csv_manifest_with_unknown_column_is_refused(tmp_path):
    manifest = tmp_path / 'm.csv'
    manifest.write_text('path,label,weight\na.jpg,cat,1\n')
    with pytest.raises(ValueError, match=r"unknown \['weight'\]"):
        listing.list_inputs(str(manifest))


def test_jsonl_manifest_rejects_unknown_keys_and_bad_lines(tmp_path):
    manifest = tmp_path / 'm.jsonl'
    lines = [
        json.dumps({'path': 'a.jpg', 'label': 'cat'}),
        '',
        json.dumps({'path': 'b.jpg', 'label': 'dog', 'colour': 'red'}),
        '{not json',
        json.dumps(['a.jpg', 'cat']),
        json.dumps({'path': 'ü b.jpg', 'label': 'dog', 'split': 'test'}),
    ]
    manifest.write_text('\n'.join(lines) + '\n', encoding='utf-8')
    entries = listing.list_inputs(str(manifest)).entries
    assert [e.reject for e in entries] == [
        '',
        'malformed_row',
        'malformed_row',
        'malformed_row',
        '',
    ]
    assert 'colour' in entries[1].detail
    assert [e.path for e in entries[1:4]] == [f'{manifest}#line={n}' for n in (3, 4, 5)]
    assert (entries[4].key, entries[4].split) == ('ü b.jpg', 'test')


@pytest.mark.parametrize(
    'make_input',
    [
        lambda d: str(d / 'missing'),
        lambda d: str(d / 'empty'),
        lambda d: str(d / 'empty' / '*.jpg'),
    ],
)
def test_nothing_to_build_is_a_clear_error(tmp_path, make_input):
    (tmp_path / 'empty').mkdir()
    (tmp_path / 'empty' / 'readme.txt').write_text('no images')
    with pytest.raises(ValueError, match='--input'):
        listing.list_inputs(make_input(tmp_path))


def test_listing_file_round_trips_in_chunks(tmp_path):
    paths = imgs.write_tree(tmp_path / 'tree', per_class=5)
    entries = listing.list_inputs(str(tmp_path / 'tree')).entries
    target = tmp_path / 'listing.jsonl'
    listing.write_listing(entries, str(target), chunk_size=4)
    lines = target.read_text(encoding='utf-8').splitlines()
    assert len(lines) == 4  # 15 entries in chunks of 4
    assert [e for line in lines for e in listing.parse_listing_line(line)] == entries
    assert len(paths) == 15


def test_a_tree_streams_in_the_order_of_sorted_relative_paths(tmp_path):
    # A folder's name sorts as if followed by '/': 'a/x' after 'a-b' and 'a.jpg', before 'a0'.
    names = ['c/a/x.jpg', 'c/a-b.jpg', 'c/a.jpg', 'c/a0.jpg', 'c/a/b/y.png', 'c/B.jpg', 'b/1.jpg']
    names += ['c/a b/z.gif', 'c/ä.jpg', 'c/Z/q.jpg', 'c/a_/r.jpg']
    for name in names:
        _write(tmp_path / 'in' / name)
    scan = listing.scan_inputs(str(tmp_path / 'in'))
    keys = [entry.key for entry in scan.entries]
    assert keys == sorted(names)
    assert keys[:3] == ['b/1.jpg', 'c/B.jpg', 'c/Z/q.jpg']


def test_listing_file_streams_entries_and_indexes_its_lines(tmp_path):
    for i in range(11):
        _write(tmp_path / 'in' / f'k{i % 2}' / f'{i:02d}.jpg')
    _write(tmp_path / 'in' / 'k0' / 'notes.txt')
    scan = listing.scan_inputs(str(tmp_path / 'in'))
    path = str(tmp_path / 'listing.jsonl')
    summary = listing.write_listing_file(scan, path, chunk_size=4, spec='in')
    assert summary.num_inputs == 11 and summary.labels == ['k0', 'k1']
    assert summary.skipped == {'not_image': 1} and summary.largest_group == 6
    items = listing.work_items(path)
    assert len(items) == 3 and items[0][0] == 0
    assert items[-1][1] == (tmp_path / 'listing.jsonl').stat().st_size
    entries = [entry for item in items for entry in listing.read_work_item(path, item)]
    assert entries == listing.list_inputs(str(tmp_path / 'in')).entries


def test_an_empty_listing_is_refused_after_the_walk(tmp_path):
    _write(tmp_path / 'in' / 'cat' / 'readme.md')
    scan = listing.scan_inputs(str(tmp_path / 'in'))
    with pytest.raises(ValueError, match='matched no image files.*not_image'):
        listing.write_listing_file(scan, str(tmp_path / 'listing.jsonl'), 4, 'in')
