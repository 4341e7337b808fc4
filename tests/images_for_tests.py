"""Real JPEG/PNG (and other) bytes for tests, made with Pillow: small, distinct, learnable."""

import io
import struct
import zlib

import numpy as np
from PIL import Image
from PIL import ImageDraw
from PIL import ImageEnhance
from PIL import ImageFilter

# One colour per class so that a model can tell classes apart; noise makes every image unique.
CLASS_COLOURS = [
    (220, 40, 40),
    (40, 200, 60),
    (50, 70, 220),
    (230, 200, 40),
    (160, 60, 200),
    (40, 200, 200),
    (240, 120, 20),
    (120, 120, 120),
]


def pixels(index, class_index=0, size=(24, 32)):
    """An RGB array (height, width, 3): the class colour, a noisy block placed by `index`."""
    rng = np.random.default_rng(index)
    height, width = size
    image = np.empty((height, width, 3), np.uint8)
    image[:] = CLASS_COLOURS[class_index % len(CLASS_COLOURS)]
    noise = rng.integers(0, 256, (height // 2, width // 2, 3), dtype=np.uint8)
    top, left = index % (height // 2), (index * 7) % (width // 2)
    image[top : top + height // 2, left : left + width // 2] = noise
    return image


def encode(array_or_image, fmt='JPEG', **params):
    image = (
        array_or_image
        if isinstance(array_or_image, Image.Image)
        else Image.fromarray(array_or_image)
    )
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **params)
    return buffer.getvalue()


def jpeg(index, class_index=0, size=(24, 32), **params):
    return encode(pixels(index, class_index, size), 'JPEG', quality=90, **params)


def png(index, class_index=0, size=(24, 32)):
    return encode(pixels(index, class_index, size), 'PNG')


def exif_rotated_jpeg(index, orientation=6, size=(20, 36), class_index=0):
    image = Image.fromarray(pixels(index, class_index, size))
    exif = image.getexif()
    exif[0x0112] = orientation
    return encode(image, 'JPEG', quality=90, exif=exif)


def sixteen_bit_png(index):
    grey = pixels(index)[..., 0].astype(np.uint16) * 257
    return encode(Image.fromarray(grey), 'PNG')


def decompression_bomb_png(side=20_000):
    """A tiny file that declares side x side pixels (a 1-bit image compresses to almost nothing)."""
    return encode(Image.new('1', (side, side)), 'PNG')


def write_tree(root, per_class, classes=('cat', 'dog', 'fish'), start=0):
    """Writes `<root>/<class>/img_NNNN.(jpg|png)`, alternating formats; returns the paths."""
    paths = []
    for class_index, name in enumerate(classes):
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            index = start + class_index * 10_000 + i
            if i % 3 == 2:
                path, data = folder / f'img_{i:04d}.png', png(index, class_index)
            else:
                path, data = folder / f'img_{i:04d}.jpg', jpeg(index, class_index)
            path.write_bytes(data)
            paths.append(path)
    return paths


def write_noise_tree(root, per_class=20, classes=('ant', 'bee', 'cat')):
    """Writes `<root>/<class>/N.jpg`: JPEGs of noise, which do not compress (~4.6 KB each: the
    issue's 60 images fill a 150 KB disk). Returns `root`."""
    for class_index, name in enumerate(classes):
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            noise = np.random.default_rng([i, class_index]).integers(0, 256, (40, 40, 3))
            (root / name / f'{i}.jpg').write_bytes(encode(noise.astype(np.uint8), quality=95))
    return root


# Bytes for the bad-input matrix (tests/test_bad_inputs.py): every kind of file a build meets.


def image_bytes(index, fmt, mode='RGB', size=(24, 32), **params):
    """`pixels(index)` in Pillow mode `mode`, saved as `fmt` (JPEG at quality 90)."""
    if fmt == 'JPEG':
        params.setdefault('quality', 90)
    return encode(Image.fromarray(pixels(index, index % 3, size)).convert(mode), fmt, **params)


def palette_png(index, bits=8, transparency=None):
    """A palette PNG of 2**bits colours, with one transparent palette entry if asked."""
    image = Image.fromarray(pixels(index)).quantize(2**bits)
    params = {'bits': bits} if bits < 8 else {}
    if transparency is not None:
        params['transparency'] = transparency
    return encode(image, 'PNG', **params)


def png_chunk(kind, data):
    return struct.pack('>I', len(data)) + kind + data + struct.pack('>I', zlib.crc32(kind + data))


def with_png_chunk(png_bytes, chunk, before=b'IDAT'):
    """`png_bytes` with `chunk` inserted before the first chunk of type `before`."""
    at = png_bytes.index(before) - 4
    return png_bytes[:at] + chunk + png_bytes[at:]


def sixteen_bit_rgb_png(index):
    """A 16-bit RGB PNG (Pillow cannot write one), low bytes set so that scaling shows."""
    samples = pixels(index).astype('>u2') * 257 + 3
    raw = b''.join(b'\0' + row.tobytes() for row in samples)
    height, width = samples.shape[:2]
    header = struct.pack('>IIBBBBB', width, height, 16, 2, 0, 0, 0)
    return (
        b'\x89PNG\r\n\x1a\n'
        + png_chunk(b'IHDR', header)
        + png_chunk(b'IDAT', zlib.compress(raw))
        + png_chunk(b'IEND', b'')
    )


def animated(index, fmt, frames=3, **params):
    """An animated GIF, PNG (APNG) or WebP, or an MPO, of `frames` different frames."""
    images = [Image.fromarray(pixels(index + i, i)) for i in range(frames)]
    if fmt == 'GIF':
        images = [image.convert('P') for image in images]
    buffer = io.BytesIO()
    images[0].save(buffer, format=fmt, save_all=True, append_images=images[1:], **params)
    return buffer.getvalue()


def jpeg_with_app1(index, payload):
    """A JPEG with an extra APP1 (EXIF) segment holding `payload`."""
    data = jpeg(index)
    return data[:2] + b'\xff\xe1' + struct.pack('>H', len(payload) + 2) + payload + data[2:]


def corrupt_exif_jpeg(index):
    """A JPEG whose EXIF claims an IFD far beyond its end (Pillow cannot read it)."""
    return jpeg_with_app1(index, b'Exif\x00\x00II*\x00\xff\xff\xff\x0f')


def png_text_bomb(index=0, before=b'IDAT', chunk_type=b'zTXt'):
    """A PNG with a 40 KB zTXt (or iCCP) chunk that inflates to 40 MB."""
    inflated = zlib.compress(b'\0' * 40_000_000, 9)
    return with_png_chunk(png(index), png_chunk(chunk_type, b'k\0\0' + inflated), before)


def gif_screen_bomb(index):
    """A small GIF whose logical screen declares 65535x65535 pixels."""
    data = image_bytes(index, 'GIF', 'P')
    return data[:6] + struct.pack('<HH', 65535, 65535) + data[10:]


def gif_frame_bomb(index):
    """A small GIF whose first frame declares 40000x40000 pixels (the screen grows to fit)."""
    data = image_bytes(index, 'GIF', 'P')
    flags = data[10]  # a global colour table of 3 * 2**(n+1) bytes follows the screen
    frame = data.index(b',', 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0))
    return data[: frame + 5] + struct.pack('<HH', 40_000, 40_000) + data[frame + 9 :]


def jpeg_size_bomb(index):
    """A small JPEG whose frame header declares 60000x60000 pixels."""
    data = bytearray(jpeg(index))
    frame = data.index(b'\xff\xc0')
    data[frame + 5 : frame + 9] = struct.pack('>HH', 60_000, 60_000)
    return bytes(data)


def bmp_size_bomb(index):
    """A small BMP whose header declares 20000x20000 pixels."""
    data = bytearray(image_bytes(index, 'BMP'))
    data[18:26] = struct.pack('<ii', 20_000, 20_000)
    return bytes(data)


def webp_canvas_bomb(index):
    """A small animated WebP whose canvas declares 16384x16384 pixels."""
    data = bytearray(animated(index, 'WEBP', lossless=True))
    header = data.index(b'VP8X')
    data[header + 12 : header + 18] = (16_383).to_bytes(3, 'little') * 2  # sizes minus one
    return bytes(data)


def tiff_size_bomb():
    """A small 1-bit TIFF whose header declares 30000x30000 pixels."""
    data = bytearray(encode(Image.new('1', (64, 64)), 'TIFF'))
    order = '<' if data[:2] == b'II' else '>'
    offset = struct.unpack(order + 'I', data[4:8])[0]
    (count,) = struct.unpack(order + 'H', data[offset : offset + 2])
    for at in range(offset + 2, offset + 2 + 12 * count, 12):
        tag, kind = struct.unpack(order + 'HH', data[at : at + 4])
        if tag in (256, 257):  # ImageWidth, ImageLength
            # A LONG value, or a SHORT padded to 4 bytes.
            value = (
                struct.pack(order + 'I', 30_000)
                if kind == 4
                else struct.pack(order + 'HH', 30_000, 0)
            )
            data[at + 8 : at + 12] = value
    return bytes(data)


def jpeg_scan_bomb(scans=400):
    """A progressive JPEG with `scans` repeated refinement scans: small, slow to decode."""
    data = encode(Image.new('RGB', (1024, 1024), (10, 200, 30)), 'JPEG', progressive=True)
    starts = [i for i in range(len(data)) if data.startswith(b'\xff\xda', i)]
    ends = starts[1:] + [len(data) - 2]
    smallest = min(zip(starts, ends), key=lambda span: span[1] - span[0])
    return data[:-2] + data[smallest[0] : smallest[1]] * scans + b'\xff\xd9'


def _segment(data, marker):
    """(start of the segment body, its end) of the first segment with `marker` (0xC4 ...)."""
    start = data.index(bytes([0xFF, marker])) + 4
    return start, start + struct.unpack('>H', data[start - 2 : start])[0] - 2


def jpeg_bad_huffman_table(index):
    """A JPEG whose first Huffman table has two codes of length 1 and more of other lengths: no
    prefix code can have them (libjpeg: "Bogus Huffman table definition")."""
    data = bytearray(jpeg(index, size=(48, 64)))
    start, _ = _segment(data, 0xC4)
    counts = start + 1  # after the table's class and id
    donor = next(i for i in range(counts + 15, counts, -1) if data[i] >= 2)
    data[donor] -= 2
    data[counts] += 2
    return bytes(data)


def jpeg_zero_width(index):
    """A JPEG whose frame header declares a width of 0."""
    data = bytearray(jpeg(index))
    start, _ = _segment(data, 0xC0)
    data[start + 3 : start + 5] = b'\0\0'
    return bytes(data)


def jpeg_without_scan(index):
    """A JPEG with its tables and frame header and no scan: its end marker follows the header."""
    data = jpeg(index)
    return data[: data.index(b'\xff\xda')] + b'\xff\xd9'


def jpeg_with_trailing_bytes(index):
    """A JPEG followed by bytes after its end marker, as some cameras and tools write."""
    return jpeg(index) + b'\0\0 trailing data after EOI ' + bytes(range(256))


def png_flipped_byte(index, where='IDAT', crc=False):
    """A PNG with one bit flipped in the data (or, with `crc`, in the CRC) of chunk `where`: the
    chunk's CRC no longer matches."""
    data = bytearray(png(index, size=(48, 64)))
    at = data.index(where.encode()) + 4  # the chunk's data
    length = struct.unpack('>I', data[at - 8 : at - 4])[0]
    data[at + (length if crc else length // 2)] ^= 0x10
    return bytes(data)


def jpeg_cut_before_end_marker(n):
    """The n-th `jpeg(i)` that Pillow still decodes without a word when cut just before its end
    marker (TensorFlow refuses all such files)."""
    found = 0
    for index in range(10_000):
        data = jpeg(index)[:-2]
        try:
            Image.open(io.BytesIO(data)).load()
        except OSError:
            continue
        if found == n:
            return data
        found += 1
    raise AssertionError('Pillow rejects every JPEG without an end marker: make another kind')


# Two label levels that a small model learns from colour alone: species -> (family, colour).
SPECIES = {
    'sparrow': ('birds', 0),
    'finch': ('birds', 3),
    'trout': ('fish', 2),
    'carp': ('fish', 1),
}


def write_level_manifest(root, per_species, name='levels.csv', missing=()):
    """Writes `<root>/img/<species>_NNNN.(jpg|png)` and a CSV manifest of them with the columns
    path,label,label/family,label/species (label = species); returns the manifest's path.

    `missing`: (row, level) pairs whose value is left empty.
    """
    folder = root / 'img'
    folder.mkdir(parents=True, exist_ok=True)
    lines = ['path,label,label/family,label/species']
    for species_index, (species, (family, colour)) in enumerate(sorted(SPECIES.items())):
        for i in range(per_species):
            index = 50_000 + species_index * 1_000 + i
            ext, data = ('png', png(index, colour)) if i % 3 == 2 else ('jpg', jpeg(index, colour))
            relative = f'img/{species}_{i:04d}.{ext}'
            (root / relative).write_bytes(data)
            row = len(lines) - 1
            values = {'family': family, 'species': species}
            for level in values:
                if (row, level) in missing:
                    values[level] = ''
            lines.append(f'{relative},{species},{values["family"]},{values["species"]}')
    path = root / name
    path.write_text('\n'.join(lines) + '\n', encoding='utf-8')
    return path


def photo_like(index, size=(96, 128)):
    """A smooth RGB image with structure at every scale, its detail fainter the finer it is (as
    in photographs), distinct per index: what a perceptual hash is made for."""
    rng = np.random.default_rng([index, 7])
    field = np.zeros((*size, 3))
    for cells, weight in ((3, 1.0), (6, 0.5), (12, 0.25), (24, 0.125)):
        coarse = rng.uniform(-1, 1, (cells, cells * 4 // 3, 3)).astype(np.float32)
        layers = [Image.fromarray(coarse[..., c]) for c in range(3)]
        resized = [
            np.asarray(layer.resize(size[::-1], Image.Resampling.BICUBIC)) for layer in layers
        ]
        field += weight * np.stack(resized, axis=-1)
    return Image.fromarray(np.clip(128 + 45 * field, 0, 255).astype(np.uint8))


def near_duplicates_of(image):
    """Near-duplicates of `image` the ways they arise: {kind: JPEG bytes}."""
    width, height = image.size
    written = image.copy()
    ImageDraw.Draw(written).text((6, height - 16), 'v2', fill=(255, 255, 255))
    return {
        'reencoded': encode(image, quality=55),
        'downscaled': encode(image.resize((width // 2, height // 2)), quality=90),
        'border_cropped': encode(image.crop((3, 2, width - 3, height - 2)), quality=90),
        'brightened': encode(ImageEnhance.Brightness(image).enhance(1.2), quality=90),
        'blurred': encode(image.filter(ImageFilter.GaussianBlur(1.5)), quality=90),
        'text': encode(written, quality=90),
    }
