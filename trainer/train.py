"""Training: distribution strategy, precision, Keras fit with resumable checkpoints, export.

A run resumes from the newest checkpoint in the checkpoint directory. Checkpoints hold the
model and the optimizer (whose step counter says where training stopped); because the input
pipeline rebuilds any epoch from (seed, epoch), the batches after the resume point are the
ones an uninterrupted run would have seen. SIGTERM (how Vertex AI preempts a replica) makes
the run write a checkpoint after the current step and stop.

Only the chief writes the model, the logs and metrics.json. Under MultiWorkerMirroredStrategy
every worker saves checkpoints and exports the model, since saving may run collective ops that
need all of them (TensorFlow's multi-worker guide); the others write to a local throw-away
folder, removed at the end, and all of them resume from the chief's checkpoints.
"""

import contextlib
import json
import logging
import os
import shutil
import signal
import tempfile
import time

import keras
import tensorflow as tf

from trainer import export
from trainer import heads as heads_lib
from trainer import input as input_lib
from trainer import transform
from trainer.dataset_info import DatasetInfo
from trainer.model import build_model

_LOG = logging.getLogger(__name__)
PREEMPTED_EXIT_CODE = 143  # 128 + SIGTERM, what a process stopped by SIGTERM reports


def cluster_spec():
    """(task_type, task_index, number of workers) from TF_CONFIG; ('chief', 0, 1) without it."""
    tf_config = json.loads(os.environ.get('TF_CONFIG') or '{}')
    cluster = tf_config.get('cluster', {})
    task = tf_config.get('task', {})
    workers = len(cluster.get('chief', [])) + len(cluster.get('worker', []))
    return task.get('type', 'chief'), int(task.get('index', 0)), max(workers, 1)


def is_chief():
    task_type, task_index, _ = cluster_spec()
    return task_type == 'chief' or (
        task_type == 'worker' and task_index == 0 and 'chief' not in _cluster_roles()
    )


def _cluster_roles():
    return json.loads(os.environ.get('TF_CONFIG') or '{}').get('cluster', {})


class KerasMultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """MultiWorkerMirroredStrategy with a `reduce` that Keras 3's fit() and evaluate() can use.

    Keras 3 (3.15 here) reduces in two ways that MultiWorkerMirroredStrategy rejects
    (keras-team/keras#20585), so that fit() fails before its first step: the first (images,
    labels) batch of every fit and evaluate, a nest, to learn its shapes (and no collective
    reduces uint8 images); and each step's scalar metrics with axis=0. This reduces a nest
    part by part, as MirroredStrategy does, integers other than int32/int64 as float32, and
    scalars across replicas only.
    """

    def reduce(self, reduce_op, value, axis):
        return tf.nest.map_structure(lambda part: self._reduce_one(reduce_op, part, axis), value)

    def _reduce_one(self, reduce_op, value, axis):
        local = self.experimental_local_results(value)[0]
        if local.shape.rank == 0:
            axis = None
        if local.dtype.is_floating or local.dtype in (tf.int32, tf.int64):
            return super().reduce(reduce_op, value, axis)
        return tf.cast(super().reduce(reduce_op, self._as_float32(value), axis), local.dtype)

    @tf.function
    def _as_float32(self, value):
        # In a tf.function: run() outside one warns of its eager overhead every time.
        return self.run(tf.cast, args=(value, tf.float32))


def choose_strategy():
    """MultiWorkerMirrored for several workers, Mirrored for several GPUs, else the default."""
    _, _, workers = cluster_spec()
    if workers > 1:
        return KerasMultiWorkerMirroredStrategy()
    if len(tf.config.list_physical_devices('GPU')) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def set_precision(mode):
    """mixed_float16 when asked, or (auto) when a GPU is present; returns the policy name."""
    use = mode == 'on' or (mode == 'auto' and tf.config.list_physical_devices('GPU'))
    policy = 'mixed_float16' if use else 'float32'
    keras.mixed_precision.set_global_policy(policy)
    return policy


@contextlib.contextmanager
def output_dirs(config):
    """Yields (checkpoint dir, model dir) this worker writes to.

    The chief's are the job's; another worker's are in a local temporary folder (under $TMPDIR),
    removed when the block ends: nothing it saves is ever read, and local disk spares the
    shared bucket its writes.
    """
    if is_chief():
        yield config.resolved_checkpoint_dir, config.resolved_model_dir
        return
    task_type, task_index, _ = cluster_spec()
    scratch = tempfile.mkdtemp(prefix=f'imageshards-{task_type}-{task_index}-')
    _LOG.info('not the chief: checkpoints and the export go to %s (then removed)', scratch)
    try:
        yield os.path.join(scratch, 'checkpoints'), os.path.join(scratch, 'model')
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class ResumableCheckpoints(keras.callbacks.Callback):
    """Checkpoints every `every` steps, at each epoch's end, and on SIGTERM (then stops)."""

    def __init__(self, manager, every):
        super().__init__()
        self._manager = manager
        self._every = every
        self.preempted = False
        self._previous_handler = None

    def on_train_begin(self, logs=None):
        self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)

    def on_train_end(self, logs=None):
        signal.signal(signal.SIGTERM, self._previous_handler or signal.SIG_DFL)

    def _on_sigterm(self, signum, frame):
        del signum, frame
        _LOG.warning('SIGTERM: writing a checkpoint after this step, then stopping')
        self.preempted = True

    def _step(self):
        return int(self.model.optimizer.iterations.numpy())

    def _save(self):
        _LOG.info('checkpoint %s', self._manager.save(checkpoint_number=self._step()))

    def on_train_batch_end(self, batch, logs=None):
        if self.preempted or (self._every and self._step() % self._every == 0):
            self._save()
        if self.preempted:
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        self._save()


class SkippedImagesLog(keras.callbacks.Callback):
    """Logs how many undecodable images --skip-bad-images has skipped so far."""

    def __init__(self, skipped):
        super().__init__()
        self._skipped = skipped

    def on_epoch_end(self, epoch, logs=None):
        if self._skipped.skipped:
            _LOG.warning('skipped %d undecodable images so far', self._skipped.skipped)


def train(config):
    """Trains as `config` says; returns the final metrics (also written to metrics.json)."""
    with output_dirs(config) as (checkpoint_dir, model_dir):
        return _train(config, checkpoint_dir, model_dir)


def check_devices(config):
    """Raises ValueError where the devices at hand cannot run `config` as it asks."""
    gpus = tf.config.list_physical_devices('GPU')
    if config.require_gpu and not gpus:
        raise ValueError(
            '--require-gpu: TensorFlow sees no GPU. On Vertex AI, the CUDA and cuDNN libraries '
            'of the container may not be those this TensorFlow needs (docs/vertex.md)'
        )
    if config.xla and cluster_spec()[2] > 1 and not gpus:
        raise ValueError(
            '--xla with several workers needs GPUs: XLA cannot compile the collectives of '
            'MultiWorkerMirroredStrategy for CPUs (TensorFlow aborts); leave out --xla'
        )


def _train(config, checkpoint_dir, model_dir):
    check_devices(config)
    strategy = choose_strategy()
    policy = set_precision(config.mixed_precision)
    info = DatasetInfo.load(config.data)
    pipelines = cluster_spec()[2]  # one input pipeline per worker
    steps = config.steps_per_epoch or input_lib.steps_per_epoch(
        info, config.train_split, config.batch_size, pipelines, config.patches_per_image
    )
    if steps < 1:
        raise ValueError(
            f'split {config.train_split!r} has {info.num_records(config.train_split)}'
            f' records: fewer than one batch of {config.batch_size}'
        )
    if pipelines > 1:
        _warn_if_uneven(info, config.train_split, pipelines, config.batch_size // pipelines)
    # The same initial weights (and dropout) for a seed. Never a global seed of 0 (mod 2**31-1):
    # tf.data would then compare the per-epoch shuffle seed tensors with 0 in Python and fail.
    keras.utils.set_random_seed(config.seed % (2**31 - 2) + 1)
    heads = heads_lib.level_heads(info, config.label_levels)  # {} without --label-levels
    transform_output = transform.load(info)
    with strategy.scope():
        model = build_model(
            config.model,
            info.num_classes,
            config.image_size,
            heads=heads,
            transform_output=transform_output,
        )
        model.compile(
            optimizer=keras.optimizers.Adam(config.learning_rate),
            jit_compile=config.xla,
            **heads_lib.compile_args(heads),
        )
        # Dropout's random state is not in a model's checkpoint by default; with it, a resumed
        # run draws the masks an uninterrupted one would.
        random_states = [v for v in model.variables if 'seed_generator_state' in v.path]
        checkpoint = tf.train.Checkpoint(
            model=model, optimizer=model.optimizer, random_states=random_states
        )
    manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=3)
    # Every worker resumes from the chief's checkpoints: workers that disagreed on the step
    # would wait for each other's collectives forever.
    latest = tf.train.latest_checkpoint(config.resolved_checkpoint_dir)
    if latest:
        checkpoint.restore(latest).expect_partial()
        _LOG.info('resumed from %s', latest)
    done = int(model.optimizer.iterations.numpy())
    start_epoch, skip = divmod(done, steps)
    _LOG.info(
        '%s on %d replicas, %s, %d steps per epoch, from epoch %d step %d',
        config.model,
        strategy.num_replicas_in_sync,
        policy,
        steps,
        start_epoch,
        skip,
    )
    checkpoints = ResumableCheckpoints(manager, config.checkpoint_every)
    skipped = input_lib.SkippedImages() if config.skip_bad_images else None
    callbacks = [checkpoints] + ([SkippedImagesLog(skipped)] if skipped else [])
    if is_chief():
        callbacks.append(keras.callbacks.TensorBoard(config.resolved_log_dir))
    validation = _validation(config, info, strategy)
    started = time.monotonic()
    history = {}
    for first, last, skip_now in _phases(start_epoch, skip, config.epochs):
        if checkpoints.preempted:
            break
        data = _training_data(config, info, strategy, (first, last, skip_now), skipped, steps)
        try:
            fitted = model.fit(
                data,
                initial_epoch=first,
                epochs=last,
                steps_per_epoch=steps - skip_now,
                validation_data=validation,
                callbacks=callbacks,
                shuffle=False,  # the input pipeline shuffles
                verbose=2,
            )
        except tf.errors.DataLossError as e:
            shards = info.shard_paths(config.train_split) + (
                info.shard_paths(config.val_split) if validation is not None else []
            )
            raise input_lib.name_corrupt_shards(e, shards) from e
        history.update({k: v[-1] for k, v in fitted.history.items() if v})
    if checkpoints.preempted:
        return {'preempted': True, 'steps': int(model.optimizer.iterations.numpy())}
    metrics = _final_metrics(model, history, steps, config, time.monotonic() - started, done)
    if skipped:
        metrics['skipped_images'] = skipped.skipped
    if heads:
        metrics['label_levels'] = heads_lib.level_metrics(history, heads)
    levels = {level: info.label_levels[level] for level in heads}
    labels = transform.class_names(transform_output) if transform_output else info.labels
    export.export_saved_model(model, labels, config.image_size, model_dir, levels)
    if is_chief():
        _LOG.info('exported the model to %s', model_dir)
        _write_json(os.path.join(config.job_dir, 'metrics.json'), metrics)
    return metrics


def _warn_if_uneven(info, split, pipelines, pipeline_batch):
    """Warns when workers hold a batch or more records than others of the training split.

    Every worker runs the steps the one with the fewest records can fill, so the others do
    not reach the end of their shards within an epoch.
    """
    shards = info.split(split)['shards']
    held = [sum(s['num_records'] for s in shards[i::pipelines]) for i in range(pipelines)]
    if max(held) - min(held) >= pipeline_batch:
        _LOG.warning(
            '%d shards of split %r fall unevenly on %d workers (%d to %d records each): an '
            'epoch covers the smallest share only; build with --num-shards a multiple of %d',
            len(shards),
            split,
            pipelines,
            min(held),
            max(held),
            pipelines,
        )


def _phases(start_epoch, skip, epochs):
    """(first, last, skipped) fit calls: the rest of an interrupted epoch, then whole epochs."""
    if start_epoch >= epochs:
        return []
    if not skip:
        return [(start_epoch, epochs, 0)]
    phases = [(start_epoch, start_epoch + 1, skip)]
    if start_epoch + 1 < epochs:
        phases.append((start_epoch + 1, epochs, 0))
    return phases


def _training_data(config, info, strategy, phase, skipped, steps):
    """The distributed training batches of epochs [first, last) of `steps` steps each, after
    `skip` steps."""
    first_epoch, last_epoch, skip_steps = phase
    replicas_per_pipeline = max(1, strategy.num_replicas_in_sync // max(1, cluster_spec()[2]))

    def dataset(input_context):
        return input_lib.make_dataset(
            config.data,
            config.train_split,
            config.batch_size,
            training=True,
            seed=config.seed,
            image_size=config.image_size,
            augment=config.augment,
            input_context=input_context,
            info=info,
            start_epoch=first_epoch,
            epochs=last_epoch,
            skip_batches=skip_steps * replicas_per_pipeline,
            batches_per_epoch=steps * replicas_per_pipeline,
            patches_per_image=config.patches_per_image,
            patch_size=config.patch_size,
            skip_bad_images=config.skip_bad_images,
            skipped=skipped,
            deterministic=config.deterministic,
            shuffle_buffer=config.shuffle_buffer,
            cycle_length=config.cycle_length,
            area_range=config.crop_area,
            label_levels=config.label_levels,
        )

    return strategy.distribute_datasets_from_function(dataset)


def _validation(config, info, strategy):
    """The validation split's one ordered pass: all of it on every worker, in the same batches.

    Split among workers, their pipelines could hold different numbers of batches: Keras would
    run as many steps as each one's own, and the one with more would wait for the others'
    collectives forever (tf.distribute's empty batches for a worker already done do not get
    through the model's convolutions on the CPU either). Every worker evaluating everything
    costs validation time, and its metrics, averaged over workers, stay exact.
    """
    if config.val_split not in info.splits:
        _LOG.info('no %r split in the build: training without validation', config.val_split)
        return None
    return strategy.distribute_datasets_from_function(
        lambda input_context: input_lib.make_dataset(
            config.data,
            config.val_split,
            input_context.get_per_replica_batch_size(config.batch_size),
            training=False,
            image_size=config.image_size,
            info=info,
            label_levels=config.label_levels,
        )
    )


def _final_metrics(model, history, steps, config, seconds, steps_before):
    trained_steps = int(model.optimizer.iterations.numpy()) - steps_before
    metrics = {key: float(value) for key, value in history.items()}
    metrics.update(
        {
            'epochs': config.epochs,
            'steps_per_epoch': steps,
            'steps': int(model.optimizer.iterations.numpy()),
            'train_images_per_second': trained_steps * config.batch_size / max(seconds, 1e-9),
            'model': config.model,
            'image_size': list(config.image_size),
        }
    )
    return metrics


def _write_json(path, value):
    tf.io.gfile.makedirs(os.path.dirname(path) or '.')
    with tf.io.gfile.GFile(path, 'w') as f:
        f.write(json.dumps(value, indent=2) + '\n')
