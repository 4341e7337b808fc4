"""Splits you can trust: groups, near-duplicate clusters and an earlier build's splits never
leak between splits (pipelines/assignment/grouping.py), said in dataset.json and checked by
verify. Each end-to-end test also shows that the same inputs leak without the feature."""

import collections
import csv
import json
import pathlib

import pytest
from PIL import Image

from imageshards import features
from imageshards import file_names
from imageshards import records
from imageshards import storage
from imageshards_cli import verify
from pipelines import launcher
from pipelines.inputs.listing import input_base

import images_for_tests as imgs

SPLITS = 'train=0.6,val=0.2,test=0.2'


def _run(*args):
    return launcher.run(['--direct_running_mode=in_memory', '--splits', SPLITS, *args])


def _records(out):
    """{key below the input: (split, group or None)} of every record of the build in `out`."""
    dataset = json.loads((out / 'dataset.json').read_text())
    base = input_base(dataset['input'])
    found = {}
    for split, info in dataset['splits'].items():
        for shard in info['shards']:
            path = str(out / shard['path'])
            with storage.open_read(path) as f:
                for _, record in records.framed_records(f, path):
                    values = records.example_values(records.parse_example(record))
                    name = file_names.from_bytes(values[features.FILENAME][1][0])
                    group = values.get(features.GROUP, (None, [None]))[1][0]
                    found[name[len(base) + 1 :]] = (split, group and group.decode())
    return found


def _built(out, *args):
    """The records of a build of `args` into `out` (_records)."""
    _run(*args, '--output', str(out))
    return _records(out)


def _splits_of(found, names_of):
    """{name: set of splits its images are in}, names given by `names_of(key)`."""
    splits = collections.defaultdict(set)
    for key, (split, _) in found.items():
        name = names_of(key)
        if name:
            splits[name].add(split)
    return splits


# -- builds --------------------------------------------------------------------------------------


def _grouped_tree(root, per_class=16, groups=6):
    """A tree of two classes whose file names name their patient: `p<k>_img_NNNN`."""
    for path in imgs.write_tree(root, per_class, ('cat', 'dog')):
        index = int(path.stem.split('_')[1])
        path.rename(path.with_name(f'p{(index * 5 + len(path.parent.name)) % groups}_{path.name}'))


def test_group_pattern_keeps_every_group_in_one_split_where_a_plain_build_splits_them(tmp_path):
    _grouped_tree(tmp_path / 'in')
    patient = lambda key: key.split('/')[1].split('_')[0]  # noqa: E731
    plain = _built(tmp_path / 'a', '--input', str(tmp_path / 'in'))
    assert any(len(s) > 1 for s in _splits_of(plain, patient).values())
    out = tmp_path / 'b'
    dataset = _run(
        '--input', str(tmp_path / 'in'), '--output', str(out), '--group-pattern', r'/(p\d)_'
    )
    found = _records(out)
    assert len(found) == 32
    assert all(len(s) == 1 for s in _splits_of(found, patient).values())
    assert {key: group for key, (_, group) in found.items()} == {k: patient(k) for k in found}
    assert (
        dataset['grouping']['groups']['count']
        == 6
        == sum(dataset['splits'][s]['groups'] for s in dataset['splits'])
    )
    assert dataset['grouping']['groups']['leaked'] == 0
    assert all(info['leaked_groups'] == 0 for info in dataset['splits'].values())


def _manifest(path, rows):
    with open(path, 'w', newline='', encoding='utf-8') as f:
        writer = csv.writer(f)
        writer.writerow(['path', 'label', 'split', 'group'])
        writer.writerows(rows)


def test_a_group_whose_rows_name_two_splits_stops_the_build_in_one_line(tmp_path, caplog):
    paths = imgs.write_tree(tmp_path / 'in', 4, ('cat', 'dog'))
    rows = [(str(p), p.parent.name, '', f'g{i % 3}') for i, p in enumerate(paths)]
    rows[0] = (*rows[0][:2], 'train', 'g0')
    rows[3] = (*rows[3][:2], 'test', 'g0')
    _manifest(tmp_path / 'm.csv', rows)
    argv = ['--input', str(tmp_path / 'm.csv'), '--output', str(tmp_path / 'out')]
    assert launcher.main(['--direct_running_mode=in_memory', *argv]) != 0
    assert "group 'g0': its manifest rows name the splits test (1), train (1)" in caplog.text


def test_a_manifest_group_column_keeps_groups_together_and_its_splits_win(tmp_path):
    paths = imgs.write_tree(tmp_path / 'in', 12, ('cat', 'dog'))
    rows = [(str(p), p.parent.name, '', f'g{i % 5}') for i, p in enumerate(paths)]
    rows[0] = (*rows[0][:2], 'test', 'g0')  # the whole of g0 follows its one named split
    _manifest(tmp_path / 'm.csv', rows)
    dataset = _run('--input', str(tmp_path / 'm.csv'), '--output', str(tmp_path / 'out'))
    found = _records(tmp_path / 'out')
    by_group = collections.defaultdict(set)
    for split, group in found.values():
        by_group[group].add(split)
    assert by_group['g0'] == {'test'}
    assert all(len(s) == 1 for s in by_group.values()) and len(by_group) == 5
    assert dataset['grouping']['groups']['by'] == ['column']


def _near_duplicate_tree(root):
    """Six originals, each with its six kinds of copies in other files (some in the other
    class), twelve singles, and eight blank images (one hash: a cluster to cap)."""
    (root / 'a').mkdir(parents=True)
    (root / 'b').mkdir()
    clusters = []
    for i in range(6):
        image = imgs.photo_like(i)
        (root / 'a' / f'orig_{i}.jpg').write_bytes(imgs.encode(image, quality=90))
        members = [f'a/orig_{i}.jpg']
        for j, (kind, data) in enumerate(imgs.near_duplicates_of(image).items()):
            name = f'{"ab"[j % 2]}/{kind}_{i}.jpg'
            (root / name).write_bytes(data)
            members.append(name)
        clusters.append(sorted(members))
    for i in range(12):
        (root / 'ab'[i % 2] / f'single_{i}.jpg').write_bytes(imgs.encode(imgs.photo_like(100 + i)))
    for i in range(8):
        blank = Image.new('RGB', (40, 30), (10 * i, 10 * i, 10 * i))
        (root / 'b' / f'blank_{i}.png').write_bytes(imgs.encode(blank, 'PNG'))
    return clusters


def test_near_duplicates_are_clustered_listed_and_kept_in_one_split(tmp_path):
    clusters = _near_duplicate_tree(tmp_path / 'in')
    cluster_of = {key: i for i, members in enumerate(clusters) for key in members}
    plain = _built(tmp_path / 'a', '--input', str(tmp_path / 'in'))
    assert any(len(s) > 1 for s in _splits_of(plain, cluster_of.get).values())
    assert not (tmp_path / 'a' / 'near_duplicates.jsonl').exists()
    out = tmp_path / 'b'
    argv = ['--input', str(tmp_path / 'in'), '--output', str(out), '--near-duplicates']
    dataset = _run(*argv, '--max-cluster-size', '7')
    found = _records(out)
    assert len(found) == 62  # every image written once, with its label
    assert all(len(s) == 1 for s in _splits_of(found, cluster_of.get).values())
    rows = [json.loads(line) for line in (out / 'near_duplicates.jsonl').read_text().splitlines()]
    base = str(tmp_path / 'in') + '/'
    listed = [sorted(i['path'][len(base) :] for i in row['images']) for row in rows]
    assert sorted(m for m, r in zip(listed, rows) if not r['capped']) == sorted(clusters)
    (capped,) = [row for row in rows if row['capped']]
    assert capped['size'] == 8 and all('blank_' in i['path'] for i in capped['images'])
    assert all(d <= 8 for row in rows for _, _, d in row['pairs'])
    near = dataset['grouping']['near_duplicates']
    assert (near['clusters'], near['capped'], near['leaked']) == (7, 1, near['leaked'])
    assert near['leaked'] <= 1  # only the capped cluster may cross splits
    assert all(info['leaked_clusters'] <= near['leaked'] for info in dataset['splits'].values())


def test_splits_from_keeps_every_earlier_image_in_its_split_as_the_dataset_grows(tmp_path):
    root = tmp_path / 'in'
    _grouped_tree(root, per_class=20)
    keys = sorted(str(p.relative_to(root)) for p in root.rglob('*.*'))
    later = tmp_path / 'later'
    for key in keys[::5]:  # a fifth arrives later
        (later / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).rename(later / key)
    pattern = ('--group-pattern', r'/(p\d)_')
    _run('--input', str(root), '--output', str(tmp_path / 'v1'), *pattern)
    first = _records(tmp_path / 'v1')
    for path in later.rglob('*.*'):
        path.rename(root / path.relative_to(later))
    renamed = sorted(first)[1]
    new_name = str(pathlib.PurePosixPath(renamed).with_stem('renamed'))
    (root / renamed).rename(root / new_name)
    removed = sorted(first)[2]
    (root / removed).unlink()
    fresh = _built(tmp_path / 'fresh', '--input', str(root), *pattern)
    assert any(fresh[k][0] != first[k][0] for k in first if k in fresh)  # a plain rebuild moves
    dataset = _run(
        '--input',
        str(root),
        '--output',
        str(tmp_path / 'v2'),
        *pattern,
        '--splits-from',
        str(tmp_path / 'v1'),
    )
    second = _records(tmp_path / 'v2')
    assert all(second[k][0] == first[k][0] for k in first if k in second)
    assert second[new_name][0] == first[renamed][0]  # matched by its content
    patient = lambda key: key.split('/')[1].split('_')[0] if '_' in key else None  # noqa: E731
    assert all(len(s) == 1 for s in _splits_of(second, patient).values())
    previous = dataset['grouping']['previous']
    assert previous == {
        'build': str(tmp_path / 'v1'),
        'kept': len(first) - 1,
        'new': len(second) - len(first) + 1,
        'removed': 1,
        'moved': 0,
    }


@pytest.mark.slow
def test_verify_recounts_groups_clusters_and_leaks_from_the_records(tmp_path):
    _near_duplicate_tree(tmp_path / 'in')
    out = tmp_path / 'out'
    argv = ['--input', str(tmp_path / 'in'), '--output', str(out), '--near-duplicates']
    _run(*argv, '--group-pattern', r'/([a-z]+)_')
    assert verify.verify(str(out)) == 0
    dataset_path = out / 'dataset.json'
    tampered = json.loads(dataset_path.read_text())
    tampered['splits']['test']['groups'] += 1
    dataset_path.write_text(json.dumps(tampered))
    assert verify.verify(str(out)) == 1
    tampered['splits']['test']['groups'] -= 1
    dataset_path.write_text(json.dumps(tampered))
    listed = out / 'near_duplicates.jsonl'
    rows = [json.loads(line) for line in listed.read_text().splitlines()]
    rows[0]['images'].pop()  # a cluster said smaller than it is
    listed.write_text(''.join(json.dumps(row) + '\n' for row in rows))
    assert verify.verify(str(out)) >= 1


def test_a_multi_label_build_keeps_groups_whole(tmp_path):
    paths = imgs.write_tree(tmp_path / 'in', 15, ('a', 'b'))
    label_sets = ['x', 'x y', 'y', 'z', 'x z', '']
    with open(tmp_path / 'm.csv', 'w', newline='', encoding='utf-8') as f:
        writer = csv.writer(f)
        writer.writerow(['path', 'labels', 'group'])
        for i, path in enumerate(paths):
            writer.writerow([str(path), label_sets[i % 6], f'g{i % 7}'])
    argv = ['--input', str(tmp_path / 'm.csv'), '--output', str(tmp_path / 'out')]
    dataset = _run(*argv, '--no-analyze')  # the analysis of label lists loads TensorFlow
    by_group = collections.defaultdict(set)
    for split, group in _records(tmp_path / 'out').values():
        by_group[group].add(split)
    assert len(by_group) == 7 and all(len(splits) == 1 for splits in by_group.values())
    assert dataset['multi_label'] and dataset['grouping']['groups']['leaked'] == 0
    assert {split for splits in by_group.values() for split in splits} == {'train', 'val', 'test'}


def test_a_group_name_too_long_to_be_one_is_rejected_with_its_reason(tmp_path):
    paths = imgs.write_tree(tmp_path / 'in', 3, ('cat', 'dog'))
    rows = [(str(p), p.parent.name, '', f'g{i % 2}') for i, p in enumerate(paths)]
    rows[1] = (*rows[1][:3], 'x' * 2000)  # a whole row pasted into one cell
    _manifest(tmp_path / 'm.csv', rows)
    dataset = _run('--input', str(tmp_path / 'm.csv'), '--output', str(tmp_path / 'out'))
    assert dataset['counts']['rejected_by_reason'] == {'invalid_group': 1}
    assert dataset['counts']['written'] == 5


def test_a_manifest_that_moves_an_earlier_image_stops_the_build_in_one_line(tmp_path, caplog):
    paths = imgs.write_tree(tmp_path / 'in', 6, ('cat', 'dog'))
    _manifest(tmp_path / 'v1.csv', [(str(p), p.parent.name, '', '') for p in paths])
    _run('--input', str(tmp_path / 'v1.csv'), '--output', str(tmp_path / 'v1'))
    first = _records(tmp_path / 'v1')
    key, (split, _) = sorted(first.items())[0]
    other = next(name for name in ('train', 'val', 'test') if name != split)
    rows = [(str(p), p.parent.name, '', '') for p in paths]
    rows = [(*row[:2], other if row[0].endswith(key) else '', '') for row in rows]
    _manifest(tmp_path / 'v2.csv', rows)
    argv = ['--input', str(tmp_path / 'v2.csv'), '--output', str(tmp_path / 'v2')]
    argv += ['--splits', SPLITS, '--splits-from', str(tmp_path / 'v1')]
    assert launcher.main(['--direct_running_mode=in_memory', *argv]) != 0
    assert f'{key} was in split {split} of --splits-from' in caplog.text
    assert not (tmp_path / 'v2' / '_SUCCESS').exists()
