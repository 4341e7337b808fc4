"""`imageshards report` and its measures: hand-computed metrics, a label-sorted build against
the write-up's shuffle-buffer baseline, and the order it reports against the trainer's own."""

import csv
import itertools
import json
import math
import re

import numpy as np
import pytest
from PIL import Image

from imageshards_cli import main as cli
from imageshards_cli import shuffle_metrics as sm
from trainer import input_pipeline

CLASSES = 5
PER_CLASS = 400
BATCH = 20
EPOCHS = 2
SEED = 1

# The measures, on values small enough to compute by hand.


def test_ranks_and_spearman_by_hand():
    np.testing.assert_array_equal(sm.rankdata([10, 20, 20, 5]), [2, 3.5, 3.5, 1])
    # sum d^2 = 2: rho = 1 - 6 * 2 / (4 * (16 - 1)) = 0.8
    assert sm.spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    # Tied ranks [1.5, 1.5, 3.5, 3.5] against [1, 2, 3, 4]: cov 4, variances 4 and 5.
    assert sm.spearman([0, 0, 1, 1], [0, 1, 2, 3]) == pytest.approx(4 / math.sqrt(20))
    assert sm.spearman_id_vs_position([40, 30, 20, 10]) == pytest.approx(-1)
    assert math.isnan(sm.spearman([1, 1, 1], [1, 2, 3]))
    # Records in both epochs: 2 at positions 1 and 1, 3 at positions 2 and 0.
    assert sm.epoch_order_spearman([1, 2, 3], [3, 2, 4]) == pytest.approx(-1)
    assert sm.epoch_order_spearman([5, 6, 7, 8], [5, 6, 7, 8]) == pytest.approx(1)


def test_ideal_distinct_labels_by_hand_and_by_enumeration():
    # Two classes of 2, batches of 2: each is missing with C(2, 2) / C(4, 2) = 1/6.
    assert sm.ideal_distinct_labels([2, 2], 2) == pytest.approx(2 * (1 - 1 / 6))
    # Of 3 + 1, a pair always holds the big class; the single one with 1 - C(3, 2) / 6 = 1/2.
    assert sm.ideal_distinct_labels([3, 1], 2) == pytest.approx(1.5)
    assert sm.ideal_distinct_labels([3, 0, 1], 2) == pytest.approx(1.5)  # absent classes
    records = [0, 0, 0, 1, 1, 2]
    batches = list(itertools.combinations(records, 3))
    exact = np.mean([len(set(batch)) for batch in batches])
    assert sm.ideal_distinct_labels([3, 2, 1], 3) == pytest.approx(exact)
    with pytest.raises(ValueError, match='larger than'):
        sm.ideal_distinct_labels([2, 2], 5)


def test_distinct_labels_per_batch_leaves_the_tail_out():
    per_batch = sm.distinct_labels_per_batch([0, 0, 1, 2, 2, 2, 1], 3)
    np.testing.assert_array_equal(per_batch, [2, 1])


def test_kl_divergence_by_hand():
    # p = (3/4, 1/4) against (1/2, 1/2).
    expected = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    assert sm.kl_divergence([3, 1], [5, 5]) == pytest.approx(expected)
    assert sm.kl_divergence([4, 0], [1, 1]) == pytest.approx(math.log(2))  # 0 log 0 = 0
    assert sm.kl_divergence([2, 2], [1, 1]) == 0
    assert sm.kl_divergence([1, 1], [1, 0]) == math.inf  # a label the reference lacks


def test_window_label_kl_by_hand():
    labels = [0, 0, 1, 1, 0, 1, 0, 1]
    # Windows of 4 every 2: [0 0 1 1], [1 1 0 1], [0 1 0 1].
    kl = sm.window_label_kl(labels, [4, 4], window=4, stride=2)
    skewed = 0.25 * math.log(0.5) + 0.75 * math.log(1.5)
    np.testing.assert_allclose(kl, [0, skewed, 0], atol=1e-12)
    # Fewer records than a window: the whole sequence is one.
    np.testing.assert_allclose(sm.window_label_kl([0, 0, 0, 1], [2, 2], window=10), [skewed])


def test_random_order_measures_match_their_formulas():
    # A seeded uniformly random order: fixed numbers, no flakiness.
    counts = [100_000, 60_000, 30_000, 8_000, 2_000]
    labels = np.random.default_rng(7).permutation(np.repeat(np.arange(5), counts))
    distinct = sm.distinct_labels_per_batch(labels, 20).mean()
    assert distinct == pytest.approx(sm.ideal_distinct_labels(counts, 20), abs=0.02)
    window_kl = sm.window_label_kl(labels, counts).mean()
    assert window_kl == pytest.approx(sm.random_window_label_kl(counts), rel=0.2)
    assert sm.random_window_label_kl([1000, 1000]) == pytest.approx(1 / 2000 * 1000 / 1999)


def test_shard_spread_and_label_coverage_by_hand():
    assert sm.shard_class_spread([[3, 1], [1, 3]]) == pytest.approx(1)  # shares of 2
    assert sm.shard_class_spread([[2, 1], [4, 2]]) == pytest.approx(0)  # exactly proportional
    assert sm.records_until_all_labels([0, 0, 1, 0, 2, 1], 3) == 5
    assert sm.records_until_all_labels([0, 1, 1], 3) is None


# The command on a build of label-sorted inputs.


@pytest.fixture(scope='module')
def sorted_build(tmp_path_factory):
    """CLASSES x PER_CLASS tiny PNGs whose listing order is sorted by label, in 8 shards."""
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    root = tmp_path_factory.mktemp('sorted_tree')
    rng = np.random.default_rng(0)
    for label in range(CLASSES):
        folder = root / f'class_{label}'
        folder.mkdir()
        for i in range(PER_CLASS):
            pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f'{i:04d}.png')
    out = tmp_path_factory.mktemp('sorted') / 'out'
    launcher.run(
        ['--input', str(root), '--output', str(out), '--splits', 'train=1']
        + ['--num-shards', '8', '--seed', '3', '--direct_running_mode=in_memory']
    )
    return out


@pytest.fixture(scope='module')
def report_dir(sorted_build, tmp_path_factory):
    """The report of `sorted_build`, through the command line, with the trainer's settings
    from its YAML. The baseline buffer keeps the write-up's proportion by default."""
    out = tmp_path_factory.mktemp('report')
    config = out / 'train.yaml'
    config.write_text(f'model: small_cnn\nepochs: 30\nbatch_size: {BATCH}\nseed: {SEED}\n')
    status = cli.main(
        ['report', str(sorted_build), '--out', str(out), '--epochs', str(EPOCHS)]
        + ['--config', str(config)]
    )
    assert status == 0
    return out


def test_report_tells_a_real_shuffle_from_a_shuffle_buffer(report_dir):
    metrics = json.loads((report_dir / 'metrics.json').read_text())
    mine, baseline = metrics['imageshards'], metrics['baseline']
    n = CLASSES * PER_CLASS
    # The write-up's 10,000-record buffer for 70,000 records, and the YAML's training settings.
    assert metrics['baseline_buffer'] == round(n / 7) and not metrics['baseline_is_a_full_shuffle']
    assert (metrics['batch_size'], metrics['seed']) == (BATCH, SEED)
    assert mine['records_per_epoch'] == baseline['records_per_epoch'] == n
    # What a uniformly random order gives (4 standard deviations), against the listing's trace.
    assert abs(mine['spearman_id_vs_position']) <= 4 / math.sqrt(n)
    assert baseline['spearman_id_vs_position'] > 0.5
    assert baseline['epoch_order_spearman'] > 0.5
    ideal = sm.ideal_distinct_labels([PER_CLASS] * CLASSES, BATCH)
    assert mine['ideal_distinct_labels_per_batch'] == pytest.approx(ideal)
    assert mine['mean_distinct_labels_per_batch'] == pytest.approx(ideal, abs=0.1)
    assert baseline['mean_distinct_labels_per_batch'] < ideal - 1
    assert mine['max_window_label_kl'] < 0.05 < baseline['max_window_label_kl']
    assert mine['records_until_all_labels'] < 50 < baseline['records_until_all_labels']
    # The build's promise (within one of proportional), against the listing cut into 8 files.
    assert mine['shard_class_spread'] <= 1
    assert baseline['shard_class_spread'] >= PER_CLASS / 2


def test_order_csv_is_the_order_the_trainer_reads(report_dir, sorted_build):
    with open(report_dir / 'order.csv', newline='') as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ['epoch', 'position', 'id', 'label']
    # The trainer's pipeline, decoding (tiny) images: what order.csv says without decoding.
    dataset = input_pipeline.make_dataset(
        str(sorted_build),
        'train',
        BATCH,
        training=True,
        seed=SEED,
        image_size=(4, 4),
        with_ids=True,
        epochs=EPOCHS,
    )
    ids = np.concatenate([i.numpy() for _, _, i in dataset])
    labels = np.concatenate([y.numpy() for _, y, _ in dataset])
    per_epoch = len(ids) // EPOCHS
    expected = [
        (k // per_epoch, k % per_epoch, int(i), int(y)) for k, (i, y) in enumerate(zip(ids, labels))
    ]
    got = [(int(r['epoch']), int(r['position']), int(r['id']), int(r['label'])) for r in rows]
    assert got == expected


def test_figures_and_page(report_dir):
    page = (report_dir / 'report.md').read_text()
    for kind in ('ids', 'labels', 'distinct', 'shards'):
        for variant in ('imageshards', 'baseline'):
            name = f'{kind}_{variant}.png'
            assert f']({name})' in page
            with Image.open(report_dir / name) as image:
                assert image.size[0] >= 400 and image.size[1] >= 250
                colours = image.convert('RGB').getcolors(maxcolors=1 << 20)
                assert len(colours) > 20, name
    assert '| Spearman ρ of record id and read position, epoch 0 |' in page


@pytest.mark.parametrize(
    'fmt, options',
    [
        ('examples', {'augment': 'standard'}),
        ('paths', {}),
        ('examples', {'start_epoch': 1, 'skip_batches': 2}),
        ('examples', {'patches_per_image': 4, 'patch_size': 4, 'patch_shuffle_images': 8}),
    ],
)
def test_skipping_decodes_keeps_the_order(color_builds, fmt, options):
    common = dict(training=True, seed=4, image_size=(8, 8), epochs=2, **options)
    data = str(color_builds[fmt])
    decoded = input_pipeline.make_dataset(data, 'train', 8, with_ids=True, **common)
    undecoded = input_pipeline.make_dataset(data, 'train', 8, decode_images=False, **common)
    got = [(y.numpy().tolist(), i.numpy().tolist()) for y, i in undecoded]
    expected = [(y.numpy().tolist(), i.numpy().tolist()) for _, y, i in decoded]
    assert len(expected) > 10 and got == expected


def test_a_baseline_buffer_holding_the_split_is_called_a_full_shuffle(
    sorted_build, tmp_path, capsys
):
    status = cli.main(
        ['report', str(sorted_build), '--out', str(tmp_path), '--epochs', '1']
        + ['--baseline-buffer', '10000']
    )
    assert status == 0
    printed = capsys.readouterr().out
    assert re.search(r'^Spearman rho, id vs read position +-?\d', printed, re.M), printed
    assert 'distinct labels per batch of 20' in printed
    assert "note: the baseline's buffer of 10,000 records holds the whole split" in printed
    assert 'full shuffle' in (tmp_path / 'report.md').read_text()


def test_the_shard_heatmap_numbers_shards_and_labels_with_whole_numbers():
    from imageshards_cli import report_figures  # pylint: disable=import-outside-toplevel

    one_shard = report_figures._shard_figure(np.array([[3, 4]]), ['a', 'b'], 'one')  # pylint: disable=protected-access
    assert one_shard.axes[0].get_yticks().tolist() == [0]
    many = report_figures._shard_figure(np.ones((3, 30), int), [str(i) for i in range(30)], 'x')  # pylint: disable=protected-access
    ticks = many.axes[0].get_xticks()
    assert all(float(t).is_integer() for t in ticks)
