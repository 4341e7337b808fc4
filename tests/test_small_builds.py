"""Small end-to-end builds: --dedup, and what a build refuses to do."""

import json
import os

import pytest

from pipelines import launcher

import images_for_tests as imgs


def _run(*args):
    """launcher.run in this process."""
    return launcher.run(['--direct_running_mode=in_memory', *args])


def _jsonl(path):
    return [json.loads(line) for line in path.read_text(encoding='utf-8').splitlines()]


def test_dedup_drops_byte_identical_images_keeping_the_first(tmp_path):
    root = tmp_path / 'in'
    imgs.write_tree(root, 4, ('a', 'b'))
    (root / 'b' / 'copy_of_a0.jpg').write_bytes((root / 'a' / 'img_0000.jpg').read_bytes())
    (root / 'a' / 'zz_copy.jpg').write_bytes((root / 'a' / 'img_0000.jpg').read_bytes())
    dataset = _run('--input', str(root), '--output', str(tmp_path / 'out'), '--dedup')
    assert dataset['counts']['duplicates'] == 2
    assert dataset['counts']['inputs'] == 10 == dataset['counts']['written'] + 2
    rows = _jsonl(tmp_path / 'out' / 'duplicates.jsonl')
    assert {os.path.basename(r['path']) for r in rows} == {'copy_of_a0.jpg', 'zz_copy.jpg'}
    assert {os.path.basename(r['duplicate_of_path']) for r in rows} == {'img_0000.jpg'}


def test_refuses_a_non_empty_output_and_overwrite_removes_only_its_own_files(tmp_path):
    root = tmp_path / 'in'
    imgs.write_tree(root, 6, ('a', 'b'))
    out = tmp_path / 'out'
    out.mkdir()
    (out / 'keep.txt').write_text('mine')
    with pytest.raises(FileExistsError, match='--overwrite'):
        _run('--input', str(root), '--output', str(out))
    _run('--input', str(root), '--output', str(out), '--overwrite', '--num-shards', '3')
    assert len(list((out / 'train').iterdir())) == 6  # shards and their index files
    _run('--input', str(root), '--output', str(out), '--overwrite', '--num-shards', '2')
    assert sorted(p.name for p in (out / 'train').iterdir()) == [
        'train-00000-of-00002.tfrecord',
        'train-00000-of-00002.tfrecord.idx',
        'train-00001-of-00002.tfrecord',
        'train-00001-of-00002.tfrecord.idx',
    ]
    assert (out / 'keep.txt').read_text() == 'mine'
    assert (out / '_SUCCESS').exists()


def test_a_build_with_no_images_fails_with_a_clear_message(tmp_path, caplog):
    (tmp_path / 'in' / 'a').mkdir(parents=True)
    (tmp_path / 'in' / 'a' / 'x.txt').write_text('no')
    assert launcher.main(['--input', str(tmp_path / 'in'), '--output', str(tmp_path / 'out')]) == 2
    assert '--input matched no image files' in caplog.text
    assert not (tmp_path / 'out').exists()


def test_refuses_an_output_inside_the_input_tree(tmp_path):
    imgs.write_tree(tmp_path / 'in', 2, ('a',))
    with pytest.raises(ValueError, match='is inside --input'):
        _run('--input', str(tmp_path / 'in'), '--output', str(tmp_path / 'in' / 'shards'))
