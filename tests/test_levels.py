"""Label levels end to end: manifest columns and tree folders, vocabularies, missing values
(rejected with a reason, or kept with id -1), per-shard counts, verify, inspect and report, and a
model with one head per level that learns both, resumes and serves both from raw bytes."""

import collections
import json

import numpy as np
import pytest

from imageshards import dataset_facts
from imageshards import features
from imageshards import records
from imageshards import tfrecord
from imageshards_cli import inspect as inspect_lib
from imageshards_cli import verify as verify_lib
from pipelines import launcher
from pipelines.inputs import listing

import images_for_tests as imgs

LEVELS = ('family', 'species')
# Manifest rows (0-based, after the header) whose value of a level is left empty.
MISSING = {(3, 'family'), (40, 'species'), (41, 'family'), (41, 'species')}


def _build(source, out, *flags):
    return launcher.run(
        [
            '--direct_running_mode=in_memory',
            '--input',
            str(source),
            '--output',
            str(out),
            '--splits',
            'train=0.75,val=0.25',
            '--num-shards',
            '2',
            '--seed',
            '4',
            *flags,
        ]
    )


@pytest.fixture(scope='module')
def manifest(tmp_path_factory):
    return imgs.write_level_manifest(tmp_path_factory.mktemp('levels'), 32, missing=MISSING)


@pytest.fixture(scope='module')
def strict_build(manifest, tmp_path_factory):
    out = tmp_path_factory.mktemp('strict') / 'out'
    return out, _build(manifest, out)


@pytest.fixture(scope='module')
def lenient_build(manifest, tmp_path_factory):
    out = tmp_path_factory.mktemp('lenient') / 'out'
    return out, _build(manifest, out, '--allow-missing-levels')


def _records(out, dataset):
    """{split: [{key: value}]} of every record, shard by shard."""
    found = collections.defaultdict(list)
    for split, info in dataset['splits'].items():
        for shard in info['shards']:
            with open(out / shard['path'], 'rb') as f:
                for record in tfrecord.read_records(f):
                    values = records.example_values(records.parse_example(record))
                    found[split].append(
                        {key: items[0] for key, (_, items) in values.items()} | {'shard': shard}
                    )
    return found


def test_missing_level_values_are_rejected_with_their_reason(strict_build):
    out, dataset = strict_build
    rejected = [json.loads(line) for line in (out / 'rejected.jsonl').read_text().splitlines()]
    assert sorted(row['id'] for row in rejected) == [3, 40, 41]
    assert {row['reason'] for row in rejected} == {'missing_label_level'}
    by_id = {row['id']: row['detail'] for row in rejected}
    assert 'family' in by_id[3] and 'species' not in by_id[3].split('(')[0]
    assert '--allow-missing-levels' in by_id[40]
    counts = dataset['counts']
    assert counts['inputs'] == 4 * 32 == counts['written'] + counts['rejected']
    assert counts['rejected_by_reason'] == {'missing_label_level': 3}


def test_vocabularies_features_and_per_shard_counts(strict_build):
    out, dataset = strict_build
    assert dataset['label_levels'] == {
        'family': ['birds', 'fish'],
        'species': ['carp', 'finch', 'sparrow', 'trout'],
    }
    assert dataset['labels'] == ['carp', 'finch', 'sparrow', 'trout']  # the label column
    assert dataset['features'] == features.record_schema('examples', LEVELS)
    for split, found in _records(out, dataset).items():
        per_shard = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
        for record in found:
            species = record['image/label/species/text'].decode()
            family, _ = imgs.SPECIES[species]
            assert record['image/class/text'].decode() == species
            assert record['image/label/family/text'].decode() == family
            for level in LEVELS:
                names = dataset['label_levels'][level]
                text = record[features.level_text(level)].decode()
                assert names[record[features.level_label(level)]] == text
                per_shard[record['shard']['path']][level][text] += 1
        info = dataset['splits'][split]
        for shard in info['shards']:
            assert shard['level_counts'] == {
                level: dict(per_shard[shard['path']][level]) for level in LEVELS
            }
            assert shard['level_missing'] == {'family': 0, 'species': 0}
        # Stratified by the primary label: species within one of their share in every shard.
        for shard in info['shards']:
            for species, n in info['class_counts'].items():
                share = n * shard['num_records'] / info['num_records']
                assert abs(shard['class_counts'].get(species, 0) - share) <= 1
        summed = collections.Counter()
        for shard in info['shards']:
            summed.update(shard['level_counts']['family'])
        assert info['level_counts']['family'] == dict(summed)
    assert verify_lib.verify(str(out)) == 0


def test_allow_missing_levels_keeps_the_images_with_id_minus_one(lenient_build, capsys):
    out, dataset = lenient_build
    assert dataset['counts']['rejected'] == 0 and dataset['allow_missing_levels'] is True
    everything = [r for found in _records(out, dataset).values() for r in found]
    missing = {
        (r['image/id'], level)
        for r in everything
        for level in LEVELS
        if r[features.level_label(level)] == features.MISSING_LEVEL
    }
    assert missing == MISSING
    for r in everything:
        for level in LEVELS:
            if r[features.level_label(level)] == -1:
                assert r[features.level_text(level)] == b''
    missing_counted = collections.Counter()
    for info in dataset['splits'].values():
        missing_counted.update(info['level_missing'])
        for shard in info['shards']:
            for level in LEVELS:
                counted = sum(shard['level_counts'][level].values())
                assert counted + shard['level_missing'][level] == shard['num_records']
    assert missing_counted == {'family': 2, 'species': 2}
    assert verify_lib.verify(str(out)) == 0
    capsys.readouterr()
    assert inspect_lib.main([str(out), '--split', 'train', '-n', '1']) == 0
    shown = capsys.readouterr().out
    assert 'label level family: birds, fish' in shown
    assert 'label level species: carp, finch, sparrow, trout' in shown
    assert 'image/label/species/text' in shown


def test_verify_finds_level_counts_that_do_not_add_up(lenient_build):
    out, dataset = lenient_build
    damaged = json.loads(json.dumps(dataset))
    shard = damaged['splits']['train']['shards'][0]
    shard['level_counts']['family']['birds'] += 1
    problems = [message for _, message in verify_lib.accounting_problems(str(out), damaged)]
    assert any('level family counts' in message for message in problems), problems
    assert any('splits.train.level_counts.family' in message for message in problems)
    del damaged['splits']['val']['level_missing']
    assert any('level_missing' in p for p in dataset_facts.structure_problems(damaged))


def test_tree_levels_come_from_nested_folders(tmp_path):
    for i, relative in enumerate(
        [
            'birds/sparrow/a.jpg',
            'birds/sparrow/deeper/b.jpg',
            'fish/other/c.jpg',
            'birds/other/d.jpg',
            'fish/e.jpg',  # no species folder
        ]
    ):
        (tmp_path / 'tree' / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / 'tree' / relative).write_bytes(imgs.jpeg(i))
    found = listing.list_inputs(str(tmp_path / 'tree'), label_levels=LEVELS)
    entries = {entry.key: entry for entry in found.entries}
    assert entries['birds/sparrow/deeper/b.jpg'].label == 'birds/sparrow'
    assert entries['birds/sparrow/deeper/b.jpg'].levels == {'family': 'birds', 'species': 'sparrow'}
    assert entries['fish/e.jpg'].levels == {'family': 'fish'}
    # The label is the finest class: two families' `other` stay apart.
    assert found.labels == ['birds/other', 'birds/sparrow', 'fish', 'fish/other']
    assert found.label_levels == {'family': ['birds', 'fish'], 'species': ['other', 'sparrow']}
    dataset = _build(tmp_path / 'tree', tmp_path / 'out', '--label-levels', 'family,species')
    assert dataset['counts']['rejected_by_reason'] == {'missing_label_level': 1}
    rejected = json.loads((tmp_path / 'out' / 'rejected.jsonl').read_text())
    assert rejected['path'].endswith('fish/e.jpg')
    assert list(dataset['label_levels']) == ['family', 'species']


def test_level_names_are_checked(tmp_path):
    assert features.parse_label_levels('family, species') == ('family', 'species')
    for bad in ('', 'a,,b', 'a/b', 'a,a', '.hidden'):
        with pytest.raises(ValueError):
            features.parse_label_levels(bad)
    (tmp_path / 'x.jpg').write_bytes(imgs.jpeg(0))
    for header, message in (
        ('path,label,label/', 'label level'),
        ('path,label,label/a/b', 'label level'),
        ('path,label,label/a,label/a', 'more than once'),
    ):
        (tmp_path / 'm.csv').write_text(f'{header}\nx.jpg,l,v,v\n')
        with pytest.raises(ValueError, match=message):
            listing.list_inputs(str(tmp_path / 'm.csv'))
    (tmp_path / 'm.csv').write_text('path,label,label/family\nx.jpg,l,f\n')
    with pytest.raises(ValueError, match='does not match its columns'):
        listing.list_inputs(str(tmp_path / 'm.csv'), label_levels=('family', 'species'))


def test_jsonl_levels_are_the_keys_rows_name(tmp_path):
    rows = [
        {'path': 'a.jpg', 'label': 'x', 'label/family': 'birds'},
        {'path': 'b.jpg', 'label': 'y', 'label/family': 'fish', 'label/species': 'carp'},
        {'path': 'c.jpg', 'label': 'y', 'label/bad/name': 'z'},
        {'path': 'd.jpg', 'label': 'y', 'labels/family': 'z'},
    ]
    for i in range(4):
        (tmp_path / f'{"abcd"[i]}.jpg').write_bytes(imgs.jpeg(i))
    (tmp_path / 'm.jsonl').write_text(''.join(json.dumps(row) + '\n' for row in rows))
    found = listing.list_inputs(str(tmp_path / 'm.jsonl'))
    assert found.label_levels == {'family': ['birds', 'fish'], 'species': ['carp']}
    first, second, third, fourth = found.entries
    assert first.levels == {'family': 'birds'} and not first.reject
    assert second.levels == {'family': 'fish', 'species': 'carp'}
    assert third.reject == fourth.reject == 'malformed_row'
    declared = listing.list_inputs(str(tmp_path / 'm.jsonl'), label_levels=('family',))
    assert declared.entries[1].reject == 'malformed_row'  # label/species is not declared


def test_masked_loss_and_accuracy_leave_missing_labels_out(tf):
    from trainer import heads  # pylint: disable=import-outside-toplevel

    probabilities = tf.constant([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.5, 0.5]])
    labels = tf.constant([0, 0, -1, -1], tf.int64)
    loss = heads.SparseCrossentropy()
    losses = loss.call(labels, probabilities).numpy()
    # Keras takes the mean of these four: the mean over the two known labels.
    assert losses.mean() == pytest.approx(-(np.log(0.9) + np.log(0.2)) / 2, rel=1e-5)
    assert float(loss(labels, probabilities)) == pytest.approx(losses.mean(), rel=1e-6)
    assert losses[2] == losses[3] == 0
    accuracy = heads.MaskedAccuracy()
    accuracy.update_state(labels, probabilities)
    assert float(accuracy.result()) == pytest.approx(0.5)
    accuracy.update_state(tf.constant([-1, -1], tf.int64), probabilities[:2])  # nothing known
    assert float(accuracy.result()) == pytest.approx(0.5)


def test_make_dataset_yields_a_dict_of_level_labels(tf, lenient_build):
    from trainer import input_pipeline  # pylint: disable=import-outside-toplevel

    out, dataset = lenient_build
    batches = input_pipeline.make_dataset(
        str(out), 'val', 8, training=False, image_size=(16, 16), label_levels=['species'], **{}
    )
    images, labels = next(iter(batches))
    assert images.shape == (8, 16, 16, 3) and set(labels) == {'species'}
    for training in (True, False):
        order = input_pipeline.make_dataset(
            str(out),
            'train',
            8,
            training=training,
            epochs=1,
            decode_images=False,
            label_levels=list(LEVELS),
        )
        labels = collections.Counter()
        for batch, _ in order:
            labels.update(batch['family'].numpy().tolist())
        assert set(labels) <= {-1, 0, 1}
    with pytest.raises(ValueError, match='not label levels'):
        input_pipeline.make_dataset(str(out), 'val', 8, training=False, label_levels=['genus'])
    del dataset


def test_report_measures_every_level(lenient_build, tmp_path):
    from imageshards_cli import report  # pylint: disable=import-outside-toplevel

    out, _ = lenient_build
    path, metrics = report.report(
        str(out),
        'train',
        str(tmp_path / 'report'),
        epochs=2,
        batch_size=8,
        seed=0,
        baseline_buffer=100,
    )
    assert set(metrics['label_levels']) == set(LEVELS)
    family = metrics['label_levels']['family']
    assert 1 <= family['mean_distinct_labels_per_batch'] <= 3  # birds, fish, and missing
    assert family['shard_class_spread'] <= 1
    assert '| species |' in open(path, encoding='utf-8').read()


@pytest.fixture(scope='module')
def trained(lenient_build, tmp_path_factory):
    from trainer import config as config_lib  # pylint: disable=import-outside-toplevel
    from trainer import train as train_lib  # pylint: disable=import-outside-toplevel

    out, _ = lenient_build
    flags = ['--data', str(out), '--job-dir', str(tmp_path_factory.mktemp('job'))]
    flags += ['--image-size', '32', '--batch-size', '16', '--crop-area', '0.5,1']
    flags += ['--checkpoint-every', '5', '--label-levels', 'family,species']
    config = config_lib.parse_train_args([*flags, '--epochs', '4'])
    return config, train_lib.train(config), flags


@pytest.mark.slow  # trains on the CPU: about 25 s with the build
def test_one_head_per_level_learns_both_levels(trained):
    config, metrics, _ = trained
    per_level = metrics['label_levels']
    assert per_level['family']['val_accuracy'] >= 0.9, metrics
    assert per_level['species']['val_accuracy'] >= 0.9, metrics
    written = json.loads(open(f'{config.job_dir}/metrics.json', encoding='utf-8').read())
    assert written['label_levels'] == per_level
    assert written['val_species_accuracy'] == pytest.approx(per_level['species']['val_accuracy'])


@pytest.mark.slow  # trains on the CPU: about 25 s with the build
def test_the_served_model_answers_for_both_levels_from_raw_bytes(tf, trained, lenient_build):
    config, _, _ = trained
    out, dataset = lenient_build
    served = tf.saved_model.load(config.resolved_model_dir).signatures['serving_default']
    val = sorted(_records(out, dataset)['val'], key=lambda record: record['image/id'])
    outputs = served(image_bytes=tf.constant([r[features.ENCODED] for r in val]))
    for level in LEVELS:
        names = dataset['label_levels'][level]
        assert outputs[f'{level}/class_names'].numpy()[0].tolist() == [n.encode() for n in names]
        assert outputs[f'{level}/probabilities'].shape == (len(val), len(names))
        known = [(r, top) for r, top in zip(val, outputs[f'{level}/top_class'].numpy()) if top]
        truth = [r[features.level_text(level)] for r, _ in known if r[features.level_text(level)]]
        predicted = [top for r, top in known if r[features.level_text(level)]]
        assert np.mean([a == b for a, b in zip(truth, predicted)]) >= 0.9
    # The probabilities the trained model gives the evaluation pipeline's images.
    images, _, ids = next(iter(_evaluation(out, with_ids=True)))
    expected = _restored_model(config, dataset)(images, training=False)
    by_id = np.argsort(ids.numpy())
    for level in LEVELS:
        np.testing.assert_allclose(
            outputs[f'{level}/probabilities'].numpy(), expected[level].numpy()[by_id], atol=1e-5
        )


def _evaluation(out, **options):
    from trainer import input_pipeline  # pylint: disable=import-outside-toplevel

    return input_pipeline.make_dataset(
        str(out),
        'val',
        64,
        training=False,
        image_size=(32, 32),
        label_levels=list(LEVELS),
        **options,
    )


def _restored_model(config, dataset):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    from trainer import best_epoch  # pylint: disable=import-outside-toplevel
    from trainer import dataset_info  # pylint: disable=import-outside-toplevel
    from trainer import heads as heads_lib  # pylint: disable=import-outside-toplevel
    from trainer import hierarchy  # pylint: disable=import-outside-toplevel
    from trainer import transform  # pylint: disable=import-outside-toplevel
    from trainer.model import build_model  # pylint: disable=import-outside-toplevel

    info = dataset_info.load(config.data)
    levels = list(dataset['label_levels'])
    # As training built it: family is derived from species (every species in one family).
    heads = heads_lib.model_heads(info, levels, hierarchy.derive(info, 'train', levels))
    assert heads['family'].source == 'species'
    normalize = transform.load(info)
    model = build_model(config.model, 0, config.image_size, heads=heads, transform_output=normalize)
    best = best_epoch.BestEpoch(model, ['val_loss'], lower_is_better=True)
    checkpoint = tf.train.Checkpoint(model=model, best=best.state)
    checkpoint.restore(tf.train.latest_checkpoint(config.resolved_checkpoint_dir)).expect_partial()
    best.restore_best()  # the model exported is the best epoch's
    return model


@pytest.mark.slow  # trains on the CPU: about 25 s with the build
def test_a_multi_head_run_resumes_from_its_checkpoint(trained):
    from trainer import config as config_lib  # pylint: disable=import-outside-toplevel
    from trainer import train as train_lib  # pylint: disable=import-outside-toplevel

    _, metrics, flags = trained
    resumed = train_lib.train(config_lib.parse_train_args([*flags, '--epochs', '5']))
    assert resumed['steps'] == 5 * metrics['steps_per_epoch']  # continued, not restarted
    assert set(resumed['label_levels']) == set(LEVELS)
