"""The build's tf.Transform analysis, end to end: a build of a few hundred generated images of
several sizes and formats on worker processes, its statistics against NumPy, its label ids
against dataset.json, and the served model against the trainer's own evaluation."""

import bisect
import json
import logging

import numpy as np
import pytest
from PIL import Image

from imageshards.kinds import example_bytes
from imageshards.kinds import features
from imageshards.shard_formats import tfrecord
from pipelines import launcher
from pipelines.analysis import analyze
from pipelines.writing import sample as sample_lib
from trainer import dataset_info
from trainer import export
from trainer import input_pipeline
from trainer import tft_output
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
    dataset = launcher.run(
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
        yield from _records_of(out, shard)


def _reference_pixels(path):
    """The specification, written out: Pillow's decode (a JPEG at the reduced scale that keeps
    the analysis size), EXIF orientation, RGB, bilinear resize to the analysis size."""
    image = Image.open(path)
    if image.format == 'JPEG':
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


def _value(record, key):
    feature = record[key]
    return getattr(feature, feature.WhichOneof('kind')).value[0]


@pytest.mark.slow
def test_statistics_equal_numpy_over_the_train_split(analyzed):
    out, dataset = analyzed
    train = list(_records(out, dataset, 'train'))
    pixels = np.concatenate(
        [_reference_pixels(_value(r, features.FILENAME).decode()) for r in train]
    )
    heights = np.array([_value(r, features.HEIGHT) for r in train])
    widths = np.array([_value(r, features.WIDTH) for r in train])
    summary = dataset['analysis']
    # A split smaller than the sample is measured whole: exact, without error.
    assert summary['num_images'] == len(train) == dataset['splits']['train']['num_records']
    assert summary['sample'] == {**summary['sample'], 'size': len(train), 'of': len(train)}
    np.testing.assert_allclose(summary['pixel_mean'], pixels.mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(summary['pixel_std'], pixels.std(axis=0), atol=1e-5)
    assert summary['pixel_mean_se'] == summary['pixel_std_se'] == [0.0] * 3
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
    recorded = json.loads((out / 'transform_fn' / 'assets.extra' / 'analysis.json').read_text())
    assert recorded == summary


def test_a_sample_is_the_first_records_of_each_shard_and_its_errors_cover_the_split(tmp_path):
    root = tmp_path / 'tree'
    _write_images(root, 40)  # 160 images
    out = tmp_path / 'out'
    dataset = launcher.run(
        ['--input', str(root), '--output', str(out), '--analysis-sample', '40', '--seed', '3']
        + ['--num-shards', '3', '--analysis-size', str(ANALYSIS_SIZE)]
        + ['--direct_running_mode=in_memory']
    )
    summary = dataset['analysis']
    assert summary['sample']['size'] == 40 and summary['sample']['of'] == 160
    shards = [
        [_value(r, features.FILENAME).decode() for r in _records_of(out, shard)]
        for shard in dataset['splits']['train']['shards']
    ]
    assert [len(paths) for paths in shards] == [54, 53, 53]
    # 40 spread as the records are: the first shard, one record larger, measures one more.
    counts = [sample_lib.sample_count(160, 3, index, 40) for index in range(3)]
    assert counts == [14, 13, 13]
    chosen = [path for paths, n in zip(shards, counts) for path in paths[:n]]
    sample = np.stack([_reference_pixels(path) for path in chosen])  # [images, pixels, 3]
    np.testing.assert_allclose(summary['pixel_mean'], sample.reshape(-1, 3).mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(summary['pixel_std'], sample.reshape(-1, 3).std(axis=0), atol=1e-5)
    # The standard error of the mean, from the images' means, with the finite population
    # correction; and the whole split lies within a few of them.
    image_means = sample.mean(axis=1)
    fpc = (160 - 40) / (160 - 1)
    expected_se = image_means.std(axis=0, ddof=1) * np.sqrt(fpc / 40)
    np.testing.assert_allclose(summary['pixel_mean_se'], expected_se, rtol=1e-4)
    everything = np.concatenate([_reference_pixels(path) for paths in shards for path in paths])
    assert np.all(np.abs(everything.mean(axis=0) - summary['pixel_mean']) < 4 * expected_se)
    assert np.all(
        np.abs(everything.std(axis=0) - summary['pixel_std'])
        < 4 * np.array(summary['pixel_std_se'])
    )
    assert all(se > 0 for se in summary['pixel_std_se'])


def test_a_sample_never_asks_a_shard_for_more_records_than_it_holds():
    for num_records in range(1, 60):
        for num_shards in range(1, 9):
            held = [num_records // num_shards + (i < num_records % num_shards) for i in range(9)]
            for size in (1, 7, num_records - 1, num_records, num_records + 5):
                counts = [
                    sample_lib.sample_count(num_records, num_shards, i, size)
                    for i in range(num_shards)
                ]
                assert sum(counts) == min(size, num_records)
                assert all(0 <= n <= held[i] for i, n in enumerate(counts))


def _records_of(out, shard):
    with open(out / shard['path'], 'rb') as f:
        for record in tfrecord.read_records(f, shard['path']):
            yield example_bytes.example_class().FromString(record).features.feature


def _serialized(out, dataset, split):
    for shard in dataset['splits'][split]['shards']:
        with open(out / shard['path'], 'rb') as f:
            yield from tfrecord.read_records(f, shard['path'])


@pytest.mark.slow
def test_tfx_style_code_parses_records_and_transforms_them(analyzed, tf):
    """What TFX's Trainer does with a Transform output, from outside this package."""
    import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel

    out, dataset = analyzed
    output = tft.TFTransformOutput(str(out))
    serialized = list(_serialized(out, dataset, 'val'))
    raw = tf.io.parse_example(tf.constant(serialized), output.raw_feature_spec())
    transformed = output.transform_features_layer()(raw)
    size = dataset['analysis']['transform_image_size']
    assert transformed['image'].shape == (len(serialized), size, size, 3)
    assert transformed['label'].numpy().tolist() == raw[features.LABEL].numpy().tolist()
    mean = np.array(dataset['analysis']['pixel_mean'], np.float32)
    std = np.array(dataset['analysis']['pixel_std'], np.float32)
    np.testing.assert_allclose(
        transformed['pixel_mean'].numpy(), np.tile(mean, (len(serialized), 1))
    )
    np.testing.assert_allclose(transformed['pixel_std'].numpy(), np.tile(std, (len(serialized), 1)))
    # The image: the record's pixels resized to size x size, normalized by those constants.
    for i in (0, len(serialized) - 1):
        encoded = raw[features.ENCODED][i]
        pixels = tf.image.resize(
            tf.io.decode_jpeg(encoded, channels=3, dct_method='INTEGER_ACCURATE')
            if tf.io.is_jpeg(encoded)
            else tf.io.decode_image(encoded, channels=3, expand_animations=False),
            [size, size],
            antialias=True,
        )
        np.testing.assert_allclose(
            transformed['image'][i].numpy(), (pixels.numpy() - mean) / std, atol=1e-4
        )
    # Label ids are those of dataset.json, also for names given as text.
    assert tft_output.class_names(output) == dataset['labels']
    names = tf.constant([*reversed(dataset['labels']), 'unknown'])
    ids = output.transform_raw_features({features.LABEL_TEXT: names})['label']
    assert ids.numpy().tolist() == [3, 2, 1, 0, -1]


@pytest.mark.slow
def test_steps_in_the_pipeline_write_the_same_analysis(analyzed, tmp_path, tf):
    """As on Dataflow: the tf.Transform output written by pipeline steps on the workers."""
    import tensorflow_transform as tft  # pylint: disable=import-outside-toplevel

    out, dataset = analyzed
    again = tmp_path / 'in-pipeline'
    rebuilt = launcher.run(
        [
            '--input',
            dataset['input'],
            '--output',
            str(again),
            '--splits',
            'train=0.7,val=0.3',
            '--num-shards',
            '3',
            '--analysis-size',
            str(ANALYSIS_SIZE),
            '--analysis-in-pipeline',
            '--direct_running_mode=multi_processing',
            '--direct_num_workers=2',
        ]
    )
    assert rebuilt['analysis'] == dataset['analysis']
    assert rebuilt['splits'] == dataset['splits']
    serialized = tf.constant(list(_serialized(out, dataset, 'val'))[:6])
    results = []
    for build_dir in (out, again):
        output = tft.TFTransformOutput(str(build_dir))
        raw = tf.io.parse_example(serialized, output.raw_feature_spec())
        results.append(output.transform_features_layer()(raw))
    for key in ('image', 'label', 'pixel_mean', 'pixel_std'):
        np.testing.assert_array_equal(results[0][key].numpy(), results[1][key].numpy())


@pytest.mark.slow
def test_served_model_matches_the_evaluation_pipeline_on_raw_bytes(analyzed, tf, tmp_path):
    out, dataset = analyzed
    info = dataset_info.load(str(out))
    output = tft_output.load(info)
    image_size = (24, 24)
    model = build_model('small_cnn', info.num_classes, image_size, transform_output=output)
    path = export.export_saved_model(
        model, tft_output.class_names(output), image_size, str(tmp_path / 'model')
    )
    served = tf.saved_model.load(path).signatures['serving_default']
    # One shard, so that the evaluation pipeline reads records in file order.
    shard = dataset['splits']['val']['shards'][0]
    single = info.with_splits({'val': {**dataset['splits']['val'], 'shards': [shard]}})
    evaluation = input_pipeline.make_dataset(
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
    dataset = launcher.run(
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
        assert tft_output.load(dataset_info.load(str(out))) is None
    assert [r.message for r in caplog.records if 'no transform_fn' in r.message]
    model = build_model('small_cnn', 2, (8, 8), transform_output=None)
    assert model.get_layer('scale') is not None


@pytest.mark.slow
def test_a_model_with_the_transform_saves_and_loads_in_the_keras_format(analyzed, tf, tmp_path):
    import keras  # pylint: disable=import-outside-toplevel

    out, _ = analyzed
    output = tft_output.load(dataset_info.load(str(out)))
    model = build_model('small_cnn', 4, (16, 16), transform_output=output)
    assert 'TransformPixels' in model.to_json()  # what TensorBoard's graph needs
    images = tf.cast(tf.random.stateless_uniform([3, 16, 16, 3], [1, 2], 0, 255), tf.uint8)
    model.save(tmp_path / 'model.keras')
    loaded = keras.saving.load_model(tmp_path / 'model.keras')
    np.testing.assert_allclose(loaded(images).numpy(), model(images).numpy(), atol=1e-6)
    normalized = model.get_layer('normalize')(images).numpy()
    analysis = json.loads((out / 'dataset.json').read_text())['analysis']
    expected = (images.numpy() - np.array(analysis['pixel_mean'])) / np.array(analysis['pixel_std'])
    np.testing.assert_allclose(normalized, expected, rtol=1e-5, atol=1e-4)
