"""The kinds of file the bad-input matrix (tests/test_bad_inputs.py) mixes into its builds:
valid ones with how they are stored, broken ones with the reason they are rejected for."""

import functools

import images_for_tests as imgs

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
