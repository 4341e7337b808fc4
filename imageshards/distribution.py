"""This package as Vertex AI and Dataflow install it, and where its default configs are.

Vertex AI replicas and Dataflow workers pip-install imageshards from a package file. Run from a
source checkout (also one installed with `pip install -e`), that file is built from the
checkout's setup.py. An install from a wheel or an sdist (`pip install .`) has no setup.py to
build from: the user then names a built wheel or sdist of the same version.

The default config files live in the checkout's top-level `configs/`, the folder users read and
copy; setup.py installs the same files as package data, in `imageshards/configs/`.
"""

import os
import re

import imageshards

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# The folder holding setup.py in a source checkout; site-packages in an install.
SOURCE_ROOT = os.path.dirname(_PACKAGE_DIR)
_OUR_SETUP = re.compile(r"""name=['"]imageshards['"]""")
# imageshards-1.2.3.tar.gz, imageshards-1.2.3-py3-none-any.whl (PEP 625 / PEP 427 names).
_PACKAGE_FILE = re.compile(r'^imageshards-(?P<version>[^-]+?)(?:\.tar\.gz|-[^/]+\.whl)$')


def checkout_setup_py():
    """The setup.py of the imageshards checkout this code runs from, or None if installed."""
    candidate = os.path.join(SOURCE_ROOT, 'setup.py')
    try:
        with open(candidate, encoding='utf-8') as f:
            return candidate if _OUR_SETUP.search(f.read()) else None
    except OSError:
        return None


def default_config(name):
    """The path of the default config file `name` (e.g. vertex_job.yaml), installed or not.

    The installed copy comes first: beside an install, SOURCE_ROOT is site-packages, whose
    `configs/` may belong to anything.
    """
    installed = os.path.join(_PACKAGE_DIR, 'configs', name)
    if os.path.exists(installed):
        return installed
    if checkout_setup_py():
        return os.path.join(SOURCE_ROOT, 'configs', name)
    raise FileNotFoundError(
        f'{installed} is missing: imageshards was installed without its configs; reinstall it'
    )


def package_file(path, flag):
    """Checks that `path` is a wheel or sdist of this imageshards version; returns it.

    Raises:
        ValueError: saying what is wrong with the file named by `flag`.
    """
    match = _PACKAGE_FILE.match(os.path.basename(path))
    if not match:
        raise ValueError(
            f'{flag} {path} is not an imageshards wheel or sdist '
            f'(imageshards-VERSION-py3-none-any.whl or imageshards-VERSION.tar.gz)'
        )
    if match.group('version') != imageshards.__version__:
        raise ValueError(
            f'{flag} {path} is imageshards {match.group("version")}, but this is '
            f'{imageshards.__version__}: the job would run other code than this command checked'
        )
    if not os.path.isfile(path):
        raise ValueError(f'{flag} {path} does not exist')
    return path


def no_source(flag):
    """The one sentence that says what to do when there is no checkout to build from."""
    return (
        f'imageshards was installed from a wheel or an sdist, so there is no setup.py to build '
        f'the package its jobs install: pass {flag} PATH of the imageshards '
        f'{imageshards.__version__} wheel or sdist (`pip wheel --no-deps CHECKOUT` or '
        f'`python -m build CHECKOUT` makes one), or run from a source checkout'
    )
