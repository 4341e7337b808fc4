import atexit
import os
import shutil
import sys
import tempfile

import pytest

# Tests import the repository's packages and their own helpers without installing either.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')
# The suite's builds keep and reuse tf.Transform graphs (pipelines/analysis/graph_cache.py) in a
# cache of its own, not the user's: the first build of each kind writes one with TFT, the rest reuse
# it.
_CACHE = tempfile.mkdtemp(prefix='imageshards-test-cache-')
os.environ['IMAGESHARDS_CACHE_DIR'] = _CACHE
atexit.register(shutil.rmtree, _CACHE, True)


def pytest_configure(config):
    config.addinivalue_line('markers', 'slow: end-to-end runs across processes (minutes)')


@pytest.fixture(scope='session')
def tf():
    import tensorflow  # pylint: disable=import-outside-toplevel

    return tensorflow


@pytest.fixture
def empty_transform_cache(tmp_path, monkeypatch):
    """A cache of tf.Transform graphs of this test's own, empty, and the package's graphs
    ignored: its builds run TFT."""
    path = tmp_path / 'transform-cache'
    monkeypatch.setenv('IMAGESHARDS_CACHE_DIR', str(path))
    monkeypatch.setenv('IMAGESHARDS_PACKAGED_GRAPHS', '0')
    return path


COLOR_CLASSES = ('blue', 'green', 'red', 'yellow')


@pytest.fixture(scope='session')
def color_builds(tmp_path_factory):
    """A clearly learnable tree (a colour per class, a noisy patch per image), built in both
    formats with the same seed: {'examples': OUT, 'paths': OUT, 'tree': ROOT}."""
    from pipelines import build  # pylint: disable=import-outside-toplevel

    import images_for_tests  # pylint: disable=import-outside-toplevel

    root = tmp_path_factory.mktemp('color_tree')
    images_for_tests.write_tree(root, 48, COLOR_CLASSES)
    builds = {'tree': root}
    for fmt in ('examples', 'paths'):
        out = tmp_path_factory.mktemp(f'color_{fmt}') / 'out'
        build.run(
            [
                '--input',
                str(root),
                '--output',
                str(out),
                '--format',
                fmt,
                '--splits',
                'train=0.75,val=0.25',
                '--num-shards',
                '4',
                '--seed',
                '5',
                '--direct_running_mode=in_memory',
            ]
        )
        builds[fmt] = out
    return builds
