"""The tf.Transform graphs of earlier local builds, reused: a build with the analysis writes
its tf.Transform output without TensorFlow where one of the same kind was written before.

A build's transform graph (imageshards/transform.py) reads what depends on its data, the label
vocabulary and the pixel statistics, from two asset files as it loads
(imageshards/transform_assets.py). The rest of transform_fn/, transformed_metadata/ and
metadata/ is TFT's output for any build of the same

    format, label levels, image size and number of labels (the label's schema domain),
    with the same versions of TensorFlow and tensorflow-transform and of the code that
    makes the graph,

which make the key. After the helper process has written a build's output with TFT
(pipelines/transform_output.py), the launcher keeps a copy under the key, and a later build of
the same key copies it and writes its own two assets: no TensorFlow import (~3 s of CPU and
~700 MB on the 2-core machine of bench/RESULTS.md), no TFT pipeline (~2.5 s of CPU). Tests
hold such an output to the one TFT writes for the same build (tests/test_transform_cache.py).

Where: $IMAGESHARDS_CACHE_DIR/transform/, by default ~/.cache/imageshards/transform/
($XDG_CACHE_HOME respected). Deleting it between builds is safe: the next build writes it again
(a build that copies from it as it goes fails, and says so).
"""

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile

from imageshards import layout
from imageshards import storage
from imageshards import transform_assets

_LOG = logging.getLogger(__name__)
ENV = 'IMAGESHARDS_CACHE_DIR'
KEY_JSON = 'key.json'  # in each cached output: what its key was made of, for people
# The code whose change changes the graph or its metadata.
_SOURCES = (
    'imageshards.transform',
    'imageshards.transform_assets',
    'imageshards.decode',
    'imageshards.features',
    'pipelines.transform_output',
)
_PACKAGES = ('tensorflow', 'tensorflow-transform')


def cache_dir():
    """Where cached tf.Transform outputs are kept."""
    root = os.environ.get(ENV) or os.path.join(
        os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache'),
        'imageshards',
    )
    return os.path.join(root, 'transform')


def kind(fmt, levels, image_size):
    """What the graph is made of, but for the number of labels: a folder of the cache."""
    parts = {
        'format': fmt,
        'label_levels': list(levels),
        'image_size': image_size,
        'versions': {name: _version(name) for name in _PACKAGES},
        'sources': {name: _source_digest(name) for name in _SOURCES},
    }
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode('utf-8')).hexdigest()[:20]
    return digest, parts


def find(settings):
    """The cached output for `settings` (transform_output.settings()), or None."""
    path = _path(settings)
    whole = os.path.isfile(os.path.join(path, layout.TRANSFORM_SAVED_MODEL)) and all(
        os.path.isdir(os.path.join(path, name)) for name in layout.TRANSFORM_DIRS
    )
    return path if whole else None


def has_kind(fmt, levels, image_size):
    """Whether any output of this kind is cached (for some number of labels): a guess, before
    the inputs are listed, whether the build will find one."""
    folder = os.path.join(cache_dir(), kind(fmt, levels, image_size)[0])
    return os.path.isdir(folder) and any(os.scandir(folder))


def keep(staging_dir, settings):
    """Copies the tf.Transform output staged in `staging_dir` (by TFT, for `settings`) into the
    cache, unless it is there already; a failure to do so is only logged."""
    path = _path(settings)
    if os.path.exists(path) or storage.is_uri(staging_dir):
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        scratch = tempfile.mkdtemp(prefix='.incoming-', dir=os.path.dirname(path))
        for name in layout.TRANSFORM_DIRS:
            shutil.copytree(os.path.join(staging_dir, name), os.path.join(scratch, name))
        for name in transform_assets.NAMES:  # this build's: written anew by each build
            os.remove(os.path.join(scratch, layout.TRANSFORM_ASSETS, name))
        parts = dict(kind(settings['format'], settings['levels'], settings['image_size'])[1])
        parts['num_labels'] = len(settings['labels'])
        with open(os.path.join(scratch, KEY_JSON), 'w', encoding='utf-8') as f:
            json.dump(parts, f, indent=2, sort_keys=True)
        try:
            os.rename(scratch, path)  # atomic: a build finds all of it or none
        except OSError:  # another build kept one first
            shutil.rmtree(scratch, ignore_errors=True)
    except OSError as error:
        _LOG.warning('could not keep the tf.Transform graph in %s: %s', path, error)


def write(cached, staging_dir, labels, analysis):
    """Writes a build's tf.Transform output into the local folder `staging_dir` from the
    `cached` one: its files, and the build's label vocabulary (`labels`) and pixel statistics
    (`analysis`, dataset.json's entry) as the assets."""
    for name in layout.TRANSFORM_DIRS:
        shutil.copytree(os.path.join(cached, name), os.path.join(staging_dir, name))
    assets = {
        transform_assets.LABEL_VOCABULARY: transform_assets.vocabulary_text(labels),
        transform_assets.PIXEL_STATISTICS: transform_assets.statistics_text(analysis),
    }
    for name, content in assets.items():
        with open(os.path.join(staging_dir, layout.TRANSFORM_ASSETS, name), 'wb') as f:
            f.write(content)


def _path(settings):
    digest = kind(settings['format'], settings['levels'], settings['image_size'])[0]
    return os.path.join(cache_dir(), digest, f'labels-{len(settings["labels"])}')


def _version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _source_digest(module):
    with open(importlib.util.find_spec(module).origin, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()
