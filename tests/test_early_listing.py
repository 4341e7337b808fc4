"""pipelines/local/early_listing.py: the listing the build command starts before it imports
Beam."""

import json
import os

import pytest

from pipelines import launcher
from pipelines.core import options
from pipelines.inputs import entries
from pipelines.local import early_listing

import containers_for_tests as made
import images_for_tests as imgs
from beam_helpers import built


def _tree(tmp_path):
    root = tmp_path / 'in'
    imgs.write_tree(root, 5, ('ant', 'bee', 'cow'))
    (root / 'loose.jpg').write_bytes(imgs.jpeg(99))  # rejected by listing: no class folder
    (root / 'ant' / 'notes.txt').write_text('not an image')  # skipped
    return root


def _argv(root, out, *extra):
    return ['--input', str(root), '--output', str(out), '--seed', '4', *extra]


def test_a_build_takes_the_early_listing_and_builds_what_it_would_have(tmp_path, caplog):
    root = _tree(tmp_path)
    mode = ['--direct_running_mode=in_memory', '--no-analyze']
    early = early_listing.start_early(options.peek_build_config(_argv(root, tmp_path / 'early')))
    assert early is not None
    with caplog.at_level('DEBUG', logger='pipelines.local.early_listing'):
        launcher.run(_argv(root, tmp_path / 'early', *mode))
    assert 'listed by the early listing process' in caplog.text
    assert not os.path.exists(early.folder)
    launcher.run(_argv(root, tmp_path / 'itself', *mode))
    early_built, itself = built(tmp_path / 'early'), built(tmp_path / 'itself')
    assert early_built == itself
    assert early_built[0]['counts']['rejected'] == 1 and early_built[0]['counts']['skipped'] == 1


@pytest.mark.parametrize(
    'spec',
    ['missing-folder', 'in/*/*.jpg', 'gs://bucket/images', 'manifest.csv', 'in/ant/img_0000.jpg'],
)
def test_not_started_but_for_a_local_folder_or_container(tmp_path, monkeypatch, spec):
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path)
    (tmp_path / 'manifest.csv').write_text('path,label\nin/ant/img_0000.jpg,ant\n')
    assert (
        early_listing.start_early(options.peek_build_config(['--input', spec, '--output', 'out']))
        is None
    )


def test_a_local_archive_is_listed_early_and_builds_as_its_tree(tmp_path, caplog):
    root = _tree(tmp_path)
    archive = made.tar_tree(root, str(tmp_path / 'in.tar'))
    mode = ['--direct_running_mode=in_memory', '--no-analyze']
    early = early_listing.start_early(options.peek_build_config(_argv(archive, tmp_path / 'tar')))
    assert early is not None
    with caplog.at_level('DEBUG', logger='pipelines.local.early_listing'):
        launcher.run(_argv(archive, tmp_path / 'tar', *mode))
    assert 'listed by the early listing process' in caplog.text
    launcher.run(_argv(root, tmp_path / 'tree', *mode))
    (tar_dataset, _), (tree_dataset, _) = built(tmp_path / 'tar'), built(tmp_path / 'tree')
    assert tar_dataset['counts'] == tree_dataset['counts']
    assert tar_dataset['counts']['written'] == 15
    classes = {name: split['class_counts'] for name, split in tar_dataset['splits'].items()}
    assert classes == {name: s['class_counts'] for name, s in tree_dataset['splits'].items()}


def test_a_build_of_other_listing_options_lists_itself(tmp_path, caplog):
    root = _tree(tmp_path)
    early = early_listing.start_early(options.peek_build_config(_argv(root, tmp_path / 'out')))
    with caplog.at_level('DEBUG', logger='pipelines.local.early_listing'):
        dataset = launcher.run(
            _argv(root, tmp_path / 'out', '--chunk-size', '2', '--no-analyze')
            + ['--direct_running_mode=in_memory']
        )
    assert 'early listing' not in caplog.text
    assert dataset['counts']['written'] == 15
    assert not os.path.exists(early.folder)


def test_a_failed_early_listing_leaves_the_listing_to_the_build(tmp_path, caplog):
    root = _tree(tmp_path)
    early = early_listing.start_early(options.peek_build_config(_argv(root, tmp_path / 'out')))
    early._process.kill()  # pylint: disable=protected-access  # as if it had crashed
    with caplog.at_level('DEBUG', logger='pipelines.local.early_listing'):
        dataset = launcher.run(
            _argv(root, tmp_path / 'out', '--no-analyze', '--direct_running_mode=in_memory')
        )
    assert 'early listing' not in caplog.text
    assert dataset['counts']['written'] == 15
    assert not os.path.exists(early.folder)


def test_an_untaken_early_listing_is_stopped_and_removed(tmp_path):
    early = early_listing.start_early(
        options.peek_build_config(_argv(_tree(tmp_path), tmp_path / 'out'))
    )
    early_listing.stop_untaken()
    assert not os.path.exists(early.folder)
    early_listing.stop_untaken()  # nothing left to stop


def test_listing_counts_survive_their_json():
    counts = entries.ListingCounts()
    rows = [
        ('birds/owl', {'family': 'birds', 'species': 'owl'}, 'train', ''),
        ('birds/owl', {'family': 'birds', 'species': 'owl'}, '', ''),
        ('cats/lynx', {'family': 'cats', 'species': 'lynx'}, 'val', ''),
        ('', {}, '', 'no_label'),
    ]
    for i, (label, levels, split, reject) in enumerate(rows):
        counts.add(entries.InputEntry(i, f'/p/{i}', f'{i}', label, split, reject, levels=levels))
    again = entries.ListingCounts.from_json(json.loads(json.dumps(counts.to_json())))
    scan = entries.InputScan('/p', iter(()), levels=['family', 'species'])
    assert again.summary(scan) == counts.summary(scan)
    assert again.rejected == counts.rejected and again.num_inputs == 4
