"""The sdist that submit-training uploads, installed and run the way Vertex AI runs it.

Vertex AI pip-installs the package on a container that already has TensorFlow and runs
`python -m trainer.task` outside any checkout, with AIP_* folders set. Here the container is a
fresh virtual environment that sees this one's packages through a .pth line (TensorFlow is
not installed again; a plain path line does not run the .pth files there, so this checkout's
editable install stays out of it); the package itself comes from the sdist only.

The same install, outside any checkout, is also where a user of `pip install .` submits jobs:
with the configs the package carries, and the wheel or sdist they name.
"""

import json
import os
import subprocess
import sys
import sysconfig
import tarfile

import pytest

from trainer import submit

import images_for_tests as imgs

pytest_plugins = ['gcs_emulator']


def _completed(command, cwd, **env):
    environment = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    environment.update(env)
    return subprocess.run(
        command, cwd=cwd, env=environment, capture_output=True, text=True, check=False
    )


def _run(command, cwd, **env):
    done = _completed(command, cwd, **env)
    assert done.returncode == 0, f'{command}:\n{done.stdout}\n{done.stderr}'
    return done.stdout


def _fail(command, cwd):
    """The output of a command that must exit with status 2, its usage-error status."""
    done = _completed(command, cwd)
    assert done.returncode == 2, f'{command}:\n{done.stdout}\n{done.stderr}'
    return done.stdout + done.stderr


@pytest.fixture(scope='module')
def installed(tmp_path_factory):
    """(python, site-packages, sdist): the sdist submit-training uploads, installed, not editable,
    in a fresh virtual environment (as `pip install .` or a Vertex AI replica installs it)."""
    tmp_path = tmp_path_factory.mktemp('installed')
    sdist = submit.build_sdist(str(tmp_path))
    venv = tmp_path / 'venv'
    _run([sys.executable, '-m', 'venv', str(venv)], cwd=tmp_path)
    python = str(venv / 'bin' / 'python')
    site = _run(
        [python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'], tmp_path
    ).strip()
    with open(os.path.join(site, '_outer_site.pth'), 'w', encoding='utf-8') as f:
        f.write(sysconfig.get_paths()['purelib'] + '\n')
    # --no-index: the sdist's requirements must all be satisfied by what is installed already.
    install = [python, '-m', 'pip', 'install', '--no-index', '--no-build-isolation', sdist]
    _run(install, cwd=tmp_path)
    return python, site, sdist


@pytest.mark.slow
def test_the_installed_sdist_trains_outside_the_checkout(installed, color_builds, tmp_path):
    python, site, sdist = installed
    with tarfile.open(sdist) as archive:
        names = {name.split('/', 1)[1] for name in archive.getnames() if '/' in name}
    assert {
        'setup.py',
        'trainer/task.py',
        'trainer/submit.py',
        'imageshards/kinds/features.py',
    } <= names
    assert 'configs/vertex_job.yaml' in names
    where = _run([python, '-c', 'import trainer, imageshards; print(trainer.__file__)'], tmp_path)
    assert where.strip() == os.path.join(site, 'trainer', '__init__.py')

    aip = tmp_path / 'aip'  # the folders Vertex AI names under the job's base output directory
    job = tmp_path / 'job'
    flags = ['--image-size', '16', '--batch-size', '8', '--epochs', '1', '--steps-per-epoch', '3']
    task = [python, '-m', 'trainer.task', '--data', str(color_builds['examples']), *flags]
    _run(
        [*task, '--job-dir', str(job)],
        cwd=tmp_path,
        AIP_MODEL_DIR=f'{aip}/model/',
        AIP_CHECKPOINT_DIR=f'{aip}/checkpoints/',
        AIP_TENSORBOARD_LOG_DIR=f'{aip}/logs/',
    )
    assert json.loads((job / 'metrics.json').read_text())['steps'] == 3
    assert (aip / 'model' / 'saved_model.pb').exists()
    assert (aip / 'checkpoints' / 'ckpt-3.index').exists()
    assert list((aip / 'logs' / 'train').iterdir())


SUBMIT = [
    *('submit-training', '--dry-run', '--project', 'p', '--region', 'us-central1'),
    *('--staging-bucket', 'gs://staging', '--data', 'gs://data/shards', '--job-dir', 'gs://jobs/a'),
]


@pytest.mark.slow
def test_an_install_submits_training_with_its_shipped_configs_and_a_built_package(
    installed, tmp_path
):
    python, site, sdist = installed
    command = os.path.join(os.path.dirname(python), 'imageshards')
    assert os.path.exists(os.path.join(site, 'imageshards', 'configs', 'vertex_job.yaml'))
    refused = _fail([command, *SUBMIT], cwd=tmp_path)
    assert 'pass --package PATH of the imageshards' in refused and 'Traceback' not in refused
    job = json.loads(_run([command, *SUBMIT, '--package', sdist], cwd=tmp_path))
    (pool,) = job['jobSpec']['workerPoolSpecs']
    # The shipped vertex_job.yaml and the train_vertex.yaml it names.
    assert pool['machineSpec']['acceleratorType'] == 'NVIDIA_L4'
    assert pool['pythonPackageSpec']['packageUris'][0].endswith('/' + os.path.basename(sdist))
    assert '--model=resnet50' in pool['pythonPackageSpec']['args']


@pytest.mark.slow
def test_an_install_builds_on_dataflow_with_a_built_package(gcs, installed, tmp_path):
    python, _, sdist = installed
    imgs.write_tree(tmp_path / 'images', 2, ('a', 'b'))
    build = [os.path.join(os.path.dirname(python), 'imageshards'), 'build']
    build += ['--input', gcs.upload_tree(tmp_path / 'images', 'images'), '--output', gcs.uri('out')]
    build += ['--runner=DataflowRunner', '--project=imageshards-test', '--region=us-central1']
    build.append('--no_auth')
    build += ['--temp_location', gcs.uri('tmp'), '--dry_run=True']
    refused = _fail(build, cwd=tmp_path)
    assert 'pass --extra_package PATH of the imageshards' in refused and 'Traceback' not in refused
    # Beam stages the package in a temporary folder (which it never removes): here, tmp_path.
    # Unsupervised, so that the command does not remove its TMPDIR (imageshards/supervise.py).
    done = _completed(
        [*build, f'--extra_package={sdist}'],
        tmp_path,
        TMPDIR=str(tmp_path),
        IMAGESHARDS_SUPERVISED='1',
    )
    assert done.returncode == 0, done.stderr
    assert 'built the job without running it' in done.stderr
    listed = [path.read_text() for path in tmp_path.rglob('extra_packages.txt')]
    assert listed == [os.path.basename(sdist) + '\n']
    assert gcs.names('out') == []
