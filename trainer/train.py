"""Training: distribution strategy, precision, Keras fit with resumable checkpoints, export.

A run resumes from the newest checkpoint in the checkpoint directory. Checkpoints hold the
model and the optimizer (whose step counter says where training stopped); because the input
pipeline rebuilds any epoch from (seed, epoch), the batches after the resume point are the
ones an uninterrupted run would have seen. SIGTERM (how Vertex AI preempts a replica) makes
the run write a checkpoint after the current step and stop.

Only the chief writes the model, the logs and metrics.json; under MultiWorkerMirroredStrategy
the other workers write their checkpoints to throw-away folders, as TensorFlow requires.
"""

import json
import logging
import os
import signal
import time

import keras
import tensorflow as tf

from trainer import export
from trainer import input as input_lib
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


def choose_strategy():
    """MultiWorkerMirrored for several workers, Mirrored for several GPUs, else the default."""
    _, _, workers = cluster_spec()
    if workers > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()
    if len(tf.config.list_physical_devices('GPU')) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def set_precision(mode):
    """mixed_float16 when asked, or (auto) when a GPU is present; returns the policy name."""
    use = mode == 'on' or (mode == 'auto' and tf.config.list_physical_devices('GPU'))
    policy = 'mixed_float16' if use else 'float32'
    keras.mixed_precision.set_global_policy(policy)
    return policy


def writer_dir(path):
    """Where this worker writes `path`: itself for the chief, a throw-away folder otherwise."""
    if is_chief():
        return path
    task_type, task_index, _ = cluster_spec()
    return os.path.join(path, f'.{task_type}-{task_index}-tmp')


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

    def on_train_batch_end(self, batch, logs=None):
        step = self._step()
        if self.preempted or (self._every and step % self._every == 0):
            self._manager.save(checkpoint_number=step)
        if self.preempted:
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        self._manager.save(checkpoint_number=self._step())


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
    # The same initial weights (and dropout) for a seed. Never a global seed of 0 (mod 2**31-1):
    # tf.data would then compare the per-epoch shuffle seed tensors with 0 in Python and fail.
    keras.utils.set_random_seed(config.seed % (2**31 - 2) + 1)
    with strategy.scope():
        model = build_model(config.model, info.num_classes, config.image_size)
        model.compile(
            optimizer=keras.optimizers.Adam(config.learning_rate),
            loss='sparse_categorical_crossentropy',
            metrics=['accuracy'],
            jit_compile=config.xla,
        )
        # Dropout's random state is not in a model's checkpoint by default; with it, a resumed
        # run draws the masks an uninterrupted one would.
        random_states = [v for v in model.variables if 'seed_generator_state' in v.path]
        checkpoint = tf.train.Checkpoint(
            model=model, optimizer=model.optimizer, random_states=random_states
        )
    manager = tf.train.CheckpointManager(
        checkpoint, writer_dir(config.resolved_checkpoint_dir), max_to_keep=3
    )
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).expect_partial()
        _LOG.info('resumed from %s', manager.latest_checkpoint)
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
    validation = _validation(config, info)
    started = time.monotonic()
    history = {}
    for first, last, skip_now in _phases(start_epoch, skip, config.epochs):
        if checkpoints.preempted:
            break
        data = _training_data(config, info, strategy, (first, last, skip_now), skipped)
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
    if is_chief():
        export.export_saved_model(model, info.labels, config.image_size, config.resolved_model_dir)
        _write_json(os.path.join(config.job_dir, 'metrics.json'), metrics)
    return metrics


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


def _training_data(config, info, strategy, phase, skipped):
    """The distributed training batches of epochs [first, last), after `skip` steps."""
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
            patches_per_image=config.patches_per_image,
            patch_size=config.patch_size,
            skip_bad_images=config.skip_bad_images,
            skipped=skipped,
            deterministic=config.deterministic,
            shuffle_buffer=config.shuffle_buffer,
            cycle_length=config.cycle_length,
            area_range=config.crop_area,
        )

    return strategy.distribute_datasets_from_function(dataset)


def _validation(config, info):
    """The validation split's one ordered pass (Keras distributes it under a strategy)."""
    if config.val_split not in info.splits:
        _LOG.info('no %r split in the build: training without validation', config.val_split)
        return None
    return input_lib.make_dataset(
        config.data,
        config.val_split,
        config.batch_size,
        training=False,
        image_size=config.image_size,
        info=info,
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
