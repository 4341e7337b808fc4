"""Small training splits (trainer/small_splits.py): every image in every epoch, a resume
inside an epoch that finds the same batches, a schedule laid over more steps, and larger splits
trained as before."""

import json

import numpy as np
import pytest

from trainer import config as config_lib
from trainer import dataset_info
from trainer import input_pipeline
from trainer import recipe
from trainer import small_splits
from trainer import train as train_lib

SIZE = (16, 16)
CLASSES = ('cat', 'dog', 'fish')
# Per class: 5 training images (15 in all: under 2 batches of 8), 2 for validation, and 7 in
# a split of 21 (10 batches of 2 and one image over: not small at batch 2).
SPLITS = (('train', 5), ('val', 2), ('larger', 7))


@pytest.fixture(scope='module')
def builds(tmp_path_factory):
    """{shard format: OUT} of builds whose manifest puts exactly 15 images in `train` and 21
    in `larger`: TFRecord shards and ArrayRecord shards (read by record key in training)."""
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    import images_for_tests  # pylint: disable=import-outside-toplevel
    from build_commands import build_flags  # pylint: disable=import-outside-toplevel

    root = tmp_path_factory.mktemp('small_splits')
    images_for_tests.write_tree(root, sum(count for _, count in SPLITS), CLASSES)
    rows = ['path,label,split']
    for label in CLASSES:
        names = iter(sorted(path.name for path in (root / label).iterdir()))
        rows += [f'{label}/{next(names)},{label},{split}' for split, n in SPLITS for _ in range(n)]
    (root / 'images.csv').write_text('\n'.join(rows) + '\n')
    found = {}
    for shard_format in ('tfrecord', 'array_record'):
        out = root / shard_format
        flags = build_flags(root / 'images.csv', out, '--shard-format', shard_format)
        launcher.run(flags + build_flags(num_shards=4, seed=3, analyze=False, in_memory=True))
        found[shard_format] = out
    return found


@pytest.fixture(params=['tfrecord', 'array_record'])
def build(request, builds):
    return builds[request.param]


def _batch_ids(data, split, batch, **settings):
    """The image ids of each training batch of `split`."""
    dataset = input_pipeline.make_dataset(
        str(data), split, batch, training=True, image_size=SIZE, with_ids=True, seed=4, **settings
    )
    return [ids.numpy().tolist() for _, _, ids in dataset]


def test_fifteen_images_at_batch_8_are_two_steps_with_every_image_in_each_epoch(build):
    info = dataset_info.load(str(build))
    assert info.num_records('train') == 15
    epoch = small_splits.epoch_steps(info, 'train', 8)
    assert epoch.steps == 2 and epoch.small_split == 15
    batches = _batch_ids(build, 'train', 8, epochs=3, batches_per_epoch=epoch.steps)
    assert [len(ids) for ids in batches] == [8] * 6  # every batch full
    every = None
    for first in range(0, 6, 2):
        ids = batches[first] + batches[first + 1]
        assert len(set(ids)) == 15  # every image, one of them twice
        every = every or set(ids)
        assert set(ids) == every
    assert batches[0] != batches[2]  # each epoch in an order of its own


def test_a_resume_inside_a_small_epoch_finds_the_batches_of_a_run_never_stopped(build):
    whole = _batch_ids(build, 'train', 8, epochs=3, batches_per_epoch=2)
    for epoch, skip in ((0, 1), (1, 1), (2, 1), (1, 0)):
        resumed = _batch_ids(
            build,
            'train',
            8,
            epochs=3,
            batches_per_epoch=2,
            start_epoch=epoch,
            skip_batches=skip,
        )
        assert resumed == whole[2 * epoch + skip :], (epoch, skip)


def test_two_workers_of_a_random_access_build_read_every_image_each_small_epoch(builds):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    data = builds['array_record']
    info = dataset_info.load(str(data))
    # 15 records on 2 workers are 8 and 7, at 4 each a step: 2 steps, the second worker's
    # last batch filled with one of its records again.
    epoch = small_splits.epoch_steps(info, 'train', 8, pipelines=2)
    assert epoch.steps == 2 and epoch.repeated == 1
    parts = []
    for worker in range(2):
        context = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=worker, num_replicas_in_sync=2
        )
        ids = _batch_ids(
            data, 'train', 8, epochs=2, batches_per_epoch=epoch.steps, input_context=context
        )
        assert [len(batch) for batch in ids] == [4] * 4
        parts.append([ids[0] + ids[1], ids[2] + ids[3]])
    for first, second in zip(*parts):  # each epoch: the workers' parts, disjoint, all 15
        assert not set(first) & set(second)
        assert len(set(first) | set(second)) == 15


def test_a_share_a_record_over_full_batches_is_still_read_whole(builds):
    info = dataset_info.load(str(builds['array_record']))
    # 21 records on 2 workers are 11 and 10, at 2 each a step: 6 steps (not 5, which would
    # leave one of the first worker's records out of every epoch).
    epoch = small_splits.epoch_steps(info, 'larger', 4, pipelines=2)
    assert epoch.steps == 6 and epoch.repeated == 3


def test_a_split_of_ten_batches_or_more_trains_as_before(build):
    info = dataset_info.load(str(build))
    assert info.num_records('larger') == 21
    epoch = small_splits.epoch_steps(info, 'larger', 2)
    assert epoch == small_splits.EpochSteps(10)  # the remainder dropped, as before
    assert epoch.steps == input_pipeline.steps_per_epoch(info, 'larger', 2)
    assert epoch.note() == {}
    cut = _batch_ids(build, 'larger', 2, epochs=2, batches_per_epoch=epoch.steps)
    assert cut == _batch_ids(build, 'larger', 2, epochs=2)  # the same batches
    assert len({i for ids in cut[:10] for i in ids}) == 20


def _train(data, job_dir, monkeypatch, *flags):
    """(metrics.json of a 2-epoch run at batch 8, [the schedule floor each optimizer got] and
    then [the adapt_steps of each set_trainable call])."""
    floors = []
    original = recipe.schedule
    monkeypatch.setattr(recipe, 'schedule', lambda *args: floors.append(args[3]) or original(*args))
    marks = recipe.set_trainable
    monkeypatch.setattr(
        recipe, 'set_trainable', lambda *args: floors.append(args[3]) or marks(*args)
    )
    config = config_lib.parse_train_args(
        ['--data', str(data), '--job-dir', str(job_dir), '--image-size', '16']
        + ['--batch-size', '8', '--epochs', '2', '--checkpoint-every', '0', *flags]
    )
    metrics = train_lib.train(config)
    written = json.loads((job_dir / 'metrics.json').read_text())
    assert metrics['small_split'] == written['small_split']
    assert np.isfinite(written['val_loss'])
    return written, floors


def test_a_small_split_trains_every_image_and_fine_tunes_on_a_longer_schedule(
    builds, tmp_path, monkeypatch
):
    scratch, floors = _train(builds['tfrecord'], tmp_path / 'scratch', monkeypatch)
    # From random weights: the cosine of the run's own length (and BatchNorm trains anyway).
    assert floors == [0, 0, 0]
    assert scratch['steps_per_epoch'] == 2 and scratch['steps'] == 4
    assert scratch['small_split'] == (
        '15 training images, fewer than 10 batches: 2 steps an epoch with every image in it '
        '(1 again to fill the last batch)'
    )
    started = ['--init-from', str(tmp_path / 'scratch'), '--frozen-epochs', '1']
    tuned, floors = _train(builds['tfrecord'], tmp_path / 'tuned', monkeypatch, *started)
    # Set up, then the frozen phase and the whole phase: its 2 steps, too few for BatchNorm to
    # settle (recipe's test), are what each call is told.
    assert floors == [2, small_splits.SCHEDULE_STEPS, 2, 2]
    assert tuned['steps'] == 4
    assert tuned['small_split'].endswith(
        "; each phase's warm-up and cosine laid over 500 steps at least, BatchNorm layers "
        'adapting where they settle'
    )


def test_the_schedule_floor_is_for_a_small_split_started_from_weights_alone(builds):
    info = dataset_info.load(str(builds['tfrecord']))
    floor = lambda *args: small_splits.epoch_steps(info, *args).min_schedule_steps
    assert floor('train', 8, 1, 0, True) == 500
    assert floor('train', 8, 1, 0, False) == 0
    assert floor('larger', 2, 1, 0, True) == 0
    adapts = lambda *args: small_splits.epoch_steps(info, *args).adapts_batch_norm
    assert adapts('train', 8, 1, 0, True)
    assert not adapts('train', 8, 1, 0, False) and not adapts('larger', 2, 1, 0, True)
