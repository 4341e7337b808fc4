"""The tf.Transform graphs of earlier local builds, reused: a build with the analysis writes
its tf.Transform output without TensorFlow where one of the same kind was written before.

A build's transform graph (imageshards/tft_preprocessing.py) reads what depends on its data,
the label vocabulary and the pixel statistics, from two asset files as it loads
(imageshards/tft_assets.py). The rest of transform_fn/, transformed_metadata/ and
metadata/ is TFT's output for any build of the same

    record kind as the graph reads it (its format, label levels, multi-label: `RecordKind.core`)
    and image size,
    with the same versions of TensorFlow and tensorflow-transform and of the code that
    makes the graph,

which make the key, but for one number: the label's domain in transformed_metadata's schema (ids -1
to the number of labels less one), which `write` sets for the build. After the graph process has
written a build's graph with TFT (pipelines/analysis/tft_pipeline.py), the launcher keeps a copy
under the key, and every build of the same key copies it and writes its own two assets and that
number: no TensorFlow import and no TFT pipeline, seconds of CPU and hundreds of MB
(bench/RESULTS.md, "Against the peers, with the tf.Transform graph reused"). Tests hold such an
output to the one TFT writes for the same build, with another number of labels
(tests/test_graph_cache.py).

Where: $IMAGESHARDS_CACHE_DIR/transform/, by default ~/.cache/imageshards/transform/
($XDG_CACHE_HOME respected). Deleting it between builds is safe: the next build writes it again
(a build that copies from it as it goes fails, and says so).

The package also ships the graphs of the default kinds (`imageshards build`'s defaults, in
either format, with the versions of TensorFlow and tensorflow-transform that setup.py pins), in
pipelines/analysis/transform_graphs/: a fresh machine or container, whose cache is empty, builds
without TensorFlow too. It is looked up under the same key, so it serves only where the code
and versions are those that wrote it; a test fails when they change, and

    python -m pipelines.analysis.graph_cache package

writes it again (with TFT, as the graph process does). IMAGESHARDS_PACKAGED_GRAPHS=0 ignores it.
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
from imageshards import tft_assets
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from pipelines.core.settings import BuildConfig
from pipelines.core.settings import InputSettings
from pipelines.core.settings import TransformSettings

_LOG = logging.getLogger(__name__)
ENV = 'IMAGESHARDS_CACHE_DIR'
PACKAGED_ENV = 'IMAGESHARDS_PACKAGED_GRAPHS'  # '0': ignore the graphs the package ships
PACKAGED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'transform_graphs')
# The kinds whose graphs the package ships: `imageshards build`'s defaults, in either format.
SHIPPED_KINDS = tuple(
    (kinds.Classification(fmt, levels=InputSettings.label_levels), BuildConfig.transform_image_size)
    for fmt in (features.EXAMPLES, features.PATHS)
)
KEY_JSON = 'key.json'  # in each cached output: what its key was made of, for people
# The code whose change changes the graph or its metadata.
_SOURCES = (
    'imageshards.tft_preprocessing',
    'imageshards.tft_assets',
    'imageshards.decode',
    'imageshards.kinds.features',
    'imageshards.kinds.record_kind',
    'imageshards.kinds.classification',
    'pipelines.analysis.tft_pipeline',
)
_PACKAGES = ('tensorflow', 'tensorflow-transform')
_GRAPH = 'graph'  # the output's folder in its kind's, whatever the number of labels
_TRANSFORMED_SCHEMA = f'{layout.TRANSFORMED_METADATA_DIR}/schema.pbtxt'
LABEL_OUTPUT = 'label'  # imageshards/tft_preprocessing.py's LABEL (that module imports TensorFlow)


def cache_dir() -> str:
    """Where cached tf.Transform outputs are kept."""
    root = os.environ.get(ENV) or os.path.join(
        os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache'),
        'imageshards',
    )
    return os.path.join(root, 'transform')


def key(record_kind, image_size) -> tuple:
    """(digest, parts) of the graph of a record kind (as the graph reads it: `RecordKind.core`)
    and image size: its folder of the cache, and what its key is made of."""
    parts = {
        **({} if record_kind.name == kinds.DEFAULT else {'kind': record_kind.name}),
        'format': record_kind.format,
        'label_levels': list(getattr(record_kind, 'levels', ())),
        'image_size': image_size,
        **({'multi_label': True} if record_kind.multi_label else {}),
        'versions': {name: _version(name) for name in _PACKAGES},
        'sources': {name: _source_digest(name) for name in _SOURCES},
    }
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode('utf-8')).hexdigest()[:20]
    return digest, parts


def find(settings) -> str | None:
    """The cached (or shipped) output for `settings` (a TransformSettings), or None."""
    for path in _paths(settings.kind, settings.image_size):
        whole = os.path.isfile(os.path.join(path, layout.TRANSFORM_SAVED_MODEL)) and all(
            os.path.isdir(os.path.join(path, name)) for name in layout.TRANSFORM_DIRS
        )
        if whole:
            return path
    return None


def has_kind(record_kind, image_size) -> bool:
    """Whether an output of this kind is cached (or shipped): what the build will find, known
    before the inputs are listed (but for a cache changed meanwhile)."""
    return any(os.path.isdir(path) for path in _paths(record_kind.core(), image_size))


def guessed_kind(config) -> kinds.RecordKind:
    """The record kind a build of `config` (its BuildConfig, before its inputs are listed) most
    likely has: a classification of its format and --label-levels, single-label."""
    return kinds.Classification(config.format, levels=tuple(config.inputs.label_levels))


def describe(path) -> str:
    """Where a graph that `find` found comes from, in words for the build's log."""
    with open(os.path.join(path, KEY_JSON), encoding='utf-8') as f:
        parts = json.load(f)
    what = f'{parts["format"]}, image size {parts["image_size"]}'
    if parts['label_levels']:
        what += f', label levels {",".join(parts["label_levels"])}'
    if parts.get('multi_label'):
        what += ', multi-label'
    if os.path.commonpath([os.path.abspath(path), PACKAGED_DIR]) == PACKAGED_DIR:
        return f'the one imageshards ships for this kind ({what}); no TensorFlow needed'
    return (
        f'kept from an earlier build of this kind ({what}) in {os.path.dirname(path)}; '
        'no TensorFlow needed'
    )


def _paths(record_kind, image_size):
    """Where an output of this kind is looked for: the cache, then the package."""
    digest = key(record_kind, image_size)[0]
    paths = [os.path.join(cache_dir(), digest, _GRAPH)]
    if os.environ.get(PACKAGED_ENV, '1') != '0':
        paths.append(os.path.join(PACKAGED_DIR, digest, _GRAPH))
    return paths


def keep(staging_dir, settings, root=None) -> None:
    """Copies the tf.Transform output staged in `staging_dir` (by TFT, for `settings`) into the
    cache (or the folder `root`), unless it is there already; a failure to do so is only
    logged."""
    digest, parts = key(settings.kind, settings.image_size)
    path = os.path.join(root or cache_dir(), digest, _GRAPH)
    if os.path.exists(path) or storage.is_uri(staging_dir):
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        scratch = tempfile.mkdtemp(prefix='.incoming-', dir=os.path.dirname(path))
        for name in layout.TRANSFORM_DIRS:
            shutil.copytree(os.path.join(staging_dir, name), os.path.join(scratch, name))
        for name in tft_assets.NAMES:  # this build's: written anew by each build
            os.remove(os.path.join(scratch, layout.TRANSFORM_ASSETS, name))
        with open(os.path.join(scratch, KEY_JSON), 'w', encoding='utf-8') as f:
            json.dump(parts, f, indent=2, sort_keys=True)
        try:
            os.rename(scratch, path)  # atomic: a build finds all of it or none
        except OSError:  # another build kept one first
            shutil.rmtree(scratch, ignore_errors=True)
    except OSError as error:
        _LOG.warning('could not keep the tf.Transform graph in %s: %s', path, error)


def write(cached, staging_dir, labels, analysis) -> None:
    """Writes a build's tf.Transform output into the local folder `staging_dir` from the
    `cached` one: its files, and the build's label vocabulary (`labels`) and pixel statistics
    (`analysis`, dataset.json's entry) as the assets."""
    for name in layout.TRANSFORM_DIRS:
        shutil.copytree(os.path.join(cached, name), os.path.join(staging_dir, name))
    assets = {
        tft_assets.LABEL_VOCABULARY: tft_assets.vocabulary_text(labels),
        tft_assets.PIXEL_STATISTICS: tft_assets.statistics_text(analysis),
    }
    os.makedirs(os.path.join(staging_dir, layout.TRANSFORM_ASSETS), exist_ok=True)  # (git
    # keeps no empty folder: the shipped graph has none)
    for name, content in assets.items():
        with open(os.path.join(staging_dir, layout.TRANSFORM_ASSETS, name), 'wb') as f:
            f.write(content)
    _set_label_domain(os.path.join(staging_dir, _TRANSFORMED_SCHEMA), len(labels))


def _set_label_domain(path, num_labels):
    """Sets the `label` output's domain in a transformed schema to this build's ids, -1 (no
    such label) to num_labels - 1, as TFT writes it for a vocabulary of num_labels."""
    # pylint: disable=import-outside-toplevel
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    with open(path, encoding='utf-8') as f:
        schema = text_format.Parse(f.read(), schema_pb2.Schema())
    for feature in schema.feature:
        if feature.name == LABEL_OUTPUT and feature.HasField('int_domain'):
            feature.int_domain.max = num_labels - 1
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text_format.MessageToString(schema))


def _version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _source_digest(module):
    with open(importlib.util.find_spec(module).origin, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def package() -> None:
    """Writes the graphs of SHIPPED_KINDS with TFT into PACKAGED_DIR, in place of any others."""
    # pylint: disable=import-outside-toplevel
    from pipelines.analysis import tft_pipeline

    shutil.rmtree(PACKAGED_DIR, ignore_errors=True)
    for record_kind, image_size in SHIPPED_KINDS:
        with tempfile.TemporaryDirectory(prefix='imageshards-package-') as work:
            settings = TransformSettings(
                labels=('label',),
                kind=record_kind,
                image_size=image_size,
                staging_dir=os.path.join(work, 'staging'),
                temp_dir=os.path.join(work, 'tmp'),
            )
            tft_pipeline.write(settings)
            keep(settings.staging_dir, settings, root=PACKAGED_DIR)
        print(f'wrote {os.path.join(PACKAGED_DIR, key(record_kind, image_size)[0], _GRAPH)}')


if __name__ == '__main__':
    import sys

    if sys.argv[1:] != ['package']:
        sys.exit(f'usage: python -m {__spec__.name} package')
    package()
