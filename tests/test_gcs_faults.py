"""gs:// builds as Cloud Storage answers them: slowly, and now and then with 429, 503 or a reset
connection (bench/gcs_proxy.py between the builds and the emulator).

A fault of the network is never an image's: a build through faults equals the clean build, and
one whose faults outlast the retries stops in one line, exit status 1, with no `_SUCCESS` and no
rejection for it. Only an answer about the object itself (404, 403) rejects an image. Cleaning
up after a failure never hides what stopped the build, and a build asks Cloud Storage about one
request per image and a few per shard.
"""

import json

import pytest

from bench import gcs_proxy
from bench.gcs_proxy import RESET
from bench.gcs_proxy import STALL
from bench.gcs_proxy import Fault
from imageshards import layout
from imageshards.gcs import RETRY_SECONDS_ENV
from pipelines import launcher

import images_for_tests as imgs

pytest_plugins = ['gcs_emulator']

CLASSES = ('ant', 'bee', 'cat')
PER_CLASS = 8
SHARDS = 2
FLAGS = ('--num-shards', str(SHARDS), '--seed', '3', '--splits', 'train=0.75,val=0.25')


@pytest.fixture(scope='module')
def images(gcs, tmp_path_factory):
    root = tmp_path_factory.mktemp('fault-data') / 'images'
    imgs.write_tree(root, PER_CLASS, CLASSES)
    return gcs.upload_tree(root, 'images')


@pytest.fixture(scope='module')
def proxy(gcs):
    with gcs_proxy.FaultProxy(gcs.url, latency=0.002) as running:
        yield running


@pytest.fixture
def through_proxy(proxy, monkeypatch):
    """The builds of a test speak to Cloud Storage through the proxy."""
    monkeypatch.setenv('STORAGE_EMULATOR_HOST', proxy.url)
    return proxy


@pytest.fixture
def short_retries(through_proxy, monkeypatch):
    """Retries that give up after 1 s: the client's 120 s would make a test of a fault that
    never ends slow."""
    monkeypatch.setenv(RETRY_SECONDS_ENV, '1')
    return through_proxy


def _argv(images, out):
    return ['--direct_running_mode=in_memory', '--no_auth', '--input', images, '--output', out]


def _build(images, out, *extra):
    return launcher.run([*_argv(images, out), *FLAGS, *extra])


def _main(images, out, *extra):
    return launcher.main([*_argv(images, out), *FLAGS, *extra])


def _outcome(dataset):
    shards = {
        s['path']: s['sha256'] for split in dataset['splits'].values() for s in split['shards']
    }
    return dataset['counts'], shards


def _errors(capsys):
    """The error lines a person sees."""
    return [
        line.split(' ERROR ', 1)[1]
        for line in capsys.readouterr().err.splitlines()
        if ' ERROR ' in line
    ]


@pytest.fixture(scope='module')
def clean(gcs, images, proxy):
    """A build with no fault, through the proxy: (dataset.json, what the proxy saw)."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv('STORAGE_EMULATOR_HOST', proxy.url)
        with proxy.faulting() as record:
            dataset = _build(images, gcs.uri('clean'))
    return dataset, record


def test_a_clean_build_asks_one_request_per_image_and_a_few_per_shard(gcs, clean):
    dataset, record = clean
    images = len(CLASSES) * PER_CLASS
    assert dataset['counts']['written'] == images
    shards = sum(len(split['shards']) for split in dataset['splits'].values())
    reads = record['op:read']
    assert images <= reads <= images + 6  # the inputs, the listing, dataset.json, the lock
    # Writes: the lock, the listing and its index, a shard and its index each, and the build's
    # own files (rejected.jsonl, dataset.json, the TFDS metadata, the tf.Transform output).
    assert record['op:upload'] <= 3 + 2 * shards + 20
    assert record['op:batch'] <= 3  # the moves of the shards (a copy, a delete), the clean-up
    assert record['op:delete'] == 1  # the lock; the rest went in batches
    assert record['op:stat'] <= 4  # is the input a folder, the lock, dataset.json
    assert record['op:other'] == 0  # no bucket lookups (google-cloud-storage's metadata cache)
    assert record.requests() <= images + 4 * shards + 40


@pytest.mark.parametrize(
    'faults',
    [
        # Every kind of request; slow: most of them go one after another, each fault costs its
        # backoff (0.5 s on average at first).
        pytest.param(
            [Fault(503, 0.2), Fault(RESET, 0.05), Fault(429, 0.05)], marks=pytest.mark.slow
        ),
        [Fault(503, 1.0, ops={'read'}, path='/o/images/bee/', times=6)],  # image reads 503 first
        [Fault(RESET, 0.3, ops={'read'}, path='/o/images/')],
    ],
    ids=['everywhere', 'some-reads', 'resets'],
)
def test_a_build_through_faults_equals_the_clean_build(gcs, images, clean, through_proxy, faults):
    with through_proxy.faulting(*faults) as record:
        dataset = _build(images, gcs.uri(f'faulted-{faults[0].status}-{faults[0].rate}'))
    assert record.faults() > 0
    assert _outcome(dataset) == _outcome(clean[0])
    assert dataset['counts']['rejected'] == 0


def test_a_read_that_keeps_failing_stops_the_build_in_one_line_not_a_rejection(
    gcs, images, short_retries, capsys
):
    out = gcs.uri('read-fails')
    with short_retries.faulting(Fault(503, 1.0, ops={'read'}, path='images/cat/img_0001.jpg')):
        assert _main(images, out) == 1
    (line,) = _errors(capsys)
    assert line.startswith(f'Cloud Storage did not answer reading {images}/cat/img_0001.jpg ')
    assert 'within 1 s of retries (HTTP 503 Service Unavailable); ' in line
    assert line.endswith(f'the build stopped without {layout.SUCCESS}: run the same command again')
    assert gcs.names('read-fails') == []  # no _SUCCESS, no rejected.jsonl, no lock


def test_a_listing_that_keeps_failing_is_one_line_before_the_output_is_touched(
    gcs, images, short_retries, capsys
):
    with short_retries.faulting(Fault(503, 1.0, ops={'list'}, path='prefix=images/')):
        assert _main(images, gcs.uri('unlisted')) == 1
    (line,) = _errors(capsys)
    assert line.startswith(f'Cloud Storage did not answer listing {images}/ within 1 s ')
    assert gcs.names('unlisted') == []


def test_only_an_answer_about_the_object_rejects_it(gcs, images, through_proxy):
    forbidden = Fault(403, 1.0, ops={'read'}, path='images/ant/img_0001.jpg')
    with through_proxy.faulting(forbidden, Fault(503, 0.3, ops={'read'}, path='/o/images/')):
        dataset = _build(images, gcs.uri('forbidden'))
    rejected = [
        json.loads(line) for line in gcs.read(gcs.uri('forbidden', 'rejected.jsonl')).splitlines()
    ]
    assert [(row['path'], row['reason']) for row in rejected] == [
        (f'{images}/ant/img_0001.jpg', 'read_error')
    ]
    assert rejected[0]['detail'].startswith('Forbidden: 403 ')
    assert dataset['counts']['rejected'] == 1


def test_a_shard_write_that_keeps_failing_stops_the_build_in_one_line(
    gcs, images, short_retries, capsys
):
    with short_retries.faulting(Fault(503, 1.0, ops={'upload'}, path='/shards/')):
        assert _main(images, gcs.uri('write-fails'), '--no-analyze') == 1
    (line,) = _errors(capsys)
    assert line.startswith(f'Cloud Storage did not answer writing {gcs.uri("write-fails")}/')
    assert gcs.names('write-fails') == []


def test_cleaning_up_that_fails_never_hides_what_stopped_the_build(
    gcs, images, short_retries, capsys
):
    out = gcs.uri('left-behind')
    faults = [
        Fault(503, 1.0, ops={'read'}, path='/o/images/cat/'),  # what stops the build
        Fault(503, 1.0, ops={'batch'}),  # removing its files (a listing, shards)
        Fault(503, 1.0, ops={'delete'}, path=layout.LOCK_FILE),  # and its lock
    ]
    with short_retries.faulting(*faults):
        assert _main(images, out, '--no-analyze') == 1
    stderr = capsys.readouterr().err
    errors = [line.split(' ERROR ', 1)[1] for line in stderr.splitlines() if ' ERROR ' in line]
    assert len(errors) == 1
    assert errors[0].startswith(f'Cloud Storage did not answer reading {images}/cat/')
    assert f'could not remove the unfinished build from {out}: Cloud Storage did not' in stderr
    assert f'could not remove the lock of {out} (' in stderr  # a warning: it lapses
    left = gcs.names('left-behind')
    assert f'left-behind/{layout.LOCK_FILE}' in left and f'left-behind/{layout.SUCCESS}' not in left


@pytest.mark.slow
def test_in_worker_processes_a_read_that_keeps_failing_is_one_line_too(
    gcs, images, short_retries, capsys
):
    """The local runner's default: workers in processes of their own, whose errors reach the
    launcher as text."""
    out = gcs.uri('workers')
    argv = ['--no_auth', '--input', images, '--output', out, *FLAGS, '--no-analyze']
    argv += ['--direct_running_mode=multi_processing', '--direct_num_workers=2']
    with short_retries.faulting(Fault(503, 1.0, ops={'read'}, path='/o/images/bee/img_0003')):
        assert launcher.main(argv) == 1
    (line,) = _errors(capsys)
    assert line.startswith(f'Cloud Storage did not answer reading {images}/bee/img_0003.jpg ')
    assert line.endswith(f'the build stopped without {layout.SUCCESS}: run the same command again')
    assert gcs.names('workers') == []


def test_a_slow_read_holds_up_no_other_work_item(gcs, images, through_proxy):
    """As a read retried after faults is: its backoff, here a request answered 2 s late."""
    slow = 'ant/img_0000.jpg'  # in the first of 6 work items
    with through_proxy.faulting(
        Fault(STALL, 1.0, ops={'read'}, path=f'/o/images/{slow}')
    ) as record:
        dataset = _build(images, gcs.uri('straggler'), '--chunk-size', '4', '--no-analyze')
    assert dataset['counts']['written'] == len(CLASSES) * PER_CLASS
    reads = [span for span in record.spans if span[2] == 'read' and '/o/images/' in span[3]]
    answered = max(end for _, end, _, path in reads if path.endswith(slow))
    others = [start for start, _, _, path in reads if not path.endswith(slow)]
    assert len(others) == len(CLASSES) * PER_CLASS - 1
    assert max(others) < answered - 1  # every other item was read while it waited
