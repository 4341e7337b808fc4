"""Detection sets packed in archives (pipelines/inputs/object_archives.py), as users export them:
a Pascal VOC tar, a YOLO zip, a COCO zip of its file and images, a COCO file whose --image-root
is an archive. Each is built and compared with the build of the same set extracted: the same
records (keys, boxes, classes, masks), the same counts and the same rejected annotations. An
archive cut short is said, and every image it lost is accounted for."""

import io
import json
import os
import shutil
import tarfile
import zipfile

import object_sets
import pytest

from imageshards import records
from imageshards.shard_formats import registry as shard_formats
from pipelines import launcher
from pipelines.core import options
from pipelines.local import early_listing

from build_commands import build_flags

# What a build's dataset.json says of its data (not of where the data was read from).
_FACTS = ('kind', 'labels', 'counts', 'splits', 'objects', 'category_ids', 'segmentation_classes')


def build(source, out, *flags, early=False):
    """The dataset.json facts of a build (`early`: its inputs listed by the early listing
    process, as the build command lists a local input)."""
    argv = build_flags(
        source, out, '--no-analyze', *flags, splits='train=0.5,val=0.25,test=0.25',
        num_shards=1, seed=3, in_memory=True,
    )  # fmt: skip
    if early:
        assert early_listing.start_early(options.peek_build_config(argv)) is not None
    dataset = launcher.run(argv)
    facts = {fact: dataset.get(fact) for fact in _FACTS}
    for split in facts['splits'].values():
        del split['shards']  # their bytes and hashes: the records name the file they read
    return facts


def built_records(out):
    """{image/key/sha256 (of the key): {feature: values}} of a build, without image/filename,
    which names the file read (its name, the last part, is `built_names`')."""
    found = {}
    for path in sorted(out.glob('*/*.tfrecord')):
        for _, record in records.shard_records(str(path), shard_formats.named('tfrecord')):
            example = records.example_values(records.parse_example(record))
            values = {key: values for key, (_, values) in example.items()}
            values['image/filename'] = values['image/filename'][0].decode().rsplit('/', 1)[1]
            found[values['image/key/sha256'][0]] = values
    assert found
    return found


def rejected_annotations(out):
    return sorted((out / 'rejected_annotations.jsonl').read_text().splitlines())


def rejected_reasons(out):
    lines = (out / 'rejected.jsonl').read_text().splitlines()
    return sorted(json.loads(line)['reason'] for line in lines)


def assert_same_build(folder_out, folder_facts, archive_out, archive_facts):
    assert archive_facts == folder_facts
    assert built_records(archive_out) == built_records(folder_out)
    assert rejected_annotations(archive_out) == rejected_annotations(folder_out)
    assert rejected_reasons(archive_out) == rejected_reasons(folder_out)


def tar_of(folder, path, arcname, mode='w'):
    with tarfile.open(path, mode) as tar:
        tar.add(folder, arcname=arcname)
    return path


def zip_of(folder, path, arcname=''):
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_DEFLATED) as archive:
        for top, _, names in sorted(os.walk(folder)):
            for name in sorted(names):
                full = os.path.join(top, name)
                archive.write(full, os.path.join(arcname, os.path.relpath(full, folder)))
    return path


@pytest.fixture(scope='module', name='voc_builds')
def fixture_voc_builds(tmp_path_factory):
    """A VOC set (segmentation masks on three images, one XML whose box is outside its image),
    built from its folder and from VOCdevkit tars: plain and gzip-compressed."""
    base = tmp_path_factory.mktemp('voc')
    root = base / 'VOCdevkit' / 'VOC2012'
    object_sets.write_voc(str(root))
    xml = root / 'Annotations' / '2008_000004.xml'
    xml.write_text(xml.read_text().replace('</annotation>', _OUTSIDE_OBJECT + '</annotation>'))
    builds = {'folder': (base / 'out', build(root, base / 'out'))}
    for suffix, mode in (('tar', 'w'), ('tar.gz', 'w:gz')):
        archive = tar_of(base / 'VOCdevkit', base / f'VOCtrainval.{suffix}', 'VOCdevkit', mode)
        out = base / f'out-{suffix}'
        builds[suffix] = (out, build(archive, out))
    return base, builds


_OUTSIDE_OBJECT = (
    '<object><name>circle</name><bndbox><xmin>500</xmin><ymin>500</ymin><xmax>600</xmax>'
    '<ymax>600</ymax></bndbox></object>'
)


@pytest.mark.parametrize('suffix', ['tar', 'tar.gz'])
def test_a_voc_tar_builds_what_its_folder_builds(voc_builds, suffix):
    _, builds = voc_builds
    folder_out, folder_facts = builds['folder']
    assert folder_facts['objects']['class_maps'] and folder_facts['objects']['masks']
    assert folder_facts['counts']['annotations']['rejected_by_reason'] == {'box_outside_image': 1}
    assert_same_build(folder_out, folder_facts, *builds[suffix])


def test_a_voc_tar_cut_short_says_so_and_accounts_for_every_image(voc_builds, caplog):
    base, builds = voc_builds
    cut = base / 'cut' / 'VOCtrainval.tar'
    cut.parent.mkdir()
    with tarfile.open(cut, 'w') as tar:  # the images last, as a VOC tar has them after its XML
        root = base / 'VOCdevkit' / 'VOC2012'
        for name in ('labelmap.txt', 'Annotations', 'ImageSets', 'SegmentationClass',
                     'SegmentationObject', 'JPEGImages'):  # fmt: skip
            tar.add(root / name, arcname=f'VOCdevkit/VOC2012/{name}')
    whole = cut.read_bytes()
    at = whole.index(b'VOCdevkit/VOC2012/JPEGImages/2008_000005.jpg')  # its header
    cut.write_bytes(whole[: at + 700])  # inside its data: it, and the images after, are lost
    facts = build(cut, base / 'out-cut')
    assert 'is incomplete' in caplog.text and '2008_000005.jpg rejected as truncated_archive' in (
        caplog.text
    )
    folder_out, folder_facts = builds['folder']
    counts = facts['counts']
    assert counts['rejected_by_reason'] == {'truncated_archive': 3}
    assert counts['inputs'] == folder_facts['counts']['inputs']
    kept = built_records(base / 'out-cut')
    assert {values['image/filename'] for values in kept.values()} == {
        f'2008_00000{i}.jpg' for i in range(5)
    }
    assert all(
        kept[key] == values for key, values in built_records(folder_out).items() if key in kept
    )
    annotations = counts['annotations']
    assert annotations['read'] == folder_facts['counts']['annotations']['read']
    assert annotations['written'] + annotations['rejected'] == annotations['read']
    assert annotations['rejected_by_reason']['image_rejected'] > 0


@pytest.fixture(scope='module', name='yolo_set')
def fixture_yolo_set(tmp_path_factory):
    base = tmp_path_factory.mktemp('yolo')
    object_sets.write_yolo(str(base / 'shapes'))
    out = base / 'out'
    return base, out, build(base / 'shapes' / 'data.yaml', out)


def test_a_yolo_zip_builds_what_its_folder_builds(yolo_set):
    base, folder_out, folder_facts = yolo_set
    assert folder_facts['objects']['masks']
    archive = zip_of(base / 'shapes', base / 'shapes.zip', 'shapes')
    out = base / 'out-zip'
    assert_same_build(folder_out, folder_facts, out, build(archive, out))


def test_a_roboflow_style_yolo_zip_with_paths_above_its_yaml_builds_the_same(yolo_set):
    """Roboflow's data.yaml names `../images/train` and a `path` of where it was made: read as
    Ultralytics reads them, the archive's own folders."""
    base, folder_out, folder_facts = yolo_set
    copy = base / 'roboflow'
    shutil.copytree(base / 'shapes', copy)
    text = (copy / 'data.yaml').read_text()
    text = text.replace('path: .', 'path: /content/datasets/shapes')
    (copy / 'data.yaml').write_text(text.replace('images/', '../images/'))
    out = base / 'out-roboflow'
    facts = build(zip_of(copy, base / 'roboflow.zip'), out, '--input-form', 'yolo')
    assert_same_build(folder_out, folder_facts, out, facts)


def test_a_yolo_label_file_cut_short_rejects_its_image_not_its_objects_silently(yolo_set):
    base, _, folder_facts = yolo_set
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode='w') as tar:
        tar.add(base / 'shapes', arcname='shapes')
    whole = data.getvalue()
    at = whole.index(b'labels/val/val_4.txt')  # the last member: its data cut short
    cut = base / 'cut.tar'
    cut.write_bytes(whole[: at + 512 + 10])
    facts = build(cut, base / 'out-cut')
    assert facts['counts']['rejected_by_reason'] == {'truncated_archive': 1}
    assert facts['counts']['written'] == folder_facts['counts']['written'] - 1
    (line,) = (base / 'out-cut' / 'rejected.jsonl').read_text().splitlines()
    rejected = json.loads(line)
    assert rejected['path'].endswith('cut.tar!shapes/images/val/val_4.jpg')
    assert rejected['detail'].startswith('its label file: ')


@pytest.fixture(scope='module', name='coco_set')
def fixture_coco_set(tmp_path_factory):
    """A COCO set with an annotation outside its image and one of an image it lacks."""
    base = tmp_path_factory.mktemp('coco')
    coco = object_sets.write_coco(str(base / 'set'), images=10)
    coco['annotations'].append(dict(coco['annotations'][0], id=900, bbox=[400, 400, 20, 20]))
    coco['annotations'].append(dict(coco['annotations'][0], id=901, image_id=77))
    (base / 'set' / 'annotations' / 'instances.json').write_text(json.dumps(coco))
    out = base / 'out'
    facts = build(base / 'set' / 'annotations' / 'instances.json', out)
    return base, out, facts


def test_a_coco_zip_of_its_file_and_images_builds_what_its_folder_builds(coco_set):
    base, folder_out, folder_facts = coco_set
    assert folder_facts['counts']['annotations']['rejected_by_reason'] == {
        'box_outside_image': 1,
        'unknown_image': 1,
    }
    archive = zip_of(base / 'set', base / 'coco-export.zip')
    out = base / 'out-zip'
    assert_same_build(folder_out, folder_facts, out, build(archive, out))


@pytest.mark.parametrize('suffix', ['tar.gz', 'zip'])
def test_a_coco_image_root_may_be_an_archive_of_the_images_folder(coco_set, suffix):
    base, folder_out, folder_facts = coco_set
    if suffix == 'zip':
        images = zip_of(base / 'set' / 'images', base / 'images.zip', 'images')
    else:
        images = tar_of(base / 'set' / 'images', base / 'images.tar.gz', 'images', 'w:gz')
    out = base / f'out-root-{suffix}'
    facts = build(base / 'set' / 'annotations' / 'instances.json', out, '--image-root', images)
    assert_same_build(folder_out, folder_facts, out, facts)


def test_an_image_its_archive_lacks_is_a_missing_file_with_its_annotations_counted(coco_set):
    base, _, folder_facts = coco_set
    source = base / 'set' / 'images'
    archive = base / 'fewer.zip'
    with zipfile.ZipFile(archive, 'w') as out:
        for path in sorted(source.rglob('*.jpg')):
            if path.name != 'img001.jpg':
                out.write(path, os.path.relpath(path, source))
    out = base / 'out-fewer'
    facts = build(base / 'set' / 'annotations' / 'instances.json', out, '--image-root', archive)
    assert facts['counts']['rejected_by_reason'] == {'missing_file': 1}
    assert facts['counts']['written'] == folder_facts['counts']['written'] - 1
    annotations = facts['counts']['annotations']
    assert annotations['read'] == folder_facts['counts']['annotations']['read']
    assert annotations['written'] + annotations['rejected'] == annotations['read']


@pytest.mark.parametrize('form', ['voc', 'coco'])
def test_an_early_listing_builds_the_same_and_what_the_input_is_is_said_once(
    voc_builds, coco_set, form, caplog
):
    """The build command lists a local input in a process of its own (early_listing.py): the
    set is listed there, and what --input is is logged once, not by both processes."""
    if form == 'voc':
        base, builds = voc_builds
        source, (folder_out, folder_facts) = base / 'VOCtrainval.tar', builds['folder']
    else:
        base, folder_out, folder_facts = coco_set
        source = base / 'set' / 'annotations' / 'instances.json'
    out = base / 'out-early'
    with caplog.at_level('DEBUG', logger='pipelines'):
        facts = build(source, out, early=True)
    assert 'listed by the early listing process' in caplog.text
    said = [r for r in caplog.records if r.getMessage().startswith(f'--input {source}: ')]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert_same_build(folder_out, folder_facts, out, facts)


def test_a_coco_zip_cut_inside_its_annotation_file_stops_the_build_in_one_line(coco_set, caplog):
    base, _, _ = coco_set
    whole = zip_of(base / 'set', base / 'whole.zip').read_bytes()
    cut = base / 'cut.zip'
    cut.write_bytes(whole[: whole.index(b'annotations/instances.json') + 300])  # no directory
    status = launcher.main(build_flags(cut, base / 'out-cut', in_memory=True))
    assert status == 2
    errors = [r.getMessage() for r in caplog.records if r.levelname == 'ERROR']
    assert len(errors) == 1 and '\n' not in errors[0]
    assert 'holds no COCO annotation file (' in errors[0] and 'cut short' in errors[0]


@pytest.mark.parametrize(
    'names, form',
    [
        (['VOCdevkit/VOC2012/Annotations/2008_000001.xml'], 'voc'),
        (['VOCdevkit/VOC2012/JPEGImages/2008_000001.jpg'], 'voc'),  # a tar of its images first
        (['data.yaml', 'train/images/a.jpg'], 'yolo'),
        (['train/images/a.jpg', 'train/labels/a.txt'], 'yolo'),  # a zip whose yaml comes last
        (['annotations/instances_val2017.json', 'images/1.jpg'], 'coco'),
        (['train/_annotations.coco.json', 'train/1.jpg'], 'coco'),  # Roboflow's COCO export
        (['daisy/1.jpg', 'daisy/notes.txt', 'rose/meta.json'], None),  # a class tree's archive
        (['000001.jpg', '000001.json'], None),  # a WebDataset sample's label
    ],
)
def test_an_archive_of_a_detection_set_is_told_by_its_first_names(names, form):
    from pipelines.inputs import object_archives  # pylint: disable=import-outside-toplevel

    assert object_archives.form_in(names) == form


def test_coco_exports_with_their_file_beside_their_images_build_as_extracted(coco_set):
    """Roboflow's layout (`train/_annotations.coco.json` beside `train/*.jpg`, told by its name)
    and Label Studio's (`result.json` at the top naming `images/...`, named by --input-form)."""
    base, _, _ = coco_set
    coco = json.loads((base / 'set' / 'annotations' / 'instances.json').read_text())
    roboflow = base / 'roboflow' / 'train'
    shutil.copytree(base / 'set' / 'images', roboflow)
    (roboflow / '_annotations.coco.json').write_text(json.dumps(coco))
    folder_facts = build(roboflow / '_annotations.coco.json', base / 'out-rf')
    assert folder_facts['counts']['written'] == len(coco['images'])
    archive = zip_of(base / 'roboflow', base / 'roboflow.zip')
    assert_same_build(
        base / 'out-rf', folder_facts, base / 'out-rf-zip', build(archive, base / 'out-rf-zip')
    )
    studio = base / 'studio'
    shutil.copytree(base / 'set' / 'images', studio / 'images')
    for image in coco['images']:
        image['file_name'] = f'images/{image["file_name"]}'
    (studio / 'result.json').write_text(json.dumps(coco))
    folder_facts = build(studio / 'result.json', base / 'out-studio')
    archive = zip_of(studio, base / 'studio.zip')
    facts = build(archive, base / 'out-studio-zip', '--input-form', 'coco')
    assert_same_build(base / 'out-studio', folder_facts, base / 'out-studio-zip', facts)
    assert facts['counts']['written'] == len(coco['images'])


def test_a_folder_of_voc_tars_builds_as_one_extracted_folder(voc_builds):
    """VOC2007 ships trainval and test tars that extract into one VOCdevkit/VOC2007."""
    base, builds = voc_builds
    root = base / 'VOCdevkit' / 'VOC2012'
    names = sorted(p.relative_to(base) for p in root.rglob('*') if p.is_file())
    (base / 'two').mkdir()
    for part, chosen in (('trainval', names[::2]), ('test', names[1::2])):
        with tarfile.open(base / 'two' / f'VOC{part}.tar', 'w') as tar:
            for name in chosen:
                tar.add(base / name, arcname=str(name))
    out = base / 'out-two'
    assert_same_build(*builds['folder'], out, build(base / 'two', out))
