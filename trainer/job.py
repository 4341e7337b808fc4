"""The job directory across runs: what trained there, whether it finished, metrics.json.

A rerun into the same `--job-dir` resumes from its checkpoints, which only the same model on
the same data can do. So the chief records what it trains (`run.json` beside the checkpoints:
the model, image size, labels and label levels, and a digest of the build's shards) and every
later run compares before touching anything: another model or other data is refused in one
sentence that says how to go on, instead of failing deep inside the checkpoint restore. A run
that finds its job already done keeps the outputs and says so.
"""

import hashlib
import json
import logging
import posixpath

import tensorflow as tf

from trainer import distribute
from trainer.model import LOGITS

_LOG = logging.getLogger(__name__)

RUN_JSON = 'run.json'
METRICS_JSON = 'metrics.json'
_COMPARED = ('model', 'image_size', 'labels', 'label_levels', 'derived_levels', 'data', 'init_from')
# What a run.json written before a key existed means by it.
_BEFORE = {'derived_levels': {}, 'init_from': ''}


def data_digest(info) -> str:
    """sha256 of every shard's path and sha256 in the build: the same for a rebuild with the
    same inputs and seed, wherever the build is read from (gs://b/out or /gcs/b/out)."""
    shards = sorted(
        (shard['path'], shard['sha256'])
        for split in info.splits.values()
        for shard in split['shards']
    )
    return hashlib.sha256(json.dumps(shards).encode('utf-8')).hexdigest()


def fingerprint(config, info, derived=None, heads=None) -> dict:
    """What a job's checkpoints belong to (`derived`: trainer/hierarchy.py's levels), and the
    classes of each head layer of its model (`heads`: trainer/heads.py's), for --init-from."""
    return {
        'model': config.model,
        'image_size': list(config.image_size),
        'labels': list(info.labels),
        'label_levels': list(config.label_levels),
        'derived_levels': {coarse: fine for coarse, (fine, _) in (derived or {}).items()},
        'data': data_digest(info),
        'data_dir': info.data_dir,
        'init_from': config.recipe.init_from,
        'head_classes': head_classes(heads or {}),
    }


def head_classes(heads) -> dict:
    """{head layer name (trainer/model.py): its class names} of the heads with weights."""
    return {
        (f'{level}_{LOGITS}' if level else LOGITS): list(head.classes)
        for level, head in heads.items()
        if not head.source
    }


def read_run(checkpoint_dir) -> dict | None:
    """The run.json beside a job's checkpoints, or None."""
    return _read_json(posixpath.join(checkpoint_dir, RUN_JSON))


def _read_json(path):
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, 'r') as f:
        return json.load(f)


def write_json(path, value) -> None:
    tf.io.gfile.makedirs(posixpath.dirname(path) or '.')
    with tf.io.gfile.GFile(path, 'w') as f:
        f.write(json.dumps(value, indent=2) + '\n')


def _difference(old, new):
    """What differs between two fingerprints, in words."""
    if old['model'] != new['model']:
        return f'model {old["model"]}, not {new["model"]}'
    if old['image_size'] != new['image_size']:
        size = lambda run: 'x'.join(str(side) for side in run['image_size'])
        return f'image size {size(old)}, not {size(new)}'
    if old['labels'] != new['labels'] or old['label_levels'] != new['label_levels']:
        return f'the labels of {old["data_dir"]}, not those of {new["data_dir"]}'
    if old.get('init_from', '') != new['init_from']:
        start = lambda run: run.get('init_from') or 'random weights'
        return f'weights started from {start(old)}, not from {start(new)}'
    if old.get('derived_levels', {}) != new['derived_levels']:
        derived = lambda run: run.get('derived_levels') or 'none'
        return f'levels derived as {derived(old)} (--hierarchy), not as {derived(new)}'
    return f'the build in {old["data_dir"]}, not the one now in {new["data_dir"]}'


def check_rerun(config, info, checkpoint_dir, derived=None, heads=None) -> dict:
    """Raises ValueError if `checkpoint_dir` holds checkpoints of another model or other data.

    Returns the fingerprint of this run.
    """
    new = fingerprint(config, info, derived, heads)
    old = read_run(checkpoint_dir)
    if old is not None and any(old.get(key, _BEFORE.get(key)) != new[key] for key in _COMPARED):
        raise ValueError(
            f'--job-dir {config.job_dir} holds the checkpoints of a run on '
            f'{_difference(old, new)}: train into a new --job-dir, or delete {checkpoint_dir} '
            f'to start this one from scratch'
        )
    return new


def record_run(checkpoint_dir, run) -> None:
    """Writes run.json beside the checkpoints, once (the chief)."""
    path = posixpath.join(checkpoint_dir, RUN_JSON)
    if not tf.io.gfile.exists(path):
        write_json(path, run)


def finished_or_recorded(config, done_steps, steps_per_epoch, checkpoint_dir, run) -> dict | None:
    """The metrics.json of a job that already trained every epoch asked for; else None, once the
    chief has recorded `run` (run.json) for the run that starts now."""
    finished = finished_metrics(config, done_steps, steps_per_epoch)
    if finished is None and distribute.is_chief():
        record_run(checkpoint_dir, run)
    return finished


def finished_metrics(config, done_steps, steps_per_epoch) -> dict | None:
    """The metrics.json of a job that already trained every epoch asked for, else None."""
    if done_steps < config.epochs * steps_per_epoch:
        return None
    metrics = _read_json(posixpath.join(config.job_dir, METRICS_JSON))
    if metrics is not None:
        _LOG.info(
            '%s already finished %d epochs (%s); its outputs are kept. Raise --epochs to train '
            'on, or give a new --job-dir to train again',
            config.job_dir,
            done_steps // steps_per_epoch,
            METRICS_JSON,
        )
    return metrics


def write_metrics(config, metrics) -> None:
    write_json(posixpath.join(config.job_dir, METRICS_JSON), metrics)


def restore_latest(checkpoint, config) -> bool:
    """Restores the newest checkpoint of the chief, if any (returns whether there was one).

    Every worker resumes from the chief's checkpoints: workers that disagreed on the step
    would wait for each other's collectives forever.
    """
    latest = tf.train.latest_checkpoint(config.resolved_checkpoint_dir)
    if not latest:
        return False
    try:
        checkpoint.restore(latest).expect_partial()
    except (ValueError, tf.errors.OpError) as e:
        raise ValueError(
            f'{latest} does not fit this run (another model, image size or labels: '
            f'{str(e).splitlines()[0]}): train into a new --job-dir, or delete '
            f'{config.resolved_checkpoint_dir} to start this one from scratch'
        ) from e
    _LOG.info('resumed from %s', latest)
    return True
