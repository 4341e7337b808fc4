"""--init-from: a model starts from trained weights, copied by layer from each kind of source, and
the recipe then trains the heads alone, then everything, BatchNorm statistics kept."""

import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from trainer import config as config_lib
from trainer import heads as heads_lib
from trainer import job
from trainer import train as train_lib
from trainer import warm_start
from trainer.model import build_model

SIZE = '16'
CONVS = ('block1_conv', 'block2_conv', 'block3_conv')
BATCH_NORMS = ('block1_bn', 'block2_bn', 'block3_bn')


def _config(data, job_dir, *flags):
    return config_lib.parse_train_args(
        ['--data', str(data), '--job-dir', str(job_dir), '--image-size', SIZE]
        + ['--batch-size', '8', '--crop-area', '0.5,1', '--checkpoint-every', '0', *flags]
    )


@pytest.fixture(scope='module')
def source_job(color_builds, tmp_path_factory):
    """A small_cnn trained for two epochs on the four colours: its job directory."""
    job_dir = tmp_path_factory.mktemp('source_job')
    train_lib.train(_config(color_builds['examples'], job_dir, '--epochs', '2'))
    return job_dir


@pytest.fixture(scope='module')
def other_classes(tmp_path_factory):
    """A build of three other classes (cat, dog, fish), a few images each."""
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    import images_for_tests  # pylint: disable=import-outside-toplevel

    root = tmp_path_factory.mktemp('other_tree')
    images_for_tests.write_tree(root, 16, ('cat', 'dog', 'fish'), start=500)
    out = tmp_path_factory.mktemp('other_build') / 'out'
    launcher.run(
        ['--input', str(root), '--output', str(out), '--splits', 'train=0.75,val=0.25']
        + ['--num-shards', '2', '--direct_running_mode=in_memory']
    )
    return out


def _best(job_dir):
    """The best epoch's weights of a job's newest checkpoint, by path."""
    weights, _ = warm_start.read(str(job_dir), 'small_cnn', (16, 16))
    return weights


def _last(job_dir, classes):
    """The weights of a job's newest checkpoint (its last epoch), by path."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    model = build_model('small_cnn', classes, (16, 16))
    latest = tf.train.latest_checkpoint(str(job_dir / 'checkpoints'))
    tf.train.Checkpoint(model=model).restore(latest).expect_partial()
    return {weight.path: weight.numpy() for weight in model.weights}


def test_a_job_starts_another_with_its_backbone_then_trains_heads_then_all_of_it(
    source_job, other_classes, tmp_path
):
    # The model is exported: the source is read from model/ (the SavedModel of the best epoch).
    source = warm_start._folder(str(source_job))[0]  # pylint: disable=protected-access
    flags = ['--init-from', str(source_job), '--frozen-epochs', '1']
    frozen = train_lib.train(_config(other_classes, tmp_path, *flags, '--epochs', '1'))
    assert frozen['init_from'] == {
        'source': str(source_job),
        'copied_layers': 6,
        'new_layers': ['logits'],  # four colours there, three animals here
    }
    after_frozen = _best(tmp_path)
    for name in CONVS + BATCH_NORMS:  # frozen, and BatchNorm in inference mode
        for weight in (
            ('kernel',) if 'conv' in name else ('gamma', 'moving_mean', 'moving_variance')
        ):
            np.testing.assert_array_equal(
                after_frozen[f'{name}/{weight}'], source[f'{name}/{weight}']
            )
    assert after_frozen['logits/kernel'].shape == (128, 3)
    # A rerun with more epochs resumes at the switch: now everything but BatchNorm trains.
    whole = train_lib.train(_config(other_classes, tmp_path, *flags, '--epochs', '3'))
    assert whole['steps'] == 3 * whole['steps_per_epoch']
    assert whole['init_from'] == frozen['init_from']  # said again after a resume
    after_whole = _last(tmp_path, 3)
    for name in CONVS:
        assert not np.array_equal(after_whole[f'{name}/kernel'], source[f'{name}/kernel']), name
    for name in BATCH_NORMS:
        for weight in ('gamma', 'beta', 'moving_mean', 'moving_variance'):
            np.testing.assert_array_equal(
                after_whole[f'{name}/{weight}'], source[f'{name}/{weight}']
            )
    written = json.loads((tmp_path / 'metrics.json').read_text())
    assert 1 <= written['best_epoch'] <= 3 and written['selected_by'] == 'val_loss'


def _model_of(build_dir, config):
    from trainer import dataset_info  # pylint: disable=import-outside-toplevel

    info = dataset_info.load(str(build_dir))
    heads = heads_lib.model_heads(info, ())
    return build_model('small_cnn', info.num_classes, config.image_size, heads=heads), heads


def test_a_job_on_the_same_classes_gives_its_heads_too(source_job, color_builds, tmp_path):
    config = _config(color_builds['examples'], tmp_path, '--init-from', str(source_job))
    model, heads = _model_of(color_builds['examples'], config)
    report = warm_start.apply(model, str(source_job), config, job.head_classes(heads))
    assert report['copied_layers'] == 7 and report['new_layers'] == []
    np.testing.assert_array_equal(
        model.get_layer('logits').kernel.numpy(), _best(source_job)['logits/kernel']
    )


def _legacy_hdf5(model, path):
    """`model`'s weights in Keras' HDF5 weights format (the keras.applications downloads'):
    a group per layer, its `weight_names` attribute naming its datasets."""
    with h5py.File(path, 'w') as f:
        layers = [layer for layer in model.layers if layer.weights]
        f.attrs['layer_names'] = [layer.name.encode() for layer in layers]
        for layer in layers:
            group = f.create_group(layer.name)
            names = [f'{layer.name}/{w.name}:0' for w in layer.weights]
            group.attrs['weight_names'] = [name.encode() for name in names]
            for name, weight in zip(names, layer.weights):
                group.create_dataset(name, data=weight.numpy())


def test_every_kind_of_source_gives_the_same_layers(color_builds, tmp_path):
    config = _config(color_builds['examples'], tmp_path)
    source, _ = _model_of(color_builds['examples'], config)
    source.save(tmp_path / 'model.keras')
    source.export(str(tmp_path / 'saved_model'), verbose=False)
    _legacy_hdf5(source, tmp_path / 'weights.h5')
    expected = {weight.path: weight.numpy() for weight in source.weights}
    for path in ('model.keras', 'saved_model', 'weights.h5'):
        weights, classes = warm_start.read(str(tmp_path / path), 'small_cnn', (16, 16))
        assert expected.keys() <= weights.keys(), path  # (a SavedModel has dropout's seed too)
        for name, value in expected.items():
            np.testing.assert_array_equal(weights[name], value, err_msg=f'{path}: {name}')
        assert classes == {}  # no source but a job says what its classes are
        model, heads = _model_of(color_builds['examples'], config)
        report = warm_start.apply(model, str(tmp_path / path), config, job.head_classes(heads))
        assert (report['copied_layers'], report['new_layers']) == (6, ['logits']), path


def test_sources_that_cannot_start_a_model_are_refused_in_one_line(color_builds, tmp_path):
    config = _config(color_builds['examples'], tmp_path)
    model, heads = _model_of(color_builds['examples'], config)
    classes = job.head_classes(heads)
    other = build_model('mobilenet_v3_small', 4, (32, 32))
    other.save(tmp_path / 'mobile.keras')
    with pytest.raises(
        ValueError, match=r'mobile.keras: none of its layers fits --model small_cnn'
    ):
        warm_start.apply(model, str(tmp_path / 'mobile.keras'), config, classes)
    model.save_weights(tmp_path / 'w.weights.h5')
    with pytest.raises(ValueError, match=r'a Keras 3 weights file holds no layer names'):
        warm_start.apply(model, str(tmp_path / 'w.weights.h5'), config, classes)
    with pytest.raises(ValueError, match=r'--init-from .*missing: no such file or directory'):
        warm_start.apply(model, str(tmp_path / 'missing'), config, classes)
    with pytest.raises(ValueError, match=r'neither a SavedModel nor a job directory'):
        warm_start.apply(model, str(tmp_path), config, classes)
    with pytest.raises(ValueError, match=r'small_cnn has no ImageNet weights'):
        warm_start.apply(model, 'imagenet', config, classes)


def test_imagenet_without_a_network_or_a_cached_file_says_where_the_file_goes(
    color_builds, tmp_path
):
    env = dict(
        os.environ,
        KERAS_HOME=str(tmp_path / 'keras'),
        https_proxy='http://127.0.0.1:9',  # nothing listens: the download fails at once
        HTTPS_PROXY='http://127.0.0.1:9',
        PYTHONPATH=os.pathsep.join(sys.path),
    )
    flags = ['--model', 'mobilenet_v3_small', '--init-from', 'imagenet', '--image-size', '32']
    done = subprocess.run(
        [sys.executable, '-m', 'trainer.task', '--data', str(color_builds['examples'])]
        + ['--job-dir', str(tmp_path / 'job'), '--epochs', '1', *flags],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert 'could not download MobileNetV3Small weights' in error, done.stderr
    name = 'weights_mobilenet_v3_small_224_1.0_float_no_top_v2.h5'
    assert f'{tmp_path / "keras"}/models does not hold {name}' in error
    assert f'--init-from /path/{name}' in error


def test_keras_applications_models_by_name_with_their_own_preprocessing(tf):
    from trainer import model as model_lib  # pylint: disable=import-outside-toplevel

    assert model_lib.application_name('resnet50') == 'ResNet50'
    assert model_lib.application_name('efficientnet_b0') == 'EfficientNetB0'
    assert model_lib.application_name('MobileNet_V3_Small') == 'MobileNetV3Small'
    with pytest.raises(
        ValueError, match='--model resnet51: not small_cnn nor a keras.applications'
    ):
        model_lib.application_name('resnet51')
    red = tf.constant([[[[255, 0, 0]]]], tf.uint8)
    # ResNet's caffe-style input: BGR, the ImageNet mean taken off.
    caffe = model_lib.ApplicationPreprocessing('ResNet50')(red).numpy().ravel()
    np.testing.assert_allclose(caffe, [-103.939, -116.779, 255 - 123.68], rtol=1e-5)
    mobile = model_lib.ApplicationPreprocessing('MobileNetV2')(red).numpy().ravel()
    np.testing.assert_allclose(mobile, [1, -1, -1])  # [-1, 1]
