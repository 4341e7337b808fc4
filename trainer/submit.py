"""Training as a Vertex AI custom job: `imageshards submit-training`, `python -m trainer.submit`.

Vertex AI runs a "Python training application" on one of its prebuilt training containers: on
every replica it pip-installs the packages named in `package_uris` (with their requirements)
and runs `python -m trainer.task ARGS`. This command builds that package, the sdist of this
checkout's setup.py (or takes the wheel or sdist given as --package, which an install from a
wheel or an sdist needs), uploads it under --staging-bucket and creates the CustomJob with the
google-cloud-aiplatform SDK. With --dry-run it builds the sdist and the job, prints the job as
JSON and uploads and submits nothing.

The job's YAML (configs/vertex_job.yaml) holds the machines and names a trainer YAML
(`train_config`) whose settings become trainer flags here: the job then carries every setting
and the replicas need no file. Flags after `--` follow them, so they win. Vertex sets
AIP_MODEL_DIR, AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR under the job's base output
directory, --job-dir, the folders the trainer uses by default. docs/vertex.md has the details.
"""

import argparse
import importlib.metadata
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid

from imageshards import configfile
from imageshards import console
from imageshards import distribution
from trainer import config as trainer_config

_LOG = logging.getLogger(__name__)

# python_package_spec runs on Vertex AI's prebuilt training containers only.
_PREBUILT = re.compile(
    r'^([a-z0-9-]+-docker\.pkg\.dev/vertex-ai/training|gcr\.io/cloud-aiplatform/training)/'
)
# Trainer flags that submit-training sets itself, or that would name a file no replica has.
_OWN_TRAINER_FLAGS = {'config': '--config', 'data': '--data', 'job_dir': '--job-dir'}


def build_arg_parser():
    parser = argparse.ArgumentParser(
        prog='imageshards submit-training',
        description='Run `python -m trainer.task` as a Vertex AI custom job. Trainer flags go '
        'after `--`.',
    )
    add = parser.add_argument
    add('--config', help='YAML with defaults for these flags (default: configs/vertex_job.yaml)')
    add('--project', required=True, help='Google Cloud project of the job')
    add('--region', required=True, help='Vertex AI region, e.g. us-central1')
    add('--staging-bucket', required=True, help='gs://BUCKET[/PATH] for the uploaded package')
    add('--data', required=True, help='the build to train on: gs://BUCKET/OUT or /gcs/BUCKET/OUT')
    add('--job-dir', required=True, help='gs:// base output directory: model, checkpoints, logs')
    add('--display-name', default='', help='default: imageshards-train-<UTC time>')
    add('--container-uri', help='a Vertex AI prebuilt TensorFlow training container')
    add('--machine-type', default='n1-standard-8')
    add('--accelerator-type', default='ACCELERATOR_TYPE_UNSPECIFIED', help='e.g. NVIDIA_L4')
    add('--accelerator-count', type=int, default=0, help='per replica; 0: CPUs only')
    add('--replica-count', type=int, default=1, help='1: the chief alone; N: chief + N-1 workers')
    add('--boot-disk-size-gb', type=int, default=100)
    add('--service-account', default='', help="the job's service account (docs/vertex.md: IAM)")
    add(
        '--restart-job-on-worker-restart',
        action=argparse.BooleanOptionalAction,
        default=True,
        help='restart every replica when one restarts (multi-worker jobs cannot go on without)',
    )
    add(
        '--install-cuda',
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with GPUs: also install this TensorFlow's CUDA libraries from PyPI (docs/vertex.md)",
    )
    add('--train-config', default='', help="trainer YAML (relative paths: to --config's folder)")
    add(
        '--package',
        help='a built imageshards wheel or sdist to install on the replicas (default: the sdist '
        'of the checkout this runs from; an install from a wheel or an sdist needs one)',
    )
    add('--dry-run', action='store_true', help='print the job as JSON; upload and submit nothing')
    return parser


def parse_args(argv):
    """(submit flags, trainer flags given after `--`)."""
    if '--' in argv:
        at = argv.index('--')
        argv, passthrough = argv[:at], argv[at + 1 :]
    else:
        passthrough = []
    parser = build_arg_parser()
    known, _ = parser.parse_known_args(argv)
    if known.config is None:  # the shipped default, looked up only when no --config is given
        known.config = distribution.default_config('vertex_job.yaml')
        parser.set_defaults(config=known.config)
    beside_config = lambda path: os.path.join(os.path.dirname(known.config), path)
    configfile.apply_defaults(parser, argv, convert={'train_config': beside_config})
    return parser.parse_args(argv), passthrough


def check_args(args):
    """Raises ValueError for settings Vertex AI would refuse, or that cannot work there."""
    if not args.staging_bucket.startswith('gs://'):
        raise ValueError(f'--staging-bucket must be gs://BUCKET[/PATH], got {args.staging_bucket}')
    if not args.job_dir.startswith('gs://'):
        raise ValueError(
            f'--job-dir must be a gs:// folder (the base output directory of the job), '
            f'got {args.job_dir}'
        )
    if not args.data.startswith(('gs://', '/gcs/')):
        raise ValueError(
            f'--data must be gs://BUCKET/OUT or its Cloud Storage FUSE path /gcs/BUCKET/OUT: '
            f'Vertex AI replicas cannot read {args.data}'
        )
    if not args.container_uri or not _PREBUILT.match(args.container_uri):
        raise ValueError(
            f'container_uri {args.container_uri!r}: a Python package runs on a Vertex AI '
            f'prebuilt training container (us-docker.pkg.dev/vertex-ai/training/...)'
        )
    if args.replica_count < 1:
        raise ValueError(f'replica_count must be 1 or more, got {args.replica_count}')
    from google.cloud.aiplatform import gapic  # pylint: disable=import-outside-toplevel

    names = [t.name for t in gapic.AcceleratorType if t.value]
    unspecified = args.accelerator_type == 'ACCELERATOR_TYPE_UNSPECIFIED'
    if not unspecified and args.accelerator_type not in names:
        raise ValueError(
            f'accelerator_type {args.accelerator_type!r} is not one of {", ".join(names)}'
        )
    if args.accelerator_count < 0 or (args.accelerator_count and unspecified):
        raise ValueError(
            f'accelerator_count {args.accelerator_count} with accelerator_type '
            f'{args.accelerator_type}: name a type for a count above 0; 0 means CPUs only'
        )


def trainer_args(args, passthrough):
    """The arguments of `python -m trainer.task` on every replica, checked by its own parser."""
    for flag in passthrough:
        name = flag.split('=', 1)[0]
        if name in _OWN_TRAINER_FLAGS.values():
            raise ValueError(
                f'{name} after `--`: give --data and --job-dir to submit-training itself, and '
                f'trainer settings as flags or in train_config (no replica has a local file)'
            )
    flags = yaml_to_flags(args.train_config) if args.train_config else []
    flags = ['--data', args.data, '--job-dir', args.job_dir, *flags, *passthrough]
    if args.accelerator_count:
        flags.append('--require-gpu')  # fail loudly, not train on the CPU, without a GPU
    trainer_config.parse_train_args(flags)  # exits with the trainer's own message if wrong
    return flags


def yaml_to_flags(path):
    """The trainer flags that say what a trainer YAML (configs/train_*.yaml) says."""
    found = configfile.as_flags(path, trainer_config.build_arg_parser(), 'trainer settings')
    own = sorted(set(configfile.load(path)) & set(_OWN_TRAINER_FLAGS))
    if own:
        raise ValueError(f'{path}: {own} are set by submit-training itself, not in train_config')
    return found


def worker_pool_specs(args, package_uris, flags):
    """The chief's pool and, for several replicas, the workers' pool (TF_CONFIG's roles)."""
    pool = {
        'machine_spec': {'machine_type': args.machine_type},
        'disk_spec': {'boot_disk_type': 'pd-ssd', 'boot_disk_size_gb': args.boot_disk_size_gb},
        'python_package_spec': {
            'executor_image_uri': args.container_uri,
            'package_uris': list(package_uris),
            'python_module': 'trainer.task',
            'args': list(flags),
        },
    }
    if args.accelerator_count:
        pool['machine_spec']['accelerator_type'] = args.accelerator_type
        pool['machine_spec']['accelerator_count'] = args.accelerator_count
    specs = [{**pool, 'replica_count': 1}]
    if args.replica_count > 1:
        specs.append({**pool, 'replica_count': args.replica_count - 1})
    return specs


def job_package(args, dist_dir):
    """The imageshards package file the replicas install: --package, or this checkout's sdist."""
    if args.package:
        return distribution.package_file(args.package, '--package')
    if distribution.checkout_setup_py() is None:
        raise ValueError(distribution.no_source('--package'))
    return build_sdist(dist_dir)


def build_sdist(dist_dir, source_root=distribution.SOURCE_ROOT):
    """Builds the sdist of the setup.py in `source_root` into `dist_dir`; returns its path."""
    setup_py = os.path.join(source_root, 'setup.py')
    done = subprocess.run(
        [sys.executable, setup_py, '--quiet', 'sdist', '--dist-dir', dist_dir],
        cwd=source_root,
        capture_output=True,
        text=True,
        check=False,
    )
    built = [name for name in os.listdir(dist_dir) if name.endswith('.tar.gz')]
    if done.returncode or len(built) != 1:
        raise RuntimeError(f'building the sdist of {setup_py} failed:\n{done.stderr[-2000:]}')
    return os.path.join(dist_dir, built[0])


_CUDA_SETUP = """import setuptools

setuptools.setup(name='imageshards-cuda', version={version!r}, install_requires=[{req!r}])
"""


def build_cuda_sdist(dist_dir):
    """An sdist that only requires this machine's TensorFlow with its CUDA libraries from PyPI.

    Vertex AI installs package_uris with their requirements but without extras, and its prebuilt
    images carry the CUDA and cuDNN of an older TensorFlow than the one setup.py pins; with
    this package each replica gets the libraries its TensorFlow was built against.
    """
    version = importlib.metadata.version('tensorflow')
    source = tempfile.mkdtemp(dir=dist_dir)
    with open(os.path.join(source, 'setup.py'), 'w', encoding='utf-8') as f:
        f.write(_CUDA_SETUP.format(version=version, req=f'tensorflow[and-cuda]=={version}'))
    out = os.path.join(dist_dir, 'cuda')
    os.makedirs(out)
    return build_sdist(out, source)


def staging_dir(staging_bucket):
    """A fresh gs:// folder for a job's packages, so that no other job's are overwritten."""
    run = f'{time.strftime("%Y%m%d-%H%M%S", time.gmtime())}-{uuid.uuid4().hex[:8]}'
    return f'{staging_bucket.rstrip("/")}/staging/{run}'


def make_job(args, specs, credentials=None):
    """The aiplatform.CustomJob, with what `submit` would add already in its spec."""
    from google.cloud import aiplatform  # pylint: disable=import-outside-toplevel

    job = aiplatform.CustomJob(
        display_name=args.display_name,
        worker_pool_specs=specs,
        base_output_dir=args.job_dir,
        project=args.project,
        location=args.region,
        staging_bucket=args.staging_bucket,
        credentials=credentials,
    )
    # Set here rather than as submit()'s arguments, so that --dry-run prints them too.
    if args.service_account:
        job.job_spec.service_account = args.service_account
    if args.restart_job_on_worker_restart:
        job.job_spec.scheduling = {'restart_job_on_worker_restart': True}
    return job


def upload(local_path, uri, project):
    from google.cloud import storage  # pylint: disable=import-outside-toplevel

    bucket, _, name = uri[len('gs://') :].partition('/')
    storage.Client(project=project).bucket(bucket).blob(name).upload_from_filename(local_path)
    _LOG.info('uploaded %s to %s', os.path.basename(local_path), uri)


def submit(args, passthrough, out=None):
    """Builds (and unless --dry-run, uploads and submits) the job; returns the CustomJob."""
    check_args(args)
    flags = trainer_args(args, passthrough)
    args.display_name = args.display_name or time.strftime(
        'imageshards-train-%Y%m%d-%H%M%S', time.gmtime()
    )
    with tempfile.TemporaryDirectory(prefix='imageshards-submit-') as dist_dir:
        packages = [job_package(args, dist_dir)]
        if args.accelerator_count and args.install_cuda:
            packages.append(build_cuda_sdist(dist_dir))
        staging = staging_dir(args.staging_bucket)
        uris = {path: f'{staging}/{os.path.basename(path)}' for path in packages}
        credentials = None
        if args.dry_run:
            from google.auth import credentials as auth  # pylint: disable=import-outside-toplevel

            credentials = auth.AnonymousCredentials()  # builds the job without logging in
        job = make_job(args, worker_pool_specs(args, uris.values(), flags), credentials)
        if args.dry_run:
            for path, uri in uris.items():
                _LOG.info(
                    'dry run: would upload %s (%d bytes) to %s', path, os.path.getsize(path), uri
                )
            out = out or sys.stdout
            json.dump(job.to_dict(), out, indent=2)
            out.write('\n')
            return job
        for path, uri in uris.items():
            upload(path, uri, args.project)
    job.submit()
    _LOG.info('submitted %s', job.resource_name)
    return job


def main(argv=None):
    console.configure_logging()
    try:
        args, passthrough = parse_args(sys.argv[1:] if argv is None else argv)
        submit(args, passthrough)
    except (ValueError, FileNotFoundError, RuntimeError) as e:
        _LOG.error('%s', e)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
