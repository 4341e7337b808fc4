"""report and preview of a multi-label build: label sets, pairs and how evenly labels spread over
files and batches, beside the write-up's baseline and a random order; captions with every
label."""

import collections
import itertools
import json

import pytest

from bench import labelled_build
from imageshards_cli import preview
from imageshards_cli import report

import multilabel_builds


@pytest.fixture(scope='module')
def sorted_build(tmp_path_factory):
    """A multi-label build whose listing order is sorted by label set (the worst order for a
    buffer shuffle), all of it the train split."""
    labels = sorted(
        (multilabel_builds.colour_labels(i) for i in range(128)), key=lambda s: (len(s), s)
    )
    images = [multilabel_builds.colour_jpeg(i, names) for i, names in enumerate(labels)]
    out = str(tmp_path_factory.mktemp('sorted') / 'out')
    return labelled_build.write(out, images, labels, ['train'] * len(labels), num_shards=4), labels


def test_report_measures_label_sets_and_their_spread_beside_a_baseline(sorted_build, tmp_path):
    out, labels = sorted_build
    path, metrics = report.report(
        out,
        'train',
        str(tmp_path / 'report'),
        epochs=1,
        batch_size=16,
        seed=0,
        baseline_buffer=None,
    )
    dataset = json.load(open(f'{out}/dataset.json', encoding='utf-8'))
    assert metrics['label_cardinality'] == dataset['splits']['train']['label_cardinality']
    assert metrics['unlabeled'] == sum(not names for names in labels)
    pairs = collections.Counter(p for names in labels for p in itertools.combinations(names, 2))
    assert [tuple(p) for p in metrics['top_label_pairs']] == [
        (a, b, n) for (a, b), n in pairs.most_common(len(metrics['top_label_pairs']))
    ]
    ours, base, rand = metrics['imageshards'], metrics['baseline'], metrics['random']
    # The build's files are stratified; the baseline's are the sorted listing cut in pieces.
    assert ours['label_distribution_over_files'] < rand['label_distribution_over_files']
    assert base['label_distribution_over_files'] > 2 * rand['label_distribution_over_files']
    # Batches of the trainer's order are as mixed as a random order's; the baseline's are not.
    assert ours['label_distribution_over_batches'] < base['label_distribution_over_batches'] / 2
    assert abs(ours['spearman_id_vs_position']) < 0.3 < base['spearman_id_vs_position']
    text = open(path, encoding='utf-8').read()
    assert '| label distribution over the batches of epoch 0 |' in text


def test_preview_captions_each_image_with_all_its_labels(sorted_build):
    out, labels = sorted_build
    grid = preview.training_images(out, 'train', count=12, seed=0)
    by_id = dict(enumerate(labels))
    for caption, image_id in zip(grid.captions, grid.ids):
        names = by_id[int(image_id)] or ['-']
        shown = caption.rsplit('\n', 1)[0].replace('\n', ', ').split(', ')
        assert shown == names, (caption, names)


def _manifest(root, form, count=48):
    """A multi-label manifest of `count` colour images in `form`: ours in JSONL, or a Vertex AI
    import file (CSV without a header, or JSONL), the first three quarters for training."""
    (root / 'img').mkdir(parents=True)
    lines = []
    for i in range(count):
        names = multilabel_builds.colour_labels(i)
        (root / f'img/{i:03d}.jpg').write_bytes(multilabel_builds.colour_jpeg(i, names))
        use, split = ('training', 'train') if i < count * 3 // 4 else ('validation', 'val')
        if form == 'jsonl':
            lines.append(json.dumps({'path': f'img/{i:03d}.jpg', 'labels': names, 'split': split}))
        elif form == 'vertex-csv':
            lines.append(','.join([use.upper(), f'img/{i:03d}.jpg', *names]))
        else:
            lines.append(
                json.dumps(
                    {
                        'imageGcsUri': f'img/{i:03d}.jpg',
                        'classificationAnnotations': [{'displayName': n} for n in names],
                        'dataItemResourceLabels': {'aiplatform.googleapis.com/ml_use': use},
                    }
                )
            )
    path = root / ('import.csv' if form == 'vertex-csv' else 'import.jsonl')
    path.write_text('\n'.join(lines) + '\n')
    return path


@pytest.mark.slow  # a build and an epoch of training on the CPU each: ~15 s
@pytest.mark.parametrize('form', ['jsonl', 'vertex-csv', 'vertex-jsonl'])
def test_a_jsonl_manifest_and_vertex_import_files_build_train_and_serve(tf, tmp_path, form):
    from pipelines import launcher  # pylint: disable=import-outside-toplevel
    from trainer import config as config_lib  # pylint: disable=import-outside-toplevel
    from trainer import train  # pylint: disable=import-outside-toplevel

    out = tmp_path / 'out'
    dataset = launcher.run(
        ['--input', str(_manifest(tmp_path / 'in', form)), '--output', str(out)]
        + ['--num-shards', '2', '--direct_running_mode=in_memory']
    )
    assert dataset['multi_label'] and list(dataset['splits']) == ['train', 'val']
    assert dataset['labels'] == list(multilabel_builds.COLOURS)
    config = config_lib.parse_train_args(
        ['--data', str(out), '--job-dir', str(tmp_path / 'job'), '--image-size', '32']
        + ['--batch-size', '16', '--epochs', '1', '--checkpoint-every', '0']
    )
    metrics = train.train(config)
    assert set(metrics['thresholds']) == set(multilabel_builds.COLOURS)
    served = tf.saved_model.load(config.resolved_model_dir).signatures['serving_default']
    image = multilabel_builds.colour_jpeg(0, ['red', 'blue'])
    outputs = served(image_bytes=tf.constant([image]))
    assert outputs['scores'].shape == outputs['predicted'].shape == (1, 4)
    assert outputs['classes'].numpy()[0].tolist() == [c.encode() for c in dataset['labels']]
