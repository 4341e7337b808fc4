"""Splits you can trust: groups, near-duplicate clusters and an earlier build's splits never
leak between splits (pipelines/assignment/grouping.py), said in dataset.json and checked by
verify. Each end-to-end test also shows that the same inputs leak without the feature."""

import collections
import csv
import json
import pathlib

import numpy as np
import pytest
from PIL import Image
from PIL import ImageDraw
from PIL import ImageEnhance
from PIL import ImageFilter

from imageshards import features
from imageshards import file_names
from imageshards import records
from imageshards import storage
from imageshards.cli import verify
from pipelines import build
from pipelines.assignment import clusters as cluster_lib
from pipelines.assignment import neighbours
from pipelines.assignment import splits as split_lib
from pipelines.assignment.placement import Unit
from pipelines.assignment.placement import place_units
from pipelines.core import blocks
from pipelines.core.blocks import ImageMeta
from pipelines.core.groups import group_of
from pipelines.inputs.listing import input_base
from pipelines.validation import perceptual

import images_for_tests as imgs

SPLITS = 'train=0.6,val=0.2,test=0.2'


def _run(*args):
    return build.run(['--direct_running_mode=in_memory', '--splits', SPLITS, *args])


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


def _field(index, size=(96, 128)):
    """A smooth RGB image with structure at every scale, its detail fainter the finer it is (as
    in photographs), distinct per index: what a perceptual hash is made for."""
    rng = np.random.default_rng([index, 7])
    field = np.zeros((*size, 3))
    for cells, weight in ((3, 1.0), (6, 0.5), (12, 0.25), (24, 0.125)):
        coarse = rng.uniform(-1, 1, (cells, cells * 4 // 3, 3)).astype(np.float32)
        layers = [Image.fromarray(coarse[..., c]) for c in range(3)]
        resized = [
            np.asarray(layer.resize(size[::-1], Image.Resampling.BICUBIC)) for layer in layers
        ]
        field += weight * np.stack(resized, axis=-1)
    return Image.fromarray(np.clip(128 + 45 * field, 0, 255).astype(np.uint8))


def _copies(image):
    """Near-duplicates of `image` the ways they arise: {kind: JPEG bytes}."""
    width, height = image.size
    written = image.copy()
    ImageDraw.Draw(written).text((6, height - 16), 'v2', fill=(255, 255, 255))
    return {
        'reencoded': imgs.encode(image, quality=55),
        'downscaled': imgs.encode(image.resize((width // 2, height // 2)), quality=90),
        'border_cropped': imgs.encode(image.crop((3, 2, width - 3, height - 2)), quality=90),
        'brightened': imgs.encode(ImageEnhance.Brightness(image).enhance(1.2), quality=90),
        'blurred': imgs.encode(image.filter(ImageFilter.GaussianBlur(1.5)), quality=90),
        'text': imgs.encode(written, quality=90),
    }


# -- the perceptual hash and the banded search ---------------------------------------------------


def test_the_hash_keeps_planted_copies_close_and_distinct_images_apart():
    originals = [_field(i) for i in range(12)]
    hashes = [perceptual.perceptual_hash(imgs.encode(image, quality=90)) for image in originals]
    for image, original in zip(originals, hashes):
        for kind, data in _copies(image).items():
            assert perceptual.hamming(perceptual.perceptual_hash(data), original) <= 8, kind
    apart = [perceptual.hamming(a, b) for i, a in enumerate(hashes) for b in hashes[i + 1 :]]
    assert min(apart) > 12


def test_the_hash_of_a_jpeg_drafted_small_equals_the_hash_of_its_png_twin_within_a_few_bits():
    image = _field(3, size=(480, 640))
    jpeg = perceptual.perceptual_hash(imgs.encode(image, quality=95))
    png = perceptual.perceptual_hash(imgs.encode(image, 'PNG'))
    assert perceptual.hamming(jpeg, png) <= 4


@pytest.mark.parametrize('distance', [0, 3, 8, 12])
def test_bands_find_every_pair_within_the_distance(distance):
    rng = np.random.default_rng(distance)
    hashes = rng.integers(0, 2**63, 400, dtype=np.int64).astype(np.uint64) * np.uint64(2)
    for i in range(0, 400, 5):  # plant a neighbour of every fifth hash, 1..distance+2 bits away
        flips = rng.choice(64, int(rng.integers(1, distance + 3)), replace=False)
        hashes[i + 1] = hashes[i] ^ np.uint64(sum(1 << int(b) for b in flips))
        hashes[i + 2] = hashes[i] if i % 10 == 0 else hashes[i + 2]  # byte copies, blank images
    ids = np.arange(len(hashes), dtype=np.int64)
    edges = []
    for shift, width in neighbours.band_layout(distance):
        values = neighbours.band_values(hashes, shift, width)
        for value in np.unique(values):
            picked = np.flatnonzero(values == value)
            if len(picked) > 1:
                edges += neighbours.close_pairs(hashes[picked], ids[picked], distance)
    packed = np.array(edges, dtype=neighbours._EDGE).tobytes()  # pylint: disable=protected-access
    found = cluster_lib.make_clusters([packed], len(hashes), max_cluster_size=len(hashes))
    want = cluster_lib.make_clusters([_brute_force(hashes, distance)], len(hashes), len(hashes))
    assert found.cluster_of == want.cluster_of
    assert want.cluster_of  # the planted pairs within the distance are there to find


def _brute_force(hashes, distance):
    pairs = [
        (i, j, (int(hashes[i]) ^ int(hashes[j])).bit_count())
        for i in range(len(hashes))
        for j in range(i + 1, len(hashes))
        if (int(hashes[i]) ^ int(hashes[j])).bit_count() <= distance
    ]
    return np.array(pairs, dtype=neighbours._EDGE).tobytes()  # pylint: disable=protected-access


def test_a_cluster_over_the_cap_is_capped_and_kept_by_no_split():
    edges = [(0, i, 0) for i in range(1, 30)] + [(40, 41, 3)]
    packed = np.array(edges, dtype=neighbours._EDGE).tobytes()  # pylint: disable=protected-access
    found = cluster_lib.make_clusters([packed], 1000, max_cluster_size=20)
    assert found.sizes == {0: 30, 40: 2} and found.capped == {0}
    assert found.kept(5) == -1 and found.kept(41) == 40


# -- metadata, groups, placement -----------------------------------------------------------------


def test_a_group_and_a_hash_survive_packing_and_an_image_without_them_packs_as_before():
    plain = ImageMeta(3, 'a/x.jpg', 1, '', 'jpeg', 10, 12, 3, b'd' * 32, 100, b'', 7, False)
    both = plain._replace(group='patient ü 7', phash=2**64 - 1)
    assert blocks.unpack(blocks.pack([plain, both])) == [plain, both]
    assert len(blocks.pack([both])) > len(blocks.pack([plain]))
    assert blocks.pack([plain._replace(group='', phash=-1)]) == blocks.pack([plain])


def test_a_row_group_wins_over_the_pattern_and_the_named_group_over_the_first():
    pattern = r'(scan)_(?P<group>p\d+)_'
    assert group_of('cat/scan_p042_01.jpg', '', pattern) == 'p042'
    assert group_of('cat/scan_p042_01.jpg', 'own', pattern) == 'own'
    assert group_of('cat/other.jpg', '', pattern) == ''
    assert group_of('clinic/p7/a.jpg', '', r'^[^/]+/([^/]+)/') == 'p7'


def test_whole_groups_are_placed_near_their_shares_rare_labels_first():
    sizes = [1, 1, 2, 3, 5, 8, 13, 1, 2, 4, 6, 1, 1, 3, 2, 9, 1, 1, 2, 4]
    units = [Unit(f'g{i}', n, {i % 3: n}, '') for i, n in enumerate(sizes)]
    units.append(Unit('rare', 3, {'rare': 3}, ''))
    placed = place_units(units, (('train', 0.6), ('val', 0.2), ('test', 0.2)), seed=1)
    assert placed == place_units(units, (('train', 0.6), ('val', 0.2), ('test', 0.2)), seed=1)
    totals = collections.Counter()
    for unit in units:
        totals[placed[unit.key]] += unit.size
    whole = sum(totals.values())
    assert abs(totals['train'] - 0.6 * whole) <= 13  # within the largest group
    assert set(placed.values()) == {'train', 'val', 'test'}


def test_fill_brings_each_class_with_what_is_placed_to_its_shares():
    placed = [[0, 10, 0], [6, 0, 0]]  # class 0: 10 already in val; class 1: 6 in train
    rows = split_lib.fill_split_counts([40, 14], placed, [0.6, 0.2, 0.2])
    assert [sum(row) for row in rows] == [40, 14]
    assert rows[0] == [30, 0, 10]  # val holds its 10 of 50 already
    assert rows[1][0] == 6 and abs(rows[1][1] - rows[1][2]) <= 1  # train 12 of 20


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
    assert build.main(['--direct_running_mode=in_memory', *argv]) != 0
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
        image = _field(i)
        (root / 'a' / f'orig_{i}.jpg').write_bytes(imgs.encode(image, quality=90))
        members = [f'a/orig_{i}.jpg']
        for j, (kind, data) in enumerate(_copies(image).items()):
            name = f'{"ab"[j % 2]}/{kind}_{i}.jpg'
            (root / name).write_bytes(data)
            members.append(name)
        clusters.append(sorted(members))
    for i in range(12):
        (root / 'ab'[i % 2] / f'single_{i}.jpg').write_bytes(imgs.encode(_field(100 + i)))
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
