"""The build's tf.Transform analysis, end to end: a build of a few hundred generated images of
several sizes and formats on worker processes, its statistics against NumPy, its label ids
against dataset.json, and the served model against the trainer's own evaluation."""

import bisect
import json
import logging

import numpy as np
import pytest
from PIL import Image

from imageshards import features
from imageshards import tfrecord
from imageshards import transform as transform_lib
from pipelines import analyze
from pipelines import build
from trainer import export
from trainer import input as input_lib
from trainer import transform
from trainer.dataset_info import DatasetInfo
from trainer.model import build_model

import images_for_tests as imgs

CLASSES = ('apple', 'banana', 'cherry', 'date')
SIZES = ((24, 32), (40, 40), (64, 48), (30, 90), (120, 80))  # (height, width)
ANALYSIS_SIZE = 16


def _write_images(root, per_class):
    """JPEGs (some greyscale, some EXIF-rotated) and PNGs (some with alpha) of several sizes."""
    for c, name in enumerate(CLASSES):
        (root / name).mkdir(parents=True)
        for i in range(per_class):
            index = c * 1000 + i
            size = SIZES[index % len(SIZES)]
            kind = index % 5
            if kind == 4:
                data = imgs.exif_rotated_jpeg(index, size=size, class_index=c)
            elif kind == 3:
                data = imgs.encode(
                    Image.fromarray(imgs.pixels(index, c, size)).convert('RGBA'), 'PNG'
                )
            elif kind == 2:
                data = imgs.png(index, c, size)
            elif kind == 1:
                data = imgs.encode(
                    Image.fromarray(imgs.pixels(index, c, size)).convert('L'), 'JPEG'
                )
            else:
                data = imgs.jpeg(index, c, size)
            suffix = 'png' if kind in (2, 3) else 'jpg'
            (root / name / f'{i:04d}.{suffix}').write_bytes(data)


@pytest.fixture(scope='module')
def analyzed(tmp_path_factory):
    root = tmp_path_factory.mktemp('analysis_tree')
    _write_images(root, 75)  # 300 images
    out = tmp_path_factory.mktemp('analysis_build') / 'out'
    dataset = build.run(
        [
            '--input',
            str(root),
            '--output',
            str(out),
            '--splits',
            'train=0.7,val=0.3',
            '--num-shards',
            '3',
            '--analysis-size',
            str(ANALYSIS_SIZE),
            '--direct_running_mode=multi_processing',
            '--direct_num_workers=2',
        ]
    )
    return out, dataset


def _records(out, dataset, split):
    for shard in dataset['splits'][split]['shards']:
        with open(out / shard['path'], 'rb') as f:
            for record in tfrecord.read_records(f, shard['path']):
                yield features.example_class().FromString(record).features.feature


def _reference_pixels(path):
    """The specification, written out: Pillow's decode (a JPEG at the reduced scale that keeps
    the analysis size), EXIF orientation, RGB, bilinear resize to the analysis size."""
    image = Image.open(path)
    if image.format == 'JPEG' and image.getexif().get(0x0112, 1) == 1:
        width, height = image.size
        image.draft(
            image.mode,
            tuple(max(1, side // 8, min(side, ANALYSIS_SIZE)) for side in (width, height)),
        )
    image.load()
    rotate = {6: Image.Transpose.ROTATE_270}.get(image.getexif().get(0x0112, 1))
    if rotate is not None:
        image = image.transpose(rotate)
    small = image.convert('RGB').resize((ANALYSIS_SIZE, ANALYSIS_SIZE), Image.Resampling.BILINEAR)
    return np.asarray(small, dtype=np.float64).reshape(-1, 3)


@pytest.mark.slow
def test_statistics_equal_numpy_over_the_train_split(analyzed, tf):
    out, dataset = analyzed
    train = list(_records(out, dataset, 'train'))
    pixels = np.concatenate(
        [_reference_pixels(r[features.FILENAME].bytes_list.value[0].decode()) for r in train]
    )
    heights = np.array([r[features.HEIGHT].int64_list.value[0] for r in train])
    widths = np.array([r[features.WIDTH].int64_list.value[0] for r in train])
    mean, std = pixels.mean(axis=0), pixels.std(axis=0)
    summary = dataset['analysis']
    assert summary['num_images'] == len(train) == dataset['splits']['train']['num_records']
    np.testing.assert_allclose(summary['pixel_mean'], mean, atol=1e-3)
    np.testing.assert_allclose(summary['pixel_std'], std, atol=1e-3)
    assert summary['height'] == {
        'min': heights.min(),
        'median': np.median(heights),
        'max': heights.max(),
    }
    assert summary['width'] == {
        'min': widths.min(),
        'median': np.median(widths),
        'max': widths.max(),
    }
    assert len(set(zip(heights, widths))) > 3  # sizes vary, EXIF rotation swaps some
    expected_bins = np.bincount(
        [bisect.bisect_right(analyze.ASPECT_EDGES, w / h) for h, w in zip(heights, widths)],
        minlength=len(analyze.ASPECT_EDGES) + 1,
    )
    assert summary['aspect_ratio_histogram']['counts'] == expected_bins.tolist()
    assert summary['label_counts'] == dataset['splits']['train']['class_counts']
    # The transform graph holds the same statistics: pixel p -> (p - mean) / std.
    output = transform.load(DatasetInfo.load(str(out)))
    probe = tf.constant([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    normalized = (
        output.transform_raw_features({transform_lib.PIXEL: probe})[transform_lib.PIXEL_NORMALIZED]
        .numpy()
        .astype(np.float64)
    )
    graph_std = 1 / (normalized[1] - normalized[0])
    np.testing.assert_allclose(graph_std, std, atol=1e-3)
    np.testing.assert_allclose(-normalized[0] * graph_std, mean, atol=1e-3)
    # ... also recorded with the TFT output.
    recorded = json.loads((out / 'transform_fn' / 'assets.extra' / 'analysis.json').read_text())
    assert recorded == summary


@pytest.mark.slow
def test_label_ids_are_those_of_dataset_json(analyzed, tf):
    out, dataset = analyzed
    assert dataset['labels'] == list(CLASSES)
    output = transform.load(DatasetInfo.load(str(out)))
    assert transform.class_names(output) == dataset['labels']
    names = tf.constant([*reversed(dataset['labels']), 'unknown'])
    ids = output.transform_raw_features({transform_lib.LABEL: names})[transform_lib.LABEL_ID]
    assert ids.numpy().tolist() == [3, 2, 1, 0, -1]
    for record in _records(out, dataset, 'val'):
        text = record[features.LABEL_TEXT].bytes_list.value[0].decode()
        assert dataset['labels'].index(text) == record[features.LABEL].int64_list.value[0]


@pytest.mark.slow
def test_served_model_matches_the_evaluation_pipeline_on_raw_bytes(analyzed, tf, tmp_path):
    out, dataset = analyzed
    info = DatasetInfo.load(str(out))
    output = transform.load(info)
    image_size = (24, 24)
    model = build_model('small_cnn', info.num_classes, image_size, transform_output=output)
    path = export.export_saved_model(
        model, transform.class_names(output), image_size, str(tmp_path / 'model')
    )
    served = tf.saved_model.load(path).signatures['serving_default']
    # One shard, so that the evaluation pipeline reads records in file order.
    shard = dataset['splits']['val']['shards'][0]
    single = DatasetInfo(
        info.data_dir,
        info.format,
        info.labels,
        {'val': {**dataset['splits']['val'], 'shards': [shard]}},
        info.counts,
        info.raw,
    )
    evaluation = input_lib.make_dataset(
        str(out), 'val', 8, training=False, image_size=image_size, info=single
    )
    expected = np.concatenate([model(images, training=False).numpy() for images, _ in evaluation])
    encoded = [
        r[features.ENCODED].bytes_list.value[0]
        for r in _records(out, {'splits': {'val': {'shards': [shard]}}}, 'val')
    ]
    outputs = served(image_bytes=tf.constant(encoded))
    assert len(encoded) == len(expected) > 10
    np.testing.assert_allclose(outputs['probabilities'].numpy(), expected, atol=1e-5)
    # The normalization is not the fallback's scaling: the model sees centred pixels.
    normalize = model.get_layer('normalize')
    first = next(iter(evaluation))[0]
    assert abs(float(tf.reduce_mean(normalize(first)))) < 1.0


def test_without_analysis_no_transform_and_the_trainer_scales(tmp_path, caplog, tf):
    imgs.write_tree(tmp_path / 'tree', 4, ('a', 'b'))
    out = tmp_path / 'out'
    dataset = build.run(
        [
            '--input',
            str(tmp_path / 'tree'),
            '--output',
            str(out),
            '--no-analyze',
            '--direct_running_mode=in_memory',
        ]
    )
    assert 'analysis' not in dataset
    assert not (out / 'transform_fn').exists() and not (out / 'transformed_metadata').exists()
    with caplog.at_level(logging.INFO):
        assert transform.load(DatasetInfo.load(str(out))) is None
    assert [r.message for r in caplog.records if 'no transform_fn' in r.message]
    model = build_model('small_cnn', 2, (8, 8), transform_output=None)
    assert model.get_layer('scale') is not None
