"""submit-training: the Vertex AI custom job it builds (with --dry-run, offline) and its errors."""

import dataclasses
import json
import os
import re
import socket

import pytest

import imageshards
from imageshards import distribution
from imageshards_cli import main as cli
from trainer import config as config_lib
from trainer import submit

CONFIGS = os.path.join(os.path.dirname(__file__), '..', 'configs')
REQUIRED = [
    '--project',
    'my-project',
    '--region',
    'us-central1',
    '--staging-bucket',
    'gs://my-staging',
    '--data',
    'gs://my-data/shards',
    '--job-dir',
    'gs://my-jobs/run-7',
]


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Fails any test here that opens a network connection: a dry run must need none."""

    def refuse(sock, address):
        raise AssertionError(f'network connection to {address} in a dry run')

    monkeypatch.setattr(socket.socket, 'connect', refuse)
    monkeypatch.setattr(socket.socket, 'connect_ex', refuse)


def _dry_run(capsys, *argv, main=submit.main):
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def _write(path, text):
    path.write_text(text)
    return str(path)


@pytest.fixture
def multi_worker_config(tmp_path):
    """A job YAML for a chief and two workers, each with two T4s, and its trainer YAML."""
    _write(
        tmp_path / 'train.yaml',
        'model: small_cnn\nimage_size: [24, 32]\nepochs: 5\ncrop_area: [0.5, 1.0]\n'
        'xla: true\ndeterministic: false\nlog_dir:\n',
    )
    return _write(
        tmp_path / 'job.yaml',
        'container_uri: europe-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest\n'
        'machine_type: n1-standard-16\naccelerator_type: NVIDIA_TESLA_T4\n'
        'accelerator_count: 2\nreplica_count: 3\nboot_disk_size_gb: 200\n'
        'service_account: trainer@my-project.iam.gserviceaccount.com\n'
        'train_config: train.yaml\n',
    )


def test_the_dry_run_prints_the_custom_job_vertex_would_run(capsys, multi_worker_config):
    job = _dry_run(
        capsys,
        '--dry-run',
        *REQUIRED,
        '--config',
        multi_worker_config,
        '--display-name',
        'colours',
        '--',
        '--epochs',
        '7',
    )
    assert job['displayName'] == 'colours'
    spec = job['jobSpec']
    assert spec['baseOutputDirectory'] == {'outputUriPrefix': 'gs://my-jobs/run-7'}
    assert spec['serviceAccount'] == 'trainer@my-project.iam.gserviceaccount.com'
    assert spec['scheduling'] == {'restartJobOnWorkerRestart': True}
    chief, workers = spec['workerPoolSpecs']  # TF_CONFIG's chief, then its workers
    assert (chief['replicaCount'], workers['replicaCount']) == ('1', '2')
    for pool in (chief, workers):
        assert pool['machineSpec'] == {
            'machineType': 'n1-standard-16',
            'acceleratorType': 'NVIDIA_TESLA_T4',
            'acceleratorCount': 2,
        }
        assert pool['diskSpec'] == {'bootDiskType': 'pd-ssd', 'bootDiskSizeGb': 200}
        package = pool['pythonPackageSpec']
        assert package['executorImageUri'] == (
            'europe-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest'
        )
        assert package['pythonModule'] == 'trainer.task'
        ours, cuda = package['packageUris']
        assert ours.startswith('gs://my-staging/staging/')
        assert ours.endswith('/imageshards-0.1.0.tar.gz')
        # setuptools 69.3 and later name the sdist by its normalized name (imageshards_cuda-).
        folder, name = cuda.rsplit('/', 1)
        assert folder == ours.rsplit('/', 1)[0] and re.match(r'imageshards[-_]cuda-', name)
    args = chief['pythonPackageSpec']['args']
    assert args == workers['pythonPackageSpec']['args']
    assert args[:4] == ['--data', 'gs://my-data/shards', '--job-dir', 'gs://my-jobs/run-7']
    assert '--xla' in args and '--no-deterministic' in args and '--require-gpu' in args
    # What every replica's `python -m trainer.task` makes of them: the YAML, then `--` flags.
    config = config_lib.parse_train_args(args)
    assert (config.data, config.job_dir) == ('gs://my-data/shards', 'gs://my-jobs/run-7')
    assert config.image_size == (24, 32) and config.input.crop_area == (0.5, 1.0)
    assert config.epochs == 7  # the flag after `--` wins over the YAML's 5
    assert config.xla and not config.input.deterministic and config.require_gpu
    assert config.log_dir == ''  # an empty YAML value leaves the default


def test_the_shipped_job_config_and_command_line_overrides(capsys):
    job = _dry_run(
        capsys, 'submit-training', '--dry-run', *REQUIRED, '--replica-count', '2', main=cli.main
    )  # also through the `imageshards` command
    chief, workers = job['jobSpec']['workerPoolSpecs']
    assert (chief['replicaCount'], workers['replicaCount']) == ('1', '1')
    package = chief['pythonPackageSpec']
    assert package['executorImageUri'] == (
        'us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest'
    )
    assert chief['machineSpec']['acceleratorType'] == 'NVIDIA_L4'
    config = config_lib.parse_train_args(package['args'])
    expected = config_lib.parse_train_args(
        ['--config', os.path.join(CONFIGS, 'train_vertex.yaml'), *package['args'][:4]]
    )
    assert config == dataclasses.replace(expected, require_gpu=True)


def test_a_cpu_job_has_neither_accelerators_nor_cuda_wheels(capsys):
    job = _dry_run(
        capsys,
        '--dry-run',
        *REQUIRED,
        '--machine-type',
        'n2-standard-8',
        '--accelerator-count',
        '0',  # the shipped config's accelerator_type then does not matter
    )
    (pool,) = job['jobSpec']['workerPoolSpecs']
    assert pool['machineSpec'] == {'machineType': 'n2-standard-8'}
    assert len(pool['pythonPackageSpec']['packageUris']) == 1
    assert '--require-gpu' not in pool['pythonPackageSpec']['args']


def test_a_built_package_is_what_the_replicas_install(capsys, tmp_path):
    wheel = _write(tmp_path / f'imageshards-{imageshards.__version__}-py3-none-any.whl', 'zip')
    job = _dry_run(capsys, '--dry-run', *REQUIRED, '--accelerator-count', '0', '--package', wheel)
    (pool,) = job['jobSpec']['workerPoolSpecs']
    (uri,) = pool['pythonPackageSpec']['packageUris']
    assert uri.startswith('gs://my-staging/staging/') and uri.endswith(
        '/' + os.path.basename(wheel)
    )


def test_an_install_without_its_source_asks_for_a_package(capsys, caplog, tmp_path, monkeypatch):
    # As installed from a wheel or an sdist: the packages, and no setup.py beside them.
    monkeypatch.setattr(distribution, 'SOURCE_ROOT', str(tmp_path))
    flags = [*REQUIRED, '--dry-run', '--config', os.path.join(CONFIGS, 'vertex_job.yaml')]
    assert submit.main(flags) == 2
    assert 'so there is no setup.py to build the package its jobs install: pass --package PATH' in (
        caplog.text
    )
    sdist = _write(tmp_path / f'imageshards-{imageshards.__version__}.tar.gz', 'tar')
    job = _dry_run(capsys, *flags, '--accelerator-count', '0', '--package', sdist)
    (pool,) = job['jobSpec']['workerPoolSpecs']
    assert pool['pythonPackageSpec']['packageUris'][0].endswith('/' + os.path.basename(sdist))


@pytest.mark.parametrize(
    'name, message',
    [
        ('other-0.1.0.tar.gz', 'is not an imageshards wheel or sdist'),
        ('imageshards-0.0.1-py3-none-any.whl', 'is imageshards 0.0.1, but this is'),
        (f'imageshards-{imageshards.__version__}.tar.gz', 'does not exist'),
    ],
)
def test_a_package_that_is_not_this_imageshards_is_refused(caplog, tmp_path, name, message):
    if 'does not exist' not in message:
        _write(tmp_path / name, 'bytes')
    assert submit.main([*REQUIRED, '--dry-run', '--package', str(tmp_path / name)]) == 2
    assert message in caplog.text


@pytest.mark.parametrize(
    'name',
    [
        'train_smoke.yaml',
        'train_local.yaml',
        'train_vertex.yaml',
        'train_detection_smoke.yaml',
        'train_segmentation_smoke.yaml',
    ],
)
def test_trainer_yaml_as_flags_means_what_the_yaml_means(name):
    path = os.path.join(CONFIGS, name)
    folders = ['--data', 'd', '--job-dir', 'j']
    as_flags = config_lib.parse_train_args([*folders, *submit.yaml_to_flags(path)])
    assert as_flags == config_lib.parse_train_args(['--config', path, *folders])


@pytest.mark.parametrize(
    'job_yaml, flags, message',
    [
        ('machine: n1-standard-4\n', [], "unknown keys ['machine']"),
        ('accelerator_type: NVIDIA_TESLA_K9000\n', [], "'NVIDIA_TESLA_K9000' is not one of"),
        ('accelerator_type: ACCELERATOR_TYPE_UNSPECIFIED\n', [], 'name a type for a count'),
        ('replica_count: 0\n', [], 'replica_count must be 1 or more'),
        ('container_uri: tensorflow/tensorflow:latest-gpu\n', [], 'prebuilt training container'),
        ('train_config: missing.yaml\n', [], 'missing.yaml'),
        ('train_config: bad_train.yaml\n', [], "unknown trainer settings ['learning_rte']"),
        ('train_config: data_train.yaml\n', [], "['data'] are set by submit-training itself"),
        ('', ['--data', '/home/me/shards'], 'Vertex AI replicas cannot read /home/me/shards'),
        ('', ['--job-dir', 'jobs/run-7'], '--job-dir must be a gs:// folder'),
        ('', ['--staging-bucket', 'my-staging'], '--staging-bucket must be gs://'),
        ('', ['--', '--config', 'configs/train_vertex.yaml'], '--config after `--`'),
    ],
)
def test_bad_configs_stop_with_a_clear_error(tmp_path, caplog, job_yaml, flags, message):
    with open(os.path.join(CONFIGS, 'vertex_job.yaml'), encoding='utf-8') as f:
        shipped = f.read().replace('train_config: train_vertex.yaml', '')
    _write(tmp_path / 'bad_train.yaml', 'learning_rte: 0.1\n')
    _write(tmp_path / 'data_train.yaml', 'data: gs://elsewhere\n')
    config = _write(tmp_path / 'job.yaml', shipped + job_yaml)
    assert submit.main([*REQUIRED, '--config', config, '--dry-run', *flags]) == 2
    assert message in caplog.text


def test_a_bad_trainer_flag_stops_with_the_trainers_own_message(capsys):
    with pytest.raises(SystemExit) as stopped:
        submit.main([*REQUIRED, '--dry-run', '--', '--epochs', 'many'])
    assert stopped.value.code == 2
    assert (
        "python -m trainer.task: error: argument --epochs: expected a whole number, got 'many'"
        in (capsys.readouterr().err)
    )


def test_the_trainer_refuses_what_these_devices_cannot_run(tf, monkeypatch):
    from trainer import distribute  # pylint: disable=import-outside-toplevel

    if tf.config.list_physical_devices('GPU'):
        pytest.skip('a GPU is present')
    folders = ['--data', 'd', '--job-dir', 'j']
    with pytest.raises(ValueError, match='--require-gpu: TensorFlow sees no GPU'):
        distribute.check_devices(config_lib.parse_train_args([*folders, '--require-gpu']))
    xla = config_lib.parse_train_args([*folders, '--xla'])
    distribute.check_devices(xla)  # one worker: XLA compiles for the CPU
    cluster = {'chief': ['127.0.0.1:1'], 'worker': ['127.0.0.1:2']}
    monkeypatch.setenv('TF_CONFIG', json.dumps({'cluster': cluster, 'task': {'type': 'chief'}}))
    with pytest.raises(ValueError, match='--xla with several workers needs GPUs'):
        distribute.check_devices(xla)
