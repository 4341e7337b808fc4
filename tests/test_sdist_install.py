"""The sdist that submit-training uploads, installed and run the way Vertex AI runs it.

Vertex AI pip-installs the package on a container that already has TensorFlow and runs
`python -m trainer.task` outside any checkout, with AIP_* folders set. Here the container is a
fresh virtual environment that sees this one's packages through a .pth line (TensorFlow is
not installed again; a plain path line does not run the .pth files there, so this checkout's
editable install stays out of it); the package itself comes from the sdist only.
"""

import json
import os
import subprocess
import sys
import sysconfig
import tarfile

import pytest

from trainer import submit


def _run(command, cwd, **env):
    environment = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
    environment.update(env)
    done = subprocess.run(
        command, cwd=cwd, env=environment, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f'{command}:\n{done.stdout}\n{done.stderr}'
    return done.stdout


@pytest.mark.slow
def test_the_installed_sdist_trains_outside_the_checkout(color_builds, tmp_path):
    sdist = submit.build_sdist(str(tmp_path))
    with tarfile.open(sdist) as archive:
        names = {name.split('/', 1)[1] for name in archive.getnames() if '/' in name}
    assert {'setup.py', 'trainer/task.py', 'trainer/submit.py', 'imageshards/features.py'} <= names
    assert 'configs/vertex_job.yaml' in names

    venv = tmp_path / 'venv'
    _run([sys.executable, '-m', 'venv', str(venv)], cwd=tmp_path)
    python = str(venv / 'bin' / 'python')
    site = _run(
        [python, '-c', 'import sysconfig; print(sysconfig.get_paths()["purelib"])'], tmp_path
    )
    with open(os.path.join(site.strip(), '_outer_site.pth'), 'w', encoding='utf-8') as f:
        f.write(sysconfig.get_paths()['purelib'] + '\n')
    # --no-index: the sdist's requirements must all be satisfied by what is installed already.
    install = [python, '-m', 'pip', 'install', '--no-index', '--no-build-isolation', sdist]
    _run(install, cwd=tmp_path)
    where = _run([python, '-c', 'import trainer, imageshards; print(trainer.__file__)'], tmp_path)
    assert where.strip() == os.path.join(site.strip(), 'trainer', '__init__.py')

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
