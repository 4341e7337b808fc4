"""Training on a detection build: the task follows the build (a build with masks trains
instance segmentation), the best epoch is chosen by val mask mAP (or mAP, or mIoU), metrics.json
says COCO's measures, the served model's boxes and masks are the evaluated ones, and a run
stopped mid-epoch resumes to the very weights of an uninterrupted one."""

import io
import json
import pathlib
import shutil

import keras
import numpy as np
import object_sets
import pytest
from PIL import Image

from imageshards.kinds import detection
from imageshards_cli import preview
from pipelines import launcher
from trainer import coco_metrics
from trainer import config as config_lib
from trainer import dataset_info
from trainer import distribute
from trainer import model as model_lib
from trainer import objects_evaluate
from trainer import objects_train
from trainer import segmenter
from trainer import train as train_lib
from trainer import warm_start

from build_commands import build_flags

FLAGS = ('--image-size', '64', '--batch-size', '4', '--checkpoint-every', '1')


@pytest.fixture(scope='module', name='coco_build')
def fixture_coco_build(tmp_path_factory):
    folder = tmp_path_factory.mktemp('coco')
    object_sets.write_coco(str(folder), images=24)
    out = folder / 'out'
    flags = build_flags(
        folder / 'annotations' / 'instances.json',
        out,
        '--no-analyze',
        splits='train=0.5,val=0.25,test=0.25',
        num_shards=1,
        seed=3,
        in_memory=True,
    )
    launcher.run(flags)
    return out


def _config(data, job_dir, *extra):
    return config_lib.parse_train_args(
        ['--data', str(data), '--job-dir', str(job_dir), *FLAGS, *extra]
    )


@pytest.fixture(scope='module', name='detector')
def fixture_detector(coco_build, tmp_path_factory):
    job_dir = tmp_path_factory.mktemp('detector')
    config = _config(coco_build, job_dir, '--epochs', '2')
    return config, train_lib.train(config)


def test_a_build_with_masks_trains_instance_segmentation_chosen_by_val_mask_map(detector):
    config, metrics = detector
    written = json.loads((pathlib.Path(config.job_dir) / 'metrics.json').read_text())
    assert written['task'] == 'instance_segmentation' and written['model'] == 'centernet'
    assert written['selected_by'] == 'val_mask_map'
    assert written['classes'] == list(object_sets.CLASSES)
    for name in ('map', 'map_50', 'map_75', 'map_small', 'map_medium', 'map_large'):
        assert 0.0 <= written[f'test_{name}'] <= 1.0 and f'val_{name}' in written
        assert 0.0 <= written[f'test_mask_{name}'] <= 1.0 and f'val_mask_{name}' in written
    assert written['best_epoch'] in (1, 2)
    assert metrics['steps'] == 2 * metrics['steps_per_epoch']


def test_detection_on_a_build_with_masks_trains_boxes_alone(coco_build, tmp_path):
    config = _config(coco_build, tmp_path / 'boxes', '--epochs', '1', '--task', 'detection')
    metrics = train_lib.train(config)
    assert metrics['task'] == 'detection' and metrics['selected_by'] == 'val_map'
    assert 0.0 <= metrics['test_map_50'] <= 1.0
    assert not [key for key in metrics if 'mask' in key]


def _test_images(tf, info):
    """The encoded images of the test split, in the order evaluation reads them."""
    [path] = info.shard_paths('test')
    spec = {'image/encoded': tf.io.FixedLenFeature([], tf.string)}
    return [
        tf.io.parse_single_example(record, spec)['image/encoded']
        for record in tf.data.TFRecordDataset(path)
    ]


def served_and_evaluated(tf, task, info, model, model_dir):
    """(the detections evaluation scores on the test split, the exported model's answer to its
    images): as many, and some detections among them."""
    evaluated = list(objects_evaluate.Scorer(task, info, 'test', 4).detections(model))
    served = tf.saved_model.load(model_dir).signatures['serving_default']
    answer = served(image_bytes=tf.stack(_test_images(tf, info)))
    assert len(evaluated) == len(answer['num_detections']) == info.num_records('test')
    assert sum(len(found[1]) for found in evaluated) > 0
    return evaluated, answer


def assert_served_as_evaluated(answer, task, index, boxes, scores, classes) -> int:
    """The served boxes, scores, classes and class names of image `index` are the evaluated
    ones; returns how many."""
    n = int(answer['num_detections'][index])
    assert n == len(boxes)
    np.testing.assert_allclose(answer['detection_boxes'][index, :n], boxes, atol=1e-5)
    np.testing.assert_allclose(answer['detection_scores'][index, :n], scores, atol=1e-5)
    assert answer['detection_classes'][index, :n].numpy().tolist() == classes.tolist()
    names = [name.decode() for name in answer['detection_class_names'][index, :n].numpy()]
    assert names == [task.classes[c] for c in classes]
    return n


def test_the_served_boxes_classes_scores_and_masks_are_the_evaluated_ones(detector, coco_build, tf):
    config, _ = detector
    info = dataset_info.load(str(coco_build))
    task = objects_train.task_for(config, info)
    model = objects_train.build(task)[0]
    copied = warm_start.apply(model, config.job_dir, config, objects_train.heads(task))
    assert not copied['new_layers']  # the exported weights
    class_layers = {layer.name for layer in model.layers if model_lib.is_head(layer.name)}
    assert class_layers == set(objects_train.heads(task))  # the heatmap's stage scores too
    assert len(class_layers) == 5
    evaluated, answer = served_and_evaluated(tf, task, info, model, config.resolved_model_dir)
    for index, boxes, scores, classes, masks in evaluated:
        n = assert_served_as_evaluated(answer, task, index, boxes, scores, classes)
        assert masks.shape == (n, 28, 28) and answer['detection_masks'].shape[2:] == (28, 28)
        np.testing.assert_allclose(answer['detection_masks'][index, :n], masks, atol=1e-5)


def _checkpoint_weights(tf, job_dir):
    reader = tf.train.load_checkpoint(str(job_dir / 'checkpoints'))
    names = [
        name
        for name in reader.get_variable_to_shape_map()
        if name.endswith('VARIABLE_VALUE') and not name.startswith('save_counter')
    ]
    return {name: reader.get_tensor(name) for name in names}


def test_a_run_stopped_mid_epoch_resumes_to_the_weights_of_an_uninterrupted_one(
    coco_build, detector, tf, tmp_path
):
    config, metrics = detector
    whole = _checkpoint_weights(tf, pathlib.Path(config.job_dir))
    steps = metrics['steps']
    cut = tmp_path / 'cut'
    shutil.copytree(config.job_dir, cut)
    stopped = steps - 2  # inside the second epoch (3 steps an epoch)
    assert stopped > metrics['steps_per_epoch']
    checkpoints = cut / 'checkpoints'
    for number in (steps - 1, steps):
        for path in checkpoints.glob(f'ckpt-{number}.*'):
            path.unlink()
    tf.compat.v1.train.update_checkpoint_state(
        str(checkpoints), str(checkpoints / f'ckpt-{stopped}')
    )
    (cut / 'metrics.json').unlink()
    resumed = train_lib.train(_config(coco_build, cut, '--epochs', '2'))
    assert resumed['steps'] == steps
    again = _checkpoint_weights(tf, cut)
    assert again.keys() == whole.keys()
    for name, value in whole.items():
        if isinstance(value, bytes):
            continue
        np.testing.assert_allclose(again[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_semantic_segmentation_of_a_build_with_masks_scores_mean_iou(coco_build, tmp_path):
    config = _config(
        coco_build, tmp_path / 'seg', '--epochs', '1', '--task', 'semantic_segmentation'
    )
    metrics = train_lib.train(config)
    assert metrics['task'] == 'semantic_segmentation' and metrics['model'] == 'segmenter'
    assert metrics['classes'] == ['background', *object_sets.CLASSES]
    assert metrics['selected_by'] == 'val_mean_iou'
    assert 0.0 < metrics['test_mean_iou'] <= 1.0
    assert 'background' in metrics['test_iou_per_class']
    # Every class layer (the 1/4 scores and each stage's) is a head of the job's classes, so a
    # run on the same classes starts from all of them and one on others from none.
    task = objects_train.task_for(config, dataset_info.load(str(coco_build)))
    model = objects_train.build(task)[0]
    class_layers = {layer.name for layer in model.layers if model_lib.is_head(layer.name)}
    assert class_layers == set(objects_train.heads(task)) == set(segmenter.HEADS)
    assert len(class_layers) == 4
    copied = warm_start.apply(model, config.job_dir, config, objects_train.heads(task))
    assert not copied['new_layers']
    others = {name: ['x', *classes[1:]] for name, classes in objects_train.heads(task).items()}
    copied = warm_start.apply(model, config.job_dir, config, others)
    assert sorted(copied['new_layers']) == sorted(class_layers)


def test_mixed_precision_trains_in_float16_and_keeps_float32_weights_and_outputs(
    coco_build, tf, tmp_path, caplog
):
    """--mixed-precision on (auto on a GPU): the layers compute in float16 with a scaled loss;
    the weights, the checkpoints and what the served model answers stay float32."""
    config = _config(coco_build, tmp_path / 'mixed', '--epochs', '1', '--mixed-precision', 'on')
    caplog.set_level('INFO', logger='trainer.objects_train')
    try:
        metrics = train_lib.train(config)
    finally:
        keras.mixed_precision.set_global_policy('float32')  # the tests after this one's
    assert 'mixed_float16' in caplog.text
    assert metrics['steps'] == metrics['steps_per_epoch']
    for key in ('loss', 'heatmap_loss', 'boxes_loss', 'masks_loss'):
        assert np.isfinite(metrics[key]), key
    assert 0.0 <= metrics['test_mask_map'] <= 1.0
    dtypes = tf.train.load_checkpoint(str(tmp_path / 'mixed' / 'checkpoints'))
    dtypes = dtypes.get_variable_to_dtype_map()
    kernels = [name for name in dtypes if name.startswith('best/weights/') and 'kernel' in name]
    assert kernels and {dtypes[name] for name in kernels} == {tf.float32}
    assert tf.float16 not in dtypes.values()
    assert 'optimizer/dynamic_scale/.ATTRIBUTES/VARIABLE_VALUE' in dtypes  # a resume keeps it
    info = dataset_info.load(str(coco_build))
    served = tf.saved_model.load(config.resolved_model_dir).signatures['serving_default']
    answer = served(image_bytes=tf.stack(_test_images(tf, info)))
    for key in ('detection_boxes', 'detection_scores', 'detection_masks'):
        assert answer[key].dtype == tf.float32, key
        assert np.isfinite(answer[key].numpy()).all(), key


def test_a_model_of_another_task_is_refused_in_one_line(coco_build, tmp_path):
    info = dataset_info.load(str(coco_build))
    with pytest.raises(ValueError, match='an? instance_segmentation run trains centernet'):
        objects_train.task_for(_config(coco_build, tmp_path, '--model', 'resnet50'), info)
    with pytest.raises(ValueError, match='multiples of 32'):
        objects_train.task_for(_config(coco_build, tmp_path, '--image-size', '100'), info)
    with pytest.raises(ValueError, match='or deeplabv3_plus'):
        task = '--task', 'semantic_segmentation'
        objects_train.task_for(_config(coco_build, tmp_path, *task, '--model', 'centernet'), info)


def test_perfect_boxes_score_a_map_of_one_and_a_missed_class_lowers_it(coco_build):
    info = dataset_info.load(str(coco_build))
    truth = coco_metrics.ground_truth(info, 'val', info.labels)
    annotations = truth.dataset['annotations']
    assert len(annotations) > 0 and all(a['area'] > 0 for a in annotations)
    perfect = [
        {
            'image_id': a['image_id'],
            'category_id': a['category_id'],
            'bbox': a['bbox'],
            'score': 1.0,
        }
        for a in annotations
    ]
    scored = coco_metrics.evaluate(truth, perfect, info.labels)
    assert scored['map'] == pytest.approx(1.0) and scored['map_50'] == pytest.approx(1.0)
    assert set(scored['map_per_class']) == {info.labels[a['category_id']] for a in annotations}
    missed = annotations[0]['category_id']
    fewer = [p for p in perfect if p['category_id'] != missed]
    assert coco_metrics.evaluate(truth, fewer, info.labels)['map_per_class'][
        info.labels[missed]
    ] == pytest.approx(0.0)


def test_perfect_masks_score_a_mask_map_of_one_and_boxes_as_masks_score_less(coco_build):
    info = dataset_info.load(str(coco_build))
    truth = coco_metrics.ground_truth(info, 'val', info.labels, masks=True)
    solid = [a for a in truth.dataset['annotations'] if not a['iscrowd']]
    assert solid and all(isinstance(a['segmentation'], dict) for a in solid)  # RLE of the PNGs
    perfect = [
        {'image_id': a['image_id'], 'category_id': a['category_id'], 'score': 1.0}
        | {'segmentation': a['segmentation'], 'bbox': a['bbox']}
        for a in solid
    ]
    assert coco_metrics.evaluate(truth, perfect, info.labels, 'segm')['map'] == pytest.approx(1.0)
    boxes = []  # each mask replaced by its box: the shapes are no boxes, their mask mAP falls
    for found in perfect:
        height, width = truth.sizes[found['image_id']]
        x, y, w, h = found['bbox']
        pixels = np.zeros((height, width), bool)
        pixels[int(round(y)) : int(round(y + h)), int(round(x)) : int(round(x + w))] = True
        boxes.append(found | {'segmentation': coco_metrics.encode(pixels)})
    assert coco_metrics.evaluate(truth, boxes, info.labels, 'segm')['map'] < 0.9


def test_a_segmenter_trains_in_bfloat16_where_the_cpu_computes_it_and_serves_float32(
    coco_build, tf, tmp_path, caplog
):
    """--mixed-precision bfloat16: mixed_bfloat16 on a CPU with AVX512-BF16 or AMX (this
    machine's), float32 on one without; the weights stay float32, the class map is served."""
    flags = ('--epochs', '1', '--task', 'semantic_segmentation', '--mixed-precision', 'bfloat16')
    config = _config(coco_build, tmp_path / 'bf16', *flags)
    caplog.set_level('INFO', logger='trainer.objects_train')
    try:
        metrics = train_lib.train(config)
    finally:
        keras.mixed_precision.set_global_policy('float32')  # the tests after this one's
    native = distribute.cpu_computes_bfloat16()
    assert ('mixed_bfloat16' if native else 'float32') in caplog.text
    assert np.isfinite(metrics['loss']) and 0.0 <= metrics['test_mean_iou'] <= 1.0
    dtypes = tf.train.load_checkpoint(str(tmp_path / 'bf16' / 'checkpoints'))
    dtypes = dtypes.get_variable_to_dtype_map()
    assert {dtypes[name] for name in dtypes if name.startswith('best/weights/')} == {tf.float32}
    info = dataset_info.load(str(coco_build))
    served = tf.saved_model.load(config.resolved_model_dir).signatures['serving_default']
    answer = served(image_bytes=tf.stack(_test_images(tf, info)))
    assert answer['class_map'].shape[1:] == (64, 64)


def test_the_cpus_own_bfloat16_is_read_from_its_flags(tmp_path):
    cpuinfo = tmp_path / 'cpuinfo'
    for flags, native in (('fpu avx512f avx512_bf16 sse', True), ('fpu amx_bf16', True)):
        cpuinfo.write_text(f'processor\t: 0\nflags\t\t: {flags}\n')
        assert distribute.cpu_computes_bfloat16(str(cpuinfo)) is native
    cpuinfo.write_text('processor\t: 0\nflags\t\t: fpu avx512f avx512bw\n')
    assert distribute.cpu_computes_bfloat16(str(cpuinfo)) is False
    assert distribute.cpu_computes_bfloat16(str(tmp_path / 'none')) is False


def test_mean_iou_counts_each_class_over_the_split_and_leaves_void_out():
    truth = np.array([[0, 0, 1, 1], [2, 2, 255, 255]])
    predicted = np.array([[0, 1, 1, 1], [2, 0, 0, 1]])
    counts = segmenter.confusion(truth, predicted, 3)
    assert counts.sum() == 6  # the two VOID pixels count nowhere
    found = segmenter.mean_iou(counts, ('background', 'a', 'b'))
    # background: 1 shared of 3 (2 true, 2 predicted); a: 2 of 3; b: 1 of 2
    assert found['iou_per_class'] == pytest.approx({'background': 1 / 3, 'a': 2 / 3, 'b': 1 / 2})
    assert found['mean_iou'] == pytest.approx((1 / 3 + 2 / 3 + 1 / 2) / 3)


def _full_resolution_loss(truth, logits):
    """Cross-entropy over each image's pixels that are not VOID, plus the batch's soft Dice
    over the classes its truth holds, pixel by pixel: what `segmenter.loss` scores on cells."""
    valid = truth != 255
    labels = np.where(valid, truth, 0)
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    each = -np.take_along_axis(log_p, labels[..., None], -1)[..., 0] * valid
    ce = each.sum((1, 2)) / valid.sum((1, 2))
    p = np.exp(log_p) * valid[..., None]
    one_hot = np.eye(logits.shape[-1])[labels] * valid[..., None]
    overlap, sizes = (p * one_hot).sum((0, 1, 2)), (p + one_hot).sum((0, 1, 2))
    present = one_hot.sum((0, 1, 2)) > 0
    dice = ((2 * overlap + 1) / (sizes + 1))[present].mean()
    return ce + 1 - dice


def test_the_segmenters_loss_on_cells_is_the_full_resolution_loss_of_logits_constant_in_them():
    rng = np.random.default_rng(3)
    cells = rng.normal(0, 2, (2, 3, 5, 4)).astype(np.float32)  # logits at 1/4: [B, h, w, C]
    truth = rng.integers(0, 3, (2, 12, 20))  # class 3 is in no pixel
    truth[0, :5, :7] = 255  # VOID, across cell borders
    truth[1, 4:8, 8:12] = 255  # a whole cell
    full = np.repeat(np.repeat(cells, 4, axis=1), 4, axis=2)
    found = segmenter.loss(truth.astype(np.int32), cells).numpy()
    np.testing.assert_allclose(found, _full_resolution_loss(truth, full), rtol=1e-5)
    # evaluation and serving read the classes of the logits upsampled as the models did before
    # they ended at 1/4 (Keras' bilinear UpSampling2D)
    upsampled = keras.layers.UpSampling2D(4, interpolation='bilinear')(cells)
    np.testing.assert_array_equal(
        segmenter.class_map(cells, (12, 20)).numpy(), np.argmax(upsampled, -1)
    )


def test_preview_draws_training_examples_with_their_boxes_and_masks_moved(coco_build, tmp_path):
    info = dataset_info.load(str(coco_build))
    shown = preview.training_objects(str(coco_build), 'train', (64, 96), seed=0)
    assert len(shown) == info.num_records('train')
    checked = 0
    for values in shown:
        image = Image.open(io.BytesIO(values['image/encoded'][0]))
        assert image.size == (96, 64)  # the canvas, width x height
        boxes = zip(*(values[key] for key in detection.BOX_KEYS))
        for (xmin, ymin, xmax, ymax), png in zip(boxes, values.get(detection.MASK, [])):
            mask = np.asarray(Image.open(io.BytesIO(png)))
            if mask.any():  # the mask's pixels lie where the moved box says
                rows, cols = np.nonzero(mask)
                found = [cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]
                np.testing.assert_allclose(
                    found, [xmin * 96, ymin * 64, xmax * 96, ymax * 64], atol=1.5
                )
                checked += 1
    assert checked > 0
    out = tmp_path / 'grid.png'
    assert preview.main([str(coco_build), '--image-size', '64', '--out', str(out)]) == 0
    assert Image.open(out).format == 'PNG'
