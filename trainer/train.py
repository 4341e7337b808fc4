"""Training: Keras fit with resumable checkpoints, a final test pass, export.

A run resumes from the newest checkpoint in the checkpoint directory. Checkpoints hold the
model and the optimizer (whose step counter says where training stopped); because the input
pipeline rebuilds any epoch from (seed, epoch), the batches after the resume point are the
ones an uninterrupted run would have seen. SIGTERM (how Vertex AI preempts a replica) makes
the run write a checkpoint after the current step and stop.

Where it runs (strategy, precision, which worker writes what) is trainer/distribute.py; what a
job directory holds across runs, trainer/job.py.
"""

import dataclasses
import logging
import signal
import sys
import time

import keras
import tensorflow as tf

from imageshards import console
from trainer import config as config_lib
from trainer import corrupt_shards
from trainer import dataset_info
from trainer import distribute
from trainer import evaluate
from trainer import export
from trainer import heads as heads_lib
from trainer import hierarchy
from trainer import input_pipeline
from trainer import job
from trainer import transform
from trainer.model import build_model

_LOG = logging.getLogger(__name__)
PREEMPTED_EXIT_CODE = 143  # 128 + SIGTERM, what a process stopped by SIGTERM reports


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
    with distribute.output_dirs(config) as (checkpoint_dir, model_dir):
        return _train(config, checkpoint_dir, model_dir)


def _train(config, checkpoint_dir, model_dir):
    distribute.check_devices(config)
    strategy = distribute.choose_strategy()
    policy = distribute.set_precision(config.mixed_precision)
    info = dataset_info.load(config.data)
    check_classes(info, config.label_levels)
    config = _with_crop_area(config, info)
    steps = _steps_per_epoch(config, info)
    # The same initial weights (and dropout) for a seed. Never a global seed of 0 (mod 2**31-1):
    # tf.data would then compare the per-epoch shuffle seed tensors with 0 in Python and fail.
    keras.utils.set_random_seed(config.seed % (2**31 - 2) + 1)
    derived = _derived_levels(config, info)
    heads = heads_lib.model_heads(info, config.label_levels, derived)
    transform_output = transform.load(info)
    model, checkpoint = _compiled_model(config, info, strategy, heads, transform_output)
    manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=3)
    run = job.check_rerun(config, info, config.resolved_checkpoint_dir, derived)
    _restore(checkpoint, config)
    done = int(model.optimizer.iterations.numpy())
    finished = job.finished_metrics(config, done, steps)
    if finished is not None:
        return finished
    if distribute.is_chief():
        job.record_run(checkpoint_dir, run)
    _LOG.info(
        '%s%s on %s, %s, %d steps per epoch, from epoch %d step %d',
        config.model,
        '' if config.model == 'small_cnn' else ' (from scratch: random initial weights)',
        console.plural(strategy.num_replicas_in_sync, 'replica'),
        policy,
        steps,
        *divmod(done, steps),
    )
    checkpoints = ResumableCheckpoints(manager, config.checkpoint_every)
    skipped = input_pipeline.SkippedImages() if config.skip_bad_images else None
    started = time.monotonic()
    history = _fit(model, config, info, strategy, (steps, done), checkpoints, skipped)
    if checkpoints.preempted:
        return {'preempted': True, 'steps': int(model.optimizer.iterations.numpy())}
    metrics = _final_metrics(model, history, steps, config, time.monotonic() - started, done)
    metrics.update(evaluate.test_metrics(model, config, info, strategy))
    if skipped:
        metrics['skipped_images'] = skipped.skipped
    thresholds, chosen = evaluate.multi_label_thresholds(model, config, info, heads)
    metrics.update(chosen.pop('', {}))
    if config.label_levels:
        metrics['label_levels'] = heads_lib.level_metrics(metrics, config.label_levels)
        for level, report in chosen.items():
            metrics['label_levels'][level].update(report)
        metrics['derived_levels'] = {coarse: fine for coarse, (fine, _) in derived.items()}
    _export(model, heads, transform_output, config, model_dir, thresholds)
    if distribute.is_chief():
        _LOG.info('exported the model to %s', model_dir)
        job.write_metrics(config, metrics)
    return metrics


def _derived_levels(config, info):
    """{coarse level: (finer level, parents)} of the levels this run derives (--hierarchy)."""
    if config.hierarchy == 'off' or len(config.label_levels) < 2:
        return {}
    return hierarchy.derive(info, config.train_split, config.label_levels)


def _export(model, heads, transform_output, config, model_dir, thresholds):
    """The SavedModel of the trained model (trainer/export.py)."""
    labels, levels = heads.get(''), None if '' in heads else heads
    if labels and transform_output and not labels.multi_label:  # the graph's vocabulary
        labels = transform.class_names(transform_output)
    export.export_saved_model(
        model, labels, config.image_size, model_dir, levels, thresholds, config.eval_crop
    )


def _steps_per_epoch(config, info):
    """Steps per epoch (the same on every worker); warns where workers' shares are uneven."""
    pipelines = distribute.cluster_spec()[2]  # one input pipeline per worker
    steps = config.steps_per_epoch or input_pipeline.steps_per_epoch(
        info, config.train_split, config.batch_size, pipelines, config.patches_per_image
    )
    if steps < 1:
        raise ValueError(
            f'split {config.train_split!r} has {info.num_records(config.train_split)}'
            f' records: fewer than one batch of {config.batch_size}'
        )
    if pipelines > 1:
        _warn_if_uneven(info, config.train_split, pipelines, config.batch_size // pipelines)
    return steps


def _compiled_model(config, info, strategy, heads, transform_output):
    """(the compiled model, the tf.train.Checkpoint of everything a resume restores)."""
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
    return model, checkpoint


def _fit(model, config, info, strategy, progress, checkpoints, skipped):
    """Trains the epochs left after `done` steps; returns the last value of each metric.

    Args:
        progress: (steps per epoch, steps done before this run).
    """
    steps, done = progress
    callbacks = [checkpoints] + ([SkippedImagesLog(skipped)] if skipped else [])
    if distribute.is_chief():
        callbacks.append(keras.callbacks.TensorBoard(config.resolved_log_dir))
    validation = evaluate.dataset(config, info, strategy)
    history = {}
    for first, last, skip_now in _phases(*divmod(done, steps), config.epochs):
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
                verbose=1 if sys.stdout.isatty() else 2,
            )
        except tf.errors.DataLossError as e:
            shards = info.shard_paths(config.train_split) + (
                info.shard_paths(config.val_split) if validation is not None else []
            )
            raise corrupt_shards.name_corrupt_shards(e, shards) from e
        history.update({k: v[-1] for k, v in fitted.history.items() if v})
    return history


def _warn_if_uneven(info, split, pipelines, pipeline_batch):
    """Warns when workers hold a batch or more records than others of the training split.

    Every worker runs the steps the one with the fewest records can fill, so the others do
    not reach the end of their shards within an epoch.
    """
    held = input_pipeline.records_per_worker(info, split, pipelines)
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
    replicas_per_pipeline = max(
        1, strategy.num_replicas_in_sync // max(1, distribute.cluster_spec()[2])
    )

    def dataset(input_context):
        return input_pipeline.make_dataset(
            config.data,
            config.train_split,
            config.batch_size,
            training=True,
            input_context=input_context,
            info=info,
            skipped=skipped,
            start_epoch=first_epoch,
            epochs=last_epoch,
            skip_batches=skip_steps * replicas_per_pipeline,
            batches_per_epoch=steps * replicas_per_pipeline,
            **config.input_options(),
        )

    return strategy.distribute_datasets_from_function(dataset)


def _final_metrics(model, history, steps, config, seconds, steps_before):
    trained_steps = int(model.optimizer.iterations.numpy()) - steps_before
    metrics = {key: float(value) for key, value in history.items()}
    metrics.update(
        {
            'epochs': config.epochs,
            'steps_per_epoch': steps,
            'steps': int(model.optimizer.iterations.numpy()),
            'train_images_per_second': trained_steps * config.batch_size / max(seconds, 1e-9),
            'train_seconds': round(seconds, 1),
            'crop_area': list(config.crop_area),
            'eval_crop': config.eval_crop,
            'model': config.model,
            'image_size': list(config.image_size),
        }
    )
    return metrics


def check_classes(info, levels):
    """Raises ValueError where there is nothing to classify: a single label (or level value)
    of a softmax head, none of a multi-label head (one sigmoid is a yes/no classifier).

    With one output unit, Keras would measure a binary accuracy and report 0 loss and 0
    accuracy however long it trained.
    """
    multi = set(info.multi_label_levels) if info.multi_label else set()
    heads = [('label', info.labels, info.multi_label)]
    heads += [(level, info.label_levels[level], level in multi) for level in levels]
    for level, names, multi_label in heads:
        if len(names) < (1 if multi_label else 2):
            raise ValueError(
                f'{info.data_dir} has only one {level} value ({", ".join(names) or "none"}): a '
                f'classifier needs at least two classes; build from images of two or more labels'
            )


def _with_crop_area(config, info):
    """`config` with its crop range and evaluation crop resolved (`auto`), logged once."""
    train_records = info.num_records(config.train_split)
    area = config_lib.resolve_crop_area(config.crop_area, train_records, info.multi_label)
    kind = 'multi-label images' if info.multi_label else 'training images'
    _LOG.info(
        'random crops keep %g to %g of each image%s; evaluation and serving see its central %g',
        *area,
        f' (auto, for {train_records:,} {kind})' if config.crop_area == 'auto' else '',
        eval_crop := config_lib.resolve_eval_crop(config.eval_crop, info.multi_label),
    )
    return dataclasses.replace(config, crop_area=area, eval_crop=eval_crop)


def _restore(checkpoint, config):
    """Restores the newest checkpoint of the chief, if any.

    Every worker resumes from the chief's checkpoints: workers that disagreed on the step
    would wait for each other's collectives forever.
    """
    latest = tf.train.latest_checkpoint(config.resolved_checkpoint_dir)
    if not latest:
        return
    try:
        checkpoint.restore(latest).expect_partial()
    except (ValueError, tf.errors.OpError) as e:
        raise ValueError(
            f'{latest} does not fit this run (another model, image size or labels: '
            f'{str(e).splitlines()[0]}): train into a new --job-dir, or delete '
            f'{config.resolved_checkpoint_dir} to start this one from scratch'
        ) from e
    _LOG.info('resumed from %s', latest)
