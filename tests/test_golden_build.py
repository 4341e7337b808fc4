"""Golden bytes of a whole build: a build without new flags writes exactly the records it always
did (keys, values, image bytes, order, framing), whatever features are added beside them.

The inputs are fixed bytes, not made by Pillow (whose encoder may change between versions): two
small JPEGs held here, made distinct by a comment segment, and PNGs whose pixel stream is stored
uncompressed. `image/filename` holds the input's absolute path, which differs per run, so each
record is compared with its filename made relative to the input root.
"""

import base64
import hashlib
import struct
import zlib

from imageshards import records
from imageshards.kinds import example_bytes
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards.shard_formats import registry as shard_formats
from imageshards.shard_formats import tfrecord
from pipelines import launcher

TFRECORD = shard_formats.named('tfrecord')  # the shards' format

_RGB_JPEG = base64.b64decode(
    '/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAMCAgMCAgMDAwMEAwMEBQgFBQQEBQoHBwYIDAoMDAsKCwsNDhIQDQ4RDgsL'
    'EBYQERMUFRUVDA8XGBYUGBIUFRT/2wBDAQMEBAUEBQkFBQkUDQsNFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQU'
    'FBQUFBQUFBQUFBQUFBQUFBQUFBT/wAARCAAeACgDASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcI'
    'CQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRol'
    'JicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ip'
    'qrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAA'
    'AAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLR'
    'ChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVmZ2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaX'
    'mJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3+Pn6/9oADAMBAAIRAxEA'
    'PwDVpQUBBlkEMY+9IyswQdyQoJOPQAn0BpKgv7XUL6xubbSJri21WaNo7Oa0j8yaOYgiNkT+JgxBA7nAr8QhHmmo9z+U'
    'sHSjXxNOlJNqUknbfV208x89xHFFfyxsZYbNJXMsim3WQRttbZ5wQn5jEozgHz0IyodkzdQ8QSWBjxpGp3Qffg20AcYV'
    '1Qn73OWkjAxnJbAywYLYSy0bT9U1++1eHUru1VI7pr86cLeMxN5Us0DRxxiM7sDyXcKu2UuGV0VK5r+3dIxBqsthqF0J'
    'prm+kv4o44bua1U+bCtzYylvOVChcudyuAy+Z94N+oU+GcPqmm7rmW8dLOSs3Kzdt1vvom0fumH4Hyqo4u83G6s76Ts1'
    'zJPyV7rdScY92dXp98mo2wnjR0Qsy4fAOQSDkA8YII98ZGQQSVbe1jtwssV1bTJdbrhYYIpYmt1ZjsSRJMYLJtkGFUMk'
    'sbHezNLIV+eZhQWGxVSio2Se29vL+r+r3PxzPMHDL8zr4WnFxjGTSTd2l0TfVra/XcZUdxEZ7eWISPCXUqJI8bkyOoyC'
    'Mj3BqSiuBNxaaPFjJwkpLp8/wejI9bgOv2cf2q4nF63ltcPFsjhkkR2cSIioGjbexbKvwQCP4t1bXtNn1+e7a51fU7iK'
    '4IkeG4mUh5ggTzJGRUaU7VUEOxGFC8L8tXaK9WGbY2Ct7S680n89U7PzWvmfXw4vzuHKo1/h292GmjX8vZu3a7sS3d09'
    '7dPM8dvCCEjSG1gWGKNERY0VVUYHyoM9sk7QibUUqKivLnOVSTlLdny2Ir1MVVlWq/FLV2SWvokl+B//2Q=='
)
_GREY_JPEG = base64.b64decode(
    '/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAYEBQYFBAYGBQYHBwYIChAKCgkJChQODwwQFxQYGBcUFhYaHSUfGhsjHBYW'
    'ICwgIyYnKSopGR8tMC0oMCUoKSj/wAALCAAeACgBAREA/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QA'
    'tRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0'
    'NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2'
    't7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/9oACAEBAAA/APJI9MuZY7Z4vIc3GRGi3EZc'
    '4DE5TduHCE8gdV/vLnR0XwjrWtSLHp1rHJKz+WI3uIon3Yc/ddgekcnP+w3pRqnhDXtL0pdTv9Oki09tu243KyNuJC4I'
    'JznGRjqCD0IJwaK7nSopl8NWrtEpSe2eILcITAFW6SXzDviMbb2h2MN2QsO75gCg7QzX7M7alby2M8T3Fvbveyn/AEtX'
    'LAuxZt275sKeBtIGCrgx874ltbceCrkTakpu4GV0iaWHa6NLhIowoAcqoJfYqFQIlK4UY80oruvC3i7S9A8MXNmNPe7u'
    '7lX86KWNBDK5ICF3XEjIq5JTIyQAGUFsy3/ifRVELWE+sFIXVks0jFpCVDxuUDLKzquY+zcFlb7yM00Pi7xXputW921s'
    'l1He3EESSSmFIxMwkZ33hGAOTsYMQeQQAoORw1FFFFFFf//Z'
)
# The canonical digest of each split's records (see _canonical_digest), as built at 85bde01.
GOLDEN = {
    'train': 'bcca53ef0205616162e07d2ab8a6e10211ea8f6cb585f3d64235303b5fc12de7',
    'val': 'dde82d4e1f2e2e0a9cf16db8c7efe23a2e1c225becadc0530890605a6da0ecd9',
}


def _with_comment(jpeg, text):
    """`jpeg` made distinct by a COM segment after its JFIF segment (still the same pixels)."""
    payload = text.encode()
    end = 4 + struct.unpack('>H', jpeg[4:6])[0]  # SOI, then APP0's marker and its length
    return jpeg[:end] + b'\xff\xfe' + struct.pack('>H', len(payload) + 2) + payload + jpeg[end:]


def _stored_png(index, width=20, height=12):
    """An RGB PNG whose deflate stream is stored, not compressed: the same bytes with any zlib."""
    rows = b''.join(
        b'\0' + bytes((x * 12 + index) % 256 for x in range(width * 3)) for _ in range(height)
    )

    def chunk(kind, data):
        crc = struct.pack('>I', zlib.crc32(kind + data))
        return struct.pack('>I', len(data)) + kind + data + crc

    header = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 0)
    return (
        b'\x89PNG\r\n\x1a\n'
        + chunk(b'IHDR', header)
        + chunk(b'IDAT', zlib.compress(rows, 0))
        + chunk(b'IEND', b'')
    )


def write_golden_tree(root):
    """16 fixed inputs in two classes: JPEGs (colour and grey) and PNGs."""
    for class_index, name in enumerate(('kite', 'wren')):
        folder = root / name
        folder.mkdir(parents=True)
        for i in range(8):
            index = class_index * 8 + i
            if i % 4 == 3:
                (folder / f'{i}.png').write_bytes(_stored_png(index))
            else:
                base = _GREY_JPEG if i % 4 == 2 else _RGB_JPEG
                (folder / f'{i}.jpg').write_bytes(_with_comment(base, f'golden {index}'))


def _canonical_digest(root, out, dataset, split):
    """sha256 of the split's framed records, in shard order, each with `image/filename` made
    relative to `root`."""
    digest = hashlib.sha256()
    prefix = str(root).rstrip('/') + '/'
    for shard in dataset['splits'][split]['shards']:
        for _, record in records.shard_records(str(out / shard['path']), TFRECORD):
            example = example_bytes.example_class()()
            example.ParseFromString(record)
            filename = example.features.feature[features.FILENAME].bytes_list.value
            filename[0] = filename[0].decode().removeprefix(prefix).encode()
            digest.update(tfrecord.frame(example.SerializeToString(deterministic=True)))
    return digest.hexdigest()


def golden_build(tmp_path, *flags, mode='in_memory'):
    root = tmp_path / 'tree'
    write_golden_tree(root)
    out = tmp_path / 'out'
    dataset = launcher.run(
        [
            f'--direct_running_mode={mode}',
            '--input',
            str(root),
            '--output',
            str(out),
            '--splits',
            'train=0.75,val=0.25',
            '--num-shards',
            '2',
            '--seed',
            '11',
            '--no-analyze',
            *flags,
        ]
    )
    return root, out, dataset


def test_a_build_without_new_flags_writes_the_golden_records(tmp_path):
    root, out, dataset = golden_build(tmp_path)
    found = {split: _canonical_digest(root, out, dataset, split) for split in GOLDEN}
    assert found == GOLDEN
    assert set(dataset['features']) == set(kinds.Classification(features.EXAMPLES).schema)


def test_reserializing_a_record_changes_no_byte():
    """The canonical digest is of the records as written: re-serializing changes no byte but
    the filename (checked on a record whose filename is already relative)."""
    example = example_bytes.example_class()()
    values = {
        features.ENCODED: _RGB_JPEG,
        features.FORMAT: 'jpeg',
        features.HEIGHT: 30,
        features.WIDTH: 40,
        features.CHANNELS: 3,
        features.LABEL: 1,
        features.LABEL_TEXT: 'wren',
        features.FILENAME: 'wren/0.jpg',
        features.SHA256: hashlib.sha256(_RGB_JPEG).hexdigest(),
        features.ID: 4,
    }
    record = example_bytes.encode_example(kinds.Classification(features.EXAMPLES), values)
    example.ParseFromString(record)
    assert example.SerializeToString(deterministic=True) == record
