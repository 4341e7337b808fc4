"""A COCO file's annotations joined to its images by the pipeline, not the launcher: the
launcher lists the images alone, the pipeline gives each its objects in the file's order
whatever blocks they arrive in, and a build without masks keeps the boxes and counts the masks
it leaves out."""

import io
import json
import tarfile

import object_sets

from imageshards import records
from imageshards.shard_formats import registry as shard_formats
from imageshards.storage import open_read
from pipelines import launcher
from pipelines.core import blocks
from pipelines.core.settings import InputSettings
from pipelines.inputs import coco as coco_reader
from pipelines.inputs import coco_join

from build_commands import build_flags


def build(source, out, *flags):
    return launcher.run(build_flags(source, out, *flags, num_shards=1, seed=3, in_memory=True))


def detection_records(out):
    """{image key below the set's image folder: {feature: values}} of a build's records."""
    found = {}
    for path in sorted(out.glob('*/*.tfrecord')):
        for _, record in records.shard_records(str(path), shard_formats.named('tfrecord')):
            values = records.example_values(records.parse_example(record))
            values = {key: value for key, (_, value) in values.items()}
            key = values['image/filename'][0].decode().split('/images/', 1)[1]
            found[key] = values
    return found


def test_the_launcher_lists_a_coco_files_images_and_leaves_its_annotations_to_the_pipeline(
    tmp_path,
):
    coco = object_sets.write_coco(str(tmp_path), images=5)
    path = tmp_path / 'annotations' / 'instances.json'
    found = coco_reader.scan(str(path), InputSettings(image_root=str(tmp_path / 'images')))
    entries = list(found.entries)
    assert [entry.key for entry in entries] == [image['file_name'] for image in coco['images']]
    for entry, image in zip(entries, coco['images']):
        assert entry.annotation['objects'] == [] and entry.label == ()
        assert entry.annotation['size'] == [image['height'], image['width']]
    assert found.kind_options['masks'] and found.annotation_join['masks']
    assert found.annotation_join['file'] == str(path)


def test_the_pipeline_joins_objects_in_file_order_whatever_blocks_they_arrive_in(
    tmp_path, monkeypatch
):
    coco = object_sets.write_coco(str(tmp_path), images=11)
    annotations = coco['annotations'][::2] + coco['annotations'][1::2]  # images out of order
    annotations.append({**annotations[0], 'id': 7777, 'image_id': 4242})  # of no image
    annotations.append('not an annotation')
    reordered = {'annotations': annotations, 'categories': coco['categories']}
    reordered['images'] = coco['images']  # after the annotations, as some exporters write
    path = tmp_path / 'annotations' / 'reordered.json'
    path.write_text(json.dumps(reordered))
    images = f'--image-root={tmp_path / "images"}'
    build(path, tmp_path / 'whole', images)
    monkeypatch.setattr(coco_join, 'BATCH', 3)
    monkeypatch.setattr(coco_join, 'SPILL_BYTES', 1)  # a block each few annotations
    counts = build(path, tmp_path / 'spilled', images)['counts']['annotations']
    assert counts['read'] == len(annotations) and counts['written'] == len(annotations) - 2
    assert counts['rejected_by_reason'] == {'unknown_image': 2}
    for name in ('train/train-00000-of-00001.tfrecord', 'rejected_annotations.jsonl'):
        whole, spilled = (tmp_path / out / name for out in ('whole', 'spilled'))
        assert whole.read_bytes() == spilled.read_bytes()
    records = detection_records(tmp_path / 'spilled')
    for image in coco['images']:  # each image's objects in the file's order
        refs = [a for a in annotations[:-2] if a['image_id'] == image['id']]
        labels = [object_sets.COCO_IDS.index(a['category_id']) for a in refs]
        assert records[image['file_name']]['image/object/class/label'] == labels


def test_a_build_without_masks_keeps_the_boxes_and_counts_the_masks(tmp_path, caplog, monkeypatch):
    coco = object_sets.write_coco(str(tmp_path), images=4)
    path = tmp_path / 'annotations' / 'instances.json'
    dataset = build(path, tmp_path / 'out', '--no-masks')
    counts = dataset['counts']['annotations']
    assert counts['masks_not_kept'] == len(coco['annotations'])
    assert counts['written'] == len(coco['annotations'])
    assert dataset['objects']['masks'] is False
    assert caplog.text.count('build again with --masks') == 2  # the reader's, the summary's
    records = detection_records(tmp_path / 'out')
    assert all('image/object/mask' not in values for values in records.values())
    # Without the flag, the file's first annotations decide: here, none of them has a mask.
    monkeypatch.setattr(coco_reader, 'PEEK', 2)
    for annotation in coco['annotations'][:2]:
        del annotation['segmentation']
    path.write_text(json.dumps(coco))
    counts = build(path, tmp_path / 'peeked')['counts']['annotations']
    assert counts['masks_not_kept'] == len(coco['annotations']) - 2
    dataset = build(path, tmp_path / 'kept', '--masks')
    assert dataset['objects']['masks'] is True
    assert 'masks_not_kept' not in dataset['counts']['annotations']


def test_the_categories_come_from_the_files_end_only_where_they_end_it(tmp_path):
    categories = [{'id': 3, 'name': 'cat'}, {'id': 1, 'name': 'dog'}]
    nested = {'images': [], 'categories': categories, 'info': {'categories': [{'id': 9}]}}
    cases = [
        ({'images': [], 'annotations': [], 'categories': categories}, True),  # COCO's order
        ({'categories': categories, 'images': [], 'annotations': []}, False),
        (nested, False),  # a "categories" of another object, last
        ({'images': [{'file_name': '"categories": [] }'}], 'categories': categories}, True),
    ]
    for document, at_end in cases:
        path = tmp_path / 'instances.json'
        path.write_text(json.dumps(document))
        annotations = coco_reader.AnnotationFile(str(path), open_read)
        found = coco_reader._categories_at_end(annotations)  # pylint: disable=protected-access
        assert (found == categories) if at_end else found is None
        assert coco_reader.read_categories(annotations) == [(1, 'dog'), (3, 'cat')]


class _OnlyRead:
    """An archive's member as the launcher and the workers get it: bytes that stream, no seek."""

    def __init__(self, path):
        self._file = open(path, 'rb')  # pylint: disable=consider-using-with

    def read(self, size=-1):
        return self._file.read(size)

    def seek(self, *unused):
        raise io.UnsupportedOperation('seek')

    def __enter__(self):
        return self

    def __exit__(self, *unused):
        self._file.close()


def test_an_archived_files_categories_come_from_its_last_bytes_read_through(tmp_path):
    categories = [{'id': 3, 'name': 'cat'}, {'id': 1, 'name': 'dog'}]
    # Over twice TAIL_BYTES of images before them: the tail is kept across several reads.
    name = 'x' * 200
    images = [{'id': i, 'file_name': f'{i}{name}.jpg'} for i in range(12_000)]
    for document, at_end in (
        ({'images': images, 'annotations': [], 'categories': categories}, True),
        ({'categories': categories, 'images': images, 'annotations': []}, False),
    ):
        path = tmp_path / 'instances.json'
        path.write_text(json.dumps(document))
        assert path.stat().st_size > 2 * coco_reader.TAIL_BYTES
        member = coco_reader.AnnotationFile(str(path), _OnlyRead, source='an archive member')
        found = coco_reader._categories_at_end(member)  # pylint: disable=protected-access
        assert (found == categories) if at_end else found is None
        assert coco_reader.read_categories(member) == [(1, 'dog'), (3, 'cat')]


def test_masks_are_a_coco_files_choice(tmp_path, caplog):
    object_sets.write_voc(str(tmp_path / 'voc'), images=2)
    status = launcher.main(build_flags(tmp_path / 'voc', tmp_path / 'out', '--no-masks'))
    assert status == 2 and '--no-masks is for a COCO file' in caplog.text


def test_a_set_of_several_work_items_gives_each_its_own_images_objects(tmp_path):
    object_sets.write_coco(str(tmp_path), images=9)
    path = tmp_path / 'annotations' / 'instances.json'
    whole = build(path, tmp_path / 'whole')['counts']['annotations']
    items = build(path, tmp_path / 'items', '--chunk-size', '2')['counts']['annotations']
    assert items == whole and whole['written'] == whole['read'] > 0
    assert detection_records(tmp_path / 'items') == detection_records(tmp_path / 'whole')


class _LoggedStore(blocks.BlockStore):
    """The build's own store, each read of an annotation block logged with its range."""

    def __init__(self, store, ranges, log):
        self._store, self._ranges, self._log = store, ranges, log

    def get(self, ref):
        self._log.append(('read', self._ranges[ref]))
        return self._store.get(ref)


def test_a_work_item_of_a_whole_archive_holds_one_range_of_annotations_at_a_time(
    tmp_path, monkeypatch
):
    """The images of a .tar.gz are one work item, however many: its join reads the blocks of
    one range of images when its lines reach them, each once, and the records are those of a
    join of the whole work item at once."""
    coco = object_sets.write_coco(str(tmp_path), images=10)
    coco['annotations'] = coco['annotations'][::2] + coco['annotations'][1::2]  # blocks mixed
    path = tmp_path / 'annotations' / 'instances.json'
    path.write_text(json.dumps(coco))
    with tarfile.open(tmp_path / 'images.tar.gz', 'w:gz') as tar:
        tar.add(tmp_path / 'images', arcname='images')
    flags = ('--image-root', tmp_path / 'images.tar.gz', '--chunk-size', '2')
    build(path, tmp_path / 'whole', *flags)  # one range: the work item's ten images
    monkeypatch.setattr(coco_join, 'RANGE', 3)
    monkeypatch.setattr(coco_join, 'BATCH', 2)
    monkeypatch.setattr(coco_join, 'SPILL_BYTES', 1)  # a range's blocks from several spills
    joins, joined_lines = [], coco_join.joined_lines

    def logged(lines, refs, join, store):
        lines, refs, log = list(lines), list(refs), []
        store = _LoggedStore(store, {ref: number for number, ref in refs}, log)
        joined = {'log': log, 'ranges': [number for number, _ in refs], 'lines': []}
        # Lines out of position order (none are): a range is read again, nothing lost.
        joined['backwards'] = list(joined_lines(lines[::-1], refs, join, store))[::-1]
        joins.append(joined)
        log.clear()
        for line in joined_lines(lines, refs, join, store):
            log.append(('line', {entry.id // 3 for entry in line}))
            joined['lines'].append(line)
            yield line

    monkeypatch.setattr(coco_join, 'joined_lines', logged)
    counts = build(path, tmp_path / 'ranged', *flags)['counts']['annotations']
    assert counts['written'] == counts['read'] == len(coco['annotations'])
    for name in ('train/train-00000-of-00001.tfrecord', 'rejected_annotations.jsonl'):
        whole, ranged = (tmp_path / out / name for out in ('whole', 'ranged'))
        assert whole.read_bytes() == ranged.read_bytes()
    [joined] = joins  # one work item, of five lines
    ranges = joined['ranges']
    assert len(joined['lines']) == 5 and set(ranges) == {0, 1, 2, 3}
    assert len(ranges) > len(set(ranges))  # ranges of several blocks
    assert joined['backwards'] == joined['lines']
    read, reached = [], set()
    for event, found in joined['log']:
        if event == 'read':  # in range order: one range's blocks after another's
            assert not read or found >= read[-1]
            read.append(found)
        else:  # a line leaves with every range it reached read, and none it has not
            reached |= found
            assert set(read) == reached & set(ranges)
    assert sorted(read) == sorted(ranges)  # each block read once


def test_with_an_inline_store_as_on_dataflow_annotations_travel_as_refs_to_files(
    tmp_path, monkeypatch
):
    """Where the build's store is inline (a distributed runner's: a ref is its block), the
    annotations still wait in files under the build's temporary folder, so that a work item
    travels with byte ranges of them; the records are those of the local runner's build, and
    Finalize takes the files away."""
    from pipelines import runner  # pylint: disable=import-outside-toplevel

    coco = object_sets.write_coco(str(tmp_path), images=6)
    path = tmp_path / 'annotations' / 'instances.json'
    with tarfile.open(tmp_path / 'images.tar.gz', 'w:gz') as tar:
        tar.add(tmp_path / 'images', arcname='images')
    flags = ('--image-root', tmp_path / 'images.tar.gz')
    build(path, tmp_path / 'spilled', *flags)
    monkeypatch.setattr(runner.Launch, 'block_store', lambda self, output: blocks.BlockStore())
    refs, joined_lines = [], coco_join.joined_lines

    def logged(lines, found, join, store):
        found = list(found)
        refs.extend(ref for _, ref in found)
        yield from joined_lines(lines, found, join, store)

    monkeypatch.setattr(coco_join, 'joined_lines', logged)
    counts = build(path, tmp_path / 'inline', *flags)['counts']['annotations']
    assert counts['written'] == counts['read'] == len(coco['annotations'])
    assert refs and all(isinstance(ref, tuple) and len(ref) == 3 for ref in refs)  # byte ranges
    for name in ('train/train-00000-of-00001.tfrecord', 'rejected_annotations.jsonl'):
        spilled, inline = (tmp_path / out / name for out in ('spilled', 'inline'))
        assert spilled.read_bytes() == inline.read_bytes()
    assert not (tmp_path / 'inline' / '.imageshards-tmp').exists()
