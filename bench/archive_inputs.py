"""Images where users keep them (issue 33): a photo tree as a tar, against the tree itself and
against extracting the tar first; the same on the GCS emulator; and Fashion-MNIST-shaped IDX
files.

    python -m bench.archive_inputs tar --count 20000 --repeat 3
    python -m bench.archive_inputs gcs --count 4000 --repeat 3
    python -m bench.archive_inputs idx --repeat 3

`tar`: each round builds, in turn (the order alternated round by round), the tree, its tar, its
.tar.gz (made with GNU tar, `tar -cf` and `tar -czf`), and "extract, then build": `tar -xf`
into a fresh folder, then the build of that folder (timed together). The tree and archives
are warm in the page cache before each build.
Printed per build: wall seconds, peak memory of the process tree, and for extract-then-build
the seconds before the build (extracting; on gs://, also downloading and uploading); then each
contender's median and its ratio to the tree's.

`gcs`: the same tree and tar uploaded to a GCS emulator in this process (the
`gcp-storage-emulator` package the test suite uses), built from gs:// to a local output;
with `--with-copy`, also "extract, copy, build", which downloads the tar, extracts it and
uploads every file, then builds from gs:// (a user's alternative on Cloud Storage: a copy of
every object); the emulator rewrites its whole index on every upload, so that figure is the
emulator's more than the copy's. The emulator answers in
microseconds, not Cloud Storage's tens of milliseconds: its figures count requests' CPU, not
their latency.

`idx`: 60,000 + 10,000 images of 28x28 in MNIST's four .gz files (digits of scikit-learn,
shifted and jittered: sizes like Fashion-MNIST's), built with `--class-names`; printed: wall
seconds, images/s, the input's and the output's MB, peak memory.

Every build is `imageshards build --no-analyze --num-shards 16 --seed 0` in a process of its
own, as a user runs it.
"""

import argparse
import concurrent.futures
import contextlib
import gzip
import json
import os
import pathlib
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import time

import numpy as np

from bench import datasets
from bench.measure import measure

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
COMMAND = [sys.executable, '-m', 'imageshards_cli', 'build']
FLAGS = ['--no-analyze', '--num-shards', '16', '--seed', '0']


def _build(source, out, *extra, env=None):
    """The Measurement of one build of `source` into `out` (emptied first)."""
    shutil.rmtree(out, ignore_errors=True)
    command = [*COMMAND, '--input', source, '--output', str(out), *FLAGS, *extra]
    measured = measure(command, env=env, cwd=str(REPOSITORY))
    if not (pathlib.Path(out) / '_SUCCESS').exists():
        raise RuntimeError(f'the build of {source} failed:\n{measured.output[-2000:]}')
    return measured


def _tar(root, path, compress=False):
    """The tar of `root` as a user makes it: GNU tar (`tar -cf`, `tar -czf`), whose members
    have no pax header each, as Python's `tarfile` writes for a float mtime."""
    if not os.path.exists(path):
        subprocess.run(['tar', '-czf' if compress else '-cf', path, '-C', root, '.'], check=True)
    return path


def _warm(path):
    if os.path.isdir(path):
        datasets.warm_page_cache(path)
    else:
        with open(path, 'rb') as f:
            while f.read(1 << 24):
                pass


def _extract_then_build(tar_path, work, out):
    folder = work / 'extracted'
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    started = time.monotonic()
    subprocess.run(['tar', '-xf', tar_path, '-C', str(folder)], check=True)
    extracting = time.monotonic() - started
    measured = _build(str(folder), out)
    shutil.rmtree(folder, ignore_errors=True)
    return extracting + measured.seconds, measured.peak, extracting


def _rounds(contenders, repeat):
    """Runs each contender once a round, in alternated order; prints and returns the seconds."""
    seconds = {name: [] for name in contenders}
    for round_ in range(repeat):
        names = list(contenders) if round_ % 2 == 0 else list(contenders)[::-1]
        for name in names:
            taken, peak, extra = contenders[name]()
            seconds[name].append(taken)
            note = f'  ({extra:.1f} s of it before the build)' if extra else ''
            print(
                f'  round {round_ + 1}: {name:<22}{taken:7.1f} s {peak / 2**20:7.0f} MiB{note}',
                flush=True,
            )
    base = statistics.median(next(iter(seconds.values())))
    for name, values in seconds.items():
        median = statistics.median(values)
        each = ', '.join(f'{value:.1f}' for value in values)
        print(f'{name:<22} median {median:6.2f} s  {median / base:5.2f}x  ({each})')
    return seconds


def tar_rounds(args, work):
    tree = str(work / f'photos-{args.count}')
    datasets.photo_tree(tree, args.count)
    tar_path = _tar(tree, str(work / f'photos-{args.count}.tar'))
    tgz_path = _tar(tree, str(work / f'photos-{args.count}.tar.gz'), compress=True)
    print(
        f'{args.count:,} photos: tree {_size(tree)}, tar {_size(tar_path)}, '
        f'.tar.gz {_size(tgz_path)}'
    )

    def build_of(source):
        def run():
            _warm(source)
            measured = _build(source, work / 'out')
            return measured.seconds, measured.peak, 0

        return run

    def extracted():
        _warm(tar_path)
        return _extract_then_build(tar_path, work, work / 'out')

    _rounds(
        {
            'tree': build_of(tree),
            'tar': build_of(tar_path),
            'tar.gz': build_of(tgz_path),
            'extract, then build': extracted,
        },
        args.repeat,
    )


def _size(path):
    if os.path.isdir(path):
        total = sum(f.stat().st_size for f in pathlib.Path(path).rglob('*') if f.is_file())
    else:
        total = os.path.getsize(path)
    return f'{total / 1e6:,.0f} MB'


@contextlib.contextmanager
def _emulator(work):
    """A GCS emulator (the `gcp-storage-emulator` package) in a thread of this process, on a
    free port; yields the environment that builds reach it with."""
    from gcp_storage_emulator.server import create_server  # pylint: disable=import-outside-toplevel

    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    server = create_server('127.0.0.1', port, in_memory=True)
    server.start()
    # Beam's client looks credentials up whatever --no_auth says: a token that never expires.
    credentials = work / 'emulator-credentials.json'
    credentials.write_text(
        json.dumps(
            {
                'type': 'authorized_user',
                'client_id': 'bench',
                'client_secret': 'unused',
                'refresh_token': 'unused',
                'token': 'emulator',
                'expiry': '2999-01-01T00:00:00Z',
            }
        )
    )
    env = dict(os.environ, STORAGE_EMULATOR_HOST=f'http://127.0.0.1:{port}')
    env.update(GOOGLE_CLOUD_PROJECT='bench', GOOGLE_APPLICATION_CREDENTIALS=str(credentials))
    try:
        yield env
    finally:
        server.stop()


def _upload(bucket, root, prefix):
    """Every file below `root` as `prefix/<relative path>`, eight at a time."""
    files = [path for path in pathlib.Path(root).rglob('*') if path.is_file()]

    def put(path):
        name = f'{prefix}/{path.relative_to(root).as_posix()}'
        bucket.blob(name).upload_from_filename(str(path))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(put, files))


def gcs_rounds(args, work):
    from google.auth.credentials import AnonymousCredentials  # pylint: disable=import-outside-toplevel
    from google.cloud import storage  # pylint: disable=import-outside-toplevel

    tree = str(work / f'photos-{args.count}')
    datasets.photo_tree(tree, args.count)
    tar_path = _tar(tree, str(work / f'photos-{args.count}.tar'))
    with _emulator(work) as env:
        os.environ.update(env)
        client = storage.Client(project='bench', credentials=AnonymousCredentials())
        bucket = client.create_bucket('archives')
        _upload(bucket, tree, 'tree')
        bucket.blob('photos.tar').upload_from_filename(tar_path)
        uri = lambda name: f'gs://archives/{name}'  # noqa: E731

        def build_of(source):
            def run():
                measured = _build(source, work / 'out', '--no_auth', env=env)
                return measured.seconds, measured.peak, 0

            return run

        def extracted():
            started = time.monotonic()
            folder = work / 'from-gcs'
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            bucket.blob('photos.tar').download_to_filename(str(work / 'download.tar'))
            subprocess.run(
                ['tar', '-xf', str(work / 'download.tar'), '-C', str(folder)], check=True
            )
            _upload(bucket, folder, 'extracted')
            copying = time.monotonic() - started
            measured = _build(uri('extracted'), work / 'out', '--no_auth', env=env)
            return copying + measured.seconds, measured.peak, copying

        contenders = {'gs:// tree': build_of(uri('tree')), 'gs:// tar': build_of(uri('photos.tar'))}
        if args.with_copy:
            contenders['extract, copy, build'] = extracted
        _rounds(contenders, args.repeat)


def _idx_files(folder, train=60_000, test=10_000):
    """MNIST's four .gz files of 28x28 digits (scikit-learn's, enlarged, shifted, jittered)."""
    from PIL import Image  # pylint: disable=import-outside-toplevel
    from sklearn.datasets import load_digits  # pylint: disable=import-outside-toplevel

    folder.mkdir(parents=True, exist_ok=True)
    if (folder / 'names.txt').exists():
        return
    digits = load_digits()
    bases = [
        np.asarray(Image.fromarray((image * 16).astype(np.uint8)).resize((20, 20)))
        for image in digits.images
    ]
    rng = np.random.default_rng(0)
    for prefix, count in (('train', train), ('t10k', test)):
        picks = rng.integers(0, len(bases), count)
        images = np.zeros((count, 28, 28), np.uint8)
        for i, pick in enumerate(picks):
            top, left = rng.integers(0, 9, 2)
            jitter = rng.integers(-20, 21, (20, 20))
            images[i, top : top + 20, left : left + 20] = np.clip(bases[pick] + jitter, 0, 255)
        labels = digits.target[picks].astype(np.uint8)
        for kind, array in (('images-idx3', images), ('labels-idx1', labels)):
            header = struct.pack('>BBBB', 0, 0, 8, array.ndim)
            header += struct.pack(f'>{array.ndim}I', *array.shape)
            with gzip.open(folder / f'{prefix}-{kind}-ubyte.gz', 'wb') as f:
                f.write(header + array.tobytes())
    names = [
        'T-shirt/top',
        'Trouser',
        'Pullover',
        'Dress',
        'Coat',
        'Sandal',
        'Shirt',
        'Sneaker',
        'Bag',
        'Ankle boot',
    ]
    (folder / 'names.txt').write_text('\n'.join(names) + '\n')


def idx_rounds(args, work):
    folder = work / 'fashion-shaped'
    _idx_files(folder)
    for round_ in range(args.repeat):
        measured = _build(str(folder), work / 'out', '--class-names', str(folder / 'names.txt'))
        images = 70_000
        print(
            f'  round {round_ + 1}: {measured.seconds:6.1f} s  {images / measured.seconds:7,.0f}'
            f' images/s  input {_size(str(folder))}, output {_size(str(work / "out"))}, '
            f'peak {measured.peak / 2**20:,.0f} MiB',
            flush=True,
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n', 1)[0])
    parser.add_argument('what', choices=['tar', 'gcs', 'idx'])
    parser.add_argument('--count', type=int, default=20_000)
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--work-dir', default=str(REPOSITORY / 'bench' / 'out'))
    parser.add_argument(
        '--with-copy',
        action='store_true',
        help='gcs: also "extract, copy, build" (slow: the emulator rewrites its whole index '
        'on every upload, so a copy of thousands of objects measures the emulator)',
    )
    args = parser.parse_args(argv)
    work = pathlib.Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    {'tar': tar_rounds, 'gcs': gcs_rounds, 'idx': idx_rounds}[args.what](args, work)


if __name__ == '__main__':
    main()
