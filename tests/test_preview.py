"""`imageshards preview`: the first training images (or patches), captioned with their labels."""

import io

import numpy as np
from PIL import Image

from imageshards.kinds import example_bytes
from imageshards.kinds import features
from imageshards.shard_formats import tfrecord
from imageshards_cli import main as cli
from imageshards_cli import preview
from trainer import dataset_info
from trainer import input_pipeline


def _label_texts(build):
    """image/id -> image/class/text of every record of the build, read without TensorFlow."""
    info = dataset_info.load(str(build))
    texts = {}
    for path in info.shard_paths('train'):
        with open(path, 'rb') as f:
            for record in tfrecord.read_records(f):
                feature = example_bytes.example_class().FromString(record).features.feature
                record_id = feature[features.ID].int64_list.value[0]
                texts[record_id] = feature[features.LABEL_TEXT].bytes_list.value[0].decode()
    return texts


def _caption_parts(caption):
    """('label text', 'id line') of a caption."""
    label, id_line = caption.split('\n')
    return label, id_line


def test_grid_is_the_first_training_images_captioned_with_their_labels(color_builds):
    build = color_builds['examples']
    grid = preview.training_images(str(build), seed=2, image_size=(32, 32), augment=None)
    assert grid.images.shape == (25, 32, 32, 3) and len(grid.captions) == 25
    texts = _label_texts(build)
    for caption, image_id in zip(grid.captions, grid.ids):
        label, id_line = _caption_parts(caption)
        assert id_line == f'id {image_id}'
        assert label == texts[image_id]
    assert len(set(grid.ids)) == 25
    # The same images, in the same order, as training reads them (crops are fixed by position,
    # whatever the batch size).
    dataset = input_pipeline.make_dataset(
        str(build), 'train', 5, training=True, seed=2, image_size=(32, 32), with_ids=True
    )
    batches = list(dataset.take(5))
    np.testing.assert_array_equal(grid.images, np.concatenate([b[0] for b in batches]))
    np.testing.assert_array_equal(grid.ids, np.concatenate([b[2] for b in batches]))


def test_patches_are_captioned_with_their_source_images_labels(color_builds):
    build = color_builds['examples']
    grid = preview.training_images(
        str(build), seed=1, augment='standard', patches_per_image=4, patch_size=6
    )
    assert grid.images.shape == (25, 6, 6, 3)
    texts = _label_texts(build)
    for caption, image_id in zip(grid.captions, grid.ids):
        label, id_line = _caption_parts(caption)
        assert id_line == f'patch of id {image_id}'
        assert label == texts[image_id]
    assert 5 < len(set(grid.ids)) < 25  # patches of many images, some sharing one


def test_command_writes_a_five_by_five_grid(color_builds, tmp_path):
    out = tmp_path / 'grid.png'
    status = cli.main(
        ['preview', str(color_builds['paths']), '--out', str(out), '--image-size', '24']
        + ['--patches-per-image', '2', '--patch-size', '8']
    )
    assert status == 0
    with Image.open(out) as image:
        # 2 inches a column, 2.3 a row (room for captions), at 100 dpi.
        assert image.size == (preview.GRID * 200, preview.GRID * 230)
        assert len(image.convert('RGB').getcolors(maxcolors=1 << 20)) > 100


def test_nearest_neighbour_scaling_keeps_patch_pixels_sharp():
    # A 2x2 checkerboard shown large: only its two colours (and the white page, caption
    # text) appear where it is drawn, no blend of them.
    board = np.zeros((25, 2, 2, 3), np.uint8)
    board[:, 0, 0] = board[:, 1, 1] = (255, 0, 0)
    board[:, 0, 1] = board[:, 1, 0] = (0, 0, 255)
    grid = preview.Grid(board, np.zeros(25, int), np.arange(25), ['x\nid 0'] * 25)
    with Image.open(io.BytesIO(preview.render(grid))) as image:
        pixels = np.asarray(image.convert('RGB')).reshape(-1, 3)
    purple = (pixels[:, 0] > 60) & (pixels[:, 2] > 60) & (pixels[:, 1] < 40)
    red = np.all(pixels == (255, 0, 0), axis=1)
    blue = np.all(pixels == (0, 0, 255), axis=1)
    assert red.sum() > 10_000 and blue.sum() > 10_000
    assert purple.sum() < red.sum() / 100


def test_defaults_are_the_trainers_and_its_yaml_applies(color_builds, tmp_path):
    from trainer import config as config_lib  # pylint: disable=import-outside-toplevel

    build = str(color_builds['examples'])
    defaults = preview.build_arg_parser().parse_args([build])
    trainer = config_lib.TrainConfig
    assert (defaults.augment, defaults.image_size) == (trainer.input.augment, trainer.image_size)
    assert defaults.crop_area == 'auto'
    config = tmp_path / 'train.yaml'
    config.write_text('model: resnet50\nepochs: 3\nimage_size: 24\naugment: standard\n')
    out = tmp_path / 'grid.png'
    assert cli.main(['preview', build, '--config', str(config), '--out', str(out)]) == 0
    grid = preview.training_images(
        build, seed=0, image_size=(24, 24), augment='standard', crop_area='auto'
    )
    # The trainer's crops for a small split: half to all of each image.
    expected = preview.training_images(
        build, seed=0, image_size=(24, 24), augment='standard', crop_area=(0.5, 1.0)
    )
    np.testing.assert_array_equal(grid.images, expected.images)
    with Image.open(out) as image:
        assert image.size == (preview.GRID * 200, preview.GRID * 230)
