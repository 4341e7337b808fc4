"""Nested label levels: which level nests in which, the derived level's sums, the served top
class that agrees with the finer one, and a job directory that remembers how levels were
derived; on a real build of family and species levels and a model trained on both."""

import json

import numpy as np
import pytest

from pipelines import launcher
from trainer import config as config_lib
from trainer import dataset_info
from trainer import hierarchy
from trainer import job
from trainer import train as train_lib
from trainer.model import SumOver

import images_for_tests as imgs
import multilabel_builds

# family > genus > species: species 0, 1 in genus 0; 2 in genus 1; 3, 4 in genus 2.
GENUS_OF_SPECIES = (0, 0, 1, 2, 2)
FAMILY_OF_GENUS = (0, 1, 1)


def _table(parents, coarse, count=3):
    table = np.zeros((len(parents), coarse), np.int64)
    table[np.arange(len(parents)), parents] = count
    return table


def test_a_fine_class_under_two_coarse_ones_or_an_empty_coarse_class_is_no_nesting():
    assert hierarchy.parents_of(_table(GENUS_OF_SPECIES, 3)) == GENUS_OF_SPECIES
    split = _table(GENUS_OF_SPECIES, 3)
    split[2, 0] = 1  # species 2 seen once under genus 0 as well
    assert hierarchy.parents_of(split) is None
    assert hierarchy.parents_of(_table(GENUS_OF_SPECIES, 4)) is None  # genus 3 holds nothing


def test_each_coarse_level_is_derived_from_the_finest_level_nested_in_it():
    family_of_species = tuple(FAMILY_OF_GENUS[g] for g in GENUS_OF_SPECIES)
    sizes = {'family': 2, 'genus': 3, 'species': 5, 'colour': 2}
    pairs = {
        ('species', 'genus'): _table(GENUS_OF_SPECIES, 3),
        ('species', 'family'): _table(family_of_species, 2),
        ('genus', 'family'): _table(FAMILY_OF_GENUS, 2),
    }
    counts = {}
    for a in sizes:
        for b in sizes:
            if (a, b) in pairs:
                counts[(a, b)] = pairs[(a, b)]
            else:  # anything else co-occurs everywhere: no nesting
                counts[(a, b)] = np.ones((sizes[a], sizes[b]), np.int64)
    derived = hierarchy.nestings(counts, list(sizes))
    assert derived == {
        'family': ('species', family_of_species),
        'genus': ('species', GENUS_OF_SPECIES),
    }


def test_levels_of_as_many_classes_do_not_derive_each_other():
    same = _table((1, 0), 2)
    counts = {('a', 'b'): same, ('b', 'a'): same.T, ('a', 'a'): same, ('b', 'b'): same}
    assert hierarchy.nestings(counts, ['a', 'b']) == {}


def test_sums_and_the_consistent_top_class_are_the_same_eagerly_and_in_tf_data(tf):
    fine = tf.constant([[0.1, 0.5, 0.2, 0.1, 0.1], [0.05, 0.05, 0.3, 0.3, 0.3]])
    layer = SumOver(GENUS_OF_SPECIES, 3)
    eager_sums = layer(fine).numpy()
    np.testing.assert_allclose(eager_sums, [[0.6, 0.2, 0.2], [0.1, 0.3, 0.6]], atol=1e-6)
    eager_top = hierarchy.consistent_top(fine, GENUS_OF_SPECIES).numpy()
    # Row 2: genus 2 has the most probability (0.6) but species 2 (genus 1) is tied top at
    # 0.3 and first: the coarse answer follows the fine one.
    np.testing.assert_array_equal(eager_top, [0, 1])
    in_graph = tf.data.Dataset.from_tensors(fine).map(
        lambda p: (layer(p), hierarchy.consistent_top(p, GENUS_OF_SPECIES))
    )
    sums, top = next(iter(in_graph))
    np.testing.assert_allclose(sums.numpy(), eager_sums, atol=1e-6)
    np.testing.assert_array_equal(top.numpy(), eager_top)


def test_multi_label_levels_are_left_independent(tmp_path):
    # No analysis: what nests is read from the records (and no other fast test builds this kind,
    # whose tf.Transform graph TFT would write first).
    build = multilabel_builds.write_colour_build(
        tmp_path / 'out', count=16, levels=True, analyze=False
    )
    info = dataset_info.load(str(build))
    assert hierarchy.derive(info, 'train', ('colour', 'mood')) == {}


def test_a_job_dir_trained_with_other_derived_levels_is_refused(tmp_path):
    build = multilabel_builds.write_colour_build(tmp_path / 'out', count=16)
    info = dataset_info.load(str(build))
    config = config_lib.parse_train_args(['--data', str(build), '--job-dir', str(tmp_path)])
    checkpoints = tmp_path / 'checkpoints'
    derived = {'family': ('species', (0, 0, 1))}
    job.record_run(str(checkpoints), job.check_rerun(config, info, str(checkpoints), derived))
    job.check_rerun(config, info, str(checkpoints), derived)  # the same: fine
    with pytest.raises(ValueError, match=r"levels derived as \{'family': 'species'\}.*not as none"):
        job.check_rerun(config, info, str(checkpoints), {})
    # A run.json from before derived levels existed means none.
    old = json.loads((checkpoints / job.RUN_JSON).read_text())
    del old['derived_levels']
    (checkpoints / job.RUN_JSON).write_text(json.dumps(old))
    job.check_rerun(config, info, str(checkpoints), {})


LEVELS = ('family', 'species')


@pytest.fixture(scope='module')
def level_build(tmp_path_factory):
    """Four species in two families, a family and a species value missing (rows 3, 40)."""
    root = tmp_path_factory.mktemp('levels')
    manifest = imgs.write_level_manifest(root, 24, missing={(3, 'family'), (40, 'species')})
    out = root / 'out'
    launcher.run(
        ['--direct_running_mode=in_memory', '--input', str(manifest), '--output', str(out)]
        + ['--splits', 'train=0.75,val=0.25', '--num-shards', '2', '--allow-missing-levels']
    )
    return out, json.loads((out / 'dataset.json').read_text())


def test_family_is_derived_from_species_as_the_training_records_nest_them(level_build):
    out, dataset = level_build
    names = dataset['label_levels']
    counts = hierarchy.co_occurrence(dataset_info.load(str(out)), 'train', LEVELS)
    # Records missing either value count in no pair.
    known = dataset['splits']['train']['num_records'] - counts[('family', 'species')].sum()
    assert 0 <= known <= 2
    assert counts[('family', 'species')].sum() == counts[('species', 'family')].sum()
    parents = tuple(names['family'].index(imgs.SPECIES[s][0]) for s in names['species'])
    assert hierarchy.nestings(counts, LEVELS) == {'family': ('species', parents)}


@pytest.fixture(scope='module')
def trained(level_build, tmp_path_factory):
    out, _ = level_build
    flags = ['--data', str(out), '--job-dir', str(tmp_path_factory.mktemp('job'))]
    flags += ['--image-size', '32', '--batch-size', '16', '--epochs', '3']
    flags += ['--checkpoint-every', '0', '--label-levels', 'family,species']
    config = config_lib.parse_train_args(flags)
    return config, train_lib.train(config)


@pytest.mark.slow  # trains on the CPU: about 20 s with the build
def test_the_served_family_is_the_served_species_family(tf, trained, level_build):
    config, metrics = trained
    out, dataset = level_build
    assert metrics['derived_levels'] == {'family': 'species'}
    served = tf.saved_model.load(config.resolved_model_dir).signatures['serving_default']
    images = [imgs.jpeg(i, colour) for i, (_, colour) in enumerate(imgs.SPECIES.values())] * 4
    outputs = served(image_bytes=tf.constant(images))
    species = [name.decode() for name in outputs['species/top_class'].numpy()]
    family = [name.decode() for name in outputs['family/top_class'].numpy()]
    assert family == [imgs.SPECIES[name][0] for name in species]
    by_species = outputs['species/probabilities'].numpy()
    in_family = lambda f: [imgs.SPECIES[s][0] == f for s in dataset['label_levels']['species']]
    summed = np.stack(
        [by_species[:, in_family(f)].sum(axis=1) for f in dataset['label_levels']['family']], 1
    )
    np.testing.assert_allclose(outputs['family/probabilities'].numpy(), summed, atol=1e-6)
    top = outputs['family/top_probability'].numpy()
    np.testing.assert_allclose(top, summed.max(axis=1), atol=1e-6)  # here: they agree
