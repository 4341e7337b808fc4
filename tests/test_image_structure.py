"""Structural validation of JPEG and PNG files (pipelines/validation/image_structure.py)
against decoding.

The promise: a file the structural check calls plain is one that a full Pillow decode reads, at
the size and mode the check reports, and that validation by decoding would have kept with the
same description. Thousands of mutated real files (flipped, overwritten, inserted and deleted
bytes, truncations, stray markers) hold it to that; TensorFlow decodes a sample of them too.
"""

import io
import random
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from pipelines.validation import image_structure
from pipelines.validation import images
from pipelines.validation import png_structure

import images_for_tests as imgs

MAX_PIXELS = 89_478_485


def _interlaced_png(array):
    """An Adam7-interlaced RGB PNG (Pillow does not write them), filter type 0 on every row."""
    height, width, _ = array.shape
    raw = b''
    for top, left, row_step, column_step in png_structure._ADAM7:
        for row in array[top::row_step, left::column_step]:
            if row.size:
                raw += b'\0' + row.tobytes()
    header = struct.pack('>IIBBBBB', width, height, 8, 2, 0, 0, 1)
    return (
        b'\x89PNG\r\n\x1a\n'
        + imgs.png_chunk(b'IHDR', header)
        + imgs.png_chunk(b'IDAT', zlib.compress(raw))
        + imgs.png_chunk(b'IEND', b'')
    )


def _seeds():
    """Plainly valid files of the kinds cameras and libraries write: (kind, bytes)."""
    seeds = []
    for i in range(4):
        image = Image.fromarray(imgs.pixels(i, i, size=(40 + 8 * i, 56 + 4 * i)))
        exif = image.getexif()
        exif[0x0112] = 1
        exif[0x010F] = 'camera'
        seeds += [
            ('jpeg', imgs.encode(image, 'JPEG', quality=85)),
            ('jpeg', imgs.encode(image.convert('L'), 'JPEG', quality=70)),
            ('jpeg', imgs.encode(image, 'JPEG', quality=90, progressive=True)),
            ('jpeg', imgs.encode(image, 'JPEG', subsampling=0, optimize=True)),
            ('jpeg', imgs.encode(image, 'JPEG', subsampling=1, restart_marker_blocks=2)),
            ('jpeg', imgs.encode(image, 'JPEG', exif=exif, comment=b'a comment')),
            ('png', imgs.encode(image, 'PNG')),
            ('png', imgs.encode(image.convert('RGBA'), 'PNG')),
            ('png', imgs.encode(image.convert('P'), 'PNG')),
            ('png', imgs.encode(image.convert('1'), 'PNG')),
            ('png', imgs.encode(image.convert('LA'), 'PNG', optimize=True)),
            ('png', _interlaced_png(imgs.pixels(i, i, size=(13 + i, 17 + 2 * i)))),
        ]
    return seeds


SEEDS = _seeds()


def _facts(kind, data):
    if kind == 'jpeg':
        return image_structure.jpeg_facts(data, images.MAX_JPEG_SCANS)
    return png_structure.png_facts(data)


@pytest.mark.parametrize('index', range(len(SEEDS)))
def test_ordinary_files_are_plain_and_described_as_a_decode_describes_them(index):
    kind, data = SEEDS[index]
    facts = _facts(kind, data)
    image = Image.open(io.BytesIO(data))
    image.load()
    assert (facts.width, facts.height) == image.size
    structural = images.inspect_image(data, MAX_PIXELS)
    decoded = images._inspect_decoded(images._open(data, MAX_PIXELS), data)
    assert structural == decoded


def _fix_crcs(data):
    """The PNG with every chunk's CRC recomputed, so that the checks behind the CRC are reached."""
    out, position = bytearray(data[:8]), 8
    while position + 12 <= len(data):
        length = struct.unpack('>I', data[position : position + 4])[0]
        end = position + 12 + length
        if end > len(data):
            break
        body = data[position + 4 : end - 4]
        out += data[position : position + 4] + body + struct.pack('>I', zlib.crc32(body))
        position = end
    return bytes(out + data[position:])


def _mutate(data, rng):
    data = bytearray(data)
    size = len(data)

    def place():  # headers hold the structure: aim there more often
        return rng.randrange(min(size, 700)) if rng.random() < 0.6 else rng.randrange(size)

    operation = rng.randrange(8)
    if operation == 0:
        data[place()] ^= 1 << rng.randrange(8)
    elif operation == 1:
        data[place()] = rng.randrange(256)
    elif operation == 2:
        data = data[: rng.randrange(size)]
    elif operation == 3:
        data = data[: rng.randrange(size)] + b'\xff\xd9'
    elif operation == 4:
        start = place()
        del data[start : start + rng.randrange(1, 40)]
    elif operation == 5:
        start = place()
        data[start:start] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 20)))
    elif operation == 6:
        start = place()
        data[start : start + 2] = bytes([0xFF, rng.choice(b'\xc4\xdb\xda\xdd\xd0\xd9\xe1\xc2')])
    else:
        for _ in range(rng.randrange(2, 6)):
            data[place()] = rng.choice([0x00, 0xFF, 0xD9, 0xDA, 0xC4, 0x01, rng.randrange(256)])
    return bytes(data)


def _mutants(count, seed):
    rng = random.Random(seed)
    for _ in range(count):
        kind, data = SEEDS[rng.randrange(len(SEEDS))]
        data = _mutate(data, rng)
        if kind == 'png' and rng.random() < 0.7:
            data = _fix_crcs(data)
        yield kind, data


def _verdict(kind, data):
    try:
        return 'plain', _facts(kind, data)
    except image_structure.Unusual:
        return 'unusual', None
    except image_structure.Fault:
        return 'fault', None


def test_no_mutant_that_a_decode_refuses_passes_as_plain():
    verdicts = {'plain': 0, 'unusual': 0, 'fault': 0}
    for kind, data in _mutants(4000, seed=13):
        verdict, facts = _verdict(kind, data)
        verdicts[verdict] += 1
        if verdict != 'plain':
            continue
        image = Image.open(io.BytesIO(data))
        image.load()  # raises where a full decode refuses the file
        assert (facts.width, facts.height) == image.size
        if kind == 'jpeg':
            assert image.mode == ('L' if facts.components == 1 else 'RGB')
        assert images.inspect_image(data, MAX_PIXELS) == images._inspect_decoded(
            images._open(data, MAX_PIXELS), data
        )
    # The mutations reach every verdict, plain ones by the hundred.
    assert min(verdicts.values()) > 100, verdicts


def test_tensorflow_decodes_mutants_passed_as_plain_and_refuses_crc_faults(tf):
    checked = {'plain': 0, 'fault': 0}
    for kind, data in _mutants(600, seed=29):
        verdict, _ = _verdict(kind, data)
        if verdict == 'plain':
            decode = tf.io.decode_jpeg if kind == 'jpeg' else tf.io.decode_png
            assert decode(data, channels=3).shape[-1] == 3
        elif verdict == 'fault':
            with pytest.raises(tf.errors.InvalidArgumentError):
                tf.io.decode_png(data, channels=3)
        checked[verdict] = checked.get(verdict, 0) + 1
    assert checked['plain'] > 50 and checked['fault'] > 10, checked


def _replace_segment_byte(data, marker, offset, value):
    data = bytearray(data)
    data[data.index(bytes([0xFF, marker])) + 4 + offset] = value
    return bytes(data)


UNUSUAL_JPEGS = {
    # name: (bytes, what the structural check must not pass)
    'exif_rotated': imgs.exif_rotated_jpeg(1, orientation=6),
    'cmyk': imgs.image_bytes(1, 'JPEG', 'CMYK'),
    'twelve_bit': _replace_segment_byte(imgs.jpeg(1), 0xC0, 0, 12),
    'fractional_sampling': _replace_segment_byte(imgs.jpeg(1), 0xC0, 10, 0x31),
    'arithmetic_coding': imgs.jpeg(1).replace(b'\xff\xc0', b'\xff\xc9', 1),
    'lossless': imgs.jpeg(1).replace(b'\xff\xc0', b'\xff\xc3', 1),
    'no_end_marker': imgs.jpeg(1)[:-2],
    'xmp_orientation': imgs.jpeg_with_app1(
        1, b'http://ns.adobe.com/xap/1.0/\0<x tiff:Orientation="6"/>'
    ),
    'mpo': imgs.animated(1, 'MPO', frames=2),
    'scan_bomb': imgs.jpeg_scan_bomb(300),
    'bad_huffman_table': imgs.jpeg_bad_huffman_table(1),
    'without_scan': imgs.jpeg_without_scan(1),
}


@pytest.mark.parametrize('name', sorted(UNUSUAL_JPEGS))
def test_unusual_jpegs_go_to_the_decode(name):
    with pytest.raises(image_structure.Unusual):
        image_structure.jpeg_facts(UNUSUAL_JPEGS[name], images.MAX_JPEG_SCANS)


def test_restart_markers_out_of_order_go_to_the_decode():
    data = imgs.jpeg(3, size=(64, 64), restart_marker_blocks=1)
    assert image_structure.jpeg_facts(data, images.MAX_JPEG_SCANS).width == 64
    first = data.index(b'\xff\xd0')
    swapped = data[:first] + b'\xff\xd3' + data[first + 2 :]
    with pytest.raises(image_structure.Unusual):
        image_structure.jpeg_facts(swapped, images.MAX_JPEG_SCANS)


UNUSUAL_PNGS = {
    'sixteen_bit': imgs.sixteen_bit_png(1),
    'animated': imgs.animated(1, 'PNG'),
    'text_bomb': imgs.png_text_bomb(),
    'exif_chunk': imgs.with_png_chunk(imgs.png(1), imgs.png_chunk(b'eXIf', b'MM\0*\0\0\0\x08\0\0')),
    'truncated': imgs.png(1, size=(64, 96))[:-100],
    'short_pixel_data': _fix_crcs(imgs.png(1)[:40] + imgs.png(1)[41:]),
}


@pytest.mark.parametrize('name', sorted(UNUSUAL_PNGS))
def test_unusual_pngs_go_to_the_decode(name):
    data = UNUSUAL_PNGS[name]
    if name == 'sixteen_bit':  # plainly valid, but stored re-encoded: the decode path's call
        assert png_structure.png_facts(data).bit_depth == 16
        return
    with pytest.raises(image_structure.Unusual):
        png_structure.png_facts(data)


def test_a_png_crc_mismatch_is_a_fault_even_where_pillow_reads_the_file():
    data = imgs.png_flipped_byte(2, 'IEND', crc=True)
    Image.open(io.BytesIO(data)).load()  # Pillow does not look
    with pytest.raises(image_structure.Fault, match='CRC'):
        png_structure.png_facts(data)
    with pytest.raises(images.Rejected) as caught:
        images.inspect_image(data, MAX_PIXELS)
    assert caught.value.reason == 'decode_error'


def test_interlaced_png_is_plain_and_pixels_match(tf):
    array = imgs.pixels(5, 2, size=(21, 30))
    data = _interlaced_png(array)
    assert png_structure.png_facts(data).interlaced
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(data))), array)
    np.testing.assert_array_equal(tf.io.decode_png(data).numpy(), array)
    info, stored = images.inspect_image(data, MAX_PIXELS)
    assert (info.format, info.height, info.width, stored) == ('png', 21, 30, None)


def test_remembered_headers_give_the_verdicts_of_a_full_walk():
    """Files of one encoder share their bytes up to the first scan; the checks of those bytes
    are remembered. With or without what was remembered, every verdict is the same."""
    jpegs = [(kind, data) for kind, data in _mutants(3000, seed=41) if kind == 'jpeg']
    remembered = []
    for _, data in jpegs:
        remembered.append(_verdict('jpeg', data))
    fresh = []
    for _, data in jpegs:
        image_structure._HEADERS.clear()
        fresh.append(_verdict('jpeg', data))
    assert remembered == fresh
    assert sum(verdict == 'plain' for verdict, _ in fresh) > 100
