"""What the launcher reads of per-class tars on gs:// (issue 40): ImageNet's layout, 1,000 tars of
a class's JPEGs each, on the GCS emulator, built by a checkout's code; printed per build: the
bytes and requests the launching process itself asked of Cloud Storage, and the build's wall time.

    python -m bench.archive_listing --classes 1000 --per-class 3 --side 32
    python -m bench.archive_listing --checkouts /work/wt-before,. --side 256 --repeat 2
    python -m bench.archive_listing --checkouts /work/wt-before,. --latency-ms 30

Each build is the launcher (`pipelines.launcher.main`) in a process of its own, with the local
runner's workers in processes of theirs (`multi_processing`, 2 workers), as Dataflow's workers
are machines of theirs: what the workers read (every image, to validate and write it; after
issue 40, each archive to index it) is not counted, what the launcher reads is (listing the
folder, the glance at the first archive that tells the form, the archives or their indexes,
which go to --temp_location on gs:// as on Dataflow, or with `--indexes local` to a local
folder as in a local run without one). Each build's shards are compared with the first
build's (their SHA-256 in dataset.json): the same bytes, whichever code built them. The
counting is over `requests`, which Google's storage client and Beam's Cloud Storage reads go
through (`counting_responses`): the bytes are those of the answers (Content-Length). The
checkouts are alternated round by round; each one's code is what the launcher and its workers
import (PYTHONPATH), this module is only the driver.

The emulator answers in microseconds, not Cloud Storage's tens of milliseconds, and one
connection at a time: without `--latency-ms` (each request held that long by
bench/gcs_proxy.py, as Cloud Storage's 20 to 60 ms), wall times count the requests' CPU, and
requests sent at once wait for each other; bytes and requests are what Cloud Storage would see.
"""

import argparse
import contextlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
FLAGS = ['--no_auth', '--no-analyze', '--num-shards', '4', '--seed', '0', '--splits', 'train=1.0']
WORKERS = ['--direct_running_mode=multi_processing', '--direct_num_workers=2']


@contextlib.contextmanager
def counting_responses():
    """Counts what this process asks of a server over `requests` (Google's storage client, Beam's
    too): yields {'requests': n, 'bytes': n}, the bytes those of the answers (Content-Length).
    Another process (a local runner's worker) is not counted."""
    import requests.adapters  # pylint: disable=import-outside-toplevel

    counts = {'requests': 0, 'bytes': 0}
    send = requests.adapters.HTTPAdapter.send

    def counted(adapter, request, **kwargs):
        response = send(adapter, request, **kwargs)
        counts['requests'] += 1
        counts['bytes'] += int(response.headers.get('Content-Length') or 0)
        return response

    requests.adapters.HTTPAdapter.send = counted
    try:
        yield counts
    finally:
        requests.adapters.HTTPAdapter.send = send


def _launch(checkout, counts_path, argv):
    """The child: the launcher of `checkout`'s code in this process, counted."""
    sys.path.insert(0, checkout)
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    started = time.monotonic()
    with counting_responses() as counts:
        status = launcher.main(argv)
    counts.update(seconds=time.monotonic() - started, status=status)
    pathlib.Path(counts_path).write_text(json.dumps(counts))
    return status


def _jpeg(index, side):
    """A JPEG of side `side`: a plain colour with a noisy block, distinct per index."""
    import io  # pylint: disable=import-outside-toplevel

    import numpy as np  # pylint: disable=import-outside-toplevel
    from PIL import Image  # pylint: disable=import-outside-toplevel

    rng = np.random.default_rng(index)
    pixels = np.empty((side, side, 3), np.uint8)
    pixels[:] = rng.integers(0, 256, 3, dtype=np.uint8)
    half = side // 2
    pixels[:half, :half] = rng.integers(0, 256, (half, half, 3), dtype=np.uint8)
    data = io.BytesIO()
    Image.fromarray(pixels).save(data, format='JPEG', quality=90)
    return data.getvalue()


def _class_tars(client, bucket, classes, per_class, side):
    """Uploads `classes` tars of `per_class` JPEGs of side `side`; returns their bytes in all."""
    import concurrent.futures  # pylint: disable=import-outside-toplevel
    import io  # pylint: disable=import-outside-toplevel
    import tarfile  # pylint: disable=import-outside-toplevel

    def upload(k):
        data = io.BytesIO()
        with tarfile.open(fileobj=data, mode='w') as tar:
            for i in range(per_class):
                image = _jpeg(k * per_class + i, side)
                info = tarfile.TarInfo(f'n{k:08d}_{i}.JPEG')
                info.size = len(image)
                tar.addfile(info, io.BytesIO(image))
        client.bucket(bucket).blob(f'train/n{k:08d}.tar').upload_from_string(data.getvalue())
        return len(data.getvalue())

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return sum(pool.map(upload, range(classes)))


def _build(checkout, url, scratch, name, indexes):
    """Runs one build of gs://bench/train by `checkout`'s code; returns its counts."""
    counts_path = os.path.join(scratch, f'{name}.json')
    output = os.path.join(scratch, f'out-{name}')
    argv = ['--input', 'gs://bench/train', '--output', output, *FLAGS, *WORKERS]
    if indexes == 'gs':  # as on Dataflow: the indexes go to --temp_location
        argv += ['--temp_location', f'gs://bench/tmp-{name}']
    env = dict(os.environ, PYTHONPATH=checkout, STORAGE_EMULATOR_HOST=url)
    command = [sys.executable, __file__, 'launch', checkout, counts_path, *argv]
    done = subprocess.run(command, env=env, cwd=checkout, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f'the build by {checkout} failed:\n{done.stderr[-3000:]}')
    counts = json.loads(pathlib.Path(counts_path).read_text())
    with open(os.path.join(output, 'dataset.json'), encoding='utf-8') as f:
        dataset = json.load(f)
    counts['written'] = dataset['counts']['written']
    counts['shards'] = [
        s['sha256'] for split in dataset['splits'].values() for s in split['shards']
    ]
    return counts


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ['launch']:
        return _launch(argv[1], argv[2], argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--classes', type=int, default=1000)
    parser.add_argument('--per-class', type=int, default=3, help='JPEGs in each class tar')
    parser.add_argument('--side', type=int, default=32, help="the JPEGs' side in pixels")
    parser.add_argument('--checkouts', default=str(REPOSITORY), help='comma-separated')
    parser.add_argument('--repeat', type=int, default=1)
    parser.add_argument('--latency-ms', type=float, default=0, help='added to every request')
    parser.add_argument(
        '--indexes',
        choices=('gs', 'local'),
        default='gs',
        help="where the workers write the archives' indexes: on gs:// (--temp_location, as on "
        'Dataflow), or in a local folder (a local run without --temp_location)',
    )
    args = parser.parse_args(argv)
    from google.auth.credentials import AnonymousCredentials  # pylint: disable=C0415
    from google.cloud import storage  # pylint: disable=import-outside-toplevel

    from bench import gcs_proxy  # pylint: disable=import-outside-toplevel
    from bench import gcs_server  # pylint: disable=import-outside-toplevel

    checkouts = [str(pathlib.Path(path).resolve()) for path in args.checkouts.split(',')]
    # The emulator without its own cost per write (bench/gcs_preconditions.py): 0.1 s or more
    # each, one at a time, as the objects grow, which the index files would measure.
    with (
        tempfile.TemporaryDirectory() as scratch,
        gcs_server.running_server(scratch, preconditions=True) as emulator,
        gcs_proxy.FaultProxy(emulator, latency=args.latency_ms / 1000) as proxy,
    ):
        url = proxy.url
        os.environ['STORAGE_EMULATOR_HOST'] = url
        os.environ['GOOGLE_APPLICATION_CREDENTIALS'] = gcs_server.credentials_file(scratch)
        client = storage.Client(project='bench', credentials=AnonymousCredentials())
        client.create_bucket('bench')
        size = _class_tars(client, 'bench', args.classes, args.per_class, args.side)
        print(
            f'{args.classes} class tars of {args.per_class} JPEGs of {args.side}x{args.side} on '
            f'the emulator: {size / 1e6:.1f} MB; {args.latency_ms:g} ms a request; indexes on '
            f'{args.indexes}',
            flush=True,
        )
        first = None
        for round_ in range(args.repeat):
            order = checkouts if round_ % 2 == 0 else checkouts[::-1]
            for index, checkout in enumerate(order):
                counts = _build(checkout, url, scratch, f'{round_}-{index}', args.indexes)
                first = first or counts['shards']
                print(
                    f'{checkout}: the launcher read {counts["bytes"] / 1e6:8.3f} MB '
                    f'({counts["bytes"] / args.classes:9,.0f} bytes a tar) in '
                    f'{counts["requests"]:5d} requests; build {counts["seconds"]:6.1f} s, '
                    f"{counts['written']} images written, shards the same as the first build's: "
                    f'{counts["shards"] == first}',
                    flush=True,
                )
    return 0


if __name__ == '__main__':
    sys.exit(main())
