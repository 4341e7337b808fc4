"""Training on a detection build: a detector or a semantic segmenter, as the build says.

The task follows the build (`task_for`): a build whose records carry class maps (Pascal VOC's
SegmentationClass) trains a semantic segmenter, any other a detector; `--task` overrides it
(`semantic_segmentation` on a build with instance masks draws its class maps from them). The
run is the classification trainer's (trainer/train.py): the recipe's phases and schedule
(trainer/recipe.py; with `--init-from`, the frozen phase trains all but the backbone and its
pyramid), resumable checkpoints with the best epoch in them, exact resume (the input rebuilds
any epoch from (seed, epoch)), the best epoch kept by val mAP or mIoU, the test split scored
with it, a SavedModel exported (trainer/objects_export.py), metrics.json.
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
from trainer import centernet
from trainer import deeplab
from trainer import distribute
from trainer import input_pipeline
from trainer import job
from trainer import objects_evaluate
from trainer import objects_export
from trainer import objects_input
from trainer import recipe
from trainer import retinanet
from trainer import segmenter
from trainer import shard_reading
from trainer import warm_start
from trainer.config import SMALL_CNN

_LOG = logging.getLogger(__name__)
# The models of each task, the first its default (small_cnn, --model's default, names it).
MODELS = {
    objects_input.DETECTION: ('centernet', retinanet.NAME),
    objects_input.INSTANCE: ('centernet',),  # with its mask head (trainer/instance_masks.py)
    objects_input.SEMANTIC: ('segmenter', deeplab.NAME),
}
MEASURES = {
    objects_input.DETECTION: 'map',
    objects_input.INSTANCE: 'mask_map',
    objects_input.SEMANTIC: 'mean_iou',
}
# What the frozen phase keeps: the compact backbone and its pyramid (trainer/objects_backbone.py),
# KerasHub's ResNet encoder (trainer/deeplab.py).
BACKBONE = ('backbone_', 'pyramid_', *deeplab.ENCODER)


@dataclasses.dataclass(frozen=True)
class Task:
    """What a run on a detection build trains: the task, its input settings, the names of the
    classes its model outputs, the model's name."""

    name: str
    settings: objects_input.ObjectInput
    classes: tuple
    model: str

    @property
    def measure(self) -> str:
        return MEASURES[self.name]


def task_for(config, info) -> Task:
    """The Task of `config` on the detection build `info` (ValueError: it cannot train that)."""
    kind = info.kind
    name = config.task
    if name == 'auto':
        name = objects_input.SEMANTIC if kind.class_maps else objects_input.DETECTION
        name = objects_input.INSTANCE if kind.masks and not kind.class_maps else name
    if name == objects_input.SEMANTIC and not (kind.class_maps or kind.masks):
        raise ValueError(
            f'--task {name}: {info.data_dir} has neither class maps nor instance masks; '
            f'train detection on it, or build from a source with masks'
        )
    if name == objects_input.INSTANCE and not kind.masks:
        raise ValueError(
            f'--task {name}: the records of {info.data_dir} carry no instance masks; train '
            f'detection on it, or build from a source with masks (COCO polygons or RLE, YOLO '
            f'segments, VOC SegmentationObject)'
        )
    model = MODELS[name][0] if config.model == SMALL_CNN else config.model
    if model not in MODELS[name]:
        raise ValueError(
            f'--model {config.model}: a {name} run trains {" or ".join(MODELS[name])} '
            f'(trainer/{MODELS[name][0]}.py is the default); leave --model out or name one'
        )
    classes = tuple(info.labels)
    if name == objects_input.SEMANTIC:
        classes = tuple(kind.segmentation_classes) if kind.class_maps else ()
        classes = classes or (segmenter.BACKGROUND, *info.labels)
    settings = objects_input.ObjectInput(
        task=name,
        canvas=tuple(config.image_size),
        class_maps=kind.class_maps,
        **objects_input.augmentation(config.input.augment),
    )
    multiple = retinanet.MULTIPLE if model == retinanet.NAME else 32
    if any(side % multiple for side in settings.canvas):
        raise ValueError(
            f'--image-size {config.image_size}: a {name} {model} needs multiples of {multiple}'
        )
    return Task(name, settings, classes, model)


def build(task):
    """(the Keras model, its compile arguments, its targets function) of a Task."""
    if task.model == retinanet.NAME:
        model = retinanet.build(len(task.classes), task.settings.canvas)
        return model, retinanet.compile_args(), retinanet.targets(task.settings.canvas)
    if task.name != objects_input.SEMANTIC:
        masks = task.name == objects_input.INSTANCE
        model = centernet.build(len(task.classes), task.settings.canvas, masks=masks)
        return (
            model,
            centernet.compile_args(masks),
            centernet.targets(len(task.classes), task.settings.canvas, masks),
        )
    make = deeplab.build if task.model == deeplab.NAME else segmenter.build
    model = make(len(task.classes), task.settings.canvas)
    return model, {'loss': segmenter.loss}, segmenter.targets


def set_trainable(model, frozen) -> None:
    """The frozen phase trains the heads alone: the backbone and pyramid keep their weights
    (and their BatchNorm statistics)."""
    for layer in recipe.layers_with_weights(model):
        layer.trainable = not (frozen and layer.name.startswith(BACKBONE))


def train(config, info, checkpoint_dir, model_dir) -> dict:
    """Trains as `config` says on the detection build `info`; returns the final metrics."""
    distribute.check_devices(config)
    strategy = distribute.choose_strategy()
    policy = distribute.set_precision(config.mixed_precision)
    task = task_for(config, info)
    steps = _epoch_steps(config, info)
    phases = recipe.phases(config.recipe, config.epochs)
    model, compile_args, targets = _set_up(config, task, strategy, phases, steps)
    scorer = _scorer(task, info, config, config.val_split)
    keys = [f'val_{task.measure}'] if scorer else []
    best = best_epoch.BestEpoch(model, keys, lower_is_better=False, strategy=strategy)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, best=best.state)
    manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir, max_to_keep=3)
    fingerprint = job.check_rerun(config, info, config.resolved_checkpoint_dir)
    fingerprint.update(task=task.name, head_classes=heads(task))
    done = _start(model, checkpoint, config, fingerprint)
    finished = job.finished_or_recorded(config, done, steps, checkpoint_dir, fingerprint)
    if finished is not None:
        return finished
    _LOG.info(
        '%s (%s, %d classes) from %s on %s, %s, %d steps per epoch, from epoch %d step %d',
        task.model,
        task.name,
        len(task.classes),
        config.recipe.init_from or 'random initial weights',
        console.plural(strategy.num_replicas_in_sync, 'replica'),
        policy,
        steps,
        *divmod(done, steps),
    )
    checkpoints = callbacks.ResumableCheckpoints(manager, config.checkpoint_every)
    found = ([objects_evaluate.ObjectMetrics(scorer)] if scorer else []) + [best, checkpoints]
    started = time.monotonic()
    run = (model, compile_args, targets, task, steps)
    _fit(run, config, info, strategy, done, found, phases)
    if checkpoints.preempted:
        return {'preempted': True, 'steps': int(model.optimizer.iterations.numpy())}
    best.restore_best()
    seconds = time.monotonic() - started
    steps_done = (done, int(model.optimizer.iterations.numpy()))
    metrics = _metrics(best, config, task, steps, seconds, steps_done)
    metrics['init_from'] = fingerprint.get('warm_start') or config.recipe.init_from or None
    test = _scorer(task, info, config, config.test_split)
    if test:
        metrics.update({f'test_{key}': value for key, value in test(model).items()})
    objects_export.export_saved_model(model, task, model_dir)
    if distribute.is_chief():
        _LOG.info('exported the model of epoch %s to %s', metrics.get('best_epoch'), model_dir)
        job.write_metrics(config, metrics)
    distribute.wait_for_all(strategy)  # each worker scored the test split alone, at its own pace
    return metrics


def _epoch_steps(config, info):
    """The steps of an epoch, the same on every worker: --steps-per-epoch, or those the
    smallest share of the training split fills; warns where workers' shares are uneven."""
    pipelines = distribute.cluster_spec()[2]  # one input pipeline per worker
    steps = config.steps_per_epoch or input_pipeline.steps_per_epoch(
        info, config.train_split, config.batch_size, pipelines
    )
    if steps < 1:
        raise ValueError(
            f'split {config.train_split!r} has {info.num_records(config.train_split)} records: '
            f'not one batch of {config.batch_size} to train on'
        )
    shard_reading.warn_if_uneven(info, config.train_split, pipelines, config.batch_size)
    return steps


def _set_up(config, task, strategy, phases, steps):
    """The compiled model (its optimizer built for every weight that trains in any phase, so
    that checkpoints hold the same state in each), its compile arguments and targets."""
    keras.utils.set_random_seed(config.seed % (2**31 - 2) + 1)  # never 0: see trainer/train.py
    with strategy.scope():
        model, compile_args, targets = build(task)
        model.compile(optimizer=recipe.optimizer(config.recipe, phases, steps), **compile_args)
        model.optimizer.build(model.trainable_variables)
    return model, compile_args, targets


def heads(task) -> dict:
    """{layer name: class names} of the class heads of a Task's model (what --init-from copies
    only from a job on the same classes)."""
    semantic = (segmenter.LOGITS,) if task.model == deeplab.NAME else segmenter.HEADS
    detection = retinanet.HEADS if task.model == retinanet.NAME else centernet.HEADS
    names = {objects_input.SEMANTIC: semantic, objects_input.DETECTION: detection}
    names[objects_input.INSTANCE] = (*centernet.HEADS, 'mask_logits')
    return {name: list(task.classes) for name in names[task.name]}


def _scorer(task, info, config, split):
    if split not in info.splits or not info.num_records(split):
        return None
    return objects_evaluate.Scorer(task, info, split, config.batch_size)


def _start(model, checkpoint, config, fingerprint):
    """Restores the newest checkpoint, else starts from --init-from's weights; steps done."""
    if job.restore_latest(checkpoint, config):
        earlier = job.read_run(config.resolved_checkpoint_dir) or {}
        if earlier.get('warm_start'):
            fingerprint['warm_start'] = earlier['warm_start']
    elif config.recipe.from_weights:
        fingerprint['warm_start'] = warm_start.apply(
            model, config.recipe.init_from, config, fingerprint['head_classes']
        )
    return int(model.optimizer.iterations.numpy())


def _fit(run, config, info, strategy, done, found, phases):
    model, compile_args, targets, task, steps = run
    if distribute.is_chief():
        found = [*found, keras.callbacks.TensorBoard(config.resolved_log_dir)]
    for segment in recipe.segments(done, steps, phases):
        set_trainable(model, segment.phase.frozen)
        with strategy.scope():
            model.compile(optimizer=model.optimizer, **compile_args)
        data = _training_data(config, info, strategy, segment, (task, targets, steps))
        model.fit(
            data,
            initial_epoch=segment.first,
            epochs=segment.last,
            steps_per_epoch=steps - segment.skip,
            callbacks=found,
            shuffle=False,  # the input pipeline shuffles
            verbose=1 if sys.stdout.isatty() else 2,
        )
        if any(getattr(c, 'preempted', False) for c in found):
            break


def _training_data(config, info, strategy, segment, what):
    """The distributed training batches of a Segment's epochs (as trainer/train.py's)."""
    task, targets, steps = what
    replicas = max(1, strategy.num_replicas_in_sync // max(1, distribute.cluster_spec()[2]))

    def dataset(input_context):
        return objects_input.training_dataset(
            info,
            config.train_split,
            input_context.get_per_replica_batch_size(config.batch_size),
            task.settings,
            targets,
            seed=config.seed,
            start_epoch=segment.first,
            epochs=segment.last,
            skip_batches=segment.skip * replicas,
            batches_per_epoch=steps * replicas,
            options=config.input,
            input_context=input_context,
        )

    return strategy.distribute_datasets_from_function(dataset)


def _metrics(best, config, task, steps, seconds, steps_done):
    """The best epoch's logs (trainer/best_epoch.py) and the run's figures (`steps_done`:
    before this run, and now)."""
    steps_before, steps_now = steps_done
    return {
        **best.metrics(),
        'task': task.name,
        'classes': list(task.classes),
        'epochs': config.epochs,
        'steps_per_epoch': steps,
        'steps': steps_now,
        'train_images_per_second': (steps_now - steps_before)
        * config.batch_size
        / max(seconds, 1e-9),
        'train_seconds': round(seconds, 1),
        'model': task.model,
        'image_size': list(config.image_size),
    }
