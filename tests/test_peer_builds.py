"""The peers' builds that bench/peers.py compares imageshards with still run, as their users
write them: TFDS's GeneratorBasedBuilder and Hugging Face datasets' imagefolder."""

import json
import subprocess
import sys

import pytest

import images_for_tests as imgs

REPOSITORY = __file__.rsplit('/tests/', 1)[0]


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp('peer_tree')
    imgs.write_tree(root, 4, ('ant', 'bee', 'cat'))
    return root


def _run(*args):
    subprocess.run([sys.executable, '-m', *args], check=True, cwd=REPOSITORY, capture_output=True)


@pytest.mark.slow
def test_tfds_builds_the_tree_into_its_shards(tree, tmp_path):
    _run('bench.peer_tfds', str(tree), str(tmp_path), '--num-shards', '2')
    (info_path,) = tmp_path.glob('image_tree/1.0.0/dataset_info.json')
    info = json.loads(info_path.read_text())
    (split,) = info['splits']
    assert split['name'] == 'train' and sum(map(int, split['shardLengths'])) == 12
    assert len(list(info_path.parent.glob('image_tree-train.tfrecord-*'))) == 2


@pytest.mark.slow
def test_hugging_face_datasets_saves_the_tree_shuffled(tree, tmp_path):
    import datasets  # pylint: disable=import-outside-toplevel

    _run('bench.peer_hf', str(tree), str(tmp_path), '--num-shards', '2', '--num-proc', '1')
    saved = datasets.load_from_disk(str(tmp_path / 'dataset'))
    assert len(saved) == 12
    assert sorted(saved.features['label'].names) == ['ant', 'bee', 'cat']
    assert len(list((tmp_path / 'dataset').glob('*.arrow'))) == 2
