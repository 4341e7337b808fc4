"""Training end to end on CPU: it learns, exports a faithful SavedModel, and resumes."""

import json

import numpy as np
import pytest

from imageshards import features
from imageshards import tfrecord
from trainer import config as config_lib
from trainer import input as input_lib
from trainer import train as train_lib
from trainer import transform
from trainer.dataset_info import DatasetInfo
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
        config.model, info.num_classes, config.image_size, transform_output=transform.load(info)
    )
    checkpoint = tf.train.Checkpoint(model=model)
    checkpoint.restore(tf.train.latest_checkpoint(config.resolved_checkpoint_dir)).expect_partial()
    return model


def test_exported_model_serves_raw_bytes_like_the_evaluation_pipeline(tf, trained):
    config, _ = trained
    info = DatasetInfo.load(config.data)
    model = _restored_model(config, info)
    served = tf.saved_model.load(config.resolved_model_dir).signatures['serving_default']
    evaluation = input_lib.make_dataset(
        config.data, 'val', 16, training=False, image_size=config.image_size
    )
    expected = np.concatenate([model(images, training=False).numpy() for images, _ in evaluation])
    encoded = []
    for path in info.shard_paths('val'):  # the same records, in the pipeline's order
        with open(path, 'rb') as f:
            encoded.append(
                [
                    features.example_class()
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
    again = train_lib.train(_config(color_builds['examples'], tmp_path, '--epochs', '2'))
    assert again['steps'] == 2 * per_epoch  # nothing left to do


def test_phases_of_a_resumed_run():
    assert train_lib._phases(0, 0, 3) == [(0, 3, 0)]  # pylint: disable=protected-access
    assert train_lib._phases(1, 4, 3) == [(1, 2, 4), (2, 3, 0)]
    assert train_lib._phases(2, 4, 3) == [(2, 3, 4)]
    assert train_lib._phases(3, 0, 3) == []


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
    assert config_lib.parse_image_size('160,224') == (160, 224)
