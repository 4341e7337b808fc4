"""A build is a TensorFlow Datasets dataset: `tfds.builder_from_directory(OUT)` with the real
`tensorflow-datasets`, on local builds and on one written to the GCS emulator."""

import collections
import hashlib
import json
import os
import shutil
import subprocess
import sys

import matplotlib
import numpy as np
import pytest
import tensorflow_datasets as tfds

from imageshards import features
from imageshards import layout
from imageshards import records
from imageshards import tfrecord
from imageshards_cli import verify
from pipelines import launcher

import images_for_tests as imgs

pytest_plugins = ['gcs_emulator']

REPOSITORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLASSES = ('ant', 'bee', 'cat')
FLAGS = ('--splits', 'train=0.75,val=0.25', '--num-shards', '2', '--seed', '3')
LOCAL = ('--direct_running_mode=in_memory', '--no-analyze')
# Manifest rows (0-based, after the header) whose label level value is left empty.
MISSING = {(2, 'family'), (5, 'species')}


def _build(source, out, *flags):
    return launcher.run(['--input', str(source), '--output', str(out), *LOCAL, *FLAGS, *flags])


@pytest.fixture(scope='module')
def tree(tmp_path_factory):
    """JPEGs and PNGs, a grey JPEG, and two images that the build re-encodes as PNG."""
    root = tmp_path_factory.mktemp('tfds-tree')
    imgs.write_tree(root, 6, CLASSES)
    (root / 'ant' / 'grey.jpg').write_bytes(imgs.image_bytes(7, 'JPEG', 'L'))
    (root / 'bee' / 'rotated.jpg').write_bytes(imgs.exif_rotated_jpeg(8))
    (root / 'cat' / 'deep.png').write_bytes(imgs.sixteen_bit_png(9))
    return root


@pytest.fixture(scope='module')
def builds(tree, tmp_path_factory):
    """{format: (OUT, dataset.json)} of the tree in both formats."""
    found = {}
    for fmt in features.FORMATS:
        out = tmp_path_factory.mktemp(f'tfds-{fmt}') / 'out'
        found[fmt] = out, _build(tree, out, '--format', fmt)
    return found


def _trainer_pixels(tf, out, dataset, dct_method):
    """{image/id: pixels} of every record, parsed as the trainer parses and decoded whole as it
    decodes: with the fast IDCT of its training crops, or the accurate one of evaluation."""
    from trainer import preprocess  # pylint: disable=import-outside-toplevel

    spec = features.feature_spec(dataset['format'])
    paths = [str(out / s['path']) for info in dataset['splits'].values() for s in info['shards']]
    whole = lambda shape: tf.stack([0, 0, shape[0], shape[1]])
    found = {}
    for record in tf.data.TFRecordDataset(paths):
        parsed = tf.io.parse_single_example(record, spec)
        pixels = preprocess.decode_window(parsed[features.ENCODED], whole, dct_method)
        found[int(parsed[features.ID])] = pixels.numpy()
    return found


def _tfds_examples(builder, split=None, **kwargs):
    """Every example of `split` (or of all splits) as numpy dicts."""
    splits = [split] if split else list(builder.info.splits)
    return [ex for s in splits for ex in tfds.as_numpy(builder.as_dataset(split=s, **kwargs))]


def test_the_dataset_info_describes_the_build(builds):
    out, dataset = builds['examples']
    builder = tfds.builder_from_directory(str(out))
    info = builder.info
    assert (info.name, str(info.version)) == ('imageshards', '1.0.0')
    assert info.supervised_keys == ('image/encoded', 'image/class/label')
    assert set(info.features.keys()) == set(dataset['features'])
    assert info.features['image/class/label'].names == dataset['labels'] == list(CLASSES)
    assert isinstance(info.features['image/encoded'], tfds.features.Image)
    assert info.features['image/id'].dtype == np.int64
    for split, entry in dataset['splits'].items():
        assert info.splits[split].num_examples == entry['num_records']
        assert info.splits[split].shard_lengths == [s['num_records'] for s in entry['shards']]
        assert info.splits[split].num_bytes == sum(s['num_bytes'] for s in entry['shards'])
    assert info.description.startswith(f'Images from {dataset["input"]}')


def test_tfds_decodes_the_pixels_the_trainer_decodes(builds, tf):
    from trainer import preprocess  # pylint: disable=import-outside-toplevel

    out, dataset = builds['examples']
    builder = tfds.builder_from_directory(str(out))
    # TFDS decodes with TensorFlow's default IDCT, the fast one of the trainer's training crops.
    training = _trainer_pixels(tf, out, dataset, preprocess.TRAINING_DCT_METHOD)
    examples = _tfds_examples(builder)
    found = {int(ex['image/id']): ex for ex in examples}
    assert sorted(found) == sorted(training)
    for record_id, ex in found.items():
        image = ex['image/encoded']
        assert image.dtype == np.uint8 and image.shape == (ex['image/height'], ex['image/width'], 3)
        np.testing.assert_array_equal(image, training[record_id])
    # The exact pixels of evaluation and serving: the bytes, decoded by the trainer's decode.
    evaluation = _trainer_pixels(tf, out, dataset, preprocess.DCT_METHOD)
    raw = builder.as_dataset(split='val', decoders={'image/encoded': tfds.decode.SkipDecoding()})
    for ex in raw.map(lambda ex: {**ex, 'image/encoded': preprocess.decode(ex['image/encoded'])}):
        np.testing.assert_array_equal(ex['image/encoded'], evaluation[int(ex['image/id'])])
    by_name = {os.path.basename(ex['image/filename'].decode()): ex for ex in examples}
    grey = by_name['grey.jpg']
    assert grey['image/channels'] == 1 and grey['image/format'] == b'jpeg'
    assert (grey['image/encoded'] == grey['image/encoded'][..., :1]).all()  # R == G == B
    assert dataset['counts']['reencoded'] == 2
    for name in ('rotated.jpg', 'deep.png'):
        assert by_name[name]['image/format'] == b'png'


def test_as_supervised_and_shuffle_files(builds):
    out, dataset = builds['examples']
    builder = tfds.builder_from_directory(str(out))
    pairs = list(tfds.as_numpy(builder.as_dataset(split='train', as_supervised=True)))
    labels = collections.Counter(CLASSES[label] for _, label in pairs)
    assert labels == dataset['splits']['train']['class_counts']
    assert all(image.ndim == 3 and image.shape[-1] == 3 for image, _ in pairs)
    in_order = [int(ex['image/id']) for ex in _tfds_examples(builder, 'train')]
    first_ids = set()
    for seed in range(8):
        config = tfds.ReadConfig(shuffle_seed=seed)
        shuffled = _tfds_examples(builder, 'train', shuffle_files=True, read_config=config)
        ids = [int(ex['image/id']) for ex in shuffled]
        assert sorted(ids) == sorted(in_order)
        first_ids.add(ids[0])
    assert len(first_ids) == 2  # either shard may come first


def test_as_dataframe_and_show_examples(builds):
    matplotlib.use('Agg')
    out, dataset = builds['examples']
    builder = tfds.builder_from_directory(str(out))
    frame = tfds.as_dataframe(builder.as_dataset(split='val'), builder.info)
    assert len(frame) == dataset['splits']['val']['num_records']
    assert set(frame.columns) == set(dataset['features'])
    html = frame._repr_html_()  # what a notebook shows: labels with their names
    assert any(f'({name})' in html for name in CLASSES)
    figure = tfds.show_examples(builder.as_dataset(split='train'), builder.info, rows=2, cols=3)
    shown = [axes.get_xlabel() for axes in figure.axes]
    assert len(shown) == 6
    assert all(label in {f'{name} ({i})' for i, name in enumerate(CLASSES)} for label in shown)
    matplotlib.pyplot.close(figure)


def test_a_paths_build_gives_tfds_paths_not_images(builds):
    out, dataset = builds['paths']
    builder = tfds.builder_from_directory(str(out))
    assert 'image/encoded' not in builder.info.features
    assert isinstance(builder.info.features['image/path'], tfds.features.Text)
    assert builder.info.supervised_keys == ('image/path', 'image/class/label')
    assert builder.info.description.startswith('Paths of images')
    examples = _tfds_examples(builder)
    assert len(examples) == dataset['counts']['written']
    for ex in examples:
        with open(ex['image/path'].decode(), 'rb') as f:
            assert hashlib.sha256(f.read()).hexdigest() == ex['image/key/sha256'].decode()
    path, label = next(iter(tfds.as_numpy(builder.as_dataset(split='val', as_supervised=True))))
    assert isinstance(path, bytes) and 0 <= label < len(CLASSES)


def _own_levels(out, dataset):
    """{image/id: {level: id}} read from the shards with our own record reader."""
    found = {}
    for info in dataset['splits'].values():
        for shard in info['shards']:
            with open(out / shard['path'], 'rb') as f:
                for record in tfrecord.read_records(f):
                    values = records.example_values(records.parse_example(record))
                    found[values[features.ID][1][0]] = {
                        level: values[features.level_label(level)][1][0]
                        for level in dataset['label_levels']
                    }
    return found


def test_label_levels_are_class_labels_with_minus_one_for_a_missing_value(tmp_path):
    manifest = imgs.write_level_manifest(tmp_path / 'levels', 3, missing=MISSING)
    out = tmp_path / 'out'
    dataset = _build(manifest, out, '--allow-missing-levels')
    builder = tfds.builder_from_directory(str(out))
    for level, names in dataset['label_levels'].items():
        assert builder.info.features[features.level_label(level)].names == names
        assert isinstance(builder.info.features[features.level_text(level)], tfds.features.Text)
    found = {}
    for ex in _tfds_examples(builder):
        ids = {level: int(ex[features.level_label(level)]) for level in dataset['label_levels']}
        found[int(ex['image/id'])] = ids
        for level, level_id in ids.items():
            assert (level_id == -1) == (ex[features.level_text(level)] == b'')
    assert found == _own_levels(out, dataset)
    assert sum(ids[level] == -1 for ids in found.values() for level in ids) == len(MISSING)


def test_finalize_writes_the_metadata_without_importing_tensorflow(tree, tmp_path):
    # The build runs in this one process (in_memory), Finalize included.
    script = (
        'import sys; from pipelines import launcher; '
        f'launcher.run({[*LOCAL, "--input", str(tree), "--output", str(tmp_path / "out")]!r}); '
        "print(sorted(m for m in ('tensorflow', 'tensorflow_datasets') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, '-c', script], cwd=REPOSITORY, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "['tensorflow_datasets']"
    assert (tmp_path / 'out' / layout.DATASET_INFO_JSON).exists()


@pytest.mark.parametrize(
    'damage, message',
    [
        ('delete features.json', 'features.json: missing'),
        ('shard lengths', 'split train has shard lengths'),
        ('label names', 'image/class/label names'),
    ],
)
def test_verify_compares_the_tfds_metadata_with_dataset_json(
    builds, tmp_path, capsys, damage, message
):
    out = shutil.copytree(builds['examples'][0], tmp_path / 'copy')
    if damage == 'delete features.json':
        (out / 'features.json').unlink()
    elif damage == 'shard lengths':
        info = json.loads((out / 'dataset_info.json').read_text())
        info['splits'][0]['shardLengths'][0] = str(int(info['splits'][0]['shardLengths'][0]) + 1)
        (out / 'dataset_info.json').write_text(json.dumps(info))
    else:
        (out / 'image.class.label.labels.txt').write_text('ant\nbee\ncow\n')
    assert verify.main([str(out)]) == 1
    assert message in capsys.readouterr().out


def test_a_gs_build_carries_its_tfds_metadata(gcs, tree, tmp_path):
    """TFDS reads gs:// through TensorFlow's own GCS file system, which speaks only to
    storage.googleapis.com and cannot be pointed at the emulator: the build written there is
    copied down whole, and TFDS reads the copy."""
    source = gcs.upload_tree(tree, 'tree')
    remote = gcs.uri('out')
    dataset = launcher.run(['--input', source, '--output', remote, '--no_auth', *LOCAL, *FLAGS])
    names = gcs.names('out')
    for name in ('dataset_info.json', 'features.json', 'image.class.label.labels.txt'):
        assert f'out/{name}' in names
    assert verify.verify(remote) == 0
    local = tmp_path / 'copy'
    for name in names:
        path = local / name[len('out/') :]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gcs.read(gcs.uri(name)))
    builder = tfds.builder_from_directory(str(local))
    ids = sorted(int(ex['image/id']) for ex in _tfds_examples(builder))
    assert len(ids) == dataset['counts']['written'] and len(set(ids)) == len(ids)
