"""Training: Keras fit with resumable checkpoints, the best epoch kept, a test pass, export.

A run starts from random weights or from trained ones (`--init-from`, trainer/warm_start.py)
and trains in phases (trainer/recipe.py: with trained weights, the heads alone first). At each
epoch's end the weights of the best epoch so far are kept (trainer/best_epoch.py); at the end
they are put back into the model, which is evaluated on the test split and exported.

A run resumes from the newest checkpoint in the checkpoint directory. Checkpoints hold the
model, the optimizer (whose step counter says where training stopped, and so where the
learning-rate schedule and the phases are) and the best epoch so far; because the input
pipeline rebuilds any epoch from (seed, epoch), the batches after the resume point are the
ones an uninterrupted run would have seen. SIGTERM (how Vertex AI preempts a replica) makes
the run write a checkpoint after the current step and stop (trainer/callbacks.py).

Where it runs (strategy, precision, which worker writes what) is trainer/distribute.py; what a
job directory holds across runs, trainer/job.py.
"""

import dataclasses
import logging
import sys
import time

import keras
import tensorflow as tf

from imageshards import console
from trainer import best_epoch
from trainer import callbacks
from trainer import corrupt_shards
from trainer import dataset_info
from trainer import distribute
from trainer import evaluate
from trainer import export
from trainer import heads as heads_lib
from trainer import hierarchy
from trainer import input_pipeline
from trainer import job
from trainer import objects_train
from trainer import recipe
from trainer import record_decoding
from trainer import shard_reading
from trainer import small_splits
from trainer import tft_output
from trainer import warm_start
from trainer.config import SMALL_CNN
from trainer.model import build_model

_LOG = logging.getLogger(__name__)
PREEMPTED_EXIT_CODE = 143  # 128 + SIGTERM, what a process stopped by SIGTERM reports


def train(config) -> dict:
    """Trains as `config` says; returns the final metrics (also written to metrics.json)."""
    with distribute.output_dirs(config) as (checkpoint_dir, model_dir):
        info = dataset_info.load(config.data)
        if info.kind.has_objects:  # a detector or a segmenter
            return objects_train.train(config, info, checkpoint_dir, model_dir)
        return _train(config, checkpoint_dir, model_dir)


@dataclasses.dataclass(frozen=True)
class _Run:
    """What a training run works with once it is set up."""

    model: keras.Model
    checkpoint: tf.train.Checkpoint  # what a resume restores
    best: best_epoch.BestEpoch
    compile_args: dict  # loss and metrics (trainer/heads.py)
    phases: list  # trainer/recipe.py Phases
    steps: int  # per epoch
    adapt_steps: int  # recipe.set_trainable's: BatchNorm of a small split from weights


def _train(config, checkpoint_dir, model_dir):
    distribute.check_devices(config)
    strategy = distribute.choose_strategy()
    policy = distribute.set_precision(config.mixed_precision)
    info = dataset_info.load(config.data)
    check_classes(info, config.label_levels)
    config = _with_crop_area(config, info)
    epoch = _epoch_steps(config, info)
    steps = epoch.steps
    # The same initial weights (and dropout) for a seed. Never a global seed of 0 (mod 2**31-1):
    # tf.data would then compare the per-epoch shuffle seed tensors with 0 in Python and fail.
    keras.utils.set_random_seed(config.seed % (2**31 - 2) + 1)
    derived = _derived_levels(config, info)
    heads = heads_lib.model_heads(info, config.label_levels, derived)
    transform_output = tft_output.load(info)
    validation = evaluate.dataset(config, info, strategy)
    run = _set_up(config, info, strategy, heads, transform_output, epoch, validation is not None)
    manager = tf.train.CheckpointManager(run.checkpoint, checkpoint_dir, max_to_keep=3)
    fingerprint = job.check_rerun(config, info, config.resolved_checkpoint_dir, derived, heads)
    done = _start(run, config, fingerprint, heads)
    finished = job.finished_or_recorded(config, done, steps, checkpoint_dir, fingerprint)
    if finished is not None:
        return finished
    _LOG.info(
        '%s from %s on %s, %s, %d steps per epoch, from epoch %d step %d',
        config.model,
        config.recipe.init_from or 'random initial weights',
        console.plural(strategy.num_replicas_in_sync, 'replica'),
        policy,
        steps,
        *divmod(done, steps),
    )
    checkpoints = callbacks.ResumableCheckpoints(manager, config.checkpoint_every)
    skipped = record_decoding.SkippedImages() if config.input.skip_bad_images else None
    started = time.monotonic()
    _fit(run, config, info, strategy, (validation, done), checkpoints, skipped)
    if checkpoints.preempted:
        return {'preempted': True, 'steps': int(run.model.optimizer.iterations.numpy())}
    run.best.restore_best()  # what is evaluated, exported and measured from here on
    metrics = _final_metrics(run, config, time.monotonic() - started, done)
    metrics.update(epoch.note())
    metrics['init_from'] = fingerprint.get('warm_start') or config.recipe.init_from or None
    metrics.update(evaluate.test_metrics(run.model, config, info, strategy))
    if skipped:
        metrics['skipped_images'] = skipped.skipped
    thresholds, chosen = evaluate.multi_label_thresholds(run.model, config, info, heads)
    metrics.update(chosen.pop('', {}))
    if config.label_levels:
        metrics['label_levels'] = heads_lib.level_metrics(metrics, config.label_levels)
        for level, report in chosen.items():
            metrics['label_levels'][level].update(report)
        metrics['derived_levels'] = {coarse: fine for coarse, (fine, _) in derived.items()}
    _export(run.model, heads, transform_output, config, model_dir, thresholds)
    if distribute.is_chief():
        _LOG.info('exported the model of epoch %s to %s', metrics.get('best_epoch'), model_dir)
        job.write_metrics(config, metrics)
    return metrics


def _start(run, config, fingerprint, heads):
    """Restores the newest checkpoint, or else starts from --init-from's weights; returns the
    steps done. `fingerprint` gets (or keeps, from the first run) what --init-from copied."""
    if job.restore_latest(run.checkpoint, config):
        earlier = job.read_run(config.resolved_checkpoint_dir) or {}
        if earlier.get('warm_start'):
            fingerprint['warm_start'] = earlier['warm_start']
    elif config.recipe.from_weights:
        classes = job.head_classes(heads)
        fingerprint['warm_start'] = warm_start.apply(
            run.model, config.recipe.init_from, config, classes
        )
    return int(run.model.optimizer.iterations.numpy())


def _derived_levels(config, info):
    """{coarse level: (finer level, parents)} of the levels this run derives (--hierarchy)."""
    if config.hierarchy == 'off' or len(config.label_levels) < 2:
        return {}
    return hierarchy.derive(info, config.train_split, config.label_levels)


def _export(model, heads, transform_output, config, model_dir, thresholds):
    """The SavedModel of the trained model (trainer/export.py)."""
    labels, levels = heads.get(''), None if '' in heads else heads
    if labels and transform_output and not labels.multi_label:  # the graph's vocabulary
        labels = tft_output.class_names(transform_output)
    export.export_saved_model(
        model, labels, config.image_size, model_dir, levels, thresholds, config.input.eval_crop
    )


def _epoch_steps(config, info):
    """The steps of an epoch (trainer/small_splits.py; the same on every worker); warns where
    workers' shares are uneven."""
    pipelines = distribute.cluster_spec()[2]  # one input pipeline per worker
    epoch = small_splits.EpochSteps(config.steps_per_epoch)
    if not config.steps_per_epoch:
        epoch = small_splits.epoch_steps(
            info,
            config.train_split,
            config.batch_size,
            pipelines,
            config.input.patches_per_image,
            config.recipe.from_weights,
        )
    if epoch.steps < 1:
        raise ValueError(
            f'split {config.train_split!r} has {info.num_records(config.train_split)}'
            f' records: nothing to train on'
        )
    shard_reading.warn_if_uneven(info, config.train_split, pipelines, config.batch_size)
    return epoch


def _set_up(config, info, strategy, heads, transform_output, epoch, validated):
    """The compiled model, its optimizer built for every weight that will train, and the
    checkpoint of all a resume restores (`epoch`: small_splits.EpochSteps; `validated`: whether
    a validation split is read)."""
    phases = recipe.phases(config.recipe, config.epochs)
    adapt_steps = recipe.whole_phase_steps(phases, epoch.steps) if epoch.adapts_batch_norm else 0
    weights = heads_lib.class_weights(info, config.train_split, heads, config.recipe.class_weights)
    with strategy.scope():  # the metrics' variables too: mirrored, reduced over workers
        compile_args = heads_lib.compile_args(heads, config.recipe.label_smoothing, weights)
        model = build_model(
            config.model,
            info.num_classes,
            config.image_size,
            heads=heads,
            transform_output=transform_output if config.model == SMALL_CNN else None,
        )
        recipe.set_trainable(model, False, config.recipe.from_weights, adapt_steps)
        model.compile(
            optimizer=recipe.optimizer(
                config.recipe, phases, epoch.steps, epoch.min_schedule_steps
            ),
            jit_compile=config.xla,
            **compile_args,
        )
        # Built for all that trains in any phase: the checkpoints' optimizer state is then the
        # same in every phase, and the heads keep their moments across the switch.
        model.optimizer.build(model.trainable_variables)
    best = best_epoch.make(model, config.recipe.select_by, heads, validated, strategy)
    # Dropout's random state is not in a model's checkpoint by default; with it, a resumed run
    # draws the masks an uninterrupted one would.
    random_states = [v for v in model.variables if 'seed_generator_state' in v.path]
    checkpoint = tf.train.Checkpoint(
        model=model, optimizer=model.optimizer, random_states=random_states, best=best.state
    )
    return _Run(model, checkpoint, best, compile_args, phases, epoch.steps, adapt_steps)


def _fit(run, config, info, strategy, progress, checkpoints, skipped):
    """Trains the epochs left after `done` steps, phase by phase (trainer/recipe.py).

    Args:
        progress: (the validation data or None, steps done before this run).
    """
    validation, done = progress
    found = [run.best, checkpoints] + ([callbacks.SkippedImagesLog(skipped)] if skipped else [])
    if distribute.is_chief():
        found.append(keras.callbacks.TensorBoard(config.resolved_log_dir))
    for segment in recipe.segments(done, run.steps, run.phases):
        if checkpoints.preempted:
            break
        recipe.set_trainable(
            run.model, segment.phase.frozen, config.recipe.from_weights, run.adapt_steps
        )
        with strategy.scope():  # the trainable weights change only with a new train function
            run.model.compile(
                optimizer=run.model.optimizer, jit_compile=config.xla, **run.compile_args
            )
        data = _training_data(config, info, strategy, segment, skipped, run.steps)
        try:
            run.model.fit(
                data,
                initial_epoch=segment.first,
                epochs=segment.last,
                steps_per_epoch=run.steps - segment.skip,
                validation_data=validation,
                callbacks=found,
                shuffle=False,  # the input pipeline shuffles
                verbose=1 if sys.stdout.isatty() else 2,
            )
        except tf.errors.DataLossError as e:
            shards = info.shard_paths(config.train_split) + (
                info.shard_paths(config.val_split) if validation is not None else []
            )
            raise corrupt_shards.name_corrupt_shards(e, shards, info.shard_format) from e


def _training_data(config, info, strategy, segment, skipped, steps):
    """The distributed training batches of a Segment's epochs of `steps` steps each."""
    replicas_per_pipeline = max(
        1, strategy.num_replicas_in_sync // max(1, distribute.cluster_spec()[2])
    )

    def dataset(input_context):
        return input_pipeline.make_dataset(
            config.data,
            config.train_split,
            config.batch_size,
            training=True,
            seed=config.seed,
            image_size=config.image_size,
            options=config.input,
            label_levels=config.label_levels,
            info=info,
            input_context=input_context,
            skipped=skipped,
            start_epoch=segment.first,
            epochs=segment.last,
            skip_batches=segment.skip * replicas_per_pipeline,
            batches_per_epoch=steps * replicas_per_pipeline,
        )

    return strategy.distribute_datasets_from_function(dataset)


def _final_metrics(run, config, seconds, steps_before):
    """The best epoch's metrics (trainer/best_epoch.py) and the run's figures."""
    steps_now = int(run.model.optimizer.iterations.numpy())
    metrics = run.best.metrics()
    metrics.update(
        {
            'epochs': config.epochs,
            'steps_per_epoch': run.steps,
            'steps': steps_now,
            'train_images_per_second': (steps_now - steps_before)
            * config.batch_size
            / max(seconds, 1e-9),
            'train_seconds': round(seconds, 1),
            'crop_area': list(config.input.crop_area),
            'eval_crop': config.input.eval_crop,
            'model': config.model,
            'image_size': list(config.image_size),
        }
    )
    return metrics


def check_classes(info, levels) -> None:
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
    options = config.input.resolved(train_records, info.multi_label)
    kind = 'multi-label images' if info.multi_label else 'training images'
    _LOG.info(
        'random crops keep %g to %g of each image%s; evaluation and serving see its central %g',
        *options.crop_area,
        f' (auto, for {train_records:,} {kind})' if config.input.crop_area == 'auto' else '',
        options.eval_crop,
    )
    return dataclasses.replace(config, input=options)
