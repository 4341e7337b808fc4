"""gs:// -> gs:// builds at cloud latency and under faults (issue 31), on the GCS emulator behind
bench/gcs_proxy.py, which delays every request and injects faults.

    python -m bench.gcs_latency --count 2000 --settings 0ms,30ms --repeat 3
    python -m bench.gcs_latency --count 2000 --settings 30ms,5%,30%+5%reset
    python -m bench.gcs_latency --count 2000 --checkout /path/to/main  # another checkout's code

Each setting's build runs as a user runs it (`imageshards build --no_auth`, inputs and output on
gs://), settings alternated round by round. Printed per build: wall seconds and images/s, the
requests it made per image and by operation, the requests in flight on average (while any
was), and the part after the last read of an input ("tail": requests, seconds, in flight),
where nothing but the build's own files is left to write. `--adc` hands the builds the test
suite's stand-in credentials file, for code that looks credentials up despite `--no_auth`
(main before issue 31: Beam's lookup retries for ~20 s in every process without them). A
setting with faults also prints its exit status and last line of stderr, whether `_SUCCESS`
exists, its rejections, and whether its counts and shards equal those of the first clean build
("same").

Settings: `Nms` (a delay of N ms per request, no faults); `5%` (3% 503, 1% 429, 1% resets);
`30%+5%reset` (30% 503 and 5% resets); faults come on top of --latency-ms.
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from bench import datasets
from bench import gcs_proxy
from bench import gcs_server
from bench.gcs_proxy import RESET
from bench.gcs_proxy import Fault

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent

FAULTS = {
    '5%': lambda: [Fault(503, 0.03), Fault(429, 0.01 / 0.97), Fault(RESET, 0.01 / 0.96)],
    '30%+5%reset': lambda: [Fault(503, 0.30), Fault(RESET, 0.05 / 0.70)],
}


def _setting(name, latency_ms):
    """(latency in seconds, [Fault]) of a setting's name."""
    if name.endswith('ms'):
        return float(name[:-2]) / 1000, []
    return latency_ms / 1000, FAULTS[name]()


def _upload(client, bucket, root, prefix):
    from google.cloud import storage  # pylint: disable=import-outside-toplevel

    files = [path for path in sorted(pathlib.Path(root).rglob('*')) if path.is_file()]
    target = storage.Bucket(client, bucket)

    def put(path):
        name = f'{prefix}/{path.relative_to(root).as_posix()}'
        target.blob(name).upload_from_filename(str(path))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(put, files))
    return len(files)


def _build(proxy, bucket, name, flags, checkout, env):
    """Runs one build through `proxy`; returns what it printed and what it wrote."""
    output = f'gs://{bucket}/out-{name}'
    command = [sys.executable, '-m', 'imageshards_cli', 'build', '--no_auth']
    command += ['--input', f'gs://{bucket}/images', '--output', output, *flags]
    started = time.monotonic()
    done = subprocess.run(command, env=env, cwd=checkout, capture_output=True, text=True)
    seconds = time.monotonic() - started
    return output, done, seconds


def _outcome(client, bucket, output):
    """(counts, {shard: sha256}, _SUCCESS exists) of a build's output, as far as written."""
    prefix = output[len(f'gs://{bucket}/') :]
    names = {blob.name for blob in client.list_blobs(bucket, prefix=prefix + '/')}
    dataset = None
    if f'{prefix}/dataset.json' in names:
        dataset = json.loads(
            client.bucket(bucket).blob(f'{prefix}/dataset.json').download_as_bytes()
        )
    if dataset is None:
        return None, None, f'{prefix}/_SUCCESS' in names
    shards = {
        shard['path']: shard['sha256']
        for split in dataset['splits'].values()
        for shard in split['shards']
    }
    return dataset['counts'], shards, f'{prefix}/_SUCCESS' in names


def _report(name, record, done, seconds, count, outcome, clean):
    reads = [span for span in record.spans if span[2] == 'read' and '/o/images/' in span[3]]
    last_read = max((span[1] for span in reads), default=None)
    tail = [span for span in record.spans if last_read is not None and span[0] > last_read]
    tail_seconds = max((span[1] for span in tail), default=last_read or 0) - (last_read or 0)
    ops = ', '.join(f'{key[3:]} {n}' for key, n in sorted(record.items()) if key.startswith('op:'))
    line = (
        f'{name:>12}: {seconds:6.1f} s, {count / seconds:6.1f} images/s, '
        f'{record.requests() / count:.2f} requests/image ({record.requests()}: {ops}), '
        f'{record.mean_in_flight():.1f} in flight; tail {len(tail)} requests, '
        f'{tail_seconds:.1f} s, {record.mean_in_flight(last_read):.1f} in flight'
    )
    counts, shards, success = outcome
    if record.faults() or done.returncode:
        last = (done.stderr.strip().splitlines() or [''])[-1]
        rejected = (counts or {}).get('rejected')
        same = clean is not None and (counts, shards) == clean
        line += (
            f'\n{"":>14}faults {record.faults()}; exit {done.returncode}, _SUCCESS {success}, '
            f'rejected {rejected}, same {same}, stderr lines '
            f'{len(done.stderr.strip().splitlines())}, last: {last[:300]}'
        )
    print(line, flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--count', type=int, default=2000)
    parser.add_argument('--size', default='64x64', help='image width x height')
    parser.add_argument('--settings', default='0ms,30ms', help='comma-separated (see above)')
    parser.add_argument('--latency-ms', type=float, default=30, help='under the faults')
    parser.add_argument('--repeat', type=int, default=1)
    parser.add_argument('--checkout', default=str(REPOSITORY), help='the code to run')
    parser.add_argument('--extra', default='--num-shards 4', help='more build flags')
    parser.add_argument(
        '--adc', action='store_true', help="hand the builds the test suite's stand-in ADC file"
    )
    parser.add_argument('--work-dir', default=os.path.join(os.path.dirname(__file__), 'out'))
    args = parser.parse_args(argv)
    from google.auth.credentials import AnonymousCredentials  # pylint: disable=C0415
    from google.cloud import storage  # pylint: disable=import-outside-toplevel

    width, height = map(int, args.size.split('x'))
    tree = os.path.join(args.work_dir, f'photos-{args.count}-{args.size}')
    if not os.path.isdir(tree):
        datasets.photo_tree(tree, args.count, size=(width, height))
    with tempfile.TemporaryDirectory() as scratch:
        # Honouring preconditions as Cloud Storage does, and without the emulator's own cost
        # per write (bench/gcs_preconditions.py).
        with gcs_server.running_server(scratch, preconditions=True) as url:
            os.environ['STORAGE_EMULATOR_HOST'] = url
            client = storage.Client(project='bench', credentials=AnonymousCredentials())
            bucket = client.create_bucket('bench').name
            count = _upload(client, bucket, tree, 'images')
            env = dict(os.environ, PYTHONPATH=args.checkout)
            env.pop('GOOGLE_APPLICATION_CREDENTIALS', None)
            if args.adc:
                env['GOOGLE_APPLICATION_CREDENTIALS'] = gcs_server.credentials_file(scratch)
            print(f'{count} images of {args.size} on the emulator; code of {args.checkout}')
            clean = None
            for round_ in range(args.repeat):
                for name in args.settings.split(','):
                    latency, faults = _setting(name, args.latency_ms)
                    with gcs_proxy.FaultProxy(url, latency=latency, faults=faults) as proxy:
                        env['STORAGE_EMULATOR_HOST'] = proxy.url
                        output, done, seconds = _build(
                            proxy,
                            bucket,
                            f'{name}-{round_}'.replace('%', 'pc').replace('+', '-'),
                            args.extra.split(),
                            args.checkout,
                            env,
                        )
                    outcome = _outcome(client, bucket, output)
                    if clean is None and not faults and done.returncode == 0:
                        clean = outcome[:2]
                    _report(name, proxy.record, done, seconds, count, outcome, clean)


if __name__ == '__main__':
    main()
