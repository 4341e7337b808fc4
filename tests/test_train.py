"""Training end to end on CPU: it learns, exports a faithful SavedModel, and resumes."""

import json

import numpy as np
import pytest

from imageshards.kinds import example_bytes
from imageshards.kinds import features
from imageshards.shard_formats import tfrecord
from trainer import best_epoch
from trainer import config as config_lib
from trainer import dataset_info
from trainer import input_options
from trainer import input_pipeline
from trainer import tft_output
from trainer import train as train_lib
from trainer.model import build_model

IMAGE_SIZE = 32


def _config(data, job_dir, *flags):
    return config_lib.parse_train_args(
        [
            '--data',
            str(data),
            '--job-dir',
            str(job_dir),
            '--image-size',
            str(IMAGE_SIZE),
            '--batch-size',
            '16',
            '--crop-area',
            '0.5,1',
            '--checkpoint-every',
            '5',
            *flags,
        ]
    )


@pytest.fixture(scope='module')
def trained(color_builds, tmp_path_factory):
    job_dir = tmp_path_factory.mktemp('job')
    config = _config(color_builds['examples'], job_dir, '--epochs', '4', '--augment', 'standard')
    return config, train_lib.train(config)


def test_a_small_cnn_learns_a_clearly_learnable_set(trained):
    config, metrics = trained
    assert metrics['val_accuracy'] >= 0.9, metrics
    written = json.loads(open(f'{config.job_dir}/metrics.json').read())
    assert written['val_accuracy'] == pytest.approx(metrics['val_accuracy'])
    assert written['steps'] == 4 * written['steps_per_epoch']


def _restored_model(config, info):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    model = build_model(
        config.model, info.num_classes, config.image_size, transform_output=tft_output.load(info)
    )
    best = best_epoch.BestEpoch(model, ['val_loss'], lower_is_better=True)
    checkpoint = tf.train.Checkpoint(model=model, best=best.state)
    checkpoint.restore(tf.train.latest_checkpoint(config.resolved_checkpoint_dir)).expect_partial()
    best.restore_best()  # the model exported is the best epoch's
    return model


def test_exported_model_serves_raw_bytes_like_the_evaluation_pipeline(tf, trained):
    config, _ = trained
    info = dataset_info.load(config.data)
    model = _restored_model(config, info)
    served = tf.saved_model.load(config.resolved_model_dir).signatures['serving_default']
    evaluation = input_pipeline.make_dataset(
        config.data, 'val', 16, training=False, image_size=config.image_size
    )
    expected = np.concatenate([model(images, training=False).numpy() for images, _ in evaluation])
    encoded = []
    for path in info.shard_paths('val'):  # the same records, in the pipeline's order
        with open(path, 'rb') as f:
            encoded.append(
                [
                    example_bytes.example_class()
                    .FromString(r)
                    .features.feature[features.ENCODED]
                    .bytes_list.value[0]
                    for r in tfrecord.read_records(f)
                ]
            )
    order = [item for group in _interleaved(encoded) for item in group]
    outputs = served(image_bytes=tf.constant(order))
    np.testing.assert_allclose(outputs['probabilities'].numpy(), expected, atol=1e-5)
    names = [name.decode() for name in outputs['top_class'].numpy()]
    assert names == [info.labels[i] for i in expected.argmax(axis=1)]
    assert outputs['class_names'].numpy()[0].tolist() == [n.encode() for n in info.labels]


def _interleaved(per_file):
    """The record order of an interleave over files with block length 1 (the eval pipeline)."""
    rounds = max(len(records) for records in per_file)
    return [[records[i] for records in per_file if i < len(records)] for i in range(rounds)]


def test_a_rerun_resumes_from_the_last_checkpoint(color_builds, tmp_path):
    first = train_lib.train(_config(color_builds['examples'], tmp_path, '--epochs', '1'))
    per_epoch = first['steps_per_epoch']
    assert first['steps'] == per_epoch
    resumed = train_lib.train(_config(color_builds['examples'], tmp_path, '--epochs', '2'))
    assert resumed['steps'] == 2 * per_epoch  # continued, not restarted
    written = (tmp_path / 'metrics.json').read_text()
    again = train_lib.train(_config(color_builds['examples'], tmp_path, '--epochs', '2'))
    assert again == resumed  # nothing left to do: the finished job's metrics, kept as they were
    assert (tmp_path / 'metrics.json').read_text() == written


@pytest.mark.parametrize(
    'change, message',
    [
        (('--image-size', '24'), 'image size 32x32, not 24x24'),
        (('--data', 'paths'), 'the build in .*color_examples.*/out, not the one now in'),
    ],
)
def test_a_job_dir_of_another_run_is_refused_up_front(color_builds, tmp_path, change, message):
    train_lib.train(_config(color_builds['examples'], tmp_path, '--epochs', '1'))
    flags = list(change)
    if flags[0] == '--data':
        flags[1] = str(color_builds[flags[1]])
    with pytest.raises(
        ValueError, match=f'holds the checkpoints of a run on {message}.*new --job-dir'
    ):
        train_lib.train(_config(color_builds['examples'], tmp_path, '--epochs', '1', *flags))


@pytest.mark.parametrize('name', ['train_smoke.yaml', 'train_local.yaml', 'train_vertex.yaml'])
def test_shipped_training_configs_parse(name):
    import os  # pylint: disable=import-outside-toplevel

    path = os.path.join(os.path.dirname(__file__), '..', 'configs', name)
    config = config_lib.parse_train_args(['--config', path, '--data', 'd', '--job-dir', 'j'])
    assert config.model in ('small_cnn', 'resnet50', 'efficientnet_b0')
    assert len(config.image_size) == 2 and config.epochs > 0


def test_vertex_environment_chooses_the_output_folders(monkeypatch):
    monkeypatch.setenv('AIP_MODEL_DIR', 'gs://b/model/')
    monkeypatch.setenv('AIP_CHECKPOINT_DIR', 'gs://b/checkpoints/')
    monkeypatch.setenv('AIP_TENSORBOARD_LOG_DIR', 'gs://b/logs/')
    config = config_lib.parse_train_args(['--data', 'd', '--job-dir', 'gs://b/job'])
    assert config.resolved_model_dir == 'gs://b/model/'
    assert config.resolved_checkpoint_dir == 'gs://b/checkpoints/'
    assert config.resolved_log_dir == 'gs://b/logs/'
    monkeypatch.delenv('AIP_MODEL_DIR')
    assert config.resolved_model_dir == 'gs://b/job/model'
    assert input_options.parse_image_size('160,224') == (160, 224)


def test_help_shows_every_default_what_models_start_from_and_the_recipe():
    parser = config_lib.build_arg_parser()
    text = ' '.join(parser.format_help().split())
    for action in parser._actions:  # pylint: disable=protected-access
        takes_value = action.option_strings and action.nargs != 0
        if takes_value and action.default not in (None, '', (), '==SUPPRESS=='):
            shown = config_lib.flags._shown(action.default)  # pylint: disable=protected-access
            assert f'default: {shown})' in text, action.dest
    assert 'random initial weights unless --init-from' in text
    # The recipe's switch point and rates (trainer/recipe.py).
    assert 'the first N epochs train the heads alone' in text
    assert '--fine-tune-learning-rate FINE_TUNE_LEARNING_RATE with --init-from' in text


def test_a_misspelt_or_wrong_flag_is_refused_in_words(capsys, tmp_path):
    with pytest.raises(SystemExit):
        config_lib.parse_train_args(['--data', 'd', '--job-dir', 'j', '--batch_size', '8'])
    assert 'unknown flag --batch_size: did you mean --batch-size?' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        config_lib.parse_train_args(['--data', 'd', '--job-dir', 'j', '--crop-area', '0.5'])
    assert 'expected two numbers min,max such as 0.5,1' in capsys.readouterr().err
    config = tmp_path / 'train.yaml'
    config.write_text('epochs: many\n')
    with pytest.raises(ValueError, match=f"{config}: epochs: expected a whole number, got 'many'"):
        config_lib.parse_train_args(['--config', str(config), '--data', 'd', '--job-dir', 'j'])


def test_the_crop_range_suits_the_training_set():
    assert input_options.resolve_crop_area('auto', 1_437) == (0.5, 1.0)
    assert input_options.resolve_crop_area('auto', 1_281_167) == (0.08, 1.0)  # ImageNet's recipe
    assert input_options.resolve_crop_area((0.2, 0.9), 10) == (0.2, 0.9)
    # Multi-label: whole images, in training and evaluation (bench/multilabel_crops.py).
    assert input_options.resolve_crop_area('auto', 1_281_167, multi_label=True) == (1.0, 1.0)
    assert input_options.resolve_eval_crop('auto') == 0.875
    assert input_options.resolve_eval_crop('auto', multi_label=True) == 1.0
    assert input_options.resolve_eval_crop(0.9, multi_label=True) == 0.9
    with pytest.raises(ValueError, match=r'expected auto or a share of each side in \(0, 1\]'):
        input_options.parse_eval_crop('1.5')


@pytest.fixture(scope='module')
def digits_build(tmp_path_factory):
    """scikit-learn's 1,797 digits (8x8, upscaled) in train, val and test splits."""
    from imageshards_cli import sample_data  # pylint: disable=import-outside-toplevel
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    tree = tmp_path_factory.mktemp('digits')
    sample_data.write_digits(str(tree))
    out = tmp_path_factory.mktemp('digits_build') / 'out'
    launcher.run(
        ['--input', str(tree), '--output', str(out), '--splits', 'train=0.8,val=0.1,test=0.1']
        + ['--direct_running_mode=in_memory']
    )
    return out


def test_defaults_train_a_small_set_well_and_evaluate_its_test_split(digits_build, tmp_path):
    # The new user's run of issue 15: small_cnn, 28 px, 8 epochs, nothing else set.
    flags = ['--data', str(digits_build), '--job-dir', str(tmp_path), '--image-size', '28']
    metrics = train_lib.train(config_lib.parse_train_args([*flags, '--epochs', '8']))
    assert metrics['crop_area'] == [0.5, 1.0] and metrics['eval_crop'] == 0.875
    assert metrics['accuracy'] >= 0.85, metrics  # 0.66 with ImageNet's 8% crops
    # 180 images each: one of them is half a point.
    assert (metrics['val_accuracy'] + metrics['test_accuracy']) / 2 >= 0.94, metrics
    written = json.loads((tmp_path / 'metrics.json').read_text())
    assert written['test_accuracy'] == pytest.approx(metrics['test_accuracy'])


def test_one_class_is_warned_at_build_and_refused_at_training(tmp_path, caplog):
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    import images_for_tests  # pylint: disable=import-outside-toplevel

    images_for_tests.write_tree(tmp_path / 'in', 8, ('only',))
    out = tmp_path / 'out'
    launcher.run(['--input', str(tmp_path / 'in'), '--output', str(out), '--no-analyze'])
    assert "every input has the label 'only': a classifier cannot learn" in caplog.text
    with pytest.raises(ValueError, match=r'only one label value \(only\): a classifier needs'):
        train_lib.train(_config(out, tmp_path / 'job', '--epochs', '1'))
