"""Validation of single images, and the promise that stored bytes decode to Pillow's pixels."""

import io

import numpy as np
import pytest
from PIL import Image

from pipelines.validation import images

import images_for_tests as imgs

MAX_PIXELS = 10_000_000
RGB = imgs.pixels(3)


def _pil(fmt, mode, **params):
    image = Image.fromarray(RGB).convert(mode)
    return imgs.encode(image, fmt, **params)


VALID = {
    # name: (bytes, stored format, kept as is)
    'jpeg_rgb': (imgs.jpeg(1), 'jpeg', True),
    'jpeg_grey': (_pil('JPEG', 'L'), 'jpeg', True),
    'jpeg_cmyk': (_pil('JPEG', 'CMYK'), 'png', False),
    'jpeg_exif_rotated': (imgs.exif_rotated_jpeg(4), 'png', False),
    'png_rgb': (imgs.png(2), 'png', True),
    'png_rgba': (_pil('PNG', 'RGBA'), 'png', True),
    'png_grey': (_pil('PNG', 'L'), 'png', True),
    'png_grey_alpha': (_pil('PNG', 'LA'), 'png', True),
    'png_palette': (_pil('PNG', 'P'), 'png', True),
    'png_one_bit': (_pil('PNG', '1'), 'png', True),
    'png_16_bit': (imgs.sixteen_bit_png(5), 'png', False),
    'gif': (_pil('GIF', 'P'), 'png', False),
    'bmp': (_pil('BMP', 'RGB'), 'png', False),
    'tiff': (_pil('TIFF', 'RGB'), 'png', False),
    'webp_lossless': (_pil('WEBP', 'RGB', lossless=True), 'png', False),
}


@pytest.mark.parametrize('name', sorted(VALID))
def test_valid_images_are_described_and_stored_losslessly(name):
    data, stored_format, kept = VALID[name]
    info, stored = images.inspect_image(data, MAX_PIXELS)
    assert info.format == stored_format
    assert info.reencoded is (not kept)
    assert (stored is None) is kept
    stored_bytes = data if kept else stored
    assert info.sha256 == images.sha256_hex(stored_bytes)
    assert info.num_bytes == len(stored_bytes)
    expected = images.decode_rgb(data)
    assert (info.height, info.width) == expected.shape[:2]
    # What a record stores shows the source's pixels exactly.
    np.testing.assert_array_equal(images.decode_rgb(stored_bytes), expected)


def test_exif_orientation_is_applied_to_size_and_pixels():
    data = imgs.exif_rotated_jpeg(4, orientation=6)  # stored 36 wide, 20 high; shown rotated
    info, _ = images.inspect_image(data, MAX_PIXELS)
    assert (info.height, info.width) == (36, 20)


@pytest.mark.parametrize('name', sorted(VALID))
def test_tensorflow_decodes_stored_bytes_to_pillow_pixels(tf, name):
    data, _, kept = VALID[name]
    info, stored = images.inspect_image(data, MAX_PIXELS)
    stored_bytes = data if kept else stored
    expected = images.decode_rgb(data)
    decoded = tf.io.decode_image(stored_bytes, channels=3, expand_animations=False).numpy()
    assert decoded.shape == expected.shape
    if info.format == 'jpeg':
        # decode_image uses the fast IDCT; JPEG decoders may differ by a few levels there.
        assert np.abs(decoded.astype(int) - expected).max() <= 8
        accurate = tf.io.decode_jpeg(stored_bytes, channels=3, dct_method='INTEGER_ACCURATE')
        np.testing.assert_array_equal(accurate.numpy(), expected)
    else:
        np.testing.assert_array_equal(decoded, expected)


def test_channels_describe_the_stored_image():
    assert images.inspect_image(_pil('JPEG', 'L'), MAX_PIXELS)[0].channels == 1
    assert images.inspect_image(_pil('PNG', 'LA'), MAX_PIXELS)[0].channels == 2
    assert images.inspect_image(_pil('PNG', 'RGBA'), MAX_PIXELS)[0].channels == 4
    assert images.inspect_image(imgs.jpeg(1), MAX_PIXELS)[0].channels == 3


JPEG = imgs.jpeg(7, size=(64, 96))
PNG = imgs.png(7, size=(64, 96))
REJECTED = {
    'empty': (b'', 'empty_file'),
    'text': (b'<html><body>not an image</body></html>', 'not_an_image'),
    'jpeg_truncated_half': (JPEG[: len(JPEG) // 2], 'truncated'),
    'jpeg_without_end_marker': (JPEG[:-2], 'truncated'),
    'jpeg_header_only': (JPEG[:200], 'truncated'),
    'png_truncated': (PNG[: len(PNG) // 2], 'truncated'),
    'png_bad_header_crc': (PNG[:30] + bytes([PNG[30] ^ 0xFF]) + PNG[31:], 'decode_error'),
    'png_zeroed_tail': (PNG[:-40] + bytes(len(PNG[-40:-12])) + PNG[-12:], 'truncated'),
}


@pytest.mark.parametrize('name', sorted(REJECTED))
def test_broken_inputs_are_rejected_with_a_reason(name):
    data, reason = REJECTED[name]
    with pytest.raises(images.Rejected) as caught:
        images.inspect_image(data, MAX_PIXELS)
    assert caught.value.reason == reason
    assert caught.value.detail


def test_decompression_bombs_are_rejected_before_decoding():
    bomb = imgs.decompression_bomb_png(side=20_000)
    assert len(bomb) < 100_000
    with pytest.raises(images.Rejected) as caught:
        images.inspect_image(bomb, max_pixels=MAX_PIXELS)
    assert caught.value.reason == 'decompression_bomb'
    assert '400000000 pixels' in caught.value.detail


def test_max_pixels_is_a_limit_not_a_hint():
    data = imgs.jpeg(1, size=(100, 100))
    images.inspect_image(data, max_pixels=10_000)
    with pytest.raises(images.Rejected, match='decompression_bomb'):
        images.inspect_image(data, max_pixels=9_999)


def test_reencoding_is_deterministic():
    data = VALID['bmp'][0]
    assert images.reencode(data) == images.reencode(data)
    assert images.reencode(data) == images.inspect_image(data, MAX_PIXELS)[1]
    assert Image.open(io.BytesIO(images.reencode(data))).format == 'PNG'


def test_truncated_files_are_refused_whatever_another_library_told_pillow():
    """TFDS sets Pillow's LOAD_TRUNCATED_IMAGES process-wide; validation must not follow."""
    from PIL import ImageFile  # pylint: disable=import-outside-toplevel

    before = ImageFile.LOAD_TRUNCATED_IMAGES
    ImageFile.LOAD_TRUNCATED_IMAGES = True
    try:
        with pytest.raises(images.Rejected) as caught:
            images.inspect_image(REJECTED['png_truncated'][0], MAX_PIXELS)
        assert caught.value.reason == 'truncated'
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES = before
