"""The Dataflow path up to submission: the job built offline with `--dry_run` (no job runs).

The inputs and the output live on a local GCS emulator; the package's sdist is really built.
"""

import json
import os
import subprocess
import tarfile
import tempfile

import object_sets
import pytest
from apache_beam.options.pipeline_options import GoogleCloudOptions
from apache_beam.options.pipeline_options import SetupOptions
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.options.pipeline_options import WorkerOptions
from apache_beam.portability.api import beam_runner_api_pb2

import imageshards
from imageshards import distribution
from imageshards import layout
from imageshards import output_lock
from pipelines import launcher
from pipelines import runner
from pipelines.core import options
from pipelines.core.settings import CLASS_ARCHIVES
from pipelines.core.settings import TransformBy
from pipelines.inputs import archive_index

import containers_for_tests as made
import images_for_tests as imgs
from build_commands import module_command

pytest_plugins = ['gcs_emulator']

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPOSITORY, 'configs', 'dataflow.yaml')
MAIN_STEPS = {'ReadListing', 'ValidateImages', 'AssignShards', 'WriteShards', 'Finalize'}


@pytest.fixture(scope='module')
def images(gcs, tmp_path_factory):
    root = tmp_path_factory.mktemp('dataflow-images')
    imgs.write_tree(root, 3, ('a', 'b'))
    return gcs.upload_tree(root, 'images')


def _dry_run_argv(gcs, *args):
    argv = ['--config', CONFIG, *args]
    argv += ['--project', 'imageshards-test', '--region', 'us-central1']
    return argv + ['--temp_location', gcs.uri('tmp'), '--dry_run=True', '--no_auth']


def _dry_run(gcs, *args):
    """`launcher.run` of a --dry_run on Dataflow; returns the job the runner built."""
    argv = _dry_run_argv(gcs, *args)
    _, beam_args = options.parse_build_args(argv)
    pipeline = runner.make_pipeline(beam_args)  # what launcher.run makes, kept to see the job
    assert launcher.run(argv, test_pipeline=pipeline) is None
    return pipeline.runner.job


def test_a_dataflow_dry_run_is_decided_once(gcs, images):
    argv = _dry_run_argv(gcs, '--input', images, '--output', gcs.uri('decided'))
    launch = runner.decide(*options.parse_build_args(argv))
    assert (launch.dataflow, launch.dry_run, launch.in_memory, launch.progress) == (
        True,
        True,
        False,
        False,
    )
    assert launch.transform_by is TransformBy.PIPELINE
    with launch:
        folder = launch.transform_dir  # the analysis traced as the job is built, then removed
        assert folder and os.path.isdir(folder)
    assert not os.path.exists(folder)


@pytest.fixture
def scratch_tempdir(tmp_path, monkeypatch):
    # Beam stages the sdist and the pickled session in a temporary folder it never removes.
    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))


def _staged_artifacts(job):
    """{staged name: local file} of the workers' environment."""
    staged = {}
    for environment in job.proto_pipeline.components.environments.values():
        for artifact in environment.dependencies:
            role = beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(
                artifact.role_payload
            )
            source = beam_runner_api_pb2.ArtifactFilePayload.FromString(artifact.type_payload)
            staged[role.staged_name] = source.path
    return staged


@pytest.mark.usefixtures('scratch_tempdir')
def test_dry_run_builds_the_job_with_the_package_staged_and_leaves_no_files(gcs, images):
    job = _dry_run(gcs, '--input', images, '--output', gcs.uri('shards'))
    steps = {t.unique_name.split('/')[0] for t in job.proto_pipeline.components.transforms.values()}
    assert steps >= MAIN_STEPS
    # The runner, the workers and the setup file come from the config file and the defaults.
    assert job.options.view_as(StandardOptions).runner == 'DataflowRunner'
    workers = job.options.view_as(WorkerOptions)
    assert (workers.machine_type, workers.max_num_workers, workers.disk_size_gb) == (
        'n2-standard-4',
        20,
        30,
    )
    setup_file = job.options.view_as(SetupOptions).setup_file
    assert setup_file == os.path.join(REPOSITORY, 'setup.py')
    with tarfile.open(_staged_artifacts(job)['workflow.tar.gz']) as sdist:
        names = {name.split('/', 1)[-1] for name in sdist.getnames()}
    assert {'setup.py', 'pipelines/build.py', 'imageshards/kinds/features.py'} <= names
    # The listing written for the job is gone again: a real run needs no --overwrite.
    assert gcs.names('shards') == []


@pytest.mark.usefixtures('scratch_tempdir')
def test_a_coco_dry_run_joins_the_annotations_in_the_job(gcs, tmp_path):
    object_sets.write_coco(str(tmp_path / 'coco'), images=3)
    root = gcs.upload_tree(tmp_path / 'coco', 'coco')
    job = _dry_run(
        gcs,
        *('--input', f'{root}/annotations/instances.json', '--image-root', f'{root}/images'),
        *('--output', gcs.uri('coco-shards')),
    )
    transforms = job.proto_pipeline.components.transforms.values()
    names = {t.unique_name for t in transforms}
    assert {name.split('/')[0] for name in names} >= MAIN_STEPS | {'JoinAnnotations'}
    assert 'JoinAnnotations/ReadAnnotations' in names
    assert gcs.names('coco-shards') == []


@pytest.mark.usefixtures('scratch_tempdir')
def test_dry_run_with_overwrite_leaves_an_earlier_build_in_place(gcs, images):
    earlier = {'splits': {'train': {'shards': [{'path': 'train/train-00000-of-00001.tfrecord'}]}}}
    gcs.upload('earlier/dataset.json', json.dumps(earlier))
    gcs.upload('earlier/train/train-00000-of-00001.tfrecord', b'records')
    gcs.upload('earlier/_SUCCESS', b'')
    before = gcs.names('earlier')
    _dry_run(gcs, '--input', images, '--output', gcs.uri('earlier'), '--overwrite')
    assert gcs.names('earlier') == before
    with pytest.raises(FileExistsError, match='--overwrite'):
        _dry_run(gcs, '--input', images, '--output', gcs.uri('earlier'))
    assert gcs.names('earlier') == before


@pytest.mark.usefixtures('scratch_tempdir')
def test_a_job_that_cannot_be_submitted_leaves_no_files(gcs, images, tmp_path):
    missing = str(tmp_path / 'nowhere' / 'setup.py')
    with pytest.raises(RuntimeError, match='setup_file'):
        _dry_run(gcs, '--input', images, '--output', gcs.uri('refused'), f'--setup_file={missing}')
    assert gcs.names('refused') == []


def test_local_paths_are_refused_on_dataflow(gcs, images, tmp_path):
    with pytest.raises(ValueError, match='--output .* local path'):
        _dry_run(gcs, '--input', images, '--output', str(tmp_path / 'out'))


DATAFLOW = [
    '--runner=DataflowRunner',
    '--project=imageshards-test',
    '--region=us-central1',
    '--temp_location=gs://imageshards-test/tmp',
]


@pytest.mark.usefixtures('gcs')  # for the credentials it provides
def test_an_install_without_its_source_stages_the_package_it_is_given(tmp_path, monkeypatch):
    # As installed from a wheel or an sdist: the packages, and no setup.py beside them.
    monkeypatch.setattr(distribution, 'SOURCE_ROOT', str(tmp_path))
    with pytest.raises(ValueError, match='pass --extra_package PATH of the imageshards'):
        runner.make_pipeline(DATAFLOW)
    given = runner.make_pipeline([*DATAFLOW, f'--setup_file={CONFIG}'])
    assert given.options.view_as(SetupOptions).setup_file == CONFIG
    wheel = tmp_path / f'imageshards-{imageshards.__version__}-py3-none-any.whl'
    wheel.write_bytes(b'zip')
    staged = runner.make_pipeline([*DATAFLOW, f'--extra_package={wheel}']).options
    assert staged.view_as(SetupOptions).setup_file is None
    assert staged.view_as(SetupOptions).extra_packages == [str(wheel)]
    older = tmp_path / 'imageshards-0.0.1.tar.gz'
    older.write_bytes(b'tar')
    with pytest.raises(ValueError, match='is imageshards 0.0.1, but this is'):
        runner.make_pipeline([*DATAFLOW, f'--extra_package={older}'])


def test_without_credentials_dataflow_stops_at_once_in_one_line(tmp_path):
    environment = {k: v for k, v in os.environ.items() if not k.startswith(('GOOGLE_', 'GCE_'))}
    # Nowhere to find credentials: no gcloud configuration, and a metadata server that refuses.
    environment.update(
        HOME=str(tmp_path),
        CLOUDSDK_CONFIG=str(tmp_path / 'gcloud'),
        GCE_METADATA_HOST='127.0.0.1:9',
        GCE_METADATA_IP='127.0.0.1:9',
    )
    command = module_command('gs://b/images', 'gs://b/shards', *DATAFLOW, '--dry_run=True')
    # Beam's clients would retry for minutes without credentials: the timeout fails the test.
    done = subprocess.run(
        command, cwd=REPOSITORY, env=environment, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    lines = [line for line in (done.stdout + done.stderr).splitlines() if 'ERROR' in line]
    assert len(lines) == 1 and 'Traceback' not in done.stderr
    assert 'Dataflow needs Google Cloud credentials and none were found' in lines[0]
    assert 'gcloud auth application-default login' in lines[0]


def test_a_dry_run_into_an_output_a_build_is_writing_is_refused(gcs, images):
    holder = output_lock.Holder('vm', 4321, '2025-01-02 03:04:05 UTC', 'imageshards build', 'b')
    gcs.upload(f'busy/{layout.LOCK_FILE}', holder.to_json())  # refreshed just now
    with pytest.raises(output_lock.OutputBusy, match='pid 4321 on vm'):
        _dry_run(gcs, '--input', images, '--output', gcs.uri('busy'))
    assert gcs.names('busy') == [f'busy/{layout.LOCK_FILE}']


@pytest.mark.usefixtures('scratch_tempdir')
def test_archives_on_gs_are_indexed_by_a_job_of_their_own_which_a_dry_run_never_runs(gcs, tmp_path):
    made.tar_of(tmp_path / 'cat.tar', {'1.jpg': imgs.jpeg(1), '2.jpg': imgs.jpeg(2)})
    archive = gcs.upload('archives/cat.tar', (tmp_path / 'cat.tar').read_bytes())
    argv = _dry_run_argv(gcs, '--input', archive, '--output', gcs.uri('indexed'))
    launch = runner.decide(*options.parse_build_args([*argv, '--job_name', 'shards']))
    index = archive_index.IndexArchives([archive], CLASS_ARCHIVES, gcs.uri('tmp', 'index'))
    launch.run_indexing(index)
    job = launch.pipeline.runner.job  # built, not submitted
    steps = {t.unique_name for t in job.proto_pipeline.components.transforms.values()}
    assert 'IndexArchives/IndexEachArchive' in steps and not steps & MAIN_STEPS
    assert job.proto.name == 'shards-index'
    assert launch.pipeline.options.view_as(GoogleCloudOptions).job_name == 'shards'
    # The dry run's own listing reads the archives here: nothing runs, nothing is written.
    listed = launch.index_archives([archive], CLASS_ARCHIVES)
    assert [(container, len(members)) for container, members in listed] == [(archive, 2)]
    assert gcs.names('tmp') == []
