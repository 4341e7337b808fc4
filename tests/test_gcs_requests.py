"""gs:// as a build speaks to it (imageshards/gcs.py, gcs_objects.py), on the emulator behind
bench/gcs_proxy.py: how many requests each operation takes, what is retried, what a fault that
outlasts the retries becomes, and which credentials are looked up."""

import contextlib
import errno
import threading

import google.auth
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.io.gcp import gcsio
from apache_beam.options.pipeline_options import PipelineOptions
from google.api_core import exceptions

from bench import gcs_proxy
from bench.gcs_proxy import LOST
from bench.gcs_proxy import RESET
from bench.gcs_proxy import Fault
from imageshards import gcs as cloud
from imageshards import gcs_objects
from imageshards import storage

pytest_plugins = ['gcs_emulator']


@pytest.fixture(scope='module')
def gcs(gcs_with_preconditions):
    """The emulator, honouring `ifGenerationMatch` as Cloud Storage does."""
    return gcs_with_preconditions


@pytest.fixture(scope='module')
def proxy(gcs):
    with gcs_proxy.FaultProxy(gcs.url) as running:
        yield running


@pytest.fixture
def through(proxy, monkeypatch):
    monkeypatch.setenv('STORAGE_EMULATOR_HOST', proxy.url)
    return proxy


@contextlib.contextmanager
def giving_up_after_a_second():
    """Retries that give up after 1 s, for a fault that never ends (the client's 120 s would
    make the test slow)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv(cloud.RETRY_SECONDS_ENV, '1')
        yield


def _objects(gcs, prefix, count):
    for i in range(count):
        gcs.upload(f'{prefix}/{i:04d}', b'x%d' % i)
    return [gcs.uri(prefix, f'{i:04d}') for i in range(count)]


def test_deletes_and_moves_go_100_to_a_batch_and_ask_nothing_first(gcs, through):
    uris = _objects(gcs, 'many', 250)
    with through.faulting() as record:
        storage.rename(uris, [uri.replace('/many/', '/moved/') for uri in uris])
    assert dict(record) == {'op:batch': 6}  # 3 batches of copies, then 3 of deletes
    assert len(gcs.names('moved')) == 250 and gcs.names('many') == []
    with through.faulting() as record:
        assert storage.delete_tree(gcs.uri('moved')) == 250
    assert dict(record) == {'op:list': 1, 'op:batch': 3}
    assert storage.delete([gcs.uri('moved', '0000')]) == 0  # gone already: not an error


def test_a_batch_whose_answer_is_lost_is_sent_again(gcs, through):
    uris = _objects(gcs, 'lost', 3)
    # The copies are made, their answer lost; sent again, they are made again.
    with through.faulting(Fault(LOST, 1.0, ops={'batch'}, times=2)) as record:
        storage.rename(uris, [uri.replace('/lost/', '/found/') for uri in uris])
    assert record['fault:lost'] == 2 and record['op:batch'] == 4
    assert gcs.names('found') == [f'found/{i:04d}' for i in range(3)] and gcs.names('lost') == []


def test_a_batch_never_answered_is_one_line_and_a_forbidden_one_a_permission_error(gcs, through):
    uris = _objects(gcs, 'stuck', 2)
    with through.faulting(Fault(503, 1.0, ops={'batch'})), giving_up_after_a_second():
        with pytest.raises(cloud.StoreUnavailable) as stuck:
            storage.delete(uris)
    assert str(stuck.value).startswith(
        f'Cloud Storage did not answer deleting {uris[0]} within 1 s of retries '
        '(HTTP 503 Service Unavailable); the build stopped without _SUCCESS'
    )
    with through.faulting(Fault(403, 1.0, ops={'upload'})):
        with pytest.raises(PermissionError) as refused:
            storage.write_atomically(gcs.uri('stuck', 'dataset.json'), b'{}')
    assert refused.value.errno == errno.EACCES and refused.value.filename.endswith('dataset.json')


def test_small_writes_take_one_request_and_streams_resume(gcs, through):
    files = {gcs.uri('written', f'{i}.json'): b'%d' % i for i in range(5)}
    with through.faulting() as record:
        storage.write_files(files)
        storage.write_once(gcs.uri('written', '0.json'), b'other bytes')  # there: left as it is
    assert dict(record) == {'op:upload': 6}
    assert [gcs.read(uri) for uri in files] == list(files.values())
    data = bytes(range(256)) * (gcs_objects.CHUNK_BYTES // 256 + 1000)
    with through.faulting(Fault(503, 0.5, ops={'upload'})) as record:
        with storage.create(gcs.uri('written', 'big.bin')) as f:
            for start in range(0, len(data), 1 << 20):
                f.write(data[start : start + (1 << 20)])
    assert record['fault:503'] >= 1 and gcs.read(gcs.uri('written', 'big.bin')) == data


def test_an_object_appears_only_once_written_whole(gcs, through, tmp_path):
    uri = gcs.uri('whole', 'train-00000-of-00001.tfrecord')
    with pytest.raises(ValueError):
        with storage.created_whole(uri, None) as f:
            f.write(b'half of a shard')
            raise ValueError('the writer stopped')
    assert gcs.names('whole') == []
    with storage.created_whole(uri, None) as f:
        f.write(b'a shard')
    assert gcs.read(uri) == b'a shard'
    local = tmp_path / 'out' / 'train' / 'train-00000-of-00001.tfrecord'
    with storage.created_whole(str(local), str(tmp_path / 'tmp')) as f:
        f.write(b'a shard')
        assert not local.exists()  # under a temporary name until closed
    assert local.read_bytes() == b'a shard' and list((tmp_path / 'tmp').iterdir()) == []


def test_reads_are_retried_through_resets_and_range_reads_take_one_request(gcs, through):
    uri = gcs.upload('reads/listing.jsonl', b'0123456789')
    with through.faulting(Fault(RESET, 1.0, ops={'read'}, times=2)) as record:
        assert storage.read_input(uri) == b'0123456789'
        assert storage.read_range(uri, 2, 5) == b'234'
    assert dict(record) == {'op:read': 4, 'fault:reset': 2}
    with through.faulting(Fault(429, 1.0, ops={'read'})), giving_up_after_a_second():
        with pytest.raises(cloud.StoreUnavailable):
            storage.read_input(uri)
    with through.faulting(Fault(401, 1.0, ops={'read'})):
        with pytest.raises(cloud.StoreUnavailable, match='refused the credentials of this build'):
            storage.read_input(uri)
    with pytest.raises(exceptions.NotFound) as missing:
        storage.read_input(gcs.uri('reads', 'missing.jpg'))
    assert storage.input_missing(gcs.uri('reads', 'missing.jpg'), missing.value)


@pytest.mark.parametrize(
    'error, transient',
    [
        (exceptions.ServiceUnavailable('down'), True),
        (exceptions.TooManyRequests('slow down'), True),
        (ConnectionResetError(104, 'Connection reset by peer'), True),
        (exceptions.RetryError('gave up', exceptions.InternalServerError('x')), True),
        (exceptions.NotFound('no such object'), False),
        (exceptions.Forbidden('no'), False),
        (exceptions.Unauthorized('who?'), False),
        (ValueError('a bug'), False),
    ],
)
def test_what_counts_as_a_fault_of_the_network(error, transient):
    assert cloud.is_transient(error) is transient
    wrapped = RuntimeError('in a worker')
    wrapped.__cause__ = error
    assert cloud.is_transient(wrapped) is transient


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """A process of a build on a machine without Application Default Credentials, no emulator,
    before anything looked credentials up."""
    from apache_beam.internal.gcp import auth  # pylint: disable=import-outside-toplevel

    monkeypatch.delenv('STORAGE_EMULATOR_HOST', raising=False)
    monkeypatch.setenv('GOOGLE_APPLICATION_CREDENTIALS', str(tmp_path / 'no-such-key.json'))
    monkeypatch.setattr(auth._Credentials, '_credentials_init', False)
    monkeypatch.setattr(auth._Credentials, '_credentials', None)
    monkeypatch.setattr(cloud, '_QUIETED', [])
    cloud._credentials.cache_clear()
    yield monkeypatch
    cloud._credentials.cache_clear()


def _in_a_new_thread(fn):
    made = []
    thread = threading.Thread(target=lambda: made.append(fn()))
    thread.start()
    thread.join()
    return made[0]


def test_with_no_auth_no_credentials_are_looked_up_by_us_or_beam(no_credentials):
    looked_up = []
    no_credentials.setattr(google.auth, 'default', lambda *a, **k: looked_up.append(a) or 1 / 0)
    options = PipelineOptions(['--no_auth'])
    no_credentials.setattr(FileSystems, '_pipeline_options', options)  # as a Pipeline sets it
    storage.check_credentials(['gs://public/images', '/tmp/out'])
    beam_client = gcsio.create_storage_client(options)  # what Beam's GCS filesystem makes
    ours = _in_a_new_thread(cloud.client)
    assert type(beam_client._credentials).__name__ == 'AnonymousCredentials'
    assert type(ours._credentials).__name__ == 'AnonymousCredentials'
    assert looked_up == []


def test_without_credentials_a_gs_build_is_one_line(no_credentials):
    no_credentials.setattr(FileSystems, '_pipeline_options', PipelineOptions([]))
    storage.check_credentials(['/data/images', '/data/out'])  # no gs://: nothing to check
    with pytest.raises(cloud.CredentialsMissing) as missing:
        storage.check_credentials(['/data/images', 'gs://bucket/out'])
    assert str(missing.value) == (
        'gs:// needs Google Cloud credentials and none were found: run `gcloud auth '
        'application-default login`, set GOOGLE_APPLICATION_CREDENTIALS to the key file of a '
        'service account, or pass --no_auth to read public data anonymously'
    )
