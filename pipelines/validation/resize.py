"""--resize-shorter-side: the smaller image a record stores of an input larger than training uses.

An image whose shorter side (as a viewer shows it) is longer than N is stored resized, its aspect
kept: the shorter side becomes N, the longer one L * N / S rounded half up (`target_size`). An
image at or below N is stored as validation decided (its own bytes, or the lossless re-encode of
pipelines/validation/images.py): never enlarged.

How an image is resized (`resize`):
  1. decoded; a JPEG at the smallest DCT scale that still covers the target size (Pillow's
     `draft`: libjpeg's 1/2, 1/4 or 1/8 scaled inverse DCT, which averages 2x2, 4x4 or 8x8
     blocks, so it filters as it shrinks, at a fraction of a full decode's cost); 16-bit
     samples scaled to 8 bits;
  2. resampled to the target size with Pillow's Lanczos filter (a=3, antialiased), in Pillow's
     fixed-point arithmetic: the same bytes on every worker with the same Pillow;
  3. turned by its EXIF orientation (after resampling: fewer pixels to move);
  4. encoded as JPEG at --resize-quality (pipelines/core/settings.py's DEFAULT_QUALITY:
     bench/RESULTS.md measures PSNR and size per quality), baseline, 4:2:0 chroma, optimized
     Huffman tables, grey kept as one channel, no EXIF or ICC profile; or, where the image has
     alpha or few colours (a palette or 1-bit image: drawings, masks, icons, where JPEG's
     artefacts show), as a lossless PNG (RGBA or LA with alpha; else RGB, or L for 1-bit).

Validation judges the original bytes first; a valid image is resized where validation holds its
bytes (pipelines/validation/validate.py), once. The local runner keeps the result for the writer
in its payload files (pipelines/local/spill.py); elsewhere the writer reads the input again and
resizes it again, checking the digest (pipelines/writing/encode.py).
"""

import io

from PIL import Image
from PIL import ImageFile

from pipelines.validation import images

FILTER = Image.Resampling.LANCZOS
_ALPHA_MODES = frozenset(['LA', 'La', 'PA', 'RGBA', 'RGBa'])
_CHANNELS = {'L': 1, 'LA': 2, 'RGB': 3, 'RGBA': 4}


def target_size(width, height, shorter_side) -> tuple | None:
    """(width, height) of an image of `width` x `height` resized to `shorter_side`; None where
    its shorter side is at most that (it is stored as it is)."""
    short, long = min(width, height), max(width, height)
    if short <= shorter_side:
        return None
    scaled = (2 * long * shorter_side + short) // (2 * short)  # L * N / S, rounded half up
    return (shorter_side, scaled) if width <= height else (scaled, shorter_side)


def resize(data, info, spec) -> tuple | None:
    """What a record stores of a valid image: (images.ImageInfo, bytes) of its resize, or None
    where it is not larger than `spec` (then it is stored as validation decided).

    Args:
        data: the input's bytes.
        info: their ImageInfo from images.inspect_image (sizes as a viewer shows the image).
        spec: the build's ResizeSpec (pipelines/core/settings.py).
    """
    if target_size(info.width, info.height, spec.shorter_side) is None:
        return None
    image, fmt = _resized(data, spec)
    stored = _encode(image, fmt, spec.quality)
    width, height = image.size
    channels = _CHANNELS[image.mode]
    info = images.ImageInfo(
        fmt, height, width, channels, images.sha256_hex(stored), len(stored), False
    )
    return info, stored


def stored_image(data, info, stored, spec) -> tuple:
    """(ImageInfo, stored bytes or None for the input's own, whether resized) of a valid image,
    from images.inspect_image(data, ..., reencode=False)'s (info, stored): its resize where it
    is larger than `spec`, else what validation decided, the lossless PNG made now if one is
    needed (not before: a resize replaces it, and a large image's PNG costs seconds)."""
    found = resize(data, info, spec)
    if found:
        return (*found, True)
    if info.reencoded and stored is None:
        stored = images.reencode(data)
        info = info._replace(sha256=images.sha256_hex(stored), num_bytes=len(stored))
    return info, stored, False


def resized_bytes(data, spec) -> bytes:
    """The bytes `resize` stores of `data` (an image larger than `spec`)."""
    image, fmt = _resized(data, spec)
    return _encode(image, fmt, spec.quality)


def _resized(data, spec):
    """(the resized Pillow image, 'jpeg' or 'png')."""
    ImageFile.LOAD_TRUNCATED_IMAGES = False  # validation refused truncated files; so do we
    image = Image.open(io.BytesIO(data), formats=images.SUPPORTED_FORMATS)
    # In coded orientation (EXIF turns it after): target_size is symmetric in the two sides.
    size = target_size(*image.size, spec.shorter_side)
    if image.format in ('JPEG', 'MPO'):
        image.draft(image.mode, size)  # the largest of 1/8, 1/4, 1/2 keeping both sides >= size
    image.load()
    turn = images.transposition(image)  # once loaded: a PNG may keep its EXIF after the pixels
    image, fmt = _prepared(images.eight_bit(image))
    image = image.resize(size, FILTER)
    return (image if turn is None else image.transpose(turn)), fmt


def _prepared(image):
    """(`image` in the mode it is resampled and stored in, 'jpeg' or 'png')."""
    if image.mode in _ALPHA_MODES or 'transparency' in image.info:
        return image.convert('LA' if image.mode in ('1', 'L', 'LA', 'La') else 'RGBA'), 'png'
    if image.mode in ('P', '1'):
        return image.convert('L' if image.mode == '1' else 'RGB'), 'png'
    if image.mode == 'L':
        return image, 'jpeg'
    return image.convert('RGB'), 'jpeg'


def _encode(image, fmt, quality):
    image.info = {}  # nothing of the source's metadata (EXIF, ICC) goes along
    if fmt == 'png':
        return images.encode_png(image)
    buffer = io.BytesIO()
    image.save(buffer, format='JPEG', quality=quality, subsampling=2, optimize=True)
    return buffer.getvalue()
