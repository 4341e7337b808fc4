"""Which records a training epoch or an evaluation pass reads, and in what order.

Training reads a split's shards (`Shards`): the shard list shuffled with a seed of (seed,
epoch), several shards interleaved, then a record shuffle buffer seeded by (seed, epoch); with
few shards, each shard starts at a record fixed by (seed, epoch, shard) and wraps around. A
random-access build (ArrayRecord) reads a new permutation of the whole split instead
(trainer/random_access.py). Every input pipeline of a multi-worker run reads its own shards
(`worker_shards`); an epoch cut to more batches than a pipeline's records make reads them
again (`filled`). trainer/input_pipeline.py (classification) and trainer/objects_input.py
(detection, segmentation) decode what this yields.
"""

import dataclasses
import logging
import typing

import tensorflow as tf

from trainer import random_access
from trainer.input_options import ROTATE_BELOW

# Each random stream of an epoch has a seed of its own, fixed by (seed, epoch, its salt).
SHARD_ORDER_SALT = 1  # the per-epoch shuffle of the shard list
RECORD_ORDER_SALT = 2  # the record shuffle buffer
SHARD_START_SALT = 3  # where each rotated shard starts (with the shard's index)
AUTOTUNE = tf.data.AUTOTUNE
_LOG = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Shards:
    """The shards a training epoch reads: paths, record counts, whether each shard's start
    rotates (InputOptions.rotate_shards), and how a shard's records are read (its format's
    `ShardFormat.tf_records`)."""

    paths: list
    counts: list
    rotate: bool
    open_shard: typing.Callable

    def slices(self):
        """What the shuffled shard list holds per shard: (path,), or (path, records, index)
        where the start rotates."""
        if self.rotate:
            return (self.paths, self.counts, list(range(len(self.paths))))
        return (self.paths,)

    @property
    def per_worker(self) -> int:
        """Records of an epoch that this input pipeline reads."""
        return sum(self.counts)

    def epoch_records(self, seed, epoch, start, opts) -> tf.data.Dataset:
        """(serialized record, position in the epoch) of training epoch `epoch`, from position
        `start` on: the shuffled shard list, interleaved, through the shuffle buffer."""
        shard_list = tf.data.Dataset.from_tensor_slices(self.slices()).shuffle(
            len(self.paths), seed=epoch_seed(seed, epoch, SHARD_ORDER_SALT)
        )
        open_shard = rotated(seed, epoch, self.open_shard) if self.rotate else self.open_shard
        records = read(shard_list, opts, opts.deterministic, open_shard).shuffle(
            opts.shuffle_buffer, seed=epoch_seed(seed, epoch, RECORD_ORDER_SALT)
        )
        return tf.data.Dataset.zip(records, tf.data.Dataset.range(2**62)).skip(start)


def shard_list(files, counts, opts, shard_format):
    """The shards read, rotated in training or not as `opts.rotate_shards` says (None: where
    a split has few shards per cycle_length)."""
    rotate = opts.rotate_shards
    if rotate is None:
        rotate = len(files) < ROTATE_BELOW * opts.cycle_length
    # Run as it is inside tf.data's functions: a format may read through a Python generator.
    open_shard = tf.autograph.experimental.do_not_convert(shard_format.tf_records)
    return Shards(files, counts, rotate, open_shard)


def training_source(info, split, input_context, opts):
    """What gives a training epoch's records: a random-access build's permutation of the
    whole split (trainer/random_access.py), else the shards (Shards)."""
    if info.shard_format.random_access:
        return random_access.SplitReader.of_split(info, split, input_context)
    return split_shards(info, split, input_context, opts)


def split_shards(info, split, input_context, opts) -> Shards:
    """The Shards of `split` this input pipeline reads."""
    return shard_list(*files_for(info, split, input_context), opts, info.shard_format)


def ordered_records(info, split, opts, input_context=None) -> tf.data.Dataset:
    """The records of `split` (this input pipeline's shards), in the build's order."""
    shards = split_shards(info, split, input_context, opts)
    files = tf.data.Dataset.from_tensor_slices(shards.paths)
    return read(files, opts, True, shards.open_shard)


def worker_shards(shards, worker, workers) -> list:
    """What input pipeline `worker` of `workers` reads of a split's shards (or of anything
    listed per shard, in the build's order): every `workers`-th, from its own index."""
    return shards[worker::workers]


def files_for(info, split, input_context):
    """(shard paths, their record counts) that this input pipeline reads."""
    files = info.shard_paths(split)
    counts = [shard['num_records'] for shard in info.split(split)['shards']]
    if not input_context or input_context.num_input_pipelines == 1:
        return files, counts
    pipelines = input_context.num_input_pipelines
    if len(files) < pipelines:
        raise ValueError(
            f'split {split!r} has {len(files)} shards but training reads it with {pipelines} '
            f'input pipelines (workers); each needs its own shards: rebuild with '
            f'--num-shards {pipelines} or more'
        )
    worker = input_context.input_pipeline_id
    return worker_shards(files, worker, pipelines), worker_shards(counts, worker, pipelines)


def epoch_seed(seed, epoch, salt):
    """An int64 seed for tf.data's shuffles, fixed by (seed, epoch, salt)."""
    return (tf.cast(seed, tf.int64) * 1_000_003 + tf.cast(epoch, tf.int64)) * 31 + salt


def read(files, opts, deterministic, open_shard):
    return files.interleave(
        open_shard,
        cycle_length=opts.cycle_length,
        num_parallel_calls=AUTOTUNE,
        deterministic=deterministic,
    )


def rotated(seed, epoch, open_shard):
    """(path, records, shard index) -> the shard's records from a start fixed by (seed, epoch,
    shard index) to its end, then from its beginning to that start."""

    def open_rotated(path, count, index):
        start = tf.random.stateless_uniform(
            [],
            seed=tf.stack([epoch_seed(seed, epoch, SHARD_START_SALT), tf.cast(index, tf.int64)]),
            maxval=tf.maximum(tf.cast(count, tf.int64), 1),
            dtype=tf.int64,
        )
        return open_shard(path).skip(start).concatenate(open_shard(path).take(start))

    return open_rotated


def filled(source, records, seed, epoch, opts):
    """`records` (an epoch's), then the same epoch's again and again, each pass's positions
    after the pass before (crops of their own): where an epoch is to have more full batches
    than its records make (a small split, trainer/small_splits.py, or a worker's small share
    of uneven shards), every record is in it and its last batch is full, of the epoch's first
    records once more. `source` is a Shards or a random_access.SplitReader."""
    held = source.per_worker
    again = lambda rounds: source.epoch_records(seed, epoch, 0, opts).map(
        lambda record, position: (record, position + rounds * held)
    )
    return records.concatenate(tf.data.Dataset.range(1, 2**62).flat_map(again))


def records_per_worker(info, split, workers) -> list:
    """[records of the split that each of `workers` input pipelines reads in training]."""
    if info.shard_format.random_access:
        return random_access.records_per_worker(info.num_records(split), workers)
    counts = [shard['num_records'] for shard in info.split(split)['shards']]
    return [sum(worker_shards(counts, i, workers)) for i in range(workers)]


def warn_if_uneven(info, split, pipelines, batch_size):
    """Warns when workers' input pipelines hold a batch (of `batch_size` // pipelines) or more
    records than others of the training split; nothing with one pipeline.

    Every worker runs the steps the one with the fewest records can fill, so the others do
    not reach the end of their shards within an epoch.
    """
    if pipelines < 2:
        return
    pipeline_batch = batch_size // pipelines
    held = records_per_worker(info, split, pipelines)
    if max(held) - min(held) >= pipeline_batch:
        _LOG.warning(
            '%d shards of split %r fall unevenly on %d workers (%d to %d records each): an '
            'epoch covers the smallest share only; build with --num-shards a multiple of %d',
            len(info.split(split)['shards']),
            split,
            pipelines,
            min(held),
            max(held),
            pipelines,
        )
