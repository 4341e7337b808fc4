"""Bad and hostile detection sets: every annotation that cannot be used is dropped with its
reason and listed, boxes a little past an edge are clipped and counted, images whose size
disagrees with their annotation are rejected with their annotations counted, and malformed or
hostile annotation files stop the build in one line without running or expanding anything."""

import io
import json
import os
import tarfile

import numpy as np
import object_sets
import pytest
from PIL import Image

from imageshards_cli import verify
from pipelines import launcher
from pipelines.inputs import voc
from pipelines.inputs import yolo

from build_commands import build_flags


def build(source, out, *flags):
    return launcher.run(build_flags(source, out, *flags, num_shards=1, seed=3, in_memory=True))


def jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(name='bad_coco')
def fixture_bad_coco(tmp_path):
    """A COCO set with one annotation of each kind of problem, and images that cannot be used."""
    from pycocotools import mask as coco_mask  # pylint: disable=import-outside-toplevel

    coco = object_sets.write_coco(str(tmp_path), images=4, sizes=((100, 80),))
    good = {'image_id': 1000, 'category_id': 1, 'iscrowd': 0}
    crowd = np.zeros((80, 100), np.uint8)
    crowd[10:30, 20:60] = 1
    compressed = coco_mask.encode(np.asfortranarray(crowd))
    compressed['counts'] = compressed['counts'].decode('ascii')
    uncompressed = {'size': [80, 100], 'counts': [100, 300, 7600]}  # columns 1-3, as COCO's
    problems = [
        ({'bbox': [120, 10, 10, 10]}, 'box_outside_image'),
        ({'bbox': [10, 10, 0, 10]}, 'empty_box'),
        ({'bbox': ['nan', 1, 2, 3]}, 'bad_box'),
        ({'bbox': [10, 10, 5, 5], 'category_id': 99}, 'unknown_category'),
        ({'bbox': [10, 10, 5, 5], 'image_id': 424242}, 'unknown_image'),
        ({'bbox': [10, 10, 5, 5], 'segmentation': [[10, 10, 15, 15]]}, 'bad_polygon'),
        ({'bbox': [10, 10, 5, 5], 'segmentation': {'size': [8, 8], 'counts': 'PPY2'}}, 'bad_mask'),
        ({'bbox': [90, 70, 12, 12]}, None),  # 2 px past the corner: clipped
        ({'bbox': [20, 10, 40, 20], 'iscrowd': 1, 'segmentation': compressed}, None),
        ({'bbox': [1, 0, 3, 80], 'iscrowd': 1, 'segmentation': uncompressed}, None),
    ]
    for fields, _ in problems:
        coco['annotations'].append({'id': 900 + len(coco['annotations']), **good, **fields})
    # An image whose stated size is not its own (two annotations lost with it), and one whose
    # file name climbs out of the image root (one annotation lost with it).
    coco['images'][1]['width'] = 101
    coco['images'].append({'id': 77, 'file_name': '../secret.jpg', 'width': 10, 'height': 10})
    (tmp_path / 'secret.jpg').write_bytes(
        object_sets.make_image(np.random.default_rng(0), 10, 10, 0)[0]
    )
    for image_id in (1001, 1001, 77):
        coco['annotations'].append(
            {
                'id': 990 + len(coco['annotations']),
                **good,
                'image_id': image_id,
                'bbox': [1, 1, 4, 4],
            }
        )
    path = tmp_path / 'annotations' / 'instances.json'
    path.write_text(json.dumps(coco))
    return tmp_path, coco, problems


def test_every_annotation_is_written_or_listed_with_its_reason(bad_coco):
    folder, coco, problems = bad_coco
    out = folder / 'out'
    dataset = build(folder / 'annotations' / 'instances.json', out, '--no-analyze')
    counts = dataset['counts']['annotations']
    assert counts['read'] == len(coco['annotations'])
    assert counts['read'] == counts['written'] + counts['rejected']
    assert counts['clipped'] == 1
    expected = {}
    for _, reason in problems:
        if reason:
            expected[reason] = expected.get(reason, 0) + 1
    lost_with_images = 0
    for row in jsonl(out / 'rejected.jsonl'):
        lost_with_images += row.get('annotations', 0)
    assert (
        lost_with_images >= 3
    )  # the mis-sized image's 2 (and its own drawn shapes), the escape's 1
    expected['image_rejected'] = lost_with_images
    assert counts['rejected_by_reason'] == expected
    listed = jsonl(out / 'rejected_annotations.jsonl')
    assert sorted(row['reason'] for row in listed) == sorted(
        reason for _, reason in problems if reason
    )
    for row in listed:
        assert row['detail'] and row['annotation'].startswith('annotation ')
        assert row['key'] == ('' if row['reason'] == 'unknown_image' else 'sub/img000.jpg')
    reasons = {row['reason'] for row in jsonl(out / 'rejected.jsonl')}
    assert reasons == {'size_mismatch', 'path_traversal'}
    assert verify.main([str(out)]) == 0


def test_a_crowd_region_keeps_its_rle_mask(bad_coco, tmp_path):
    from pycocotools.coco import COCO  # pylint: disable=import-outside-toplevel
    from test_detection import build_records  # pylint: disable=import-outside-toplevel

    folder, _, _ = bad_coco
    out = tmp_path / 'out'
    build(folder / 'annotations' / 'instances.json', out, '--no-analyze')
    values = build_records(out)[str(folder / 'images' / 'sub' / 'img000.jpg')]
    crowds = [i for i, crowd in enumerate(values['image/object/is_crowd']) if crowd]
    reference = COCO(str(folder / 'annotations' / 'instances.json'))
    wanted = [a for a in reference.dataset['annotations'] if a['iscrowd'] and a['image_id'] == 1000]
    assert len(crowds) == len(wanted) == 2  # compressed and uncompressed RLE
    for index, annotation in zip(crowds, wanted):
        mask = np.asarray(Image.open(io.BytesIO(values['image/object/mask'][index])))
        assert np.array_equal(mask, reference.annToMask(annotation))
    clipped = [i for i, x in enumerate(values['image/object/bbox/xmax']) if x == 1.0]
    assert clipped and values['image/object/bbox/ymax'][clipped[0]] == 1.0


def test_an_exif_rotated_image_whose_annotation_gives_its_stored_size_is_rejected(tmp_path):
    coco = object_sets.write_coco(str(tmp_path), images=2, sizes=((60, 40),))
    image = Image.open(tmp_path / 'images' / 'img001.jpg')
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90: shown 40 wide, 60 high
    image.save(tmp_path / 'images' / 'img001.jpg', exif=exif)
    out = tmp_path / 'out'
    dataset = build(tmp_path / 'annotations' / 'instances.json', out, '--no-analyze')
    rejected = jsonl(out / 'rejected.jsonl')
    assert [row['reason'] for row in rejected] == ['size_mismatch']
    assert 'EXIF' in rejected[0]['detail']
    lost = sum(a['image_id'] == 1001 for a in coco['annotations'])
    assert lost == 1  # write_coco draws one shape on its second image
    assert dataset['counts']['annotations']['rejected_by_reason'] == {'image_rejected': lost}


def test_an_image_record_without_its_size_is_checked_against_its_decoded_size(tmp_path):
    """Without `width` and `height` the decoded image's size is the truth: a box outside it is
    still dropped with its reason, one a little past its edge clipped."""
    coco = object_sets.write_coco(str(tmp_path), images=2, sizes=((60, 40),))
    del coco['images'][0]['width'], coco['images'][0]['height']
    first = {'image_id': 1000, 'category_id': 1, 'iscrowd': 0}
    coco['annotations'] += [
        dict(first, id=901, bbox=[50, 30, 30, 30]),  # 20 pixels past the 60x40 image's corner
        dict(first, id=902, bbox=[45, 5, 17, 10]),  # 2 pixels past its right edge: clipped
    ]
    (tmp_path / 'annotations' / 'instances.json').write_text(json.dumps(coco))
    out = tmp_path / 'out'
    dataset = build(tmp_path / 'annotations' / 'instances.json', out, '--no-analyze')
    assert dataset['counts']['written'] == 2
    counted = dataset['counts']['annotations']
    assert counted['rejected_by_reason'] == {'box_outside_image': 1}
    assert counted['clipped'] == 1 and counted['written'] == len(coco['annotations']) - 1
    (row,) = jsonl(out / 'rejected_annotations.jsonl')
    assert (row['key'], row['annotation']) == ('sub/img000.jpg', 'annotation 901')
    assert '60x40' in row['detail']


@pytest.mark.parametrize(
    'name, text, words',
    [
        ('instances.json', '{"images": [{"id": 1,, }]}', 'is not valid JSON'),
        ('data.yaml', 'names: [a, b\ntrain: [', 'is not a usable YAML file'),
    ],
)
def test_a_malformed_annotation_file_stops_the_build_in_one_line(
    tmp_path, caplog, name, text, words
):
    (tmp_path / name).write_text(text)
    status = launcher.main(build_flags(tmp_path / name, tmp_path / 'out', in_memory=True))
    assert status == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == 'ERROR']
    assert len(errors) == 1 and words in errors[0] and '\n' not in errors[0]


def test_a_yaml_tag_that_would_run_code_is_refused(tmp_path, caplog):
    marker = tmp_path / 'ran'
    (tmp_path / 'data.yaml').write_text(
        f'names: [a]\ntrain: !!python/object/apply:os.system ["touch {marker}"]\n'
    )
    assert launcher.main(build_flags(tmp_path / 'data.yaml', tmp_path / 'out', in_memory=True)) == 2
    assert not marker.exists()
    assert any('is not a usable YAML file' in r.getMessage() for r in caplog.records)


def test_a_billion_laughs_voc_file_is_one_line_not_gigabytes(tmp_path, caplog):
    object_sets.write_voc(str(tmp_path / 'VOC'), images=2, segmented=())
    laughs = (
        '<!DOCTYPE lolz [<!ENTITY lol "lol">'
        + ''.join(
            f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">'
            for i in range(1, 10)
        )
        + ']><annotation><filename>&lol9;</filename></annotation>'
    )
    (tmp_path / 'VOC' / 'Annotations' / '2008_000000.xml').write_text(laughs)
    assert launcher.main(build_flags(tmp_path / 'VOC', tmp_path / 'out', in_memory=True)) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == 'ERROR']
    assert len(errors) == 1 and '2008_000000.xml is not a usable VOC annotation' in errors[0]


def test_yolo_lines_that_cannot_be_used_are_listed(tmp_path):
    object_sets.write_yolo(str(tmp_path), per_split=2)
    with open(tmp_path / 'labels' / 'train' / 'train_0.txt', 'a', encoding='utf-8') as f:
        f.write('7 0.5 0.5 0.1 0.1\nnot a line\n0 0.5 0.5 0.1\n0 1.5 1.5 0.1 0.1\n')
    out = tmp_path / 'out'
    dataset = build(tmp_path / 'data.yaml', out, '--no-analyze')
    reasons = sorted(row['reason'] for row in jsonl(out / 'rejected_annotations.jsonl'))
    assert reasons == ['bad_line', 'bad_line', 'box_outside_image', 'unknown_category']
    counts = dataset['counts']['annotations']
    assert counts['read'] == counts['written'] + counts['rejected'] and counts['rejected'] == 4


def test_a_label_file_over_its_bound_is_not_read_and_its_objects_are_listed(tmp_path, monkeypatch):
    object_sets.write_yolo(str(tmp_path), per_split=2)
    label = tmp_path / 'labels' / 'train' / 'train_1.txt'
    label.write_text(label.read_text() + '\n' * 5000)  # blank lines: a label file, but large
    monkeypatch.setattr(yolo, 'MAX_LABEL_BYTES', 4000)  # the others hold a few lines
    out = tmp_path / 'out'
    dataset = build(tmp_path / 'data.yaml', out, '--no-analyze')
    rows = jsonl(out / 'rejected_annotations.jsonl')
    assert [(row['reason'], row['annotation'].endswith('train_1.txt')) for row in rows] == [
        ('bad_annotation', True)
    ]
    assert 'more than 4,000 bytes of labels; not read past them' in rows[0]['detail']
    counts = dataset['counts']['annotations']
    assert counts['read'] == counts['written'] + counts['rejected'] and counts['rejected'] == 1


@pytest.mark.parametrize('archived', [False, True])
def test_an_annotation_file_over_its_bound_stops_the_build_in_one_line(
    tmp_path, caplog, monkeypatch, archived
):
    object_sets.write_voc(str(tmp_path / 'VOC'), images=2, segmented=())
    xml = tmp_path / 'VOC' / 'Annotations' / '2008_000001.xml'
    xml.write_text(xml.read_text() + ' ' * 3000)
    monkeypatch.setattr(voc, 'MAX_XML_BYTES', 2000)
    source = tmp_path / 'VOC'
    if archived:  # the member's size, from the archive's index, decides: it is never read
        source = tmp_path / 'VOC.tar'
        with tarfile.open(source, 'w') as tar:
            tar.add(tmp_path / 'VOC', arcname='VOC')
    assert launcher.main(build_flags(source, tmp_path / 'out', in_memory=True)) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == 'ERROR']
    assert len(errors) == 1 and '\n' not in errors[0]
    assert (
        '2008_000001.xml' in errors[0] and 'more than 2,000 bytes; not read past them' in errors[0]
    )


def test_dedup_drops_a_copy_with_its_annotations_counted(tmp_path):
    coco = object_sets.write_coco(str(tmp_path), images=4)
    source = coco['images'][3]
    copy = {**source, 'id': 5555, 'file_name': 'copy.jpg'}
    os.link(tmp_path / 'images' / source['file_name'], tmp_path / 'images' / 'copy.jpg')
    coco['images'].append(copy)
    copied = [a for a in coco['annotations'] if a['image_id'] == source['id']]
    for a in copied:
        coco['annotations'].append({**a, 'id': a['id'] + 10_000, 'image_id': 5555})
    (tmp_path / 'annotations' / 'instances.json').write_text(json.dumps(coco))
    dataset = build(
        tmp_path / 'annotations' / 'instances.json', tmp_path / 'out', '--no-analyze', '--dedup'
    )
    counts = dataset['counts']['annotations']
    assert counts['rejected_by_reason'] == {'duplicate_image': len(copied)}
    assert counts['read'] == counts['written'] + counts['rejected']


def test_resizing_keeps_boxes_normalized_and_masks_at_the_stored_size(tmp_path):
    object_sets.write_coco(str(tmp_path), images=3, sizes=((96, 64),))
    plain = build_records_of(tmp_path, 'plain')
    resized = build_records_of(tmp_path, 'resized', '--resize-shorter-side', '32')
    for name, values in plain.items():
        small = resized[name]
        assert small['image/height'] == [32] and small['image/width'] == [48]
        np.testing.assert_allclose(
            small['image/object/bbox/xmin'], values['image/object/bbox/xmin']
        )
        for png in small['image/object/mask']:
            assert Image.open(io.BytesIO(png)).size == (48, 32)
        np.testing.assert_allclose(
            small['image/object/area'], np.array(values['image/object/area']) / 4, rtol=1e-5
        )


def build_records_of(folder, name, *flags):
    from test_detection import build_records  # pylint: disable=import-outside-toplevel

    out = folder / name
    build(folder / 'annotations' / 'instances.json', out, '--no-analyze', *flags)
    return {os.path.basename(k): v for k, v in build_records(out).items()}


def test_verify_finds_a_missing_annotation_line_and_bad_objects(bad_coco, capsys):
    from imageshards_cli.verify import _Problems  # pylint: disable=import-outside-toplevel
    from imageshards_cli.verify_objects import ObjectChecker  # pylint: disable=import-outside-toplevel

    folder, _, _ = bad_coco
    out = folder / 'out'
    dataset = build(folder / 'annotations' / 'instances.json', out, '--no-analyze')
    listed = (out / 'rejected_annotations.jsonl').read_text().splitlines()
    (out / 'rejected_annotations.jsonl').write_text('\n'.join(listed[1:]) + '\n')
    assert verify.main([str(out)]) == 1
    assert (
        f'has {len(listed) - 1} lines, but counts.annotations.rejected is {len(listed)}'
        in capsys.readouterr().out
    )

    problems = _Problems(20)
    checker = ObjectChecker(dataset, problems)
    mask = io.BytesIO()
    Image.new('L', (5, 5)).save(mask, 'PNG')
    values = {
        'image/width': 10,
        'image/height': 8,
        'image/object/class/label': (0, 5),
        'image/object/class/text': (b'square', b'circle'),
        'image/object/bbox/xmin': (0.1, 0.5),
        'image/object/bbox/ymin': (0.1, 0.2),
        'image/object/bbox/xmax': (0.4, 1.2),
        'image/object/bbox/ymax': (0.3, 0.1),
        'image/object/mask': (mask.getvalue(), mask.getvalue()),
        'objects/bbox': (0.0,) * 8,
    }
    count, names = checker.check('shard', 'byte 0', values)
    assert count == 2 and names == {'circle': 1}
    found = capsys.readouterr().out
    assert 'object 1: class 5 is not an index of labels' in found
    assert "object 0: class 0 is not its text b'square'" in found
    assert 'object 1: box [0.5, 0.2, 1.2, 0.1] is not inside [0, 1]' in found
    assert 'mask 0 is a PNG L (5, 5), not PNG 1 (10, 8)' in found


def test_a_vertex_ai_object_detection_import_file_builds_its_boxes_and_splits(tmp_path):
    from test_detection import build_records  # pylint: disable=import-outside-toplevel

    coco = object_sets.write_coco(str(tmp_path), images=6)
    uses = ['training', 'validation', 'test', 'training', 'training', 'unassigned']
    rows = []
    for image, use in zip(coco['images'], uses):
        width, height = image['width'], image['height']
        boxes = [
            {
                'displayName': object_sets.CLASSES[object_sets.COCO_IDS.index(a['category_id'])],
                'xMin': str(a['bbox'][0] / width),  # Vertex AI exports numbers as strings
                'yMin': a['bbox'][1] / height,
                'xMax': (a['bbox'][0] + a['bbox'][2]) / width,
                'yMax': (a['bbox'][1] + a['bbox'][3]) / height,
            }
            for a in coco['annotations']
            if a['image_id'] == image['id']
        ]
        rows.append(
            {
                'imageGcsUri': f'images/{image["file_name"]}',
                'boundingBoxAnnotations': boxes,
                'dataItemResourceLabels': {'aiplatform.googleapis.com/ml_use': use},
            }
        )
    rows.append(rows[0])  # an image named twice
    (tmp_path / 'import.jsonl').write_text(''.join(json.dumps(row) + '\n' for row in rows))
    out = tmp_path / 'out'
    dataset = build(tmp_path / 'import.jsonl', out, '--no-analyze')
    assert dataset['kind'] == 'detection'
    assert [r['reason'] for r in jsonl(out / 'rejected.jsonl')] == ['duplicate_row']
    assert {s: i['num_records'] for s, i in dataset['splits'].items()} == {
        'train': 4, 'val': 1, 'test': 1,
    }  # fmt: skip
    counts = dataset['counts']['annotations']
    assert counts['written'] == len(coco['annotations'])
    assert counts['read'] == counts['written'] + counts['rejected']
    found = {os.path.basename(k): v for k, v in build_records(out).items()}
    for image in coco['images']:
        values = found[os.path.basename(image['file_name'])]
        wanted = [a for a in coco['annotations'] if a['image_id'] == image['id']]
        xmins = sorted(a['bbox'][0] / image['width'] for a in wanted)
        np.testing.assert_allclose(sorted(values['image/object/bbox/xmin']), xmins, atol=1e-6)
    assert verify.main([str(out)]) == 0
