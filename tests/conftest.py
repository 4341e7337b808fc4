import atexit
import os
import shutil
import subprocess
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
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    import images_for_tests  # pylint: disable=import-outside-toplevel

    root = tmp_path_factory.mktemp('color_tree')
    images_for_tests.write_tree(root, 48, COLOR_CLASSES)
    builds = {'tree': root}
    for fmt in ('examples', 'paths'):
        out = tmp_path_factory.mktemp(f'color_{fmt}') / 'out'
        launcher.run(
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


@pytest.fixture
def mounted(tmp_path):
    """mount(options): a tmpfs of 150 KB at a fresh folder, unmounted at the end."""
    points = []

    def mount(options='size=150k'):
        if os.geteuid() != 0:
            pytest.skip('mounting a tmpfs needs root')
        point = tmp_path / f'disk{len(points)}'
        point.mkdir()
        subprocess.run(['mount', '-t', 'tmpfs', '-o', options, 'tmpfs', str(point)], check=True)
        points.append(point)
        return point

    yield mount
    for point in points:
        subprocess.run(['umount', str(point)], check=True)
