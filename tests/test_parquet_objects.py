"""Detection builds in Parquet hold their objects as one nested `objects` column (a struct of
lists, as Hugging Face `datasets` writes a `Sequence` of a dict): pyarrow and `datasets` read
it with the build's class names, its values are the records' (boxes bit for bit), and the rows
give back the TFRecord build's records byte for byte (images without objects and with masks,
COCO's and VOC's)."""

import io
import json
import pathlib

import datasets
import numpy as np
import object_sets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from imageshards import dataset_json
from imageshards import records
from imageshards.kinds import detection
from imageshards.shard_formats import parquet_objects
from imageshards.shard_formats import registry as shard_formats
from imageshards_cli import verify
from pipelines import launcher

from build_commands import build_flags

_FIELDS = {  # the objects' fields of a COCO build, each key's
    'label': detection.OBJECT_LABEL,
    'text': detection.OBJECT_TEXT,
    'is_crowd': detection.IS_CROWD,
    'area': detection.AREA,
    'mask': detection.MASK,
}


def _build(source, out, shard_format):
    launcher.run(
        build_flags(
            source,
            out,
            '--shard-format',
            shard_format,
            splits='train=0.5,val=0.5',
            num_shards=1,
            seed=3,
            analyze=False,
            in_memory=True,
        )
    )
    return out


@pytest.fixture(scope='module')
def builds(tmp_path_factory):
    """{(set, format): build folder} of a COCO set (masks; images without objects) and a VOC
    set (flags, masks, class maps), each in TFRecord and Parquet."""
    folder = tmp_path_factory.mktemp('objects')
    object_sets.write_coco(str(folder / 'coco'), images=8)
    object_sets.write_voc(str(folder / 'VOC2012'), images=4, segmented=(0, 1))
    sources = {'coco': folder / 'coco' / 'annotations' / 'instances.json'}
    sources['voc'] = folder / 'VOC2012'
    return {
        (name, fmt): _build(source, folder / f'{name}-{fmt}', fmt)
        for name, source in sources.items()
        for fmt in ('tfrecord', 'parquet')
    }


def _records(out):
    """[(split, record bytes)] of a build in its order, read through its format."""
    dataset = dataset_json.load(str(out), complete=True)
    shard_format = shard_formats.of_build(dataset)
    return [
        (split, record)
        for split, entry in sorted(dataset['splits'].items())
        for shard in entry['shards']
        for _, record in records.shard_records(f'{out}/{shard["path"]}', shard_format)
    ]


def _values(record):
    return {k: v for k, (_, v) in records.example_values(records.parse_example(record)).items()}


def _rows(out):
    """[(split, row)] of a Parquet build's files, in the records' order, and its schema."""
    found = []
    for path in sorted(out.glob('*/*.parquet')):
        table = pq.read_table(path)
        found += [(path.parent.name, row) for row in table.to_pylist()]
    return found, table.schema


@pytest.mark.parametrize('name', ['coco', 'voc'])
def test_a_parquet_detection_build_gives_back_the_tfrecord_builds_records(builds, name):
    parquet = _records(builds[name, 'parquet'])
    assert parquet == _records(builds[name, 'tfrecord'])
    assert len(parquet) == (8 if name == 'coco' else 4)
    assert verify.main([str(builds[name, 'parquet'])]) == 0


def test_the_objects_column_is_a_struct_of_the_records_object_lists(builds):
    rows, schema = _rows(builds['coco', 'parquet'])
    assert schema.field('objects').type == pa.struct(
        [
            ('bbox', pa.list_(pa.list_(pa.float32(), 4))),
            ('label', pa.list_(pa.int64())),
            ('text', pa.list_(pa.string())),
            ('is_crowd', pa.list_(pa.int64())),
            ('area', pa.list_(pa.float32())),
            ('mask', pa.list_(pa.binary())),
        ]
    )
    flat = [n for n in schema.names if n.startswith(('object_', 'objects_'))]
    assert flat == [] and schema.names.index('objects') == schema.names.index('source_id') + 1
    expected = [(split, _values(r)) for split, r in _records(builds['coco', 'tfrecord'])]
    assert [split for split, _ in rows] == [split for split, _ in expected]
    sizes = []
    for (_, row), (_, values) in zip(rows, expected):
        objects = row['objects']
        boxes = np.asarray(objects['bbox'], np.float32).reshape(-1, 4)
        coordinates = [values[key] for key in detection.BOX_KEYS]  # xmin, ymin, xmax, ymax
        ours = np.asarray(coordinates, np.float32).reshape(4, -1).T[:, [1, 0, 3, 2]]
        assert boxes.view(np.uint32).tolist() == ours.view(np.uint32).tolist()
        tfds = np.asarray(values[detection.TFDS_BBOX], np.float32)
        assert boxes.ravel().view(np.uint32).tolist() == tfds.view(np.uint32).tolist()
        for field, key in _FIELDS.items():
            stored = objects[field]
            if field == 'text':
                stored = [text.encode() for text in stored]
            assert stored == list(values[key])
        assert objects['label'] == values[detection.TFDS_LABEL]
        for png in objects['mask']:
            assert Image.open(io.BytesIO(png)).size == (row['width'], row['height'])
        sizes.append(len(objects['bbox']))
    assert 0 in sizes and max(sizes) == 3  # images without objects, and with several


def test_the_encoded_images_and_masks_are_stored_as_they_are_and_the_rest_compressed(builds):
    (shard,) = sorted(pathlib.Path(builds['coco', 'parquet']).glob('train/*.parquet'))
    group = pq.ParquetFile(shard).metadata.row_group(0)
    codecs = {
        group.column(i).path_in_schema: group.column(i).compression
        for i in range(group.num_columns)
    }
    stored = ('image.bytes', 'objects.mask.list.element')
    assert [codecs.pop(path) for path in stored] == ['UNCOMPRESSED', 'UNCOMPRESSED']
    assert codecs['objects.bbox.list.element.list.element'] == 'SNAPPY'
    assert set(codecs.values()) == {'SNAPPY'}


def test_hugging_face_datasets_shows_objects_with_the_builds_class_names(builds):
    out = builds['coco', 'parquet']
    files = {s: str(out / s / '*.parquet') for s in ('train', 'val')}
    loaded = datasets.load_dataset('parquet', data_files=files)
    found = loaded['train'].features['objects']
    expected = datasets.Features(
        {
            'objects': datasets.Sequence(
                {
                    'bbox': datasets.Sequence(datasets.Value('float32'), length=4),
                    'label': datasets.ClassLabel(names=list(object_sets.CLASSES)),
                    'text': datasets.Value('string'),
                    'is_crowd': datasets.Value('int64'),
                    'area': datasets.Value('float32'),
                    'mask': datasets.Value('binary'),
                }
            )
        }
    )
    assert found == expected['objects']
    assert found['label'].feature.names == list(object_sets.CLASSES)
    shard = sorted(out.glob('train/*.parquet'))[0]
    stored = json.loads(pq.read_schema(shard).metadata[b'huggingface'])
    assert stored['info']['features']['objects'] == expected.to_dict()['objects']
    rows = [r for split in ('train', 'val') for r in loaded[split]]
    expected_values = [_values(r) for _, r in _records(builds['coco', 'tfrecord'])]
    assert len(rows) == len(expected_values)
    for row, values in zip(rows, expected_values):
        boxes = np.asarray(row['objects']['bbox'], np.float32).reshape(-1)
        tfds = np.asarray(values[detection.TFDS_BBOX], np.float32)
        assert boxes.view(np.uint32).tolist() == tfds.view(np.uint32).tolist()
        names = [found['label'].feature.int2str(i) for i in row['objects']['label']]
        assert [n.encode() for n in names] == values[detection.OBJECT_TEXT]
        assert row['objects']['mask'] == values[detection.MASK]


def test_a_voc_builds_objects_carry_its_flags_and_its_class_map_stays_a_column(builds):
    rows, schema = _rows(builds['voc', 'parquet'])
    names = [field.name for field in schema.field('objects').type]
    assert names == ['bbox', 'label', 'text', 'is_crowd', 'area', 'difficult', 'truncated', 'mask']
    assert schema.field('segmentation_class_encoded').type == pa.binary()
    expected = [_values(r) for _, r in _records(builds['voc', 'tfrecord'])]
    for (_, row), values in zip(rows, expected):
        assert row['objects']['difficult'] == values[detection.DIFFICULT]
        assert row['objects']['truncated'] == values[detection.TRUNCATED]
        assert [row['segmentation_class_encoded']] == values[detection.CLASS_MAP]
    assert any(1 in row['objects']['difficult'] for _, row in rows)


def _data(xmin, ymin, xmax, ymax, tfds_bbox, labels=(0,), tfds_labels=(0,)):
    """{key: [one row's value]} of a record with the given boxes and labels."""
    data = dict(zip(detection.BOX_KEYS, ([xmin], [ymin], [xmax], [ymax])))
    data[detection.TFDS_BBOX] = [tfds_bbox]
    data[detection.OBJECT_LABEL], data[detection.TFDS_LABEL] = [list(labels)], [list(tfds_labels)]
    return data


def test_objects_whose_tfds_copies_differ_are_refused_not_written_wrong():
    schema = dict.fromkeys(_data([0], [0], [0], [0], []), 'float_list')
    schema[detection.OBJECT_LABEL] = schema[detection.TFDS_LABEL] = 'int64_list'
    struct = parquet_objects.arrow_type(schema, lambda key: pa.list_(pa.int64()))
    same = _data([0.1], [0.2], [0.3], [0.4], [0.2, 0.1, 0.4, 0.3])
    written = parquet_objects.array(same, struct)
    assert written.field('bbox').to_pylist() == [[list(np.float32([0.2, 0.1, 0.4, 0.3]))]]
    near = np.nextafter(np.float32(0.4), np.float32(1))  # another float32, the nearest
    with pytest.raises(ValueError, match='objects/bbox'):
        parquet_objects.array(
            _data([0.1], [0.2], [0.3], [0.4], [0.2, 0.1, float(near), 0.3]), struct
        )
    with pytest.raises(ValueError, match='objects/bbox'):  # the same boxes in another order
        parquet_objects.array(_data([0.1], [0.2], [0.3], [0.4], [0.1, 0.2, 0.3, 0.4]), struct)
    with pytest.raises(ValueError, match='objects/label'):
        parquet_objects.array(
            _data([0.1], [0.2], [0.3], [0.4], [0.2, 0.1, 0.4, 0.3], (0,), (1,)), struct
        )
    with pytest.raises(ValueError, match='different lengths'):
        parquet_objects.array(_data([0.1, 0.5], [0.2], [0.3], [0.4], [0.2, 0.1, 0.4, 0.3]), struct)
