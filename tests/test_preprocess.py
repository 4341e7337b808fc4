"""Training crops decoded at a DCT scale (trainer/preprocess.py): the window each ratio decodes,
its pixels eagerly and inside tf.data.Dataset.map, their closeness to a full-scale decode, and
crop statistics unchanged."""

import io

import numpy as np
import pytest
from PIL import Image

from trainer import preprocess

SIZE = (64, 64)
# PSNR of 64x64 training crops of this photo (china.jpg at 960x640, quality 90) decoded at a DCT
# scale, against the same window decoded in full and resized with an antialiasing filter;
# measured over 500 crops (ratios 2/4/8: 43/327/130): worst 27.2 dB, mean 34.8 (per ratio
# 33.4/34.4/36.2). A plain bilinear resize of the full decode, as before: worst 21.7, mean 24.8.
MIN_PSNR = 26.0
MIN_MEAN_PSNR = 33.0


@pytest.fixture(scope='module')
def photo():
    """A real photograph as a JPEG of 960x640 (4:2:0, as Pillow and cameras write them)."""
    from sklearn.datasets import load_sample_image  # pylint: disable=import-outside-toplevel

    image = Image.fromarray(load_sample_image('china.jpg')).resize((960, 640), Image.BILINEAR)
    buffer = io.BytesIO()
    image.save(buffer, format='JPEG', quality=90)
    return buffer.getvalue()


def _windows(tf, shape, count, salt=0):
    return [
        preprocess.random_window(tf.constant(shape), tf.constant((salt, i), tf.int64))
        for i in range(count)
    ]


def _psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 10 * np.log10(255**2 / max(mse, 1e-12))


def test_the_ratio_is_the_largest_that_keeps_the_output_covered(tf):
    cases = {(128, 128): 2, (127, 500): 1, (256, 300): 4, (600, 512): 8, (4000, 4000): 8}
    for (height, width), ratio in cases.items():
        window = tf.constant([0, 0, height, width])
        assert preprocess.DCT_RATIOS[int(preprocess.dct_ratio(window, SIZE))] == ratio


def test_scaled_windows_stay_inside_the_scaled_image_and_move_edges_by_half_a_ratio(tf):
    for shape in ((640, 960), (643, 961), (375, 500)):
        for window in _windows(tf, shape, 300, salt=1):
            top, left, height, width = (int(v) for v in window)
            for ratio in preprocess.DCT_RATIOS:
                s_top, s_left, s_height, s_width = (
                    int(v) for v in preprocess.scaled_window(window, ratio)
                )
                # libjpeg decodes a side s at 1/r scale to ceil(s / r) pixels.
                assert s_top >= 0 and s_top + s_height <= -(-shape[0] // ratio)
                assert s_left >= 0 and s_left + s_width <= -(-shape[1] // ratio)
                for scaled, edge in (
                    (s_top, top),
                    (s_left, left),
                    (s_top + s_height, top + height),
                    (s_left + s_width, left + width),
                ):
                    assert abs(scaled * ratio - edge) <= ratio // 2
                if ratio <= height // SIZE[0] and ratio <= width // SIZE[1]:
                    assert s_height >= SIZE[0] and s_width >= SIZE[1]


def test_crop_statistics_stay_those_of_random_window(tf):
    # The window each crop shows (its scaled window in source pixels) against random_window's:
    # the same draws, so the same area and aspect distributions up to the edges' rounding.
    shape = (1280, 1920)
    drawn, shown = [], []
    for window in _windows(tf, shape, 2000, salt=2):
        ratio = preprocess.DCT_RATIOS[int(preprocess.dct_ratio(window, (224, 224)))]
        scaled = preprocess.scaled_window(window, ratio).numpy() * ratio
        drawn.append(window.numpy()[2:])
        shown.append(scaled[2:])
    drawn, shown = np.array(drawn, np.float64), np.array(shown, np.float64)
    area = lambda sides: sides[:, 0] * sides[:, 1] / (shape[0] * shape[1])
    aspect = lambda sides: sides[:, 1] / sides[:, 0]
    for measure in (area, aspect):
        assert np.max(np.abs(measure(shown) / measure(drawn) - 1)) < 0.02
        quantiles = np.linspace(0.05, 0.95, 19)
        np.testing.assert_allclose(
            np.quantile(measure(shown), quantiles),
            np.quantile(measure(drawn), quantiles),
            rtol=5e-3,
        )


@pytest.mark.parametrize('ratio', [1, 2, 4, 8])
def test_a_scaled_decode_is_the_same_eagerly_and_inside_dataset_map(tf, photo, ratio):
    window = tf.constant([40, 64, SIZE[0] * ratio + 5, SIZE[1] * ratio + 9])
    encoded = tf.constant(photo)
    eager = preprocess.decode_scaled_window(encoded, window, SIZE).numpy()
    in_map = next(
        iter(
            tf.data.Dataset.from_tensors((encoded, window)).map(
                lambda e, w: preprocess.decode_scaled_window(e, w, SIZE)
            )
        )
    ).numpy()
    np.testing.assert_array_equal(in_map, eager)
    index, scaled = next(
        iter(
            tf.data.Dataset.from_tensors(window).map(
                lambda w: (preprocess.dct_ratio(w, SIZE), preprocess.scaled_window(w, ratio))
            )
        )
    )
    assert int(index) == int(preprocess.dct_ratio(window, SIZE))
    np.testing.assert_array_equal(scaled, preprocess.scaled_window(window, ratio))
    expected = preprocess.scaled_window(window, ratio).numpy()[2:]
    assert eager.shape == (*expected, 3) and eager.dtype == np.uint8
    assert int(preprocess.dct_ratio(window, SIZE)) == preprocess.DCT_RATIOS.index(ratio)


def test_scaled_crops_are_close_to_a_filtered_full_decode(tf, photo):
    encoded = tf.constant(photo)
    shape = tf.image.extract_jpeg_shape(encoded)[:2]
    scores, plain_scores, ratios = [], [], set()
    for i in range(64):
        seed = tf.constant((3, i), tf.int64)
        window = preprocess.random_window(shape, seed)
        ratio = preprocess.DCT_RATIOS[int(preprocess.dct_ratio(window, SIZE))]
        ratios.add(ratio)
        scaled = preprocess.for_training(encoded, SIZE, seed, dct_scaling=True).numpy()
        # The same window at full scale, resized with an antialiasing filter (the reference)
        # and as the training crops were before (bilinear, no antialiasing).
        shown = preprocess.scaled_window(window, ratio) * ratio
        shown = tf.minimum(shown, tf.concat([shown[:2], shape - shown[:2]], axis=0))
        full = tf.image.decode_and_crop_jpeg(encoded, shown, channels=3)
        reference = tf.image.resize(full, SIZE, antialias=True)
        reference = tf.cast(tf.round(reference), tf.uint8).numpy()
        scores.append(_psnr(scaled, reference))
        plain_scores.append(_psnr(preprocess.resize(full, SIZE).numpy(), reference))
    assert ratios >= {2, 4, 8}
    assert min(scores) > MIN_PSNR and np.mean(scores) > MIN_MEAN_PSNR
    assert np.mean(scores) > np.mean(plain_scores) + 5  # far less aliasing than plain resizing


def test_for_training_with_scaling_is_the_same_eagerly_and_inside_dataset_map(tf, photo):
    seeds = tf.constant([(5, i) for i in range(6)], tf.int64)
    encoded = tf.constant([photo] * 6)
    eager = np.stack(
        [preprocess.for_training(encoded[i], SIZE, seeds[i]).numpy() for i in range(6)]
    )
    in_map = tf.data.Dataset.from_tensor_slices((encoded, seeds)).map(
        lambda e, s: preprocess.for_training(e, SIZE, s, augment=None, dct_scaling=True)
    )
    np.testing.assert_array_equal(np.stack([x.numpy() for x in in_map]), eager)
    assert eager.shape == (6, *SIZE, 3)
    again = preprocess.for_training(encoded[0], SIZE, seeds[0]).numpy()
    np.testing.assert_array_equal(again, eager[0])


def test_scaling_is_left_out_where_no_crop_can_be_twice_the_output():
    assert preprocess.dct_scaling_applies(None, (375, 500), (224, 224)) is False
    assert preprocess.dct_scaling_applies(None, (2000, 3000), (224, 224)) is True
    assert preprocess.dct_scaling_applies(None, (500, 300), (224, 224)) is False
    assert preprocess.dct_scaling_applies(None, None, (224, 224)) is True  # no analysis
    assert preprocess.dct_scaling_applies(False, (2000, 3000), (224, 224)) is False
    assert preprocess.dct_scaling_applies(True, (375, 500), (224, 224)) is True


def test_resize_gives_the_uint8_kernels_values_eagerly_and_inside_dataset_map(tf):
    """The pixels go into the bilinear kernel as float32 (faster); the values are those of the
    kernel on the uint8 pixels, rounded, for crops smaller and larger than the output."""
    rng = np.random.default_rng(4)
    crops = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in ((90, 130), (300, 260))]
    for crop in crops:
        before = tf.cast(tf.image.resize(crop, (64, 48)) + 0.5, tf.uint8).numpy()
        eager = preprocess.resize(tf.constant(crop), (64, 48)).numpy()
        mapped = tf.data.Dataset.from_tensors(crop).map(lambda c: preprocess.resize(c, (64, 48)))
        assert eager.dtype == np.uint8 and eager.shape == (64, 48, 3)
        np.testing.assert_array_equal(eager, before)
        np.testing.assert_array_equal(mapped.get_single_element().numpy(), before)


@pytest.mark.parametrize('subsampling', [0, 1, 2])  # 4:4:4, 4:2:2, 4:2:0
def test_decode_and_crop_gives_tensorflows_pixels_of_every_window(tf, photo, subsampling):
    """The window widened to the iMCU grid and sliced is the window TensorFlow decodes, pixel
    for pixel, at every scale and with either IDCT; grayscale and off-grid edges included."""
    image = Image.open(io.BytesIO(photo)).crop((3, 5, 3 + 457, 5 + 301))
    buffers = {}
    for mode in ('RGB', 'L'):
        buffer = io.BytesIO()
        image.convert(mode).save(buffer, format='JPEG', quality=85, subsampling=subsampling)
        buffers[mode] = buffer.getvalue()
    windows = _windows(tf, (301, 457), 40, salt=subsampling)
    windows += [tf.constant(w) for w in ([0, 0, 301, 457], [7, 449, 9, 8], [0, 15, 3, 442])]
    off_grid = 0
    for mode, encoded in buffers.items():
        for window in windows:
            off_grid += int(window[1]) % preprocess.IMCU_WIDTH != 0
            for ratio, dct_method in ((1, 'INTEGER_FAST'), (1, 'INTEGER_ACCURATE'), (2, '')):
                scaled = preprocess.scaled_window(window, ratio) if ratio > 1 else window
                expected = tf.image.decode_and_crop_jpeg(
                    encoded, scaled, channels=3, ratio=ratio, dct_method=dct_method
                )
                got = preprocess.decode_and_crop(
                    encoded, scaled, ratio=ratio, dct_method=dct_method
                )
                assert got.shape == expected.shape, (mode, window, ratio)
                assert np.array_equal(got, expected), (mode, window, ratio)
    assert off_grid > 40  # most left edges are off the grid: the widened path is what ran
