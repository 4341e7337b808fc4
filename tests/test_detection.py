"""Detection and segmentation builds from COCO, Pascal VOC and YOLO sets made here (real JPEGs
of drawn shapes, their polygons exact): records in Model Garden's keys whose boxes and masks
are the annotations' (masks equal pycocotools' annToMask), read by TFDS as `objects`, verified,
and every annotation accounted for."""

import glob
import io
import json
import os

import numpy as np
import object_sets
import pytest
from PIL import Image

from imageshards import records
from imageshards.kinds import detection
from imageshards.shard_formats import registry as shard_formats
from imageshards_cli import verify
from pipelines import launcher

from build_commands import build_flags


def build(source, out, *flags, splits='train=0.5,val=0.25,test=0.25'):
    return launcher.run(
        build_flags(source, out, *flags, splits=splits, num_shards=1, seed=3, in_memory=True)
    )


def build_records(out):
    """{image/filename's key below the set's image folder: {key: values}} of a build."""
    found = {}
    for path in sorted(glob.glob(f'{out}/*/*.tfrecord')):
        for _, record in records.shard_records(path, shard_formats.named('tfrecord')):
            values = {
                key: values
                for key, (_, values) in records.example_values(
                    records.parse_example(record)
                ).items()
            }
            found[values['image/filename'][0].decode()] = values
    return found


@pytest.fixture(scope='module', name='coco_build')
def fixture_coco_build(tmp_path_factory):
    folder = tmp_path_factory.mktemp('coco')
    coco = object_sets.write_coco(str(folder), images=16)
    out = folder / 'out'
    dataset = build(folder / 'annotations' / 'instances.json', out, '--no-analyze')
    return folder, coco, out, dataset


def test_coco_build_states_its_classes_category_ids_and_every_annotation(coco_build):
    _, coco, out, dataset = coco_build
    assert dataset['kind'] == 'detection'
    assert dataset['labels'] == list(object_sets.CLASSES)
    assert dataset['category_ids'] == list(object_sets.COCO_IDS)
    assert dataset['objects']['masks'] is True
    counted = dataset['counts']['annotations']
    read = len(coco['annotations'])
    assert counted == {
        'read': read,
        'written': read,
        'rejected': 0,
        'clipped': 0,
        'rejected_by_reason': {},
    }
    assert sum(split['objects'] for split in dataset['splits'].values()) == read
    assert dataset['counts']['written'] == len(coco['images'])  # images without objects kept
    assert (out / 'rejected_annotations.jsonl').read_text() == ''
    assert verify.main([str(out)]) == 0


def test_coco_records_hold_the_annotations_boxes_classes_and_masks(coco_build):
    from pycocotools.coco import COCO  # pylint: disable=import-outside-toplevel

    folder, _, out, _ = coco_build
    reference = COCO(str(folder / 'annotations' / 'instances.json'))
    found = build_records(out)
    images = {image['file_name']: image for image in reference.dataset['images']}
    checked = 0
    for filename, values in found.items():
        image = images[os.path.relpath(filename, folder / 'images')]
        annotations = reference.loadAnns(reference.getAnnIds(imgIds=[image['id']]))
        assert values['image/source_id'] == [str(image['id']).encode()]
        assert len(values['image/object/mask']) == len(annotations)
        labels = [object_sets.COCO_IDS.index(a['category_id']) for a in annotations]
        assert values['image/object/class/label'] == labels
        assert values['image/class/label'] == sorted(set(labels))
        width, height = image['width'], image['height']
        for i, annotation in enumerate(annotations):
            x, y, w, h = annotation['bbox']
            box = [values[key][i] for key in detection.BOX_KEYS]
            np.testing.assert_allclose(
                box, [x / width, y / height, (x + w) / width, (y + h) / height], atol=1e-6
            )
            mask = np.asarray(Image.open(io.BytesIO(values['image/object/mask'][i])))
            assert np.array_equal(mask, reference.annToMask(annotation))
            tfds_box = values['objects/bbox'][4 * i : 4 * i + 4]
            np.testing.assert_allclose(tfds_box, [box[1], box[0], box[3], box[2]], atol=1e-6)
            checked += 1
    assert checked == len(reference.dataset['annotations'])


def test_tfds_reads_a_coco_build_as_objects(coco_build):
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

    _, coco, out, _ = coco_build
    builder = tfds.builder_from_directory(str(out))
    objects = builder.info.features['objects']
    assert objects['label'].names == list(object_sets.CLASSES)
    total = 0
    for split in builder.info.splits:
        for example in builder.as_dataset(split=split):
            boxes = example['objects']['bbox'].numpy()
            assert boxes.shape[1:] == (4,)
            assert ((boxes >= 0) & (boxes <= 1)).all()
            total += len(boxes)
    assert total == len(coco['annotations'])


def test_model_gardens_parse_spec_reads_the_records(coco_build, tf):
    """The keys and types Model Garden's TfExampleDecoder parses (official/vision/dataloaders/
    tf_example_decoder.py), with its mask decoding."""
    _, _, out, _ = coco_build
    spec = {
        'image/encoded': tf.io.FixedLenFeature((), tf.string),
        'image/height': tf.io.FixedLenFeature((), tf.int64),
        'image/width': tf.io.FixedLenFeature((), tf.int64),
        'image/source_id': tf.io.FixedLenFeature((), tf.string),
        'image/object/bbox/xmin': tf.io.VarLenFeature(tf.float32),
        'image/object/bbox/xmax': tf.io.VarLenFeature(tf.float32),
        'image/object/bbox/ymin': tf.io.VarLenFeature(tf.float32),
        'image/object/bbox/ymax': tf.io.VarLenFeature(tf.float32),
        'image/object/class/label': tf.io.VarLenFeature(tf.int64),
        'image/object/area': tf.io.VarLenFeature(tf.float32),
        'image/object/is_crowd': tf.io.VarLenFeature(tf.int64),
        'image/object/mask': tf.io.VarLenFeature(tf.string),
    }
    files = sorted(glob.glob(f'{out}/*/*.tfrecord'))
    for raw in tf.data.TFRecordDataset(files):
        parsed = tf.io.parse_single_example(raw, spec)
        masks = tf.sparse.to_dense(parsed['image/object/mask'], default_value='')
        height, width = int(parsed['image/height']), int(parsed['image/width'])
        for png in masks.numpy():
            mask = tf.io.decode_png(png, channels=1)
            assert tuple(mask.shape) == (height, width, 1)
        assert len(masks) == parsed['image/object/class/label'].dense_shape[0]


def test_voc_build_keeps_flags_masks_class_maps_and_its_splits(tmp_path):
    made = object_sets.write_voc(str(tmp_path / 'VOC2012'))
    out = tmp_path / 'out'
    dataset = build(tmp_path / 'VOC2012', out, '--no-analyze', splits=None)
    assert dataset['objects'] == {
        'masks': True,
        'class_maps': True,
        'flags': ['difficult', 'truncated'],
    }
    assert dataset['segmentation_classes'] == ['background', *object_sets.CLASSES]
    assert {split: info['num_records'] for split, info in dataset['splits'].items()} == {
        'train': 4,
        'val': 4,
    }
    found = build_records(out)
    objects = sum(len(shapes) for _, shapes in made)
    assert dataset['counts']['annotations']['written'] == objects
    for image_id, shapes in made:
        values = found[str(tmp_path / 'VOC2012' / 'JPEGImages' / f'{image_id}.jpg')]
        width, height = values['image/width'][0], values['image/height'][0]
        for i, (shape, (x, y, w, h)) in enumerate(shapes):
            assert values['image/object/class/text'][i] == shape.encode()
            # VOC's corners are 1-based and inclusive: xmin = x + 1 is pixel edge x.
            assert values['image/object/bbox/xmin'][i] == pytest.approx(int(x) / width)
            assert values['image/object/bbox/xmax'][i] == pytest.approx(int(x + w) / width)
            assert values['image/object/bbox/ymin'][i] == pytest.approx(int(y) / height)
            assert values['image/object/bbox/ymax'][i] == pytest.approx(int(y + h) / height)
        assert values['image/object/difficult'] == [int(i == 1) for i in range(len(shapes))]
        class_map = np.asarray(
            Image.open(io.BytesIO(values['image/segmentation/class/encoded'][0]))
        )
        assert class_map.shape == (height, width)
        segmented = image_id in {made[i][0] for i in (0, 1, 2)}
        if segmented:
            assert (class_map[0] == 255).all() and set(np.unique(class_map)) <= {0, 1, 2, 3, 255}
            for i, shape in enumerate(s for s, _ in shapes):
                mask = np.asarray(Image.open(io.BytesIO(values['image/object/mask'][i])))
                assert (
                    mask.any()
                    and (class_map[mask > 0] == object_sets.CLASSES.index(shape) + 1).mean() > 0.9
                )
        else:
            assert (class_map == 255).all()  # no class map: every pixel void
    assert verify.main([str(out)]) == 0


def test_yolo_build_turns_normalized_boxes_and_polygons_into_records(tmp_path):
    made = object_sets.write_yolo(str(tmp_path / 'shapes'))
    out = tmp_path / 'out'
    dataset = build(tmp_path / 'shapes' / 'data.yaml', out, '--no-analyze', splits=None)
    resplit = build(tmp_path / 'shapes' / 'data.yaml', tmp_path / 'resplit', '--no-analyze')
    assert sorted(resplit['splits']) == ['test', 'train', 'val']  # --splits: every image split
    assert (
        resplit['counts']['annotations']['written'] == dataset['counts']['annotations']['written']
    )
    assert {split: info['num_records'] for split, info in dataset['splits'].items()} == {
        'train': 5,
        'val': 5,
    }
    assert dataset['objects']['masks'] is True  # segmentation lines make masks
    found = build_records(out)
    for split, images in made.items():
        for name, shapes in images:
            values = found[str(tmp_path / 'shapes' / 'images' / split / name)]
            assert len(values['image/object/class/label']) == len(shapes)
            for i, (shape, _, (x, y, w, h)) in enumerate(shapes):
                assert values['image/object/class/text'][i] == shape.encode()
                assert values['image/object/bbox/xmin'][i] == pytest.approx(x / 90, abs=1e-5)
                assert values['image/object/bbox/ymax'][i] == pytest.approx((y + h) / 60, abs=1e-5)
                assert values['image/object/bbox/xmax'][i] == pytest.approx((x + w) / 90, abs=1e-5)
                assert values['image/object/bbox/ymin'][i] == pytest.approx(y / 60, abs=1e-5)
    assert verify.main([str(out)]) == 0


def test_a_detection_build_in_every_shard_format_holds_the_same_objects(coco_build, tmp_path):
    folder, coco, _, _ = coco_build
    for shard_format in ('array_record', 'parquet'):
        out = tmp_path / shard_format
        dataset = build(
            folder / 'annotations' / 'instances.json',
            out,
            '--no-analyze',
            '--shard-format',
            shard_format,
        )
        assert dataset['counts']['annotations']['written'] == len(coco['annotations'])
        assert verify.main([str(out)]) == 0
    schema = json.loads((tmp_path / 'parquet' / 'dataset.json').read_text())['features']
    assert schema['image/object/mask'] == 'bytes_list'


def test_coco_annotations_of_a_split_are_the_sources_and_evaluate_perfectly(coco_build, capsys):
    from pycocotools.coco import COCO  # pylint: disable=import-outside-toplevel
    from pycocotools.cocoeval import COCOeval  # pylint: disable=import-outside-toplevel

    from imageshards_cli import coco_annotations  # pylint: disable=import-outside-toplevel

    folder, coco, out, dataset = coco_build
    assert coco_annotations.main([str(out), '--split', 'train']) == 0
    written = json.loads((out / 'annotations' / 'train.json').read_text())
    assert [c['id'] for c in written['categories']] == list(object_sets.COCO_IDS)
    source = {image['id']: image for image in coco['images']}
    by_source = {}
    for a in coco['annotations']:
        by_source.setdefault(a['image_id'], []).append(a)
    ours = {image['id']: int(image['source_id']) for image in written['images']}
    for a in written['annotations']:
        wanted = by_source[ours[a['image_id']]]
        assert any(
            np.allclose(a['bbox'], w['bbox'], atol=1e-3) and a['category_id'] == w['category_id']
            for w in wanted
        )
    assert len(written['images']) == dataset['splits']['train']['num_records']
    assert set(ours.values()) <= set(source)
    truth = COCO(str(out / 'annotations' / 'train.json'))
    for kind in ('bbox', 'segm'):
        results = truth.loadRes([{**a, 'score': 1.0} for a in written['annotations']])
        evaluation = COCOeval(truth, results, kind)
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
        assert evaluation.stats[0] == pytest.approx(1.0)
    capsys.readouterr()
    assert verify.main([str(out)]) == 0  # annotations/ is a tool's output, not a stray file


def test_report_and_preview_draw_and_count_the_objects(coco_build, tmp_path):
    from imageshards_cli import preview  # pylint: disable=import-outside-toplevel
    from imageshards_cli import report  # pylint: disable=import-outside-toplevel

    _, coco, out, dataset = coco_build
    _, metrics = report.report(
        str(out), 'train', str(tmp_path / 'report'), epochs=1, batch_size=32, seed=0,
        baseline_buffer=None,
    )  # fmt: skip
    assert metrics['records'] == dataset['splits']['train']['num_records'] < 32  # a small split
    objects = metrics['objects']
    assert sum(split['objects'] for split in objects.values()) == len(coco['annotations'])
    for split, info in objects.items():
        assert info['object_counts'] == dataset['splits'][split]['object_counts']
        assert sum(info['box_sizes'].values()) == info['objects']
        assert info['images'] == dataset['splits'][split]['num_records']
    assert Image.open(tmp_path / 'report' / 'objects.png').size[0] > 200
    assert '## Objects' in (tmp_path / 'report' / 'report.md').read_text()
    assert preview.main([str(out), '--split', 'val', '--out', str(tmp_path / 'p.png')]) == 0
    assert Image.open(tmp_path / 'p.png').format == 'PNG'
