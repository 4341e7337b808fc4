"""Multi-worker training of a detection build: a chief and a worker on loopback,
MultiWorkerMirroredStrategy on CPU (tests/workers_for_tests.py runs and observes them).

The COCO set has masks, so the run trains instance segmentation (boxes and masks, scored by
pycocotools on every worker); another trains a semantic segmenter from the same masks. The
build has 3 shards per split, so that the chief reads twice as many training records as the
worker (uneven splits are what hang multi-worker runs), and an epoch has more steps than the
worker's share makes: its records fill them again.

The workers share their weights, and so agree on the training losses (reduced over both), but
not BatchNormalization's moving statistics (Keras keeps those per replica): each scores the
validation and test splits alone with its own, so their mAP or mean IoU can differ. What the
chief reports is its own model's, the one it exports.
"""

import json

import object_sets
import pytest
import workers_for_tests as workers

from pipelines import launcher
from trainer import config as config_lib
from trainer import dataset_info
from trainer import objects_evaluate
from trainer import objects_train
from trainer import warm_start

from build_commands import build_flags

# 24 images: 12 training records in 3 shards, 8 for the chief and 4 for the worker, 2 a step.
STEPS, EPOCHS = 3, 2
FLAGS = ['--image-size', '32', '--batch-size', '4', '--epochs', str(EPOCHS),
         '--steps-per-epoch', str(STEPS), '--checkpoint-every', '3']  # fmt: skip


@pytest.fixture(scope='module', name='three_shards')
def fixture_three_shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp('coco')
    object_sets.write_coco(str(folder), images=24)
    data = folder / 'three-shards'
    launcher.run(
        build_flags(
            folder / 'annotations' / 'instances.json',
            data,
            '--no-analyze',
            splits='train=0.5,val=0.25,test=0.25',
            num_shards=3,
            seed=3,
            in_memory=True,
        )
    )
    return data


def _train_on_two_workers(data, tmp_path, *flags):
    """(logs, pids) of a chief and a worker that both ended with exit code 0."""
    processes = workers.start_both(data, tmp_path, [*FLAGS, *flags])
    codes = workers.wait(processes, timeout=300)
    logs = workers.read_logs(tmp_path)
    assert codes == {'chief': 0, 'worker': 0}, logs
    return logs, {role: p.pid for role, p in processes.items()}


@pytest.fixture(scope='module', name='two_workers')
def fixture_two_workers(three_shards, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp('object-multiworker')
    logs, pids = _train_on_two_workers(three_shards, tmp_path)
    return dataset_info.load(str(three_shards)), tmp_path, logs, pids


@pytest.mark.slow
def test_each_worker_trains_on_its_own_shards_and_scores_all(two_workers):
    info, _, logs, _ = two_workers
    assert len(info.shard_paths('train')) == 3
    chief, worker = (workers.files_read(logs[role], 'train') for role in ('chief', 'worker'))
    assert chief and worker
    assert not chief & worker, f'both workers read {sorted(chief & worker)}'
    assert chief | worker == set(info.shard_paths('train'))
    assert len(chief) == 2 * len(worker)
    for role in logs:
        for split in ('val', 'test'):
            assert workers.files_read(logs[role], split) == set(info.shard_paths(split))


@pytest.mark.slow
def test_both_train_the_same_steps_and_agree_on_the_losses(two_workers):
    _, _, logs, _ = two_workers
    final = {role: workers.final_metrics(logs[role]) for role in logs}
    assert final['chief']['steps'] == final['worker']['steps'] == EPOCHS * STEPS
    assert final['chief']['task'] == 'instance_segmentation'
    for key in ('loss', 'heatmap_loss', 'boxes_loss', 'masks_loss'):
        assert final['chief'][key] == pytest.approx(final['worker'][key]), key
    for role in logs:
        assert {'val_map', 'val_mask_map', 'test_map', 'test_mask_map'} <= set(final[role])
        assert 'on 2 replicas' in logs[role]
        assert "3 shards of split 'train' fall unevenly on 2 workers (4 to 8" in logs[role]
        # Each waited for the other at the end: neither saw the other leave early.
        assert 'unhealthy' not in logs[role], logs[role]


@pytest.mark.slow
def test_only_the_chief_writes_to_the_job_directory(two_workers):
    _, tmp_path, logs, pids = two_workers
    job = tmp_path / 'job'
    written, by_worker = workers.written_by_others(job)
    for name in ('metrics.json', 'model/saved_model.pb', 'checkpoints/checkpoint'):
        assert name in written
    events = [name for name in written if '.tfevents.' in name]
    assert events
    # An events file's name ends in the pid of the process that wrote it.
    assert all(name.split('.')[-3] == str(pids['chief']) for name in events), events
    assert not by_worker, f'written by the worker: {by_worker}'
    metrics = json.loads(written['metrics.json'].read_text())
    assert metrics['steps'] == EPOCHS * STEPS
    assert 0.0 <= metrics['test_map'] <= 1.0 and 0.0 <= metrics['test_mask_map'] <= 1.0
    assert metrics['classes'] == list(object_sets.CLASSES)
    assert f'checkpoint {job}/checkpoints/ckpt-{EPOCHS * STEPS}' in logs['chief']


@pytest.mark.slow
def test_the_workers_checkpoints_and_export_are_thrown_away(two_workers):
    _, tmp_path, logs, _ = two_workers
    scratch = workers.scratch_of(logs['worker'])
    assert scratch.startswith(str(tmp_path / 'worker-tmp'))
    assert 'exported the model' in logs['chief'] and 'exported the model' not in logs['worker']
    assert 'checkpoints and the export go to' not in logs['chief']


@pytest.fixture(scope='module', name='segmenter_workers')
def fixture_segmenter_workers(three_shards, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp('segmenter-multiworker')
    flags = ('--task', 'semantic_segmentation')
    logs, _ = _train_on_two_workers(three_shards, tmp_path, *flags)
    config = config_lib.parse_train_args(
        ['--data', str(three_shards), '--job-dir', str(tmp_path / 'job'), *FLAGS, *flags]
    )
    return config, tmp_path, logs


@pytest.mark.slow
def test_two_workers_train_a_semantic_segmenter_that_the_chief_alone_writes(segmenter_workers):
    _, tmp_path, logs = segmenter_workers
    final = {role: workers.final_metrics(logs[role]) for role in logs}
    assert final['chief']['steps'] == final['worker']['steps'] == EPOCHS * STEPS
    assert final['chief']['loss'] == pytest.approx(final['worker']['loss'])
    assert final['chief']['selected_by'] == 'val_mean_iou'
    written, by_worker = workers.written_by_others(tmp_path / 'job')
    assert 'metrics.json' in written and 'model/saved_model.pb' in written
    assert not by_worker, f'written by the worker: {by_worker}'
    workers.scratch_of(logs['worker'])


@pytest.mark.slow
def test_the_chiefs_metrics_are_those_of_the_model_it_exports(segmenter_workers):
    """The best epoch's weights and BatchNormalization statistics in the chief's checkpoint
    score, on the whole test split, the mean IoU that metrics.json says."""
    config, tmp_path, _ = segmenter_workers
    written = json.loads((tmp_path / 'job' / 'metrics.json').read_text())
    info = dataset_info.load(config.data)
    task = objects_train.task_for(config, info)
    model = objects_train.build(task)[0]
    copied = warm_start.apply(model, config.job_dir, config, objects_train.heads(task))
    assert not copied['new_layers']
    found = objects_evaluate.Scorer(task, info, 'test', config.batch_size)(model)
    assert found['mean_iou'] == pytest.approx(written['test_mean_iou'])
    assert 0.0 < written['test_mean_iou'] <= 1.0
