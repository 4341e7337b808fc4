"""--resize-shorter-side: the sizes, the DCT-scaled decode, orientation, formats, and builds that
store the resized images with their original's size and digest, the same bytes on every path."""

import hashlib
import io
import json
import shutil

import numpy as np
import pytest
from PIL import Image
from PIL import JpegImagePlugin
from test_golden_build import _canonical_digest

from imageshards import features
from imageshards import records
from imageshards import tfrecord
from imageshards_cli import verify
from pipelines import launcher
from pipelines.core import options
from pipelines.core.settings import DEFAULT_QUALITY
from pipelines.core.settings import ResizeSpec
from pipelines.local import spill
from pipelines.validation import images
from pipelines.validation import resize
from pipelines.writing import encode

import images_for_tests as imgs

SPEC = ResizeSpec(64, 90)


def _photo_like(size=(300, 400), seed=0):
    """An RGB array (height, width, 3) with smooth shapes and fine texture, like a photo."""
    rng = np.random.default_rng(seed)
    height, width = size
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    image = np.stack(
        [
            128 + 90 * np.sin(x / 23.0 + seed) * np.cos(y / 31.0),
            128 + 80 * np.cos((x + y) / 41.0),
            128 + 70 * np.sin(y / 17.0 - seed),
        ],
        axis=-1,
    )
    image += rng.normal(0, 4, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def _psnr(a, b):
    mse = np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)
    return 10 * np.log10(255**2 / mse)


def _reference(data, size):
    """The image decoded in full, as a viewer shows it, resized with Lanczos: what the
    DCT-scaled decode approximates."""
    return np.asarray(images.to_rgb(Image.open(io.BytesIO(data))).resize(size, resize.FILTER))


def _resized(data):
    info, _ = images.inspect_image(data, 10**8)
    return resize.resize(data, info, SPEC)


@pytest.mark.parametrize(
    'size, expected',
    [
        ((500, 375), (341, 256)),  # 500 * 256 / 375 = 341.33
        ((375, 500), (256, 341)),
        ((257, 1000), (256, 996)),  # 1000 * 256 / 257 = 996.1
        ((1000, 1000), (256, 256)),
        ((768, 512), (384, 256)),  # exactly 384
        ((513, 512), (257, 256)),  # 256.5: half rounds up
        ((256, 4000), None),  # the shorter side is 256 already: stored as it is
        ((100, 80), None),  # never enlarged
    ],
)
def test_target_size_keeps_the_aspect_and_never_enlarges(size, expected):
    assert resize.target_size(*size, 256) == expected


def test_a_large_jpeg_is_decoded_at_the_smallest_dct_scale_that_covers_the_target(monkeypatch):
    data = imgs.encode(_photo_like((300, 400)), 'JPEG', quality=95)
    scales = []
    draft = JpegImagePlugin.JpegImageFile.draft

    def spy(self, mode, size):
        before = self.size
        found = draft(self, mode, size)
        scales.append(before[0] // self.size[0])
        return found

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, 'draft', spy)
    info, stored = _resized(data)
    assert scales == [4]  # 400x300 -> 100x75 still covers 85x64; 1/8 (50x38) would not
    assert (info.format, info.width, info.height, info.channels) == ('jpeg', 85, 64, 3)
    assert info.sha256 == hashlib.sha256(stored).hexdigest() and info.num_bytes == len(stored)
    decoded = Image.open(io.BytesIO(stored))
    assert decoded.format == 'JPEG' and decoded.size == (85, 64) and not decoded.getexif()
    assert _psnr(decoded, _reference(data, (85, 64))) > 30


def test_exif_orientation_is_applied_and_dropped():
    pixels = _photo_like((120, 200), seed=2)  # coded 200 wide, 120 high; shown turned
    image = Image.fromarray(pixels)
    exif = image.getexif()
    exif[0x0112] = 6
    data = imgs.encode(image, 'JPEG', quality=95, exif=exif)
    info, stored = _resized(data)
    assert (info.width, info.height) == (64, 107)  # as shown: portrait
    decoded = Image.open(io.BytesIO(stored))
    assert decoded.size == (64, 107) and 0x0112 not in decoded.getexif()
    assert _psnr(decoded, _reference(data, (64, 107))) > 30


@pytest.mark.parametrize(
    'make, fmt, mode',
    [
        (lambda: imgs.encode(_photo_like()[..., 0], 'JPEG'), 'jpeg', 'L'),  # grey stays grey
        (lambda: imgs.encode(_photo_like(), 'PNG'), 'jpeg', 'RGB'),  # a photo as PNG
        (lambda: imgs.encode(Image.fromarray(_photo_like()).convert('RGBA'), 'PNG'), 'png', 'RGBA'),
        (lambda: imgs.encode(Image.fromarray(_photo_like()).convert('LA'), 'PNG'), 'png', 'LA'),
        (lambda: imgs.encode(Image.fromarray(_photo_like()).quantize(16), 'PNG'), 'png', 'RGB'),
        (lambda: imgs.encode(Image.fromarray(_photo_like()).convert('1'), 'PNG'), 'png', 'L'),
        (lambda: imgs.encode(Image.fromarray(_photo_like()).quantize(8), 'GIF'), 'png', 'RGB'),
        (
            lambda: imgs.encode(Image.fromarray(_photo_like()).convert('CMYK'), 'JPEG'),
            'jpeg',
            'RGB',
        ),
    ],
)
def test_alpha_and_few_colours_stay_png_the_rest_is_jpeg(make, fmt, mode):
    info, stored = _resized(make())
    decoded = Image.open(io.BytesIO(stored))
    assert (info.format, decoded.format.lower(), decoded.mode) == (fmt, fmt, mode)
    assert (info.width, info.height) == decoded.size == (85, 64)
    assert info.channels == {'L': 1, 'LA': 2, 'RGB': 3, 'RGBA': 4}[mode]


def test_sixteen_bit_samples_are_scaled_to_eight():
    data = imgs.sixteen_bit_png(4)  # 32x24
    info, _ = images.inspect_image(data, 10**8)
    info, stored = resize.resize(data, info, ResizeSpec(12))
    assert Image.open(io.BytesIO(stored)).mode == 'L' and (info.width, info.height) == (16, 12)


def test_inspect_without_reencoding_gives_the_size_as_shown_and_leaves_the_png():
    data = imgs.exif_rotated_jpeg(3, size=(20, 36))  # coded 36 wide, 20 high; turned
    info, stored = images.inspect_image(data, 10**8, reencode=False)
    assert stored is None and info.reencoded and (info.width, info.height) == (20, 36)
    made, png = images.inspect_image(data, 10**8)
    assert (made.width, made.height) == (20, 36)
    assert resize.stored_image(data, info, None, SPEC) == (made, png, False)


def test_an_image_at_or_below_the_size_is_not_resized():
    data = imgs.encode(_photo_like((64, 90)), 'JPEG')
    info, _ = images.inspect_image(data, 10**8)
    assert resize.resize(data, info, SPEC) is None


def test_resizing_is_deterministic_and_the_writer_makes_the_same_bytes():
    data = imgs.encode(_photo_like((300, 400), seed=5), 'JPEG', quality=92)
    info, stored = _resized(data)
    assert resize.resized_bytes(data, SPEC) == stored
    meta = _meta(info, data)
    assert encode.stored_bytes(data, meta, 'x.jpg', SPEC) == stored
    with pytest.raises(encode.InputChangedError, match='resizing x.jpg gave other bytes'):
        encode.stored_bytes(data, meta, 'x.jpg', ResizeSpec(64, 80))


def _meta(info, data):
    from pipelines.core.blocks import ImageMeta  # pylint: disable=import-outside-toplevel

    return ImageMeta(
        id=0,
        key='x.jpg',
        label=0,
        split='',
        format=info.format,
        height=info.height,
        width=info.width,
        channels=info.channels,
        sha256=bytes.fromhex(info.sha256),
        num_bytes=info.num_bytes,
        source_sha256=hashlib.sha256(data).digest(),
        source_crc32c=0,
        reencoded=False,
        original_height=300,
        original_width=400,
    )


def test_flags_refuse_a_quality_alone_and_a_paths_build(capsys):
    with pytest.raises(SystemExit):
        options.parse_build_args(['--input', 'i', '--output', 'o', '--resize-quality', '80'])
    assert 'give both' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        options.parse_build_args(
            ['--input', 'i', '--output', 'o', '--resize-shorter-side', '8', '--format', 'paths']
        )
    assert 'a paths build stores none' in capsys.readouterr().err
    config, _ = options.parse_build_args(['--input', 'i', '--output', 'o'])
    assert config.resize is None
    config, _ = options.parse_build_args(
        ['--input', 'i', '--output', 'o', '--resize-shorter-side', '8']
    )
    assert config.resize == ResizeSpec(8, DEFAULT_QUALITY)


def _write_tree(root):
    """Two classes of images, some larger than 24 pixels a side and some not, in every kind."""
    files = {
        'a/wide.jpg': imgs.encode(_photo_like((60, 90), 1), 'JPEG', quality=95),
        'a/tall.png': imgs.encode(_photo_like((90, 50), 2), 'PNG'),
        'a/small.jpg': imgs.jpeg(3, 0, size=(20, 30)),  # 20 high: as it is
        'a/rotated.jpg': imgs.exif_rotated_jpeg(4, size=(40, 72)),  # re-encoded, and resized
        'a/copy.jpg': imgs.encode(_photo_like((60, 90), 1), 'JPEG', quality=95),  # a duplicate
        'b/alpha.png': imgs.encode(
            Image.fromarray(_photo_like((50, 50), 5)).convert('RGBA'), 'PNG'
        ),
        'b/grey.jpg': imgs.encode(_photo_like((80, 64), 6)[..., 1], 'JPEG'),
        'b/palette.gif': imgs.encode(Image.fromarray(_photo_like((30, 40), 7)).quantize(8), 'GIF'),
        'b/tiny.png': imgs.png(8, 1, size=(12, 16)),
        'b/rotated_small.jpg': imgs.exif_rotated_jpeg(11, size=(20, 36)),  # its PNG, as before
        'b/bmp.bmp': imgs.encode(_photo_like((48, 40), 9), 'BMP'),
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


def _resize_build(root, out, *flags, mode='in_memory'):
    return launcher.run(
        [
            f'--direct_running_mode={mode}',
            '--input',
            str(root),
            '--output',
            str(out),
            '--num-shards',
            '2',
            '--seed',
            '4',
            '--resize-shorter-side',
            '24',
            *flags,
        ]
    )


@pytest.fixture(scope='module')
def resized_build(tmp_path_factory):
    root = tmp_path_factory.mktemp('resize') / 'in'
    files = _write_tree(root)
    out = root.parent / 'out'
    return root, files, out, _resize_build(root, out)


def _records(out, dataset):
    found = {}
    for shard in dataset['splits']['train']['shards']:
        with open(out / shard['path'], 'rb') as f:
            for record in tfrecord.read_records(f):
                values = records.example_values(records.parse_example(record))
                found[values[features.FILENAME][1][0].decode()] = {
                    key: items[0] for key, (_, items) in values.items()
                }
    return found


def test_a_build_stores_the_resizes_with_their_originals_size_and_digest(resized_build):
    root, files, out, dataset = resized_build
    assert dataset['resize']['shorter_side'] == 24 and dataset['resize']['quality'] == 90
    assert dataset['counts']['resized'] == 8  # all but small.jpg and tiny.png
    assert dataset['features'] == features.record_schema(features.EXAMPLES, original=True)
    found = _records(out, dataset)
    assert len(found) == len(files)
    for name, data in files.items():
        record = found[str(root / name)]
        shown = Image.open(io.BytesIO(images.reencode(data)))  # as a viewer shows it
        original = (shown.height, shown.width)
        assert (record[features.ORIGINAL_HEIGHT], record[features.ORIGINAL_WIDTH]) == original
        assert record[features.ORIGINAL_SHA256].decode() == hashlib.sha256(data).hexdigest()
        stored = record[features.ENCODED]
        assert record[features.SHA256].decode() == hashlib.sha256(stored).hexdigest()
        wanted = resize.target_size(shown.width, shown.height, 24) or shown.size
        assert (
            Image.open(io.BytesIO(stored)).size
            == wanted
            == (record['image/width'], record['image/height'])
        )
    assert found[str(root / 'a/small.jpg')][features.ENCODED] == files['a/small.jpg']
    rotated = found[str(root / 'b/rotated_small.jpg')][features.ENCODED]
    assert rotated == images.reencode(files['b/rotated_small.jpg'])
    assert dataset['counts']['reencoded'] == 1
    assert found[str(root / 'b/alpha.png')][features.FORMAT] == b'png'
    assert found[str(root / 'b/palette.gif')][features.FORMAT] == b'png'
    assert found[str(root / 'a/rotated.jpg')][features.FORMAT] == b'jpeg'
    assert (
        found[str(root / 'b/grey.jpg')][features.CHANNELS],
        found[str(root / 'b/grey.jpg')][features.HEIGHT],
    ) == (1, 30)


def test_a_resized_build_verifies_and_its_tfds_metadata_has_the_original_keys(
    resized_build, capsys
):
    _, _, out, _ = resized_build
    assert verify.main([str(out)]) == 0, capsys.readouterr().out
    described = json.loads((out / 'features.json').read_text())
    text = json.dumps(described)
    assert all(key in text for key in features.ORIGINAL_KEYS)
    info = json.loads((out / 'dataset_info.json').read_text())
    assert 'stored resized to it (lanczos, JPEG quality 90' in info['description']


def test_verify_catches_a_record_not_at_the_size_the_setting_makes(resized_build, tmp_path, capsys):
    out = shutil.copytree(resized_build[2], tmp_path / 'copy')
    dataset = resized_build[3]
    relative = dataset['splits']['train']['shards'][0]['path']
    with open(out / relative, 'rb') as f:
        examples = [records.parse_example(r) for r in tfrecord.read_records(f)]
    examples[0].features.feature[features.ORIGINAL_HEIGHT].int64_list.value[0] += 100
    framed = [tfrecord.frame(e.SerializeToString(deterministic=True)) for e in examples]
    (out / relative).write_bytes(b''.join(framed))
    (out / (relative + '.idx')).write_bytes(tfrecord.index_text(map(len, framed)))
    assert verify.main([str(out), '--max-problems', '0']) == 1
    printed = capsys.readouterr().out
    assert '--resize-shorter-side 24 makes' in printed


def test_dedup_compares_the_original_bytes(resized_build, tmp_path):
    root = resized_build[0]
    dataset = _resize_build(root, tmp_path / 'dedup', '--dedup', '--no-analyze')
    assert dataset['counts']['duplicates'] == 1


def test_the_writer_resizes_again_where_no_payload_was_kept(resized_build, tmp_path, monkeypatch):
    """As on Dataflow, whose store keeps no payloads: the writer reads each input again and
    makes the same resize (checked against its digest), so the records are the same."""
    root, _, out, dataset = resized_build
    monkeypatch.setattr(spill.SpillingStore, 'payloads', lambda self: None)
    again = _resize_build(root, tmp_path / 'again')
    assert _canonical_digest(root, tmp_path / 'again', again, 'train') == _canonical_digest(
        root, out, dataset, 'train'
    )


@pytest.mark.slow
def test_a_resized_build_is_byte_identical_across_runners(resized_build, tmp_path):
    root, _, out, dataset = resized_build
    other = _resize_build(root, tmp_path / 'mp', mode='multi_processing')
    assert _canonical_digest(root, tmp_path / 'mp', other, 'train') == _canonical_digest(
        root, out, dataset, 'train'
    )
    for a, b in zip(dataset['splits']['train']['shards'], other['splits']['train']['shards']):
        assert (out / a['index_file']).read_bytes() == (
            tmp_path / 'mp' / b['index_file']
        ).read_bytes()
