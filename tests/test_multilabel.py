"""Multi-label builds: the manifest forms (a `labels` CSV column, JSONL lists, Vertex AI's import
files), rows of one image merged, label sets stratified over splits and shards, records that
TF Model Garden's and TFDS's multi-label readers read as they are, and verify."""

import collections
import json
import random

import numpy as np
import pytest

from imageshards import records
from imageshards import stratification
from imageshards.kinds import example_bytes
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards.shard_formats import tfrecord
from imageshards_cli import verify as verify_lib
from imageshards_cli import verify_records
from pipelines import launcher
from pipelines.assignment import plan as plan_lib
from pipelines.assignment import splits as split_lib
from pipelines.inputs import listing

import images_for_tests as imgs
from beam_helpers import built
from build_commands import build_flags

TAGS = ('agriculture', 'clear', 'cloudy', 'haze', 'primary', 'road', 'water')


def _images(root, count):
    """Writes `count` small JPEGs under root/img/; returns their names."""
    (root / 'img').mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(count):
        names.append(f'img/{i:03d}.jpg')
        (root / names[-1]).write_bytes(imgs.jpeg(i, i % 5, size=(12, 16)))
    return names


def _tags(i):
    """A skewed, seeded label set: `clear` and `primary` common, `road` and `haze` rare, and
    some images with no label."""
    rng = random.Random(i)
    weights = (0.35, 0.6, 0.15, 0.05, 0.7, 0.08, 0.2)
    return tuple(tag for tag, w in zip(TAGS, weights) if rng.random() < w)


@pytest.fixture(scope='module')
def planet(tmp_path_factory):
    """A Kaggle-Planet-like CSV of 90 images: `labels` cells of space-separated tags, and a
    `label/sky` level that is multi-valued on some rows."""
    root = tmp_path_factory.mktemp('planet')
    rows = ['path,labels,label/sky']
    for i, name in enumerate(_images(root, 90)):
        sky = ' '.join(t for t in _tags(i) if t in ('clear', 'cloudy', 'haze'))
        rows.append(f'{name},{" ".join(_tags(i))},{sky}')
    (root / 'planet.csv').write_text('\n'.join(rows) + '\n')
    return root / 'planet.csv'


def _build(manifest, out, *flags):
    splits = 'train=0.8,val=0.1,test=0.1'
    return launcher.run(
        build_flags(manifest, out, *flags, splits=splits, num_shards=2, seed=3, in_memory=True)
    )


@pytest.fixture(scope='module')
def planet_build(planet, tmp_path_factory):
    out = tmp_path_factory.mktemp('planet-build') / 'out'
    return out, _build(planet, out, '--no-analyze')


def _records(out, dataset, split):
    example = example_bytes.example_class()
    found = []
    for shard in dataset['splits'][split]['shards']:
        with open(out / shard['path'], 'rb') as f:
            for record in tfrecord.read_records(f):
                found.append(records.example_values(example.FromString(record)))
    return found


def test_a_labels_column_lists_each_images_label_set(tmp_path):
    _images(tmp_path, 4)
    (tmp_path / 'm.csv').write_text(
        'path,labels,split\nimg/000.jpg,water  clear,\nimg/001.jpg,,test\n'
        'img/002.jpg,clear\timg,\nimg/003.jpg,water,\n'
    )
    entries = listing.list_inputs(str(tmp_path / 'm.csv')).entries
    assert [entry.label for entry in entries] == [
        ('clear', 'water'),
        (),  # no label: valid in a multi-label build
        ('clear', 'img'),
        ('water',),
    ]
    assert entries[1].split == 'test' and not any(entry.reject for entry in entries)
    (tmp_path / 's.csv').write_text('path,labels\nimg/000.jpg,"a b;c"\nimg/001.jpg,x;;y\n')
    entries = listing.list_inputs(str(tmp_path / 's.csv'), label_separator=';').entries
    assert entries[0].label == ('a b', 'c')
    assert entries[1].reject == 'empty_label' and "';'" in entries[1].detail


def test_jsonl_rows_with_label_lists_and_rows_of_one_image_merged(tmp_path):
    _images(tmp_path, 3)
    rows = [
        {'path': 'img/000.jpg', 'labels': ['b', 'a'], 'label/kind': ['pet']},
        {'path': 'img/001.jpg', 'labels': []},
        {'path': 'img/000.jpg', 'labels': ['c'], 'label/kind': ['wild']},
        {'path': 'img/002.jpg', 'label': 'x'},
        {'path': 'img/002.jpg', 'labels': 'a b'},
    ]
    (tmp_path / 'm.jsonl').write_text('\n'.join(json.dumps(row) for row in rows) + '\n')
    found = listing.list_inputs(str(tmp_path / 'm.jsonl'))
    first, empty, merged, mixed, not_a_list = found.entries
    assert first.label == ('a', 'b', 'c') and first.levels == {'kind': ('pet', 'wild')}
    assert empty.label == () and not empty.reject
    assert merged.reject == 'merged_row' and 'line 1' in merged.detail
    assert mixed.reject == 'mixed_label_forms'
    assert not_a_list.reject == 'malformed_row' and 'arrays' in not_a_list.detail
    assert found.labels == ['a', 'b', 'c']


def test_a_manifest_cannot_be_single_and_multi_label_at_once(tmp_path):
    (tmp_path / 'm.csv').write_text('path,label,labels\nx.jpg,a,a b\n')
    with pytest.raises(ValueError, match='both a label and a labels column'):
        listing.list_inputs(str(tmp_path / 'm.csv'))


def test_vertex_ai_import_files_build_as_they_are(tmp_path):
    _images(tmp_path, 5)
    (tmp_path / 'import.csv').write_text(
        'training,img/000.jpg,daisy,rose\nTEST,img/001.jpg,tulip\nimg/002.jpg\n'
        'UNASSIGNED,img/003.jpg,daisy,\nVALIDATION,img/000.jpg,lily\n'
    )
    entries = listing.list_inputs(str(tmp_path / 'import.csv')).entries
    assert [(e.key, e.label, e.split, e.reject) for e in entries] == [
        ('img/000.jpg', ('daisy', 'lily', 'rose'), 'train', ''),  # its later row merged in
        ('img/001.jpg', ('tulip',), 'test', ''),
        ('img/002.jpg', (), '', ''),
        ('img/003.jpg', ('daisy',), '', ''),
        ('img/000.jpg', ('lily',), 'val', 'merged_row'),
    ]
    lines = [
        {
            'imageGcsUri': 'img/004.jpg',
            'classificationAnnotations': [{'displayName': 'b'}, {'displayName': 'a'}],
            'dataItemResourceLabels': {'aiplatform.googleapis.com/ml_use': 'validation'},
        },
        {'imageGcsUri': 'img/001.jpg', 'classificationAnnotation': {'displayName': 'c'}},
        {'imageGcsUri': 'img/002.jpg', 'dataItemResourceLabels': {'x': 'y'}, 'extra': 1},
    ]
    (tmp_path / 'import.jsonl').write_text('\n'.join(json.dumps(line) for line in lines))
    entries = listing.list_inputs(str(tmp_path / 'import.jsonl')).entries
    assert [(e.key, e.label, e.split, e.reject) for e in entries[:2]] == [
        ('img/004.jpg', ('a', 'b'), 'val', ''),
        ('img/001.jpg', ('c',), '', ''),
    ]
    assert entries[2].reject == 'malformed_row'


def _skewed_sets(count, labels, seed):
    rng = np.random.default_rng(seed)
    has = rng.random((count, labels)) < 0.4 / (np.arange(1, labels + 1) ** 1.2)
    return [tuple(int(i) for i in np.nonzero(row)[0]) for row in has]


def test_iterative_stratification_keeps_every_labels_share_far_better_than_chance():
    sets = _skewed_sets(6000, 30, seed=1)
    counts = collections.Counter(sets)
    label_sets, sizes = list(counts), list(counts.values())
    fractions = [0.8, 0.1, 0.1]
    rows = split_lib.iterative_split_counts(label_sets, sizes, fractions)
    assert [sum(row) for row in rows] == sizes  # every image somewhere
    assert rows == split_lib.iterative_split_counts(label_sets, sizes, fractions)  # determined
    parts = [[0, collections.Counter()] for _ in fractions]
    for labels, row in zip(label_sets, rows):
        for part, n in zip(parts, row):
            part[0] += n
            part[1].update({label: n for label in labels})
    assert [part[0] for part in parts] == [4800, 600, 600]  # split sizes as asked
    ours = stratification.measures([tuple(p) for p in parts], [4800, 600, 600])
    rng = random.Random(0)
    shuffled = [labels for labels in sets]
    rng.shuffle(shuffled)
    chance = stratification.measures(
        [
            (n, collections.Counter(label for labels in part for label in labels))
            for part in (shuffled[:4800], shuffled[4800:5400], shuffled[5400:])
            for n in [len(part)]
        ]
    )
    assert ours['label_distribution'] < chance['label_distribution'] / 5
    assert ours['labels_missing'] == 0 and ours['examples_distribution'] == 0


def test_shards_of_a_split_hold_every_label_evenly_and_differ_by_one_record_at_most():
    counts = collections.Counter(_skewed_sets(3000, 20, seed=2))
    plan = plan_lib.make_plan(
        {('', labels, 0): (n, n) for labels, n in counts.items()},
        [('train', 1.0)],
        num_shards=7,
        multi_label=True,
    )
    shards = [[0, collections.Counter()] for _ in range(7)]
    for labels, n in counts.items():
        for _, shard, start, end in plan.runs('', labels, 0, n):
            shards[shard][0] += end - start
            shards[shard][1].update({label: end - start for label in labels})
    sizes = [records for records, _ in shards]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 3000
    for label in range(20):
        held = [counts_[label] for _, counts_ in shards]
        assert max(held) - min(held) <= 2, (label, held)


def test_records_are_what_model_gardens_and_tfds_multi_label_readers_read(planet_build, tf):
    out, dataset = planet_build
    assert dataset['multi_label'] is True and dataset['multi_label_levels'] == ['sky']
    train = _records(out, dataset, 'train')
    # TF Model Garden's multi-label classification decoder: VarLenFeature on image/class/label,
    # one-hot summed (here tf.sparse.to_indicator, what it amounts to).
    shard = out / dataset['splits']['train']['shards'][0]['path']
    serialized = list(tf.data.TFRecordDataset(str(shard)).as_numpy_iterator())
    parsed = tf.io.parse_example(serialized, {'image/class/label': tf.io.VarLenFeature(tf.int64)})
    multi_hot = tf.sparse.to_indicator(parsed['image/class/label'], len(dataset['labels']))
    for row, values in zip(multi_hot.numpy(), train):
        ids = values[features.LABEL][1]
        assert ids == sorted(set(ids)) and list(np.nonzero(row)[0]) == ids
        names = [name.decode() for name in values[features.LABEL_TEXT][1]]
        assert names == [dataset['labels'][i] for i in ids]
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

    builder = tfds.builder_from_directory(str(out))
    assert isinstance(builder.info.features[features.LABEL], tfds.features.Sequence)
    first = next(iter(builder.as_dataset(split='train').take(1)))
    assert first[features.LABEL].numpy().tolist() == train[0][features.LABEL][1]
    assert first['image/encoded'].shape == (12, 16, 3)


def test_dataset_json_counts_label_sets_and_states_how_even_splits_and_shards_are(planet_build):
    out, dataset = planet_build
    manifest_sets = [_tags(i) for i in range(90)]
    occurrences = collections.Counter(tag for tags in manifest_sets for tag in tags)
    counted = collections.Counter()
    for info in dataset['splits'].values():
        counted.update(info['class_counts'])
    assert counted == occurrences  # class_counts count label occurrences
    assert dataset['counts']['unlabeled'] == sum(not tags for tags in manifest_sets)
    assert dataset['label_cardinality'] == round(sum(occurrences.values()) / 90, 6)
    for measures in [dataset['stratification']] + [
        info['stratification'] for info in dataset['splits'].values()
    ]:
        assert set(measures) == {'label_distribution', 'labels_missing', 'examples_distribution'}
    assert dataset['stratification']['examples_distribution'] < 1
    sizes = [info['num_records'] for info in dataset['splits'].values()]
    assert all(abs(n - 90 * f) <= 1 for n, f in zip(sizes, (0.8, 0.1, 0.1))), sizes
    for info in dataset['splits'].values():  # shards within one record of each other
        sizes = [shard['num_records'] for shard in info['shards']]
        assert max(sizes) - min(sizes) <= 1
    problems = verify_lib.verify(str(out))
    assert problems == 0


@pytest.mark.slow  # worker processes, as test_build.py's test of every running mode
def test_the_same_build_on_every_runner_and_worker_count(planet, planet_build, tmp_path):
    out, _ = planet_build
    other = tmp_path / 'out'
    launcher.run(
        ['--input', str(planet), '--output', str(other), '--splits', 'train=0.8,val=0.1,test=0.1']
        + ['--num-shards', '2', '--seed', '3', '--no-analyze']
        + ['--direct_running_mode=multi_processing', '--direct_num_workers=2']
    )
    ours, theirs = built(out), built(other)
    ours[0].pop('input'), theirs[0].pop('input')
    assert ours == theirs


SKY_KIND = kinds.Classification(features.EXAMPLES, levels=('sky',), multi_label=True)


def test_verify_finds_a_label_list_that_does_not_name_its_texts(planet_build):
    _, dataset = planet_build
    problems = _Problems()
    checker = verify_records.RecordChecker(dataset, problems)
    for label, text, expected in (
        ((2, 1), ('cloudy', 'clear'), 'not sorted and distinct'),
        ((0, 0), ('agriculture', 'agriculture'), 'not sorted and distinct'),
        ((0, 99), ('agriculture', 'x'), 'not all indices'),
        ((0, 1), ('agriculture', 'x'), 'do not name their texts'),
    ):
        record = example_bytes.encode_example(SKY_KIND, _values(label, text))
        found = checker.check('x', 0, record).label
        assert found is None and expected in problems.found[-1]
    record = example_bytes.encode_example(SKY_KIND, _values((0, 1), ('agriculture', 'clear')))
    assert checker.check('x', 0, record).label == ('agriculture', 'clear')


class _Problems:
    def __init__(self):
        self.found = []

    def add(self, where, message, offset=None):
        del where, offset
        self.found.append(message)


def _values(label, text):
    return {
        features.ENCODED: b'x',
        features.FORMAT: 'jpeg',
        features.HEIGHT: 1,
        features.WIDTH: 1,
        features.CHANNELS: 3,
        features.LABEL: label,
        features.LABEL_TEXT: text,
        features.FILENAME: 'f',
        features.SHA256: 's',
        features.ID: 0,
        'image/label/sky': (),
        'image/label/sky/text': (),
    }


def test_a_plan_too_large_to_stratify_every_label_spreads_each_label_set_instead(monkeypatch):
    monkeypatch.setattr(plan_lib, 'MAX_STRATIFIED_CELLS', 10)
    counts = collections.Counter(_skewed_sets(3000, 20, seed=2))
    plan = plan_lib.make_plan(
        {('', labels, 0): (n, n) for labels, n in counts.items()},
        [('train', 1.0)],
        num_shards=7,
        multi_label=True,
    )
    assert not plan.rows
    sizes = collections.Counter()
    for labels, n in counts.items():
        per_shard = collections.Counter()
        for _, shard, start, end in plan.runs('', labels, 0, n):
            per_shard[shard] += end - start
            sizes[shard] += end - start
        held = [per_shard[shard] for shard in range(7)]
        assert max(held) - min(held) <= 1, (labels, held)  # each set within one of its share
    assert max(sizes.values()) - min(sizes.values()) <= 1 and sum(sizes.values()) == 3000


def test_levelling_gives_each_unit_where_one_at_a_time_would():
    rng = random.Random(5)
    for _ in range(500):
        k = rng.randint(1, 6)
        scores = [rng.uniform(-5, 50) for _ in range(k)]
        ties = [rng.uniform(0, 30) for _ in range(k)]
        units = rng.randint(0, 80)
        left, tie, expected = list(scores), list(ties), [0] * k
        for _ in range(units):  # the rule itself: one unit at a time
            j = max(range(k), key=lambda j: (left[j], tie[j], -j))
            expected[j] += 1
            left[j] -= 1
            tie[j] -= 1
        assert split_lib._level(scores, ties, units) == expected  # pylint: disable=protected-access
