"""Multi-worker training: a chief and a worker on loopback, MultiWorkerMirroredStrategy on CPU.

tests/workers_for_tests.py runs the two processes and observes them from outside (the shards
each opens, who created what in the job directory). The build has 3 shards per split, so that
the chief reads twice as many training records as the worker (uneven splits are what hang
multi-worker runs).
"""

import json
import re

import pytest
import workers_for_tests as workers

from trainer import best_epoch
from trainer import dataset_info
from trainer import input_pipeline
from trainer import tft_output
from trainer.model import build_model

FLAGS = [
    '--image-size',
    '16',
    '--batch-size',
    '8',
    '--epochs',
    '2',
    '--steps-per-epoch',
    '4',
    '--crop-area',
    '0.5,1',
    '--checkpoint-every',
    '3',
]


@pytest.fixture(scope='module')
def two_workers(color_builds, tmp_path_factory):
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    tmp_path = tmp_path_factory.mktemp('multiworker')
    data = tmp_path / 'three-shards'
    tree = str(color_builds['tree'])
    launcher.run(['--input', tree, '--output', str(data), '--splits', 'train=0.75,val=0.25',
               '--num-shards', '3', '--direct_running_mode=in_memory'])  # fmt: skip
    processes = workers.start_both(data, tmp_path, FLAGS)
    codes = workers.wait(processes, timeout=300)
    logs = workers.read_logs(tmp_path)
    assert codes == {'chief': 0, 'worker': 0}, logs
    pids = {role: p.pid for role, p in processes.items()}
    return dataset_info.load(str(data)), tmp_path, logs, pids


@pytest.mark.slow
def test_each_worker_trains_on_its_own_shards_and_validates_on_all(two_workers):
    info, _, logs, _ = two_workers
    chief, worker = (workers.files_read(logs[role], 'train') for role in ('chief', 'worker'))
    assert chief and worker
    assert not chief & worker, f'both workers read {sorted(chief & worker)}'
    assert chief | worker == set(info.shard_paths('train'))
    for role in logs:
        assert workers.files_read(logs[role], 'val') == set(info.shard_paths('val'))


@pytest.mark.slow
def test_both_train_the_same_steps_and_agree_on_the_metrics(two_workers):
    _, _, logs, _ = two_workers
    final = {role: workers.final_metrics(logs[role]) for role in logs}
    assert final['chief']['steps'] == final['worker']['steps'] == 2 * 4
    for key in ('loss', 'accuracy', 'val_loss', 'val_accuracy'):
        assert final['chief'][key] == pytest.approx(final['worker'][key])
    assert '2 replicas' in logs['chief']
    # 3 shards on 2 workers: 96 and 48 training records.
    assert "3 shards of split 'train' fall unevenly on 2 workers (48 to 96" in logs['chief']


@pytest.mark.slow
def test_each_worker_validates_on_every_record(tf, two_workers):
    """val_accuracy is the mean of the workers' accuracies over the whole split.

    The workers share their weights but not BatchNormalization's moving statistics (Keras
    keeps those per replica), so their accuracies may differ; the chief's is that of its
    best epoch's weights in its checkpoint. Whatever the worker's, it must be a count of
    correct records out of all.
    """
    info, tmp_path, logs, _ = two_workers
    final = workers.final_metrics(logs['chief'])
    model = build_model(
        'small_cnn', info.num_classes, (16, 16), transform_output=tft_output.load(info)
    )
    latest = tf.train.latest_checkpoint(str(tmp_path / 'job' / 'checkpoints'))
    best = best_epoch.BestEpoch(model, ['val_loss'], lower_is_better=True)
    tf.train.Checkpoint(best=best.state).restore(latest).expect_partial()
    best.restore_best()  # the chief's weights of the epoch the metrics are of
    model.compile(loss='sparse_categorical_crossentropy', metrics=['accuracy'])
    val = input_pipeline.make_dataset(info.data_dir, 'val', 4, training=False, image_size=(16, 16))
    _, chief_accuracy = model.evaluate(val, verbose=0)
    records = info.num_records('val')
    worker_correct = (2 * final['val_accuracy'] - chief_accuracy) * records
    assert worker_correct == pytest.approx(round(worker_correct), abs=1e-3)
    assert 0 <= round(worker_correct) <= records


@pytest.mark.slow
def test_only_the_chief_writes_to_the_job_directory(two_workers):
    _, tmp_path, logs, pids = two_workers
    job = tmp_path / 'job'
    written, by_worker = workers.written_by_others(job)
    for name in ('metrics.json', 'model/saved_model.pb', 'checkpoints/checkpoint'):
        assert name in written
    events = [name for name in written if '.tfevents.' in name]
    assert {name.split('/')[1] for name in events} == {'train', 'validation'}
    # An events file's name ends in the pid of the process that wrote it.
    assert all(name.split('.')[-3] == str(pids['chief']) for name in events), events
    # The worker's umask would leave a file it created without group and other read bits.
    assert not by_worker, f'written by the worker: {by_worker}'
    assert json.loads(written['metrics.json'].read_text())['steps'] == 2 * 4
    assert f'checkpoint {job}/checkpoints/ckpt-8' in logs['chief']


@pytest.mark.slow
def test_the_workers_checkpoints_and_export_are_thrown_away(two_workers):
    _, tmp_path, logs, _ = two_workers
    scratch = workers.scratch_of(logs['worker'])  # and gone
    assert scratch.startswith(str(tmp_path / 'worker-tmp'))
    saved = re.findall(r'INFO checkpoint (\S+)', logs['worker'])
    assert saved == [f'{scratch}/checkpoints/ckpt-{step}' for step in (3, 4, 6, 8)]
    assert 'checkpoints and the export go to' not in logs['chief']


@pytest.mark.slow
def test_two_workers_train_one_head_per_label_level(tmp_path):
    """Label dicts through MultiWorkerMirroredStrategy: both workers finish and agree."""
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    import images_for_tests  # pylint: disable=import-outside-toplevel

    manifest = images_for_tests.write_level_manifest(tmp_path / 'images', 12)
    data = tmp_path / 'levels'
    launcher.run(['--input', str(manifest), '--output', str(data),
                  '--splits', 'train=0.75,val=0.25',
                  '--num-shards', '2', '--direct_running_mode=in_memory'])  # fmt: skip
    flags = [*FLAGS, '--label-levels', 'family,species']
    processes = workers.start_both(data, tmp_path, flags)
    codes = workers.wait(processes, timeout=300)
    logs = workers.read_logs(tmp_path)
    assert codes == {'chief': 0, 'worker': 0}, logs
    final = {role: workers.final_metrics(logs[role]) for role in logs}
    assert final['chief']['steps'] == final['worker']['steps'] == 2 * 4
    for key in ('family_loss', 'species_accuracy', 'val_family_accuracy'):
        assert final['chief'][key] == pytest.approx(final['worker'][key])
    assert set(final['chief']['label_levels']) == {'family', 'species'}
