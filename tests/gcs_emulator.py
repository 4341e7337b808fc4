"""A real GCS server on this machine (the `gcp-storage-emulator` package) for gs:// tests.

Test modules take the `gcs` fixture with `pytest_plugins = ['gcs_emulator']` (or
`gcs_with_preconditions`: the emulator made to honour `ifGenerationMatch` as Cloud Storage does,
bench/gcs_preconditions.py). It starts the emulator in a subprocess on a free loopback port
(bench/gcs_server.py), points Google's clients at it for the module's tests and Beam's workers
(`STORAGE_EMULATOR_HOST`, which worker processes inherit), creates a bucket, and stops the
server at the end; its objects live in its memory only.

Beam's GCS client always looks up Application Default Credentials, and on a machine without
any it retries for about 30 s before connecting anonymously. The fixture therefore hands it a
user credential (the `authorized_user` file format of `gcloud auth application-default login`)
whose token expires in the year 2999: nothing is refreshed or fetched, and the emulator
ignores the token. Builds still pass `--no_auth`, for the clients Beam creates with it.
"""

import contextlib
import dataclasses
import os

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from bench import gcs_server

PROJECT = 'imageshards-test'


@dataclasses.dataclass
class Emulator:
    """A running emulator with one empty bucket, and a google-cloud-storage client for it."""

    url: str
    client: storage.Client
    bucket: storage.Bucket

    def uri(self, *parts):
        """`gs://BUCKET/part/...`: a path in the bucket, as builds take it."""
        return '/'.join([f'gs://{self.bucket.name}', *parts])

    def upload_tree(self, local_root, prefix):
        """Copies every file below `local_root` to `prefix/<relative path>`; returns its URI."""
        for folder, _, names in os.walk(local_root):
            for name in names:
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, local_root).replace(os.sep, '/')
                self.bucket.blob(f'{prefix}/{relative}').upload_from_filename(path)
        return self.uri(prefix)

    def upload(self, name, data):
        self.bucket.blob(name).upload_from_string(data)
        return self.uri(name)

    def read(self, uri):
        """The bytes of the object at `gs://BUCKET/name`."""
        return self.bucket.blob(self.name(uri)).download_as_bytes()

    def names(self, prefix):
        """The names of the objects below `prefix/`, sorted."""
        return sorted(
            blob.name for blob in self.client.list_blobs(self.bucket, prefix=prefix + '/')
        )

    def name(self, uri):
        bucket_prefix = f'gs://{self.bucket.name}/'
        if not uri.startswith(bucket_prefix):
            raise ValueError(f'{uri} is not in {bucket_prefix}')
        return uri[len(bucket_prefix) :]


@contextlib.contextmanager
def _emulator(request, tmp_path_factory, preconditions):
    work_dir = str(tmp_path_factory.mktemp('gcs-emulator'))
    with (
        gcs_server.running_server(work_dir, preconditions) as url,
        pytest.MonkeyPatch.context() as env,
    ):
        env.setenv('STORAGE_EMULATOR_HOST', url)
        env.setenv('GOOGLE_APPLICATION_CREDENTIALS', gcs_server.credentials_file(work_dir))
        env.setenv('GOOGLE_CLOUD_PROJECT', PROJECT)
        client = storage.Client(project=PROJECT, credentials=AnonymousCredentials())
        bucket_name = request.module.__name__.rsplit('.', 1)[-1].replace('_', '-')
        yield Emulator(url, client, client.create_bucket(bucket_name))


@pytest.fixture(scope='module')
def gcs(request, tmp_path_factory):
    """An Emulator with an empty bucket named after the test module."""
    with _emulator(request, tmp_path_factory, preconditions=False) as emulator:
        yield emulator


@pytest.fixture(scope='module')
def gcs_with_preconditions(request, tmp_path_factory):
    """The same, honouring `ifGenerationMatch` on uploads and deletes as Cloud Storage does."""
    with _emulator(request, tmp_path_factory, preconditions=True) as emulator:
        yield emulator
