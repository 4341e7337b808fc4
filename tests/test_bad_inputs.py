"""The bad-input matrix: every kind of file a build meets, several of each, mixed into a valid tree
and into CSV and JSONL manifests, through real builds.

Each valid input must be written once and decode in TensorFlow to the pixels Pillow shows; each
broken one must be in rejected.jsonl with its specific reason; and the numbers must add up.
"""

import collections
import csv
import functools
import hashlib
import io
import json
import os
import random
import typing

import numpy as np
import pytest
from PIL import Image

from imageshards import features
from imageshards import tfrecord
from pipelines import build
from pipelines import images

import images_for_tests as imgs

CLASSES = ('ant', 'bee', 'cat')
INSTANCES = 3  # of each kind
MAX_PIXELS = 89_478_485  # the default of --max-pixels


def _cached(make):
    """Big bombs take a while to make; every instance of one may share its bytes."""
    once = functools.cache(make)
    return lambda index: once()


# kind -> (file extension, bytes of instance `index`, stored format, original bytes kept)
VALID = {
    'jpeg_rgb': ('.jpg', imgs.jpeg, 'jpeg', True),
    'jpeg_grey': ('.jpg', lambda i: imgs.image_bytes(i, 'JPEG', 'L'), 'jpeg', True),
    'jpeg_progressive': ('.jpeg', lambda i: imgs.jpeg(i, progressive=True), 'jpeg', True),
    'jpeg_bytes_after_end_marker': ('.jpg', imgs.jpeg_with_trailing_bytes, 'jpeg', True),
    'jpeg_restart_markers': (
        '.jpg',
        lambda i: imgs.jpeg(i, size=(48, 64), restart_marker_blocks=3),
        'jpeg',
        True,
    ),
    'jpeg_cmyk': ('.jpg', lambda i: imgs.image_bytes(i, 'JPEG', 'CMYK'), 'png', False),
    'jpeg_exif_rotated': (
        '.jpg',
        lambda i: imgs.exif_rotated_jpeg(i, orientation=(3, 6, 8)[i % 3]),
        'png',
        False,
    ),
    # Unreadable EXIF is ignored, by Pillow here as by TensorFlow: the pixels as coded.
    'jpeg_corrupt_exif': ('.jpg', imgs.corrupt_exif_jpeg, 'jpeg', True),
    'mpo_phone_photo': ('.jpg', lambda i: imgs.animated(i, 'MPO', frames=2), 'jpeg', True),
    'png_named_jpg': ('.jpg', imgs.png, 'png', True),
    'jpeg_named_png': ('.png', imgs.jpeg, 'jpeg', True),
    'png_rgb': ('.png', imgs.png, 'png', True),
    'png_grey': ('.png', lambda i: imgs.image_bytes(i, 'PNG', 'L'), 'png', True),
    'png_grey_alpha': ('.png', lambda i: imgs.image_bytes(i, 'PNG', 'LA'), 'png', True),
    'png_rgba': ('.png', lambda i: imgs.image_bytes(i, 'PNG', 'RGBA'), 'png', True),
    'png_palette': ('.png', imgs.palette_png, 'png', True),
    'png_palette_4bit_transparent': (
        '.png',
        lambda i: imgs.palette_png(i, bits=4, transparency=0),
        'png',
        True,
    ),
    'png_16bit_grey': ('.png', imgs.sixteen_bit_png, 'png', False),
    'png_16bit_rgb': ('.png', imgs.sixteen_bit_rgb_png, 'png', False),
    'png_animated': ('.png', lambda i: imgs.animated(i, 'PNG'), 'png', True),
    'gif': ('.gif', lambda i: imgs.image_bytes(i, 'GIF', 'P'), 'png', False),
    'gif_animated': ('.gif', lambda i: imgs.animated(i, 'GIF', duration=40, loop=0), 'png', False),
    'tiff': ('.tif', lambda i: imgs.image_bytes(i, 'TIFF'), 'png', False),
    'tiff_lzw_cmyk': (
        '.tiff',
        lambda i: imgs.image_bytes(i, 'TIFF', 'CMYK', compression='tiff_lzw'),
        'png',
        False,
    ),
    'bmp': ('.BMP', lambda i: imgs.image_bytes(i, 'BMP'), 'png', False),
    'webp_lossless': ('.webp', lambda i: imgs.image_bytes(i, 'WEBP', lossless=True), 'png', False),
    'webp_lossy': ('.webp', lambda i: imgs.image_bytes(i, 'WEBP', quality=80), 'png', False),
    'webp_animated': ('.webp', lambda i: imgs.animated(i, 'WEBP', lossless=True), 'png', False),
}

_BIG = (64, 96)


def _half(data):
    return data[: len(data) // 2]


# kind -> (file extension, bytes of instance `index`, reason)
BROKEN = {
    'jpeg_truncated': ('.jpg', lambda i: _half(imgs.jpeg(i, size=_BIG)), 'truncated'),
    'jpeg_without_end_marker': ('.jpg', lambda i: imgs.jpeg(i, size=_BIG)[:-2], 'truncated'),
    # All pixel data there, only the end marker lost: Pillow decodes it, TensorFlow does not.
    'jpeg_cut_just_before_end_marker': (
        '.jpg',
        lambda i: imgs.jpeg_cut_before_end_marker(i % 3),
        'truncated',
    ),
    'jpeg_progressive_truncated': (
        '.jpg',
        lambda i: imgs.jpeg(i, size=_BIG, progressive=True)[:-300],
        'truncated',
    ),
    'zero_bytes': ('.jpg', lambda i: b'', 'empty_file'),
    'html_page': (
        '.jpg',
        lambda i: b'<!doctype html><title>404 Not Found</title>\n',
        'not_an_image',
    ),
    'text_file': ('.png', lambda i: f'notes, version {i}\n'.encode(), 'not_an_image'),
    'png_truncated': ('.png', lambda i: imgs.png(i, size=_BIG)[:-100], 'truncated'),
    'png_flipped_byte_in_pixels': ('.png', imgs.png_flipped_byte, 'decode_error'),
    # Pillow skips the CRCs of IDAT and IEND and reads these; TensorFlow (libpng) refuses them.
    'png_flipped_byte_in_crc': (
        '.png',
        lambda i: imgs.png_flipped_byte(i, ('IDAT', 'IEND')[i % 2], crc=True),
        'decode_error',
    ),
    'jpeg_bad_huffman_table': ('.jpg', imgs.jpeg_bad_huffman_table, 'decode_error'),
    'jpeg_zero_width': ('.jpg', imgs.jpeg_zero_width, 'decode_error'),
    'jpeg_without_scan': ('.jpg', imgs.jpeg_without_scan, 'decode_error'),
    'png_bad_header_crc': (
        '.png',
        lambda i: imgs.png(i)[:29] + bytes([imgs.png(i)[29] ^ 0xFF]) + imgs.png(i)[30:],
        'decode_error',
    ),
    'gif_truncated': ('.gif', lambda i: imgs.image_bytes(i, 'GIF', 'P', _BIG)[:-60], 'truncated'),
    'tiff_truncated': (
        '.tif',
        lambda i: imgs.image_bytes(i, 'TIFF', size=_BIG, compression='tiff_lzw')[:-200],
        'truncated',
    ),
    'bmp_truncated': ('.bmp', lambda i: imgs.image_bytes(i, 'BMP', size=_BIG)[:-50], 'truncated'),
    'webp_truncated': (
        '.webp',
        lambda i: imgs.image_bytes(i, 'WEBP', size=_BIG, lossless=True)[:-40],
        'truncated',
    ),
    'heic_named_jpg': (
        '.jpg',
        lambda i: b'\0\0\0\x18ftypheic\0\0\0\0mif1heic' + bytes(64),
        'unsupported_format',
    ),
    'psd_named_png': ('.png', lambda i: b'8BPS\0\x01' + bytes(64), 'unsupported_format'),
    'bomb_png_pixels': ('.png', _cached(lambda: imgs.decompression_bomb_png(12_000)), 'bomb'),
    'bomb_gif_screen': ('.gif', imgs.gif_screen_bomb, 'bomb'),
    'bomb_gif_frame': ('.gif', imgs.gif_frame_bomb, 'bomb'),
    'bomb_jpeg_pixels': ('.jpg', imgs.jpeg_size_bomb, 'bomb'),  # a 60000x60000 frame header
    'bomb_bmp_pixels': ('.bmp', imgs.bmp_size_bomb, 'bomb'),
    'bomb_webp_canvas': ('.webp', imgs.webp_canvas_bomb, 'bomb'),
    'bomb_tiff_pixels': ('.tif', _cached(imgs.tiff_size_bomb), 'bomb'),
    'bomb_png_text': ('.png', _cached(imgs.png_text_bomb), 'bomb'),
    'bomb_png_text_after_pixels': (
        '.png',
        _cached(lambda: imgs.png_text_bomb(0, before=b'IEND')),
        'bomb',
    ),
    'bomb_png_icc_profile': (
        '.png',
        _cached(lambda: imgs.png_text_bomb(0, chunk_type=b'iCCP')),
        'bomb',
    ),
    'bomb_jpeg_scans': ('.jpg', _cached(imgs.jpeg_scan_bomb), 'bomb'),
}
BROKEN = {
    kind: (ext, make, 'decompression_bomb' if reason == 'bomb' else reason)
    for kind, (ext, make, reason) in BROKEN.items()
}
# Files a tree skips, and that a manifest naming them lists as inputs.
EXTRAS = {
    # relative path: (bytes, what a tree does with it, what a manifest row naming it gets)
    'ant/.hidden.jpg': (imgs.jpeg(9001), 'hidden', ('jpeg', True)),
    'bee/notes.txt': (b'not an image\n', 'not_image', 'not_an_image'),
    'cat/Thumbs.db': (bytes(512), 'not_image', 'not_an_image'),
    '.cache/thumb.png': (imgs.png(9002), 'hidden', ('png', True)),
}


class Expected(typing.NamedTuple):
    kind: str
    data: bytes
    reason: str = ''  # for a broken input
    format: str = ''  # for a valid one
    kept: bool = False

    @property
    def sha256(self):
        stored = self.data if self.kept else images.reencode(self.data)
        return hashlib.sha256(stored).hexdigest()


def _file_name(kind, ext, n):
    """Instance names: plain, with spaces and non-ASCII letters, and in another script."""
    return (f'{kind}_{n}', f'{kind} café №{n}', f'写真 {kind} {n}')[n % 3] + ext


@pytest.fixture(scope='module')
def matrix(tmp_path_factory):
    """The tree `root/<class>/<file>`; returns (root, {relative path: Expected})."""
    root = tmp_path_factory.mktemp('matrix')
    expected = {}
    for path in imgs.write_tree(root, 8, CLASSES):
        kept_as = 'jpeg' if path.suffix == '.jpg' else 'png'
        relative = str(path.relative_to(root))
        expected[relative] = Expected('valid_tree', path.read_bytes(), format=kept_as, kept=True)
    for index, (kind, (ext, make, *outcome)) in enumerate({**VALID, **BROKEN}.items()):
        for n in range(INSTANCES):
            relative = f'{CLASSES[(index + n) % 3]}/{_file_name(kind, ext, n)}'
            data = make(100 * index + n)
            if kind in VALID:
                stored_format, kept = outcome
                expected[relative] = Expected(kind, data, format=stored_format, kept=kept)
            else:
                expected[relative] = Expected(kind, data, reason=outcome[0])
            (root / relative).write_bytes(data)
    for relative, (data, _, _) in EXTRAS.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    return root, expected


def _manifest_expectations(matrix):
    root, expected = matrix
    expected = dict(expected)
    for relative, (data, _, outcome) in EXTRAS.items():
        if isinstance(outcome, tuple):
            expected[relative] = Expected('listed_extra', data, format=outcome[0], kept=outcome[1])
        else:
            expected[relative] = Expected('listed_extra', data, reason=outcome)
    rows = sorted(expected)
    random.Random(5).shuffle(rows)  # row order is listing order; not the tree's
    return root, expected, [{'path': r, 'label': r.split('/')[0]} for r in rows]


def _write_manifest(root, rows, kind):
    path = root / f'images.{kind}'
    if kind == 'csv':
        with open(path, 'w', newline='', encoding='utf-8') as f:
            writer = csv.DictWriter(f, ['path', 'label'])
            writer.writeheader()
            writer.writerows(rows)
    else:
        path.write_text(
            ''.join(json.dumps(row, ensure_ascii=False) + '\n' for row in rows), encoding='utf-8'
        )
    return path


@pytest.fixture(scope='module', params=['tree', 'csv', 'jsonl'])
def built(request, matrix, tmp_path_factory):
    """A real build of the matrix; returns (out, dataset, root, {relative: Expected})."""
    root, expected = matrix
    spec = str(root)
    if request.param != 'tree':
        root, expected, rows = _manifest_expectations(matrix)
        spec = str(_write_manifest(root, rows, request.param))
    out = tmp_path_factory.mktemp(f'matrix-{request.param}') / 'out'
    try:
        dataset = build.run(
            [
                '--direct_running_mode=in_memory',
                '--input',
                spec,
                '--output',
                str(out),
                '--num-shards',
                '3',
            ]
        )
    finally:
        if request.param != 'tree':
            os.remove(spec)  # the other builds must not see it
    return out, dataset, root, expected, request.param


def _records(out, dataset):
    from tensorflow.core.example import example_pb2  # pylint: disable=import-outside-toplevel

    for split in dataset['splits'].values():
        for shard in split['shards']:
            with open(out / shard['path'], 'rb') as f:
                for record in tfrecord.read_records(f, shard['path']):
                    feature = example_pb2.Example.FromString(record).features.feature
                    yield {
                        key: getattr(value, value.WhichOneof('kind')).value[0]
                        for key, value in feature.items()
                    }


def _rejected(out, root):
    lines = (out / 'rejected.jsonl').read_text(encoding='utf-8').splitlines()
    return {os.path.relpath(row['path'], root): row for row in map(json.loads, lines)}


def test_every_input_is_accounted_for(built):
    out, dataset, _, expected, mode = built
    counts = dataset['counts']
    broken = [e for e in expected.values() if e.reason]
    assert counts['inputs'] == len(expected)
    assert counts['inputs'] == counts['written'] + counts['rejected'] + counts['duplicates']
    assert (counts['written'], counts['rejected']) == (len(expected) - len(broken), len(broken))
    assert counts['rejected_by_reason'] == dict(
        sorted(collections.Counter(e.reason for e in broken).items())
    )
    if mode == 'tree':
        skips = collections.Counter(skip for _, skip, _ in EXTRAS.values())
        assert counts['skipped_by_reason'] == dict(skips)
    assert (out / '_SUCCESS').exists()


def test_each_broken_input_is_rejected_with_its_specific_reason(built):
    out, _, root, expected, _ = built
    rejected = _rejected(out, root)
    assert {path: row['reason'] for path, row in rejected.items()} == {
        path: e.reason for path, e in expected.items() if e.reason
    }
    assert all(row['detail'] for row in rejected.values())


def test_written_sha256_multiset_equals_the_valid_inputs(built):
    out, dataset, _, expected, _ = built
    records = list(_records(out, dataset))
    written = collections.Counter(r[features.SHA256].decode() for r in records)
    assert written == collections.Counter(e.sha256 for e in expected.values() if not e.reason)
    for record in records:
        assert (
            hashlib.sha256(record[features.ENCODED]).hexdigest() == record[features.SHA256].decode()
        )


def test_each_valid_input_decodes_in_tensorflow_to_the_pixels_pillow_shows(built, tf):
    out, dataset, root, expected, _ = built
    seen = set()
    for record in _records(out, dataset):
        relative = os.path.relpath(record[features.FILENAME].decode(), root)
        want = expected[relative]
        assert not want.reason and relative not in seen, relative
        seen.add(relative)
        encoded = record[features.ENCODED]
        assert record[features.FORMAT].decode() == want.format, relative
        if want.format == 'jpeg':
            decoded = tf.io.decode_jpeg(encoded, channels=3, dct_method='INTEGER_ACCURATE')
        else:
            decoded = tf.io.decode_image(encoded, channels=3, expand_animations=False)
        reference = images.decode_rgb(want.data)
        np.testing.assert_array_equal(decoded.numpy(), reference, err_msg=relative)
        assert (record[features.HEIGHT], record[features.WIDTH]) == reference.shape[:2]
        as_stored = tf.io.decode_image(encoded, expand_animations=False)
        assert record[features.CHANNELS] == as_stored.shape[-1], relative
    assert seen == {path for path, e in expected.items() if not e.reason}


@pytest.mark.parametrize('kind', sorted(VALID))
def test_valid_kinds_are_stored_as_planned(kind):
    _, make, stored_format, kept = VALID[kind]
    data = make(7)
    info, stored = images.inspect_image(data, MAX_PIXELS)
    assert (info.format, info.reencoded, stored is None) == (stored_format, not kept, kept)


@pytest.mark.parametrize('kind', sorted(BROKEN))
def test_broken_kinds_get_their_reason_without_a_build(kind):
    _, make, reason = BROKEN[kind]
    with pytest.raises(images.Rejected) as caught:
        images.inspect_image(make(7), MAX_PIXELS)
    assert caught.value.reason == reason, caught.value.detail


# Kinds that Pillow decodes and a build rejects: TensorFlow refuses them (training would fail),
# or they exceed a limit of the build's (a progressive JPEG of 400 scans costs seconds each).
REJECTED_THOUGH_PILLOW_DECODES = {
    'jpeg_cut_just_before_end_marker',
    'png_flipped_byte_in_crc',
    'bomb_jpeg_scans',
}


def _pillow_decodes(data):
    """Whether Pillow decodes every pixel of `data`, within the build's pixel limit."""
    try:
        image = Image.open(io.BytesIO(data), formats=images.SUPPORTED_FORMATS)
        if image.width * image.height > MAX_PIXELS:
            return False
        image.load()
    except Exception:  # pylint: disable=broad-except
        return False
    return True


@pytest.mark.parametrize('kind', sorted({**VALID, **BROKEN}))
def test_validation_agrees_with_a_full_pillow_decode(kind):
    """Whatever validation reads of a file (its structure, or a decode), it keeps exactly what a
    full Pillow decode reads, but for what TensorFlow alone refuses."""
    _, make, *_ = {**VALID, **BROKEN}[kind]
    for index in range(3):
        data = make(100 + index)
        try:
            images.inspect_image(data, MAX_PIXELS)
            kept = True
        except images.Rejected:
            kept = False
        expected = _pillow_decodes(data) and kind not in REJECTED_THOUGH_PILLOW_DECODES
        assert kept == expected, (kind, index)
