"""Arrays as inputs: MNIST's IDX files and NumPy's .npz/.npy build as they are, each image a
lossless PNG of exactly its pixels, split by the standard names, named by --class-names."""

import io
import json
import pathlib
import zipfile

import numpy as np
import pytest
from PIL import Image

from pipelines import launcher

import containers_for_tests as made

FLAGS = ('--num-shards', '2', '--seed', '1', '--no-analyze')


def _run(*args):
    return launcher.run(['--direct_running_mode=in_memory', *FLAGS, *args])


def _images(out):
    """{key: (pixels, label text, split)} of every record of a build, from `image/filename`'s
    row number (`file!row` or `file!array/row`)."""
    from imageshards import records  # pylint: disable=import-outside-toplevel

    dataset = json.loads((pathlib.Path(out) / 'dataset.json').read_text())
    found = {}
    for split, info in dataset['splits'].items():
        for shard in info['shards']:
            with open(pathlib.Path(out) / shard['path'], 'rb') as f:
                for _, record in records.framed_records(f, shard['path']):
                    feature = records.parse_example(record).features.feature
                    name = feature['image/filename'].bytes_list.value[0].decode()
                    image = Image.open(io.BytesIO(feature['image/encoded'].bytes_list.value[0]))
                    assert image.format == 'PNG'
                    text = feature['image/class/text'].bytes_list.value[0].decode()
                    container, member = name.split('!', 1)
                    found[f'{container.rsplit("/", 1)[-1]}!{member}'] = (
                        np.asarray(image),
                        text,
                        split,
                    )
    return found


@pytest.mark.parametrize('compress', [True, False], ids=['gz', 'plain'])
def test_mnist_idx_files_build_with_their_splits_and_exact_pixels(tmp_path, compress):
    made_arrays = made.mnist_like(tmp_path, compress=compress)
    dataset = _run('--input', str(tmp_path), '--output', str(tmp_path / 'out'))
    assert dataset['counts']['written'] == 17
    assert {s: i['num_records'] for s, i in dataset['splits'].items()} == {'test': 5, 'train': 12}
    assert dataset['labels'] == ['0', '1', '2']
    found = _images(tmp_path / 'out')
    suffix = '.gz' if compress else ''
    for prefix, split in (('train', 'train'), ('t10k', 'test')):
        images, labels = made_arrays[split]
        for row in range(len(images)):
            pixels, text, got_split = found[f'{prefix}-images-idx3-ubyte{suffix}!{row}']
            np.testing.assert_array_equal(pixels, images[row])  # 8x6 grey: exactly the row
            assert (text, got_split) == (str(labels[row]), split)


def test_one_idx_file_finds_its_labels_by_the_standard_name(tmp_path):
    made.mnist_like(tmp_path)
    names = tmp_path / 'classes.txt'
    names.write_text('T-shirt/top\nTrouser\nPullover\n')
    path = tmp_path / 'train-images-idx3-ubyte.gz'
    dataset = _run(
        '--input', str(path), '--output', str(tmp_path / 'out'), '--class-names', str(names)
    )
    assert dataset['labels'] == ['Pullover', 'T-shirt/top', 'Trouser']
    assert dataset['counts']['written'] == 12
    assert list(dataset['splits']) == ['train']


def test_an_idx_file_that_disagrees_with_its_header_or_labels_is_one_line(tmp_path):
    made.mnist_like(tmp_path, compress=False)
    images = tmp_path / 'train-images-idx3-ubyte'
    images.write_bytes(images.read_bytes()[:-10])
    with pytest.raises(
        ValueError,
        match=r'its header says 12 images of 8x6x1 \(592 bytes\), but '
        r'it holds 582 bytes',
    ):
        _run('--input', str(images), '--output', str(tmp_path / 'out'))
    made.idx(images, np.zeros((12, 8, 6)))
    made.idx(tmp_path / 'train-labels-idx1-ubyte', np.zeros(11))
    with pytest.raises(ValueError, match='holds 11 labels .* for the 12 images'):
        _run('--input', str(images), '--output', str(tmp_path / 'out'))
    images.write_bytes(b'\x00\x00\x0d\x03' + bytes(100))  # float32, not uint8
    with pytest.raises(ValueError, match='not an IDX file of uint8'):
        _run('--input', str(images), '--output', str(tmp_path / 'out'))


@pytest.mark.parametrize('save', [np.savez, np.savez_compressed], ids=['savez', 'compressed'])
def test_an_npz_of_keras_arrays_builds_with_train_and_test(tmp_path, save):
    rng = np.random.default_rng(2)
    x_train = rng.integers(0, 256, (9, 5, 4, 3), dtype=np.uint8)
    x_test = rng.integers(0, 256, (4, 5, 4), dtype=np.uint8)
    save(
        tmp_path / 'data.npz',
        x_train=x_train,
        y_train=np.arange(9) % 2,
        x_test=x_test,
        y_test=np.arange(4).reshape(4, 1) % 2,
    )
    dataset = _run('--input', str(tmp_path / 'data.npz'), '--output', str(tmp_path / 'out'))
    assert {s: i['num_records'] for s, i in dataset['splits'].items()} == {'test': 4, 'train': 9}
    found = _images(tmp_path / 'out')
    for row in range(9):
        np.testing.assert_array_equal(found[f'data.npz!x_train/{row}'][0], x_train[row])
    np.testing.assert_array_equal(found['data.npz!x_test/3'][0], x_test[3])


def test_npy_pairs_build_and_wrong_arrays_are_one_line(tmp_path):
    rng = np.random.default_rng(3)
    arrays = tmp_path / 'arrays'
    arrays.mkdir()
    np.save(arrays / 'x_train.npy', rng.integers(0, 256, (6, 4, 4), dtype=np.uint8))
    np.save(arrays / 'y_train.npy', np.array([0, 1, 2, 0, 1, 2]))
    dataset = _run('--input', str(arrays), '--output', str(tmp_path / 'out'))
    assert dataset['counts']['written'] == 6 and list(dataset['splits']) == ['train']
    np.save(arrays / 'x_train.npy', rng.random((6, 4, 4)))
    with pytest.raises(ValueError, match='is float64 of shape .*images must be uint8'):
        _run('--input', str(arrays), '--output', str(tmp_path / 'o2'))
    np.save(arrays / 'x_train.npy', np.zeros((6, 4, 4), np.uint8))
    np.save(arrays / 'y_train.npy', np.zeros(5, np.int64))
    with pytest.raises(ValueError, match='5 labels for 6 images'):
        _run('--input', str(arrays / 'x_train.npy'), '--output', str(tmp_path / 'o3'))


def test_a_label_without_a_class_name_is_rejected_with_its_reason(tmp_path):
    np.savez(tmp_path / 'd.npz', x=np.zeros((4, 3, 3), np.uint8), y=np.array([0, 1, 5, 1]))
    names = tmp_path / 'names.txt'
    names.write_text('a\nb\n')
    out = tmp_path / 'out'
    dataset = _run(
        '--input', str(tmp_path / 'd.npz'), '--output', str(out), '--class-names', str(names)
    )
    assert dataset['counts']['rejected_by_reason'] == {'unknown_class': 1}
    row = json.loads((out / 'rejected.jsonl').read_text())
    assert row['path'] == f'{tmp_path}/d.npz!x/2' and 'label 5 has no name' in row['detail']


def test_a_stored_npz_row_is_a_range_of_the_file(tmp_path):
    from pipelines.core import reading  # pylint: disable=import-outside-toplevel
    from pipelines.core.sources import Source  # pylint: disable=import-outside-toplevel
    from pipelines.inputs import arrays  # pylint: disable=import-outside-toplevel

    x = np.arange(2 * 3 * 2, dtype=np.uint8).reshape(2, 3, 2)
    np.savez(tmp_path / 'd.npz', images=x, labels=np.array([1, 0]))
    entries = list(arrays.array_entries([str(tmp_path / 'd.npz')], _names()))
    source = Source.decode(entries[1].source)
    assert (source.how, source.length, entries[1].key) == ('range', 6, 'd.npz/images/1')
    data = (tmp_path / 'd.npz').read_bytes()
    assert data[source.offset : source.offset + 6] == x[1].tobytes()
    png = reading.Reader().read('', entries[1].source, 1000)
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(png))), x[1])
    with zipfile.ZipFile(tmp_path / 'd.npz') as archive:
        assert all(info.compress_type == zipfile.ZIP_STORED for info in archive.infolist())


def _names():
    from pipelines.inputs.class_names import ClassNames  # pylint: disable=import-outside-toplevel

    return ClassNames()
