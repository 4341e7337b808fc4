"""Training on a multi-label build: sigmoid heads, F1 and PR-AUC per epoch, thresholds chosen on
the validation split, and a served model that returns scores, classes and label sets."""

import json

import numpy as np
import pytest
from sklearn import metrics as sk_metrics

from trainer import best_epoch
from trainer import config as config_lib
from trainer import dataset_info
from trainer import heads as heads_lib
from trainer import input_pipeline
from trainer import tft_output
from trainer import thresholds
from trainer import train as train_lib
from trainer.model import build_model

import multilabel_builds

SIZE = 32


def test_thresholds_maximise_each_classes_f1_and_keep_half_without_positives():
    rng = np.random.default_rng(0)
    labels = rng.random((60, 3)) < 0.3
    labels[:, 2] = False  # no positive: nothing to choose from
    scores = np.clip(labels * 0.25 + rng.random((60, 3)) * 0.6, 0, 1).astype(np.float32)
    chosen = thresholds.choose(scores, labels)
    assert chosen[2] == 0.5
    for c in range(2):
        best = max(
            sk_metrics.f1_score(labels[:, c], scores[:, c] >= t) for t in np.unique(scores[:, c])
        )
        assert sk_metrics.f1_score(labels[:, c], scores[:, c] >= chosen[c]) == pytest.approx(best)
        # Halfway between two scores: no score sits on the threshold.
        assert not np.isclose(scores[:, c], chosen[c]).any()


def test_thresholds_never_split_equal_scores():
    scores = np.array([[0.9], [0.6], [0.6], [0.6], [0.1]], np.float32)
    labels = np.array([[1], [1], [0], [0], [0]])
    # Cutting after the first 0.6 would score F1 1. Equal scores get one answer: the 0.9 alone
    # or all three 0.6s with it, both F1 2/3, and of equals the fewest predictions.
    assert 0.6 < thresholds.choose(scores, labels)[0] < 0.9


def test_f1_at_thresholds_is_scikit_learns():
    rng = np.random.default_rng(1)
    labels = rng.random((40, 5)) < 0.4
    labels[:, 4] = False
    scores = rng.random((40, 5))
    cut = np.array([0.3, 0.5, 0.7, 0.2, 0.9])
    got = thresholds.f1(scores, labels, cut)
    predicted = scores >= cut
    for average in ('micro', 'macro'):
        expected = sk_metrics.f1_score(labels, predicted, average=average, zero_division=0)
        assert got[f'{average}_f1'] == pytest.approx(expected)


def _train(data, job_dir, *flags):
    config = config_lib.parse_train_args(
        ['--data', str(data), '--job-dir', str(job_dir), '--image-size', str(SIZE)]
        + ['--batch-size', '16', '--checkpoint-every', '0', '--learning-rate', '0.003', *flags]
    )
    return config, train_lib.train(config)


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    build = multilabel_builds.write_colour_build(
        tmp_path_factory.mktemp('ml') / 'out',
        count=128,
        splits=(('train', 0.5), ('val', 0.25), ('test', 0.25)),
    )
    return _train(build, tmp_path_factory.mktemp('job'), '--epochs', '6')


def _restored_model(config, levels=()):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    info = dataset_info.load(config.data)
    heads = heads_lib.model_heads(info, levels)
    model = build_model(
        config.model, 0, config.image_size, heads=heads, transform_output=tft_output.load(info)
    )
    best = best_epoch.BestEpoch(model, ['val_loss'], lower_is_better=True)
    checkpoint = tf.train.Checkpoint(model=model, best=best.state)
    checkpoint.restore(tf.train.latest_checkpoint(config.resolved_checkpoint_dir)).expect_partial()
    best.restore_best()  # the model exported is the best epoch's
    return model


def _scores_and_labels(model, config, split, name=None, **options):
    batches = input_pipeline.make_dataset(
        config.data, split, 64, training=False, image_size=config.image_size, **options
    )
    pairs = [(model(x, training=False), y) for x, y in batches]
    pick = (lambda v: v[name]) if name else (lambda v: v)
    return (
        np.concatenate([pick(s).numpy() for s, _ in pairs]),
        np.concatenate([pick(y).numpy() for _, y in pairs]),
    )


@pytest.mark.slow  # trains on the CPU: about 20 s
def test_a_multi_label_model_learns_and_reports_f1_and_pr_auc(trained):
    config, metrics = trained
    for split in ('val_', 'test_'):
        for name in ('micro_f1', 'macro_f1', 'pr_auc', 'loss'):
            assert 0 <= metrics[f'{split}{name}'] <= (1 if name != 'loss' else 10), name
    assert metrics['val_pr_auc'] >= 0.9, metrics
    # Whole images: a crop could cut out what a label names.
    assert metrics['crop_area'] == [1.0, 1.0] and metrics['eval_crop'] == 1.0
    assert metrics['test_micro_f1_at_thresholds'] >= 0.85, metrics
    assert metrics['test_macro_f1_at_thresholds'] >= 0.85, metrics
    written = json.loads(open(f'{config.job_dir}/metrics.json', encoding='utf-8').read())
    assert written['thresholds'] == metrics['thresholds']
    assert list(written['thresholds']) == list(multilabel_builds.COLOURS)


@pytest.mark.slow
def test_thresholds_are_chosen_on_the_validation_split(trained):
    config, metrics = trained
    scores, labels = _scores_and_labels(
        _restored_model(config), config, 'val', eval_crop=metrics['eval_crop']
    )
    expected = thresholds.choose(scores, labels)
    np.testing.assert_allclose(list(metrics['thresholds'].values()), expected, atol=1e-6)
    at = thresholds.f1(scores, labels, expected)
    assert metrics['val_micro_f1_at_thresholds'] == pytest.approx(at['micro_f1'], abs=1e-6)


@pytest.mark.slow
def test_the_served_model_returns_scores_classes_and_label_sets(tf, trained):
    config, metrics = trained
    ids = list(range(96, 128))  # the test split's images
    colours = [multilabel_builds.colour_labels(i) for i in ids]
    encoded = [multilabel_builds.colour_jpeg(i, names) for i, names in zip(ids, colours)]
    served = tf.saved_model.load(config.resolved_model_dir).signatures['serving_default']
    outputs = served(image_bytes=tf.constant(encoded))
    assert set(outputs) == {'scores', 'classes', 'predicted'}
    scores, predicted = outputs['scores'].numpy(), outputs['predicted'].numpy()
    assert scores.dtype == np.float32 and predicted.dtype == bool
    assert scores.shape == predicted.shape == (len(ids), 4)
    names = outputs['classes'].numpy()
    assert (names == np.array([c.encode() for c in multilabel_builds.COLOURS])).all()
    cut = np.array(list(metrics['thresholds'].values()), np.float32)
    np.testing.assert_array_equal(predicted, scores >= cut)
    truth = np.array([[c in names for c in multilabel_builds.COLOURS] for names in colours])
    assert (predicted == truth).mean() >= 0.9
    # The evaluation pipeline's images of the same records give the same scores.
    model, crop = _restored_model(config), metrics['eval_crop']
    expected, _ = _scores_and_labels(model, config, 'test', eval_crop=crop)
    batches = input_pipeline.make_dataset(
        config.data, 'test', 64, training=False, image_size=config.image_size, with_ids=True
    )
    order = np.concatenate([i.numpy() for _, _, i in batches])
    np.testing.assert_allclose(scores[order - ids[0]], expected, atol=1e-5)


@pytest.mark.slow  # trains on the CPU: about 15 s
def test_a_level_tree_serves_each_level_and_keeps_half_without_a_val_split(tf, tmp_path):
    build = multilabel_builds.write_colour_build(
        tmp_path / 'out', count=48, splits=(('train', 1.0),), levels=True
    )
    config, metrics = _train(
        build, tmp_path / 'job', '--epochs', '1', '--label-levels', 'colour,mood'
    )
    colour = metrics['label_levels']['colour']
    assert set(colour['thresholds'].values()) == {0.5}
    assert {'loss', 'micro_f1', 'macro_f1', 'pr_auc'} <= set(colour)
    assert 'accuracy' in metrics['label_levels']['mood']
    served = tf.saved_model.load(config.resolved_model_dir).signatures['serving_default']
    outputs = served(image_bytes=tf.constant([multilabel_builds.colour_jpeg(0, ['red'])]))
    assert {'colour/scores', 'colour/classes', 'colour/predicted'} <= set(outputs)
    assert outputs['mood/class_names'].numpy()[0].tolist() == [b'cool', b'warm']
    assert outputs['mood/probabilities'].shape == (1, 2)
