"""pipelines/analysis/graph_cache.py: a build's tf.Transform output from a graph cached by an
earlier build of the same kind equals the one TFT writes for it."""

import filecmp
import os
import shutil

import numpy as np
import pytest

from imageshards import layout
from imageshards import tfrecord
from pipelines import launcher
from pipelines.analysis import graph_cache
from pipelines.core import options
from pipelines.core.settings import TransformSettings
from pipelines.local import transform_writer

import images_for_tests as imgs


def _build(root, out, *extra):
    return launcher.run(
        ['--input', str(root), '--output', str(out), '--seed', '3', '--num-shards', '2', *extra]
    )


def _tree(root, classes, start):
    imgs.write_tree(root, 5, classes, start=start)
    return root


def _settings(labels, fmt='examples', levels=(), image_size=224):
    return TransformSettings(tuple(labels), fmt, tuple(levels), image_size)


@pytest.mark.slow
def test_a_cached_graph_writes_what_tft_writes_for_another_build(
    tmp_path, empty_transform_cache, monkeypatch, caplog, tf
):
    import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel

    first = _tree(tmp_path / 'first', ('ant', 'bee', 'cow'), start=0)
    second = _tree(tmp_path / 'second', ('zebra', 'yak', 'emu', 'gnu'), start=500)  # one more
    mode = '--direct_running_mode=in_memory'
    _build(first, tmp_path / 'out-first', mode)  # TFT writes it; the cache keeps the graph
    kept = graph_cache.find(_settings(['ant', 'bee', 'cow']))
    assert kept is not None
    assert graph_cache.find(_settings(['emu', 'gnu', 'yak', 'zebra'])) == kept
    assert not os.listdir(os.path.join(kept, layout.TRANSFORM_ASSETS))  # no build's assets
    with caplog.at_level('INFO', logger='pipelines.local.transform_writer'):
        reused = _build(second, tmp_path / 'from-cache', mode)
    assert graph_cache.describe(kept) in caplog.text
    assert 'kept from an earlier build of this kind (examples, image size 224)' in caplog.text
    monkeypatch.setenv(graph_cache.ENV, str(tmp_path / 'another-cache'))
    written = _build(second, tmp_path / 'by-tft', mode)
    assert reused == {**written, 'created': reused['created']}

    _assert_same_output(tmp_path / 'by-tft', tmp_path / 'from-cache', written, tf, tft)


@pytest.mark.slow
@pytest.mark.parametrize('fmt', ['examples', 'paths'])
def test_a_shipped_graph_writes_what_tft_writes(
    tmp_path, empty_transform_cache, monkeypatch, tf, fmt
):
    import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel

    tree = _tree(tmp_path / 'tree', ('zebra', 'yak', 'emu', 'gnu'), start=500)
    flags = ['--direct_running_mode=in_memory', '--format', fmt]
    written = _build(tree, tmp_path / 'by-tft', *flags)
    monkeypatch.setenv(graph_cache.ENV, str(tmp_path / 'another-empty-cache'))
    monkeypatch.setenv(graph_cache.PACKAGED_ENV, '1')
    shipped = graph_cache.find(_settings(['zebra'], fmt=fmt))
    assert shipped and shipped.startswith(graph_cache.PACKAGED_DIR)
    reused = _build(tree, tmp_path / 'from-package', *flags)
    assert reused == {**written, 'created': reused['created']}
    assert not os.path.exists(tmp_path / 'another-empty-cache' / 'transform')  # nothing kept
    _assert_same_output(tmp_path / 'by-tft', tmp_path / 'from-package', written, tf, tft)


@pytest.mark.parametrize('shipped', graph_cache.SHIPPED_KINDS, ids=lambda k: k['fmt'])
def test_the_package_ships_the_graphs_of_the_default_kinds_for_this_code(
    tmp_path, monkeypatch, shipped
):
    monkeypatch.setenv(graph_cache.ENV, str(tmp_path / 'empty-cache'))
    monkeypatch.setenv(graph_cache.PACKAGED_ENV, '1')
    settings = _settings(['a'], shipped['fmt'], shipped['levels'], shipped['image_size'])
    found = graph_cache.find(settings)
    assert found and found.startswith(graph_cache.PACKAGED_DIR), (
        'pipelines/analysis/transform_graphs holds no graph for this code and these versions of '
        'TensorFlow and tensorflow-transform: run '
        '`python -m pipelines.analysis.graph_cache package`'
    )
    assert graph_cache.has_kind(**shipped)
    assert graph_cache.describe(found).startswith('the one imageshards ships for this kind (')
    monkeypatch.setenv(graph_cache.PACKAGED_ENV, '0')
    assert graph_cache.find(settings) is None
    assert not graph_cache.has_kind(**shipped)
    assert len(os.listdir(graph_cache.PACKAGED_DIR)) == len(graph_cache.SHIPPED_KINDS)


def _assert_same_output(by_tft, from_cache, written, tf, tft):
    """The build output `from_cache` has the tf.Transform output of `by_tft` (TFT's own)."""
    for name in ('label', 'pixel_statistics'):  # the build's assets
        path = os.path.join(layout.TRANSFORM_ASSETS, name)
        assert (from_cache / path).read_bytes() == (by_tft / path).read_bytes()
    for name in ('transformed_metadata/schema.pbtxt', 'metadata/schema.pbtxt'):
        assert filecmp.cmp(from_cache / name, by_tft / name, shallow=False), name
    records = [
        record
        for shard in written['splits']['train']['shards']
        for record in tfrecord.read_records(open(by_tft / shard['path'], 'rb'), shard['path'])
    ]
    outputs = []
    for out in (by_tft, from_cache):
        output = tft.TFTransformOutput(str(out))
        assert output.vocabulary_by_name('label') == [b'emu', b'gnu', b'yak', b'zebra']
        raw = tf.io.parse_example(tf.constant(records), output.raw_feature_spec())
        outputs.append(output.transform_features_layer()(raw))
    np.testing.assert_allclose(
        outputs[1]['pixel_mean'][0].numpy(), written['analysis']['pixel_mean'], rtol=1e-6
    )
    for key in ('image', 'label', 'pixel_mean', 'pixel_std'):
        np.testing.assert_array_equal(outputs[0][key].numpy(), outputs[1][key].numpy())

    # TFT's schema domain of the label is the build's own (ids -1..3), from the cached graph too.
    schema = (from_cache / 'transformed_metadata' / 'schema.pbtxt').read_text()
    assert 'min: -1\n    max: 3\n' in schema


_SCHEMA = """feature {
  name: "label"
  type: INT
  int_domain {
    min: -1
    max: 5
    is_categorical: true
  }
}
feature {
  name: "label/family"
  type: INT
}
"""


def test_a_graph_is_kept_per_kind(empty_transform_cache, tmp_path):
    staged = tmp_path / 'staged'
    for name in layout.TRANSFORM_DIRS:
        (staged / name).mkdir(parents=True)
    (staged / layout.TRANSFORMED_METADATA_DIR / 'schema.pbtxt').write_text(_SCHEMA)
    (staged / layout.TRANSFORM_SAVED_MODEL).write_bytes(b'graph')
    os.makedirs(staged / layout.TRANSFORM_ASSETS)
    for name in ('label', 'pixel_statistics'):
        (staged / layout.TRANSFORM_ASSETS / name).write_bytes(b'this build only')
    settings = _settings(['a', 'b'])
    assert graph_cache.find(settings) is None
    assert not graph_cache.has_kind('examples', (), 224)
    graph_cache.keep(str(staged), settings)
    kept = graph_cache.find(settings)
    assert kept and kept.startswith(str(empty_transform_cache))
    assert graph_cache.has_kind('examples', (), 224)
    assert graph_cache.find(_settings(['x', 'y'])) == kept  # names are assets
    assert graph_cache.find(_settings(['a', 'b', 'c'])) == kept  # so is their number
    shutil.rmtree(os.path.join(kept, layout.TRANSFORMED_METADATA_DIR))
    assert graph_cache.find(settings) is None  # not whole: not used
    shutil.copytree(
        staged / layout.TRANSFORMED_METADATA_DIR,
        os.path.join(kept, layout.TRANSFORMED_METADATA_DIR),
    )
    for other in (
        _settings(['a', 'b'], fmt='paths'),
        _settings(['a', 'b'], levels=['family']),
        _settings(['a', 'b'], image_size=160),
    ):
        assert graph_cache.find(other) is None, other
    (staged / layout.TRANSFORM_SAVED_MODEL).write_bytes(b'another')
    graph_cache.keep(str(staged), settings)  # the first one stays
    assert (empty_transform_cache.joinpath(kept, layout.TRANSFORM_SAVED_MODEL)).read_bytes() == (
        b'graph'
    )
    out = tmp_path / 'out'
    graph_cache.write(
        kept, str(out), ['b', 'a'], {'pixel_mean': [1, 2, 3], 'pixel_std': [4, 5.5, 6]}
    )
    assert (out / layout.TRANSFORM_ASSETS / 'label').read_text() == 'a\nb\n'
    assert (out / layout.TRANSFORM_ASSETS / 'pixel_statistics').read_text() == (
        '1.0\n2.0\n3.0\n4.0\n5.5\n6.0\n'
    )
    written = (out / layout.TRANSFORMED_METADATA_DIR / 'schema.pbtxt').read_text()
    assert written == _SCHEMA.replace('max: 5', 'max: 1')  # ids -1..1 of two labels


def test_the_build_command_starts_no_helper_where_a_graph_of_its_kind_is_cached(
    empty_transform_cache,
):
    argv = ['--input', 'in', '--output', 'out']
    os.makedirs(
        empty_transform_cache / 'transform' / graph_cache.kind('examples', (), 224)[0] / 'graph'
    )
    assert transform_writer.start_early(options.peek_build_config(argv)) is None
    started = transform_writer.start_early(
        options.peek_build_config([*argv, '--transform-image-size', '160'])
    )
    assert started is not None
    assert transform_writer.take() is started
    started.close()


def test_an_unwritable_cache_only_costs_the_reuse(tmp_path, monkeypatch, caplog):
    blocked = tmp_path / 'a-file'
    blocked.write_text('')
    monkeypatch.setenv(graph_cache.ENV, str(blocked))
    monkeypatch.setenv(graph_cache.PACKAGED_ENV, '0')
    staged = tmp_path / 'staged'
    for name in layout.TRANSFORM_DIRS:
        (staged / name).mkdir(parents=True)
    with caplog.at_level('WARNING'):
        graph_cache.keep(str(staged), _settings(['a']))
    assert 'could not keep the tf.Transform graph' in caplog.text
    assert graph_cache.find(_settings(['a'])) is None


def test_a_graph_is_described_by_where_it_is_whether_its_path_is_relative_or_not(
    tmp_path, monkeypatch
):
    shipped = os.path.join(
        graph_cache.PACKAGED_DIR, os.listdir(graph_cache.PACKAGED_DIR)[0], 'graph'
    )
    kept = tmp_path / 'cache' / 'some-kind' / 'graph'
    kept.mkdir(parents=True)
    shutil.copy(os.path.join(shipped, graph_cache.KEY_JSON), kept)
    monkeypatch.chdir(tmp_path)  # IMAGESHARDS_CACHE_DIR=cache, as a user may set it
    relative = os.path.join('cache', 'some-kind', 'graph')
    for path in (kept, relative):
        assert graph_cache.describe(str(path)).startswith('kept from an earlier build')
    assert graph_cache.describe(shipped).startswith('the one imageshards ships')
    assert graph_cache.describe(os.path.relpath(shipped)).startswith('the one imageshards ships')
