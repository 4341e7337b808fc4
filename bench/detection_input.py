"""Detection training input: our pipeline against TF Model Garden's RetinaNet input, same shards.

Both read the train split of a detection build (the TFRecord shards its dataset.json lists) and
deliver batches of 16 training examples of SIZE x SIZE (640 by default, `--size 320`), each
contender in a subprocess of its own, alternated round by round (the other first next round, so
that the machine's drift hits both alike), the shards' pages warm before each:
  ours          trainer.objects_input.training_dataset(info, 'train', 16,
                ObjectInput(canvas=(S, S)), centernet.targets(num_classes, (S, S)), seed=0):
                the shard list shuffled per epoch, 8 shards interleaved, a record shuffle buffer
                of 4096, then per record in a parallel map: parse, decode, flip, scale jitter
                0.75-1.33 and a random crop onto the canvas, colour jitter (brightness, contrast,
                saturation), CenterNet's targets (per-class centre heatmap and box maps at 1/4
                of the canvas; image uint8), batch, prefetch; run by this checkout's .venv
  model garden  tf-models-official 2.20's own `InputReader` (official/core/input_reader.py), as
                its RetinaNet task (official/vision/tasks/retinanet.py) builds it with the
                defaults of RetinaNet's DataConfig: the file list shuffled and repeated,
                TFRecordDataset interleaved (AUTOTUNE), a record shuffle buffer of 10,000,
                `TfExampleDecoder` (no masks) in a parallel map, `retinanet_input.Parser`
                (training) in a parallel map: crowds dropped, normalize, flip, scale jitter
                0.75-1.33, random crop, pad to a multiple of 2**7 (320 -> 384), anchors of
                levels 3-7 (3 scales, aspect ratios 0.5/1/2, anchor size 4) matched at its
                default thresholds (0.5/0.5), image bfloat16; batch, prefetch; run in its own
                environment (bench/peer_model_garden.py: TensorFlow 2.20)
Per contender and round: images/s over `--batches` batches after `--warmup` (which fill the
shuffle buffers, trace, let AUTOTUNE settle), CPU milliseconds per image over the same batches
(user + system of the subprocess, all its threads: what an image costs even on a machine under
load), and the whole subprocess's CPU seconds and peak RSS (bench/measure.py; start-up, imports
and warm-up included); then ours over theirs per round (images/s: above 1, ours faster; CPU per
image: below 1, ours cheaper) and the medians.

    python -m bench.detection_input --data BUILD_DIR --size 640 --repeat 3
    python -m bench.detection_input --data BUILD_DIR --size 320 --repeat 3
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPOSITORY = os.path.dirname(HERE)
OURS = 'ours'
PEER = 'model garden'
BATCH = 16
SPLIT = 'train'
# Model Garden's RetinaNet on COCO (official/vision/configs/retinanet.py), the jitter ours.
LEVELS = (3, 7)
NUM_SCALES = 3
ASPECT_RATIOS = [0.5, 1.0, 2.0]
ANCHOR_SIZE = 4.0
SCALE_RANGE = (0.75, 1.33)
MAX_INSTANCES = 100
RESULT = 'RESULT '  # a worker's line of results starts so


def our_dataset(data, size, batch):
    """Our training input of the build in `data` (this checkout's code)."""
    # pylint: disable=import-outside-toplevel
    from trainer import centernet
    from trainer import dataset_info
    from trainer import objects_input

    info = dataset_info.load(data)
    canvas = (size, size)
    settings = objects_input.ObjectInput(canvas=canvas)
    assert settings.scale_range == SCALE_RANGE, settings.scale_range
    targets = centernet.targets(info.num_classes, canvas)
    return objects_input.training_dataset(info, SPLIT, batch, settings, targets, seed=0)


def peer_dataset(files, size, batch):
    """Model Garden's RetinaNet training input over `files`, as its task builds it."""
    # pylint: disable=import-outside-toplevel
    from official.common import dataset_fn
    from official.core import input_reader
    from official.vision.configs import retinanet as retinanet_config
    from official.vision.dataloaders import retinanet_input
    from official.vision.dataloaders import tf_example_decoder

    params = retinanet_config.DataConfig(
        input_path=files, is_training=True, global_batch_size=batch
    )
    defaults = params.parser
    parser = retinanet_input.Parser(
        output_size=[size, size],
        min_level=LEVELS[0],
        max_level=LEVELS[1],
        num_scales=NUM_SCALES,
        aspect_ratios=ASPECT_RATIOS,
        anchor_size=ANCHOR_SIZE,
        dtype=params.dtype,
        match_threshold=defaults.match_threshold,
        unmatched_threshold=defaults.unmatched_threshold,
        aug_rand_hflip=True,
        aug_scale_min=SCALE_RANGE[0],
        aug_scale_max=SCALE_RANGE[1],
        skip_crowd_during_training=defaults.skip_crowd_during_training,
        max_num_instances=MAX_INSTANCES,
        pad=defaults.pad,
        keep_aspect_ratio=defaults.keep_aspect_ratio,
    )
    decoder = tf_example_decoder.TfExampleDecoder()
    reader = input_reader.InputReader(
        params,
        dataset_fn=dataset_fn.pick_dataset_fn(params.file_type),
        decoder_fn=decoder.decode,
        parser_fn=parser.parse_fn(params.is_training),
    )
    return reader.read()


def timed_batches(dataset, warmup, batches):
    """{images, seconds, cpu (user + system s of this process), image (shape and type)} over
    `batches` batches after `warmup`."""
    iterator = iter(dataset)
    for _ in range(warmup):
        next(iterator)
    images, start, cpu = 0, time.perf_counter(), _cpu_seconds()
    for _ in range(batches):
        batch = next(iterator)
        images += int(batch[0].shape[0])
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    image = batch[0]
    return {
        'images': images,
        'seconds': seconds,
        'cpu': cpu,
        'image': f'{list(image.shape)} {image.dtype.name}',
    }


def _cpu_seconds():
    times = os.times()
    return times.user + times.system


def work(args):
    """A worker (--worker): one contender measured in this process, its results in one line."""
    if args.worker == OURS:
        dataset = our_dataset(args.data, args.size, args.batch_size)
    else:
        with open(args.files, encoding='utf-8') as f:
            dataset = peer_dataset(json.load(f), args.size, args.batch_size)
    print(RESULT + json.dumps(timed_batches(dataset, args.warmup, args.batches)), flush=True)
    # tf.data's threads are still at work on the next batches: no orderly tear-down to wait for.
    os._exit(0)


def commands(args, files_json):
    """{contender: its worker's command line}."""
    flags = ['-m', 'bench.detection_input', '--data', args.data, '--size', str(args.size)]
    flags += ['--batch-size', str(args.batch_size), '--batches', str(args.batches)]
    flags += ['--warmup', str(args.warmup)]
    return {
        OURS: [args.python, *flags, '--worker', OURS],
        PEER: [os.path.join(args.venv, 'bin', 'python'), *flags, '--worker', 'model-garden']
        + ['--files', files_json],
    }


def run_once(command):
    """(worker's results + whole-process cpu_total and peak, bench/measure.py's figures)."""
    # pylint: disable=import-outside-toplevel
    from bench import peer_model_garden
    from bench.measure import measure

    env = dict(peer_model_garden.environment(), PYTHONPATH=REPOSITORY)
    measured = measure(command, env=env, cwd=REPOSITORY)
    lines = [line for line in measured.output.splitlines() if line.startswith(RESULT)]
    if not lines:
        raise RuntimeError(f'{command} printed no results:\n{measured.output[-4000:]}')
    found = json.loads(lines[-1][len(RESULT) :])
    return dict(found, cpu_total=measured.cpu, peak=measured.peak)


def warm(files):
    """Reads every shard once: both contenders start with the shards' pages in memory."""
    for path in files:
        with open(path, 'rb') as f:
            while f.read(1 << 24):
                pass


def run_rounds(args, files, files_json):
    """{contender: [results per round]}, printed as they come, with ours over theirs."""
    found = commands(args, files_json)
    names = list(found)
    runs = {name: [] for name in names}
    for round_ in range(args.repeat):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            warm(files)
            result = run_once(found[name])
            runs[name].append(result)
            print(f'  round {round_ + 1}: {_line(name, result)}', flush=True)
        speed, cost = _ratios(runs[OURS][-1], runs[PEER][-1])
        print(
            f'  round {round_ + 1}: ours/model garden: images/s {speed:.2f}, '
            f'CPU per image {cost:.2f}',
            flush=True,
        )
    return runs


def _rate(result):
    return result['images'] / result['seconds']


def _cpu_ms(result):
    return result['cpu'] / result['images'] * 1e3


def _ratios(ours, theirs):
    """(images/s ours over theirs, CPU per image ours over theirs)."""
    return _rate(ours) / _rate(theirs), _cpu_ms(ours) / _cpu_ms(theirs)


def _line(name, result):
    return (
        f'{name:<14}{_rate(result):>8.1f} images/s{_cpu_ms(result):>8.1f} ms CPU/image'
        f'{result["cpu_total"]:>8.1f} s CPU in all{result["peak"] / 2**20:>7.0f} MiB peak'
        f'   {result["image"]}'
    )


def print_summary(runs, args):
    rounds = len(runs[OURS])
    print(
        f'\nmedian of {rounds} round(s): {args.batches} batches of {args.batch_size} after '
        f'{args.warmup}, {args.size}x{args.size}, {os.cpu_count()} cores; peak RSS the largest'
    )
    print(f'{"contender":<14}{"images/s":>10}{"ms CPU/image":>14}{"CPU s in all":>14}{"MiB":>7}')
    for name, results in runs.items():
        rate = statistics.median(_rate(r) for r in results)
        cost = statistics.median(_cpu_ms(r) for r in results)
        total = statistics.median(r['cpu_total'] for r in results)
        peak = max(r['peak'] for r in results) / 2**20
        print(f'{name:<14}{rate:>10.1f}{cost:>14.1f}{total:>14.1f}{peak:>7.0f}')
    pairs = [_ratios(ours, theirs) for ours, theirs in zip(runs[OURS], runs[PEER])]
    for what, index, reading in (
        ('images/s', 0, 'above 1: ours faster'),
        ('CPU per image', 1, 'below 1: ours cheaper'),
    ):
        values = [pair[index] for pair in pairs]
        print(
            f'ours/model garden, {what} ({reading}): median {statistics.median(values):.2f}; '
            f'rounds {", ".join(f"{value:.2f}" for value in values)}'
        )


def shard_files(data):
    """The split's shard files, as the trainer takes them (dataset.json's list)."""
    # pylint: disable=import-outside-toplevel
    from trainer import dataset_info

    info = dataset_info.load(data)
    if info.raw.get('kind') != 'detection' or info.shard_format.name != 'tfrecord':
        raise SystemExit(f'{data}: not a detection build in TFRecord shards')
    return info.shard_paths(SPLIT)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--data', required=True, help='a detection build (imageshards build)')
    parser.add_argument('--size', type=int, default=640, help='the output side (640, 320)')
    parser.add_argument('--batch-size', type=int, default=BATCH)
    parser.add_argument('--batches', type=int, default=60, help='measured batches per run (>= 1)')
    parser.add_argument('--warmup', type=int, default=10, help='batches before the measure')
    parser.add_argument('--repeat', type=int, default=3, help='rounds; the median counts')
    parser.add_argument(
        '--python',
        default=os.path.join(REPOSITORY, '.venv', 'bin', 'python'),
        help="ours' interpreter",
    )
    parser.add_argument('--venv', help="Model Garden's environment (peer_model_garden.VENV)")
    parser.add_argument('--worker', choices=(OURS, 'model-garden'), help=argparse.SUPPRESS)
    parser.add_argument('--files', help=argparse.SUPPRESS)  # the worker's JSON list of shards
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        work(args)
        return
    # pylint: disable=import-outside-toplevel
    from bench import peer_model_garden

    args.venv = args.venv or peer_model_garden.VENV
    args.data = os.path.abspath(args.data)  # the workers run in the repository's root
    made = peer_model_garden.ensure_venv(args.venv)
    print(f"Model Garden's environment: {args.venv} {json.dumps(made)}", flush=True)
    files = shard_files(args.data)
    print(f'{len(files)} {SPLIT} shard(s) of {args.data}', flush=True)
    with tempfile.TemporaryDirectory() as work_dir:
        files_json = os.path.join(work_dir, 'files.json')
        with open(files_json, 'w', encoding='utf-8') as f:
            json.dump(files, f)
        runs = run_rounds(args, files, files_json)
    print_summary(runs, args)


if __name__ == '__main__':
    sys.exit(main())
