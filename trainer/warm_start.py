"""`--init-from SOURCE`: a new model starts from trained weights, copied layer by layer.

Every source is read as {weight path: values}, the path being Keras' (`conv1_conv/kernel`,
`logits/bias`: the layer's name, then the weight's; trainer/model.py names every layer):
    imagenet          the --model's keras.applications weights (`weights='imagenet'`: Keras
                      downloads them into its cache, ~/.keras/models, or finds them there)
    a job directory   an earlier run's --job-dir: its exported model (`model/`), else its newest
                      checkpoint's best weights (trainer/best_epoch.py); its `checkpoints/
                      run.json` names the classes of its heads
    a SavedModel      a folder with saved_model.pb: its variables, by name
    FILE.keras        a saved Keras model: its layers' weights
    FILE.h5           a Keras HDF5 weights or model file (the keras.applications downloads):
                      weights by layer name
A layer of the new model is copied when the source has every one of its weights, shapes equal.
A head (`logits`, `<level>_logits`) is copied only from a job on the same classes; otherwise it
is new, as is any layer the source lacks. Nothing copied but heads: refused in one line.
"""

import logging
import os
import posixpath
import re

import h5py
import keras
import numpy as np
import tensorflow as tf

from trainer import best_epoch
from trainer import job
from trainer import model as model_lib
from trainer import recipe

_LOG = logging.getLogger(__name__)
IMAGENET = 'imagenet'
_FETCH_FAILED = re.compile(r'URL fetch failure on (\S+?):? ')


def apply(model, source, config, head_classes) -> dict:
    """Copies the weights of `source` into `model`; returns what was copied and what is new
    ({'source', 'copied_layers', 'new_layers', 'differing_layers'}), also logged.

    Args:
        config: the TrainConfig (its model and image size name what `imagenet` means).
        head_classes: {head layer name: class names} of `model`.

    Raises:
        ValueError: the source cannot be read, or no layer but heads matches.
    """
    weights, classes = read(source, config.model, config.image_size)
    copied, new, differing = [], [], []
    for layer in recipe.layers_with_weights(model):
        found = [weights.get(weight.path) for weight in layer.weights]
        if any(value is None for value in found):
            new.append(layer.name)
            continue
        same = all(tuple(v.shape) == tuple(w.shape) for v, w in zip(found, layer.weights))
        if model_lib.is_head(layer.name):
            theirs, ours = classes.get(layer.name), head_classes.get(layer.name, ())
            same = same and theirs is not None and tuple(theirs) == tuple(ours)
        if not same:
            differing.append(layer.name)
            continue
        for weight, value in zip(layer.weights, found):
            weight.assign(np.asarray(value).astype(weight.dtype))
        copied.append(layer.name)
    if not [name for name in copied if not model_lib.is_head(name)]:
        raise ValueError(
            f'--init-from {source}: none of its layers fits --model {config.model} (by name and '
            f'shape): start from weights of the same kind of model'
        )
    report = {'source': source, 'copied_layers': len(copied), 'new_layers': new + differing}
    _LOG.info(
        'started from %s: copied %d layers with weights; new: %s',
        source,
        len(copied),
        ', '.join(new + differing) or 'none',
    )
    return report


def read(source, model_name, image_size) -> tuple:
    """({weight path: array}, {head layer name: class names, where the source says}) of
    `source` (see the module docstring)."""
    if source == IMAGENET:
        return _imagenet(model_name, image_size), {}
    if tf.io.gfile.isdir(source):
        return _folder(source)
    if source.endswith('.weights.h5'):
        raise ValueError(
            f'--init-from {source}: a Keras 3 weights file holds no layer names, only its '
            f"model's structure; give the model saved whole (model.save('x.keras')) or its job "
            f'directory'
        )
    if not tf.io.gfile.exists(source):
        raise ValueError(f'--init-from {source}: no such file or directory')
    if source.endswith('.keras'):
        try:
            loaded = keras.saving.load_model(source, compile=False)
        except (TypeError, ValueError) as e:
            raise ValueError(
                f'--init-from {source}: Keras cannot load it ({str(e).splitlines()[0]})'
            ) from e
        return {weight.path: weight.numpy() for weight in loaded.weights}, {}
    if source.endswith(('.h5', '.hdf5')):
        return _hdf5(source), {}
    raise ValueError(
        f'--init-from {source}: expected imagenet, a job or SavedModel folder, a .keras file or '
        f'a .h5 weights file'
    )


def _imagenet(model_name, image_size):
    if model_name == 'small_cnn':
        raise ValueError(
            '--init-from imagenet: small_cnn has no ImageNet weights; choose a '
            'keras.applications --model (resnet50, efficientnet_b0, ...)'
        )
    constructor = model_lib.application_name(model_name)
    try:
        source = getattr(keras.applications, constructor)(
            include_top=False, weights=IMAGENET, input_shape=(*image_size, 3), pooling='avg'
        )
    except Exception as e:  # noqa: BLE001 (Keras raises a bare Exception when it cannot fetch)
        fetched = _FETCH_FAILED.search(str(e))
        if not fetched:
            raise
        name = fetched.group(1).rsplit('/', 1)[-1]
        cache = os.path.join(os.path.expanduser(os.environ.get('KERAS_HOME', '~/.keras')), 'models')
        raise ValueError(
            f'--init-from imagenet: could not download {constructor} weights ({fetched.group(1)}) '
            f'and {cache} does not hold {name}: copy that file there, or give its path '
            f'(--init-from /path/{name})'
        ) from None
    return {weight.path: weight.numpy() for weight in source.weights}


def _folder(path):
    """A job directory's or a SavedModel's weights, and a job's head classes."""
    if tf.io.gfile.exists(posixpath.join(path, 'saved_model.pb')):
        return _saved_model(path), {}
    model_dir = posixpath.join(path, 'model')
    checkpoints = posixpath.join(path, 'checkpoints')
    run = job.read_run(checkpoints) or {}
    classes = {name: tuple(names) for name, names in run.get('head_classes', {}).items()}
    if tf.io.gfile.exists(posixpath.join(model_dir, 'saved_model.pb')):
        return _saved_model(model_dir), classes
    latest = tf.train.latest_checkpoint(checkpoints)
    if latest:
        return _checkpoint_best(latest), classes
    raise ValueError(
        f'--init-from {path}: neither a SavedModel nor a job directory (no model/saved_model.pb, '
        f'no checkpoints/)'
    )


def _saved_model(path):
    loaded = tf.saved_model.load(path)
    return {variable.name.split(':')[0]: variable.numpy() for variable in loaded.variables}


def _checkpoint_best(path):
    """The best epoch's weights that a trainer checkpoint holds (trainer/best_epoch.py)."""
    reader = tf.train.load_checkpoint(path)
    prefix, suffix = f'{best_epoch.STATE}/weights/', '/.ATTRIBUTES/VARIABLE_VALUE'
    if int(reader.get_tensor(f'{best_epoch.STATE}/epoch{suffix}')) < 0:
        raise ValueError(f'--init-from {path}: the job has not finished an epoch yet')
    return {
        _unescape(key[len(prefix) : -len(suffix)]).rstrip('#'): reader.get_tensor(key)
        for key in reader.get_variable_to_shape_map()
        if key.startswith(prefix) and key.endswith(suffix)
    }


def _unescape(name):
    """A checkpoint's object name as it was given (TensorFlow writes `/` as `.S`, `.` as `..`)."""
    return re.sub(r'\.(.)', lambda m: '/' if m.group(1) == 'S' else m.group(1), name)


def _hdf5(path):
    """{weight path: array} of a Keras HDF5 file: layer groups listing their weights' names
    (`layer_names`, `weight_names`), at the top or under `model_weights`."""
    with h5py.File(tf.io.gfile.GFile(path, 'rb'), 'r') as f:
        group = f['model_weights'] if 'model_weights' in f else f
        if 'layer_names' not in group.attrs:
            raise ValueError(f'--init-from {path}: not a Keras HDF5 weights file (no layer_names)')
        found = {}
        for layer in _names(group.attrs['layer_names']):
            for name in _names(group[layer].attrs.get('weight_names', [])):
                weight = name.split(':')[0]
                found[weight if '/' in weight else f'{layer}/{weight}'] = group[layer][name][()]
        return found


def _names(values):
    return [value.decode('utf-8') if isinstance(value, bytes) else str(value) for value in values]
