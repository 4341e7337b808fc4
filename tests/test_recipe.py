"""The recipe's parts on their own: phases, resume segments, the learning-rate schedule, which
layers train, AdamW's exclusions, the smoothed and weighted loss, and the best epoch kept."""

import dataclasses
import json
import math

import keras
import numpy as np
import pytest

from trainer import best_epoch
from trainer import config as config_lib
from trainer import heads as heads_lib
from trainer import recipe
from trainer.model import build_model


def _recipe(**fields):
    return config_lib.Recipe(**fields)


def test_a_run_from_weights_trains_the_heads_first_then_everything_at_the_lower_rate():
    started = _recipe(init_from='job', frozen_epochs=2, learning_rate=1e-3)
    assert recipe.phases(started, 5) == [
        recipe.Phase(0, 2, True, 1e-3),
        recipe.Phase(2, 5, False, started.fine_tune_learning_rate),
    ]
    assert recipe.phases(started, 2) == [recipe.Phase(0, 2, True, 1e-3)]  # heads alone
    assert recipe.phases(_recipe(init_from='job', frozen_epochs=0), 3) == [
        recipe.Phase(0, 3, False, _recipe().fine_tune_learning_rate)
    ]
    from_random = recipe.phases(_recipe(frozen_epochs=2), 4)  # no frozen phase
    assert from_random == [recipe.Phase(0, 4, False, _recipe().learning_rate)]


def test_resumed_segments_continue_inside_an_epoch_and_stop_at_the_phase_switch():
    phases = recipe.phases(_recipe(init_from='job', frozen_epochs=2), 4)
    frozen, whole = phases
    ranges = lambda done: [
        (s.first, s.last, s.skip, s.phase) for s in recipe.segments(done, 10, phases)
    ]
    assert ranges(0) == [(0, 2, 0, frozen), (2, 4, 0, whole)]
    assert ranges(13) == [(1, 2, 3, frozen), (2, 4, 0, whole)]  # the rest of epoch 1 alone
    assert ranges(20) == [(2, 4, 0, whole)]  # at the switch
    assert ranges(27) == [(2, 3, 7, whole), (3, 4, 0, whole)]
    assert ranges(40) == []


def test_each_phase_warms_up_from_zero_then_falls_along_a_cosine_to_zero():
    started = _recipe(
        init_from='job', frozen_epochs=1, learning_rate=1.0, fine_tune_learning_rate=0.1
    )
    phases = recipe.phases(started, 3)
    rate = recipe.schedule(started, phases, steps_per_epoch=8)
    at = lambda step: float(rate(step))
    # Phase one: 8 steps, warm-up min(1 epoch, half the phase) = 4 steps.
    assert [at(step) for step in range(5)] == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])
    assert at(6) == pytest.approx(0.5)  # half-way down the cosine
    assert at(7.999) == pytest.approx(0, abs=1e-3)
    # Phase two: 16 steps from step 8, warm-up 8 steps to 0.1, then down.
    assert at(8) == pytest.approx(0)
    assert at(12) == pytest.approx(0.05)
    assert at(16) == pytest.approx(0.1)
    assert at(20) == pytest.approx(0.05)
    flat = dataclasses.replace(started, lr_schedule='constant')
    constant = recipe.schedule(flat, phases, 8)
    assert [float(constant(s)) for s in (2, 4, 7, 16, 23)] == pytest.approx([0.5, 1, 1, 0.1, 0.1])
    # The schedule survives Keras' serialization (an optimizer's config holds it).
    again = recipe.PhasedSchedule.from_config(rate.get_config())
    assert float(again(12)) == pytest.approx(at(12))


def test_a_floor_on_the_schedule_length_ends_a_short_phase_partway_down_its_cosine():
    started = _recipe(init_from='job', frozen_epochs=1, learning_rate=1.0)
    phases = recipe.phases(started, 3)  # 8 steps frozen, then 16
    rate = recipe.schedule(started, phases, steps_per_epoch=8, min_schedule_steps=36)
    at = lambda step: float(rate(step))
    # The warm-up as before (4 steps, half the phase); the cosine then over 36 - 4 steps.
    assert [at(step) for step in range(5)] == pytest.approx([0, 0.25, 0.5, 0.75, 1.0])
    assert at(7) == pytest.approx(0.5 * (1 + math.cos(math.pi * 3 / 32)))
    assert at(8 + 8) == pytest.approx(started.fine_tune_learning_rate)  # after its warm-up
    assert at(8 + 15) == pytest.approx(
        started.fine_tune_learning_rate * 0.5 * (1 + math.cos(math.pi * 7 / 28))
    )
    # A floor below the phases' lengths changes nothing.
    same = recipe.schedule(started, phases, steps_per_epoch=8, min_schedule_steps=8)
    plain = recipe.schedule(started, phases, steps_per_epoch=8)
    assert [float(same(s)) for s in range(24)] == pytest.approx(
        [float(plain(s)) for s in range(24)]
    )


def _trainable_layers(model):
    return {layer.name for layer in recipe.layers_with_weights(model) if layer.trainable}


def test_frozen_phases_train_the_heads_alone_and_batchnorm_stays_in_inference_mode():
    model = build_model('small_cnn', 3, (16, 16))
    convs = {f'block{i}_conv' for i in (1, 2, 3)}
    batch_norms = {f'block{i}_bn' for i in (1, 2, 3)}
    recipe.set_trainable(model, frozen=True, from_weights=True)
    assert _trainable_layers(model) == {'logits'}
    recipe.set_trainable(model, frozen=False, from_weights=True)
    assert _trainable_layers(model) == convs | {'logits'}
    recipe.set_trainable(model, frozen=False, from_weights=False)
    assert _trainable_layers(model) == convs | batch_norms | {'logits'}
    # A keras.applications backbone: its own layers, nested in the model, are marked one by one.
    mobile = build_model('mobilenet_v3_small', 3, (32, 32))
    recipe.set_trainable(mobile, frozen=True, from_weights=True)
    assert _trainable_layers(mobile) == {'logits'}
    assert [w.path for w in mobile.trainable_weights] == ['logits/kernel', 'logits/bias']


def test_batchnorm_of_a_model_from_weights_adapts_only_where_asked_and_where_it_settles():
    model = build_model('small_cnn', 3, (16, 16))  # BatchNorm momentum 0.9
    convs = {f'block{i}_conv' for i in (1, 2, 3)}
    batch_norms = {f'block{i}_bn' for i in (1, 2, 3)}
    recipe.set_trainable(model, frozen=False, from_weights=True, adapt_steps=29)
    assert _trainable_layers(model) == convs | batch_norms | {'logits'}
    recipe.set_trainable(model, frozen=True, from_weights=True, adapt_steps=29)
    assert _trainable_layers(model) == {'logits'}  # never in the frozen phase
    recipe.set_trainable(model, frozen=False, from_weights=True, adapt_steps=28)
    assert _trainable_layers(model) == convs | {'logits'}  # 0.9 ** 28 > e ** -3: unsettled
    # A keras.applications model's BatchNorm (momentum 0.99 or more) needs 299 steps at least.
    mobile = build_model('mobilenet_v3_small', 3, (32, 32))
    recipe.set_trainable(mobile, frozen=False, from_weights=True, adapt_steps=60)
    assert not any(
        layer.trainable
        for layer in recipe.layers_with_weights(mobile)
        if isinstance(layer, keras.layers.BatchNormalization)
    )
    phases = recipe.phases(_recipe(init_from='job', frozen_epochs=1), 30)
    assert recipe.whole_phase_steps(phases, steps_per_epoch=2) == 58


def test_adamw_decays_kernels_not_biases_nor_batchnorm_scales(tf):
    model = build_model('small_cnn', 3, (16, 16))
    optimizer = recipe.optimizer(
        _recipe(weight_decay=0.5, warmup_epochs=0), [recipe.Phase(0, 1, False, 0.1)], 10
    )
    optimizer.build(model.trainable_variables)
    before = {w.path: w.numpy().copy() for w in model.trainable_variables}
    zeros = [tf.zeros_like(w) for w in model.trainable_variables]
    optimizer.apply(zeros, model.trainable_variables)
    changed = {
        w.path for w in model.trainable_variables if not np.array_equal(before[w.path], w.numpy())
    }
    assert changed == {
        'block1_conv/kernel',
        'block2_conv/kernel',
        'block3_conv/kernel',
        'logits/kernel',
    }
    kernel = model.get_layer('logits').kernel
    np.testing.assert_allclose(kernel.numpy(), before['logits/kernel'] * (1 - 0.1 * 0.5), rtol=1e-6)


def test_under_mixed_precision_a_step_skipped_on_overflow_is_counted(tf):
    """The trainer counts its steps by the optimizer's: a skipped step must count too."""
    keras.mixed_precision.set_global_policy('mixed_float16')
    try:
        optimizer = recipe.optimizer(_recipe(), [recipe.Phase(0, 1, False, 0.1)], 10)
    finally:
        keras.mixed_precision.set_global_policy('float32')
    assert isinstance(optimizer, recipe.CountingLossScaleOptimizer)
    weight = keras.Variable([1.0, 2.0])
    optimizer.build([weight])
    optimizer.apply([tf.constant([np.inf, 0.0])], [weight])  # overflowed: skipped
    np.testing.assert_array_equal(weight.numpy(), [1.0, 2.0])
    assert int(optimizer.iterations.numpy()) == 1
    assert float(optimizer.dynamic_scale.numpy()) == 2.0**14
    optimizer.apply([tf.constant([1.0, 1.0])], [weight])
    assert int(optimizer.iterations.numpy()) == 2 and weight.numpy()[0] != 1.0


def test_the_loss_smooths_labels_weights_classes_and_leaves_missing_ones_out(tf):
    probabilities = tf.constant([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]])
    labels = tf.constant([0, 1, -1], tf.int64)
    smoothed = heads_lib.SparseCrossentropy(label_smoothing=0.3).call(labels, probabilities)
    target = np.array([[0.8, 0.1, 0.1], [0.1, 0.8, 0.1]])  # 1 - 0.3 + 0.1 and 0.3 / 3
    expected = -(target * np.log(probabilities.numpy()[:2])).sum(axis=1) * 3 / 2
    np.testing.assert_allclose(smoothed.numpy()[:2], expected, rtol=1e-5)
    assert smoothed.numpy()[2] == 0
    weighted = heads_lib.SparseCrossentropy(class_weights=[2.0, 0.5, 1.0]).call(
        labels[:2], probabilities[:2]
    )
    np.testing.assert_allclose(weighted.numpy(), [-2 * np.log(0.7), -0.5 * np.log(0.8)], rtol=1e-5)
    assert heads_lib.balanced_weights([30, 10, 0, 20]) == pytest.approx(
        [60 / 120, 60 / 40, 0, 60 / 80]
    )


def _model_and_best(tf, keys=('val_loss',), lower=True):
    model = build_model('small_cnn', 3, (16, 16))
    return model, best_epoch.BestEpoch(model, keys, lower)


def test_the_best_epoch_is_kept_restored_and_survives_a_checkpoint(tf, tmp_path):
    model, best = _model_and_best(tf)
    kernel = model.get_layer('logits').kernel
    values = {}
    for epoch, loss in enumerate([0.9, 0.5, 0.7, 0.5]):
        kernel.assign(np.full(kernel.shape, epoch, np.float32))
        values[epoch] = kernel.numpy().copy()
        best.on_epoch_end(epoch, {'loss': 1.0, 'val_loss': loss, 'val_accuracy': 0.1 * epoch})
    found = best.metrics()
    assert found['best_epoch'] == 2 and found['val_loss'] == 0.5  # the earliest of equals
    assert found['selected_by'] == 'val_loss' and found['last_epoch']['epoch'] == 4
    path = tf.train.Checkpoint(model=model, best=best.state).save(str(tmp_path / 'ckpt'))
    fresh, again = _model_and_best(tf)
    tf.train.Checkpoint(model=fresh, best=again.state).restore(path)
    again.restore_best()
    np.testing.assert_array_equal(fresh.get_layer('logits').kernel.numpy(), values[1])
    assert again.metrics() == found
    stored = json.loads(again.logs.numpy().decode())
    assert stored['val_accuracy'] == pytest.approx(0.1)


def test_select_by_needs_a_head_with_that_metric():
    single = {'': heads_lib.Head(('a', 'b'))}
    multi = {'': heads_lib.Head(('a', 'b'), multi_label=True)}
    levels = {'family': heads_lib.Head(('x', 'y')), 'tags': heads_lib.Head(('t', 'u'), True)}
    assert best_epoch.monitored('loss', multi) == ['val_loss']
    assert best_epoch.monitored('accuracy', single) == ['val_accuracy']
    assert best_epoch.monitored('micro_f1', multi) == ['val_micro_f1']
    assert best_epoch.monitored('accuracy', levels) == ['val_family_accuracy']
    assert best_epoch.monitored('micro_f1', levels) == ['val_tags_micro_f1']
    with pytest.raises(ValueError, match='--select-by accuracy: this model has no softmax'):
        best_epoch.monitored('accuracy', multi)


def test_without_validation_the_last_epoch_is_kept(tf):
    model, best = _model_and_best(tf, keys=())
    for epoch, loss in enumerate([0.5, 0.9]):
        best.on_epoch_end(epoch, {'loss': loss})
    assert best.metrics()['best_epoch'] == 2
    assert best.metrics()['selected_by'] == 'the last epoch (no validation split)'


def test_balanced_class_weights_come_from_the_training_split_counts():
    from imageshards import dataset_json  # pylint: disable=import-outside-toplevel

    raw = {
        'labels': ['cat', 'dog', 'owl'],
        'label_levels': {'kind': ['bird', 'mammal']},
        'splits': {
            'train': {
                'class_counts': {'cat': 30, 'dog': 10},  # no owl in training
                'level_counts': {'kind': {'mammal': 40, 'bird': 8}},
            }
        },
    }
    info = dataset_json.Build('out', raw)
    primary = heads_lib.model_heads(info, ())
    assert heads_lib.class_weights(info, 'train', primary, 'none') is None
    assert heads_lib.class_weights(info, 'train', primary, 'balanced') == {
        '': pytest.approx([40 / 90, 40 / 30, 0.0])
    }
    levels = heads_lib.model_heads(info, ('kind',))
    assert heads_lib.class_weights(info, 'train', levels, 'balanced') == {
        'kind': pytest.approx([48 / 16, 48 / 80])
    }
    multi = {'': heads_lib.Head(('a', 'b'), multi_label=True)}
    with pytest.raises(ValueError, match='--class-weights balanced weights the classes of softmax'):
        heads_lib.class_weights(info, 'train', multi, 'balanced')
