"""Labels as they come: Kaggle-style CSVs whose columns are chosen by name (--path-column,
--label-column or --labels-column, --path-template), and a tree's or archive's labels from such
a file keyed by file name (--labels-file), every row and file accounted for."""

import json
import logging
import pathlib
import re

import pytest

from pipelines import launcher

import containers_for_tests as made
import images_for_tests as imgs

FLAGS = ('--num-shards', '1', '--seed', '2', '--no-analyze')


def _run(*args):
    return launcher.run(['--direct_running_mode=in_memory', *FLAGS, *args])


def _rejected(out):
    text = (pathlib.Path(out) / 'rejected.jsonl').read_text(encoding='utf-8')
    return sorted(
        (row['reason'], re.split('[/!]', row['path'])[-1])
        for row in map(json.loads, text.splitlines())
    )


@pytest.fixture
def kaggle(tmp_path):
    """train_images/<id>.png and train.csv `id_code,diagnosis,grader` (APTOS's columns)."""
    images = tmp_path / 'train_images'
    images.mkdir()
    rows = ['id_code,diagnosis,grader']
    for i in range(9):
        (images / f'id{i:03d}.png').write_bytes(imgs.png(i, i % 3))
        rows.append(f'id{i:03d},{i % 3},g{i % 2}')
    rows.append('nosuchid,1,g0')
    (tmp_path / 'train.csv').write_text('\n'.join(rows) + '\n', encoding='utf-8')
    return tmp_path


def test_a_kaggle_csv_builds_with_its_columns_chosen_by_name(kaggle, caplog):
    names = kaggle / 'grades.txt'
    names.write_text('none\nmild\nsevere\n')
    caplog.set_level(logging.INFO)
    dataset = _run(
        '--input',
        str(kaggle / 'train.csv'),
        '--output',
        str(kaggle / 'out'),
        '--path-column',
        'id_code',
        '--label-column',
        'diagnosis',
        '--path-template',
        'train_images/{}.png',
        '--class-names',
        str(names),
    )
    assert dataset['labels'] == ['mild', 'none', 'severe']
    assert dataset['counts']['written'] == 9
    assert _rejected(kaggle / 'out') == [('missing_file', 'nosuchid.png')]
    assert 'columns grader are not used' in caplog.text


def test_a_labels_column_of_tags_is_a_multi_label_build(tmp_path):
    (tmp_path / 'img').mkdir()
    rows = ['image_name,tags']
    for i in range(6):
        (tmp_path / 'img' / f'train_{i}.jpg').write_bytes(imgs.jpeg(i))
        rows.append(f'train_{i},{["clear primary", "haze", "clear water"][i % 3]}')
    (tmp_path / 'labels.csv').write_text('\n'.join(rows) + '\n')
    dataset = _run(
        '--input',
        str(tmp_path / 'labels.csv'),
        '--output',
        str(tmp_path / 'out'),
        '--path-column',
        'image_name',
        '--labels-column',
        'tags',
        '--path-template',
        'img/{}.jpg',
    )
    assert dataset['multi_label'] is True
    assert dataset['labels'] == ['clear', 'haze', 'primary', 'water']


def test_a_csv_without_the_columns_named_is_one_line(kaggle):
    with pytest.raises(
        ValueError, match='no column diagnosis_x .*--path-column and --label-column'
    ):
        _run(
            '--input',
            str(kaggle / 'train.csv'),
            '--output',
            str(kaggle / 'out'),
            '--path-column',
            'id_code',
            '--label-column',
            'diagnosis_x',
        )


def _flat_folder(root, count=8):
    """ImageNet's validation layout: every image at the top, labels in a file by name."""
    root.mkdir()
    rows = ['ImageId,label']
    for i in range(count):
        name = f'ILSVRC2012_val_{i + 1:08d}'
        (root / f'{name}.JPEG').write_bytes(imgs.jpeg(i, i % 2))
        if i != 3:  # a file no row names
            rows.append(f'{name},{["n01440764", "n01443537"][i % 2]}')
    rows.append('ILSVRC2012_val_00099999,n01440764')  # a row that names no file
    return '\n'.join(rows) + '\n'


@pytest.mark.parametrize('archived', [False, True], ids=['tree', 'tar'])
def test_a_flat_folder_or_archive_takes_its_labels_from_a_file_by_name(tmp_path, archived):
    text = _flat_folder(tmp_path / 'val')
    (tmp_path / 'LOC_val.csv').write_text(text)
    source = str(tmp_path / 'val')
    if archived:
        source = made.tar_tree(tmp_path / 'val', tmp_path / 'val.tar')
    out = tmp_path / 'out'
    dataset = _run(
        '--input',
        source,
        '--output',
        str(out),
        '--labels-file',
        str(tmp_path / 'LOC_val.csv'),
        '--path-column',
        'ImageId',
        '--path-template',
        '{}.JPEG',
    )
    assert dataset['labels'] == ['n01440764', 'n01443537']
    counts = dataset['counts']
    assert (counts['inputs'], counts['written']) == (9, 7)
    assert _rejected(out) == [
        ('missing_file', 'LOC_val.csv#line=9'),
        ('no_label', 'ILSVRC2012_val_00000004.JPEG'),
    ]
