import os
import sys

import pytest

# Tests import the repository's packages and their own helpers without installing either.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '1')


def pytest_configure(config):
    config.addinivalue_line('markers', 'slow: end-to-end runs across processes (minutes)')


@pytest.fixture(scope='session')
def tf():
    import tensorflow  # pylint: disable=import-outside-toplevel

    return tensorflow
