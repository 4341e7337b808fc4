"""Our detection build against TF Model Garden's COCO converter on the same files, alternated.

The files are bench/coco_like.py's set made `--peer-safe` (every crowd's RLE uncompressed, only
the wrong annotations the converter survives: it stops on the others, bench/peer_model_garden.py
--probe), 20,000 images by default. Each round runs both, in turns (the other first next round,
so that the machine's drift hits both alike), with the images' pages warm: wall seconds, CPU
seconds (user + system of every process of the tree, reaped) and peak RSS (summed over the tree,
sampled every 0.1 s; the largest single process beside it), then the ratios. The peer writes 16
shards and validates nothing (it never decodes an image); ours validates every image and
annotation and writes three splits:

    imageshards build --input DIR/annotations/instances.json --image-root DIR/images \\
        --output OUT --splits train=0.8,val=0.1,test=0.1 --overwrite

Until `imageshards build` takes `--image-root`, only the peer runs (as with `--peer-only`).

    python -m bench.coco_build [--images 20000] [--rounds 2] [--peer-only]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

from bench import coco_like
from bench import datasets
from bench import peer_model_garden
from bench.build_throughput import imageshards_build
from bench.measure import measure

HERE = os.path.dirname(os.path.abspath(__file__))
REPOSITORY = os.path.dirname(HERE)
SPLITS = 'train=0.8,val=0.1,test=0.1'
PEER = 'model garden'
OURS = 'imageshards'


def ours_available():
    """Whether this checkout's `imageshards build` reads COCO files (takes --image-root)."""
    done = subprocess.run(
        [sys.executable, '-m', 'imageshards_cli', 'build', '--help'],
        capture_output=True,
        text=True,
        check=False,
    )
    return '--image-root' in done.stdout


def contenders(data, peer_only, our_flags=()):
    """{name: out -> command}."""
    annotations = os.path.join(data, 'annotations', 'instances.json')
    images = os.path.join(data, 'images')
    found = {PEER: lambda out: peer_model_garden.command(data, out)}
    if not peer_only:
        found[OURS] = lambda out: imageshards_build(
            annotations, out, '--image-root', images, '--splits', SPLITS, *our_flags
        )
    return found


def _notes(name, out, output):
    """What each said of the annotations: the peer's one logged total, our dataset.json's counts."""
    if name == PEER:
        return {'logged_skipped': peer_model_garden.skipped(output)}
    try:
        with open(os.path.join(out, 'dataset.json'), encoding='utf-8') as f:
            counts = json.load(f).get('counts', {})
    except OSError:
        return {}
    return {'annotations': counts.get('annotations'), 'rejected': counts.get('rejected')}


def run_rounds(data, work, rounds, builds):
    """{name: [(seconds, cpu, tree peak, largest process peak)]}, printed as they come."""
    runs = {name: [] for name in builds}
    names = list(builds)
    env = peer_model_garden.environment()
    for round_ in range(rounds):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            out = os.path.join(work, ''.join(filter(str.isalnum, name)))
            shutil.rmtree(out, ignore_errors=True)
            os.makedirs(out)
            datasets.warm_page_cache(data)
            # Ours runs this checkout's code (not that of wherever the package is installed).
            own = dict(env, PYTHONPATH=REPOSITORY) if name == OURS else env
            measured = measure(builds[name](out), env=own)
            largest = measured.process_peaks[0][1] if measured.process_peaks else 0
            runs[name].append((measured.seconds, measured.cpu, measured.peak, largest))
            print(
                f'  round {round_ + 1}: {name:<14}{measured.seconds:>8.1f} s{measured.cpu:>8.1f} '
                f'CPU s{measured.peak / 2**20:>8.0f} MiB tree{largest / 2**20:>8.0f} MiB largest '
                f'{json.dumps(_notes(name, out, measured.output))}',
                flush=True,
            )
    return runs


def print_summary(runs, images):
    print(f'\nmedian of {len(next(iter(runs.values())))} round(s); peak RSS the largest seen')
    print(
        f'{"contender":<14}{"wall s":>9}{"images/s":>10}{"CPU s":>9}{"tree MiB":>10}{"largest":>9}'
    )
    for name, measured in runs.items():
        wall = statistics.median(m[0] for m in measured)
        cpu = statistics.median(m[1] for m in measured)
        tree, largest = (max(m[i] for m in measured) / 2**20 for i in (2, 3))
        print(
            f'{name:<14}{wall:>9.1f}{images / wall:>10.0f}{cpu:>9.1f}{tree:>10.0f}{largest:>9.0f}'
        )
    if OURS in runs:
        pairs = list(zip(runs[PEER], runs[OURS]))
        wall = [peer[0] / ours[0] for peer, ours in pairs]
        cpu = [peer[1] / ours[1] for peer, ours in pairs]
        print(
            f"the peer's over ours, round by round (above 1: ours faster or cheaper): "
            f'wall {", ".join(f"{r:.2f}" for r in wall)}; CPU {", ".join(f"{r:.2f}" for r in cpu)}'
        )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--images', type=int, default=20000)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--data', help='the set (default bench/out/coco-<images>)')
    parser.add_argument('--work', default=os.path.join(HERE, 'out', 'coco-build'))
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--peer-only', action='store_true')
    parser.add_argument('--our-flags', default='', help='more flags for our build, space-separated')
    args = parser.parse_args(argv)
    data = args.data or os.path.join(HERE, 'out', f'coco-{args.images}')
    made = coco_like.make(
        data, args.images, args.seed, kinds=coco_like.PEER_SAFE, compressed_rle=False
    )
    print(f'the set: {data} {json.dumps(made)}', flush=True)
    venv = peer_model_garden.ensure_venv()
    print(f"the peer's environment: {peer_model_garden.VENV} {json.dumps(venv)}", flush=True)
    peer_only = args.peer_only or not ours_available()
    if peer_only and not args.peer_only:
        print('`imageshards build` takes no --image-root here: the peer alone', flush=True)
    builds = contenders(data, peer_only, args.our_flags.split())
    print_summary(run_rounds(data, args.work, args.rounds, builds), args.images)


if __name__ == '__main__':
    main()
