"""A build as a TensorFlow Datasets dataset: the metadata `tfds.builder_from_directory` reads.

TFDS reads the shards of a build as they are, once three kinds of file describe them:
    OUT/dataset_info.json        name, version, description, splits (shard lengths, bytes,
                                 `{SPLIT}/{SPLIT}-{SHARD_X_OF_Y}.tfrecord`), supervised keys,
                                 and for an ArrayRecord build its file format (`array_record`:
                                 `builder_from_directory(OUT).as_data_source()` reads it)
    OUT/features.json            one feature per record key, as the build's kind says
                                 (imageshards/kinds/)
    OUT/<feature>.labels.txt     the names of each ClassLabel: image.class.label.labels.txt,
                                 image.label.<level>.labels.txt
They are made here from dataset.json alone, with TFDS's own API, so that a build and its TFDS
description cannot disagree; Finalize writes them before _SUCCESS, `imageshards verify` compares
them with dataset.json.

The features are the records' own keys, flat (`image/encoded`, `image/class/label`, ...): TFDS
resolves `supervised_keys` among the top-level features only, and flat keys keep the examples'
keys those of our trainer's parser. What each key decodes to:
    image/encoded          Image: uint8 (height, width, 3), also for a grey JPEG (TFDS decodes
                           with `tf.image.decode_image(channels=3)`); `image/channels` still
                           says what the file holds
    image/class/label      ClassLabel with dataset.json's `labels`
    image/label/<level>    ClassLabel with `label_levels[<level>]`; -1 where a build with
                           --allow-missing-levels has no value: TFDS's own "no label" (its
                           ClassLabel accepts -1 and `as_dataframe` shows it as `-`), but
                           `int2str(-1)` would give the last name, so test for -1 first
    other int64 keys       Scalar int64; other bytes keys: Text
A multi-label build's label and level keys are lists: `Sequence(ClassLabel)` (the image's ids,
empty where it has none, as TFDS's own multi-label datasets such as voc describe them) and
`Sequence(Text)`.
A `paths` build has `image/path` (Text) where the image would be, and no Image feature: TFDS
yields the path, and `as_supervised=True` gives (path, label) for a reader that loads the file.

A Parquet build has none of these: its rows are not TFDS's serialized examples (Hugging Face
`datasets` reads it; imageshards/shard_formats/parquet.py).

The dataset is named `imageshards`, version 1.0.0, whatever the folder: TFDS finds it by its
directory, and a fixed name stays right when a build is moved or copied.

Nothing here imports TensorFlow: TFDS writes and reads this metadata without it, and Finalize
runs on a Beam worker, which must not pay for TensorFlow.
"""

import os
import tempfile

from google.protobuf import json_format

from imageshards import layout
from imageshards import storage
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards.kinds.record_kind import LabelNames
from imageshards.shard_formats import registry as shard_formats

NAME = 'imageshards'
VERSION = '1.0.0'


def features_dict(dataset):
    """The `tfds.features.FeaturesDict` of a build's records, from its dataset.json: each
    feature its kind's (imageshards/kinds/), a list of values a `Sequence` of it."""
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

    kind, names = kinds.of_build(dataset), LabelNames.of_dataset(dataset)
    connectors = kind.tfds_features(names)
    return tfds.features.FeaturesDict(connectors)


def dataset_info(dataset, data_dir='.'):
    """The `tfds.core.DatasetInfo` of a build, from its dataset.json (a dict).

    Args:
        dataset: the build's dataset.json.
        data_dir: where the build is; TFDS keeps it in memory only (the files written hold
            paths relative to their folder, so that a build can be moved).
    """
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

    identity = tfds.core.DatasetIdentity(
        name=NAME, version=VERSION, data_dir=data_dir, module_name=__name__
    )
    payload = kinds.of_build(dataset).payload_key
    info = tfds.core.DatasetInfo(
        builder=identity,
        description=_description(dataset),
        features=features_dict(dataset),
        supervised_keys=(payload, features.LABEL),
        citation='',
    )
    splits = [
        tfds.core.SplitInfo(
            name=split,
            shard_lengths=[shard['num_records'] for shard in entry['shards']],
            num_bytes=sum(shard['num_bytes'] for shard in entry['shards']),
            filename_template=tfds.core.ShardedFileTemplate(
                data_dir=data_dir,
                template=shard_formats.of_build(dataset).tfds_template,
                dataset_name=NAME,
                split=split,
            ),
        )
        for split, entry in dataset['splits'].items()
    ]
    info.set_splits(tfds.core.SplitDict(splits))
    file_format = shard_formats.of_build(dataset).tfds_file_format
    if file_format != shard_formats.DEFAULT:  # a TFRecord build's dataset_info.json as it was
        info.set_file_format(file_format)
    return info


def _description(dataset):
    counts = dataset['counts']
    what = (
        'Images'
        if dataset['format'] == features.EXAMPLES
        else 'Paths of images (image/path; the records hold no pixels)'
    )
    return (
        f'{what} from {dataset["input"]}, {counts["written"]} records with '
        f'{len(dataset["labels"])} labels, globally shuffled (seed {dataset["seed"]}) into '
        f'label-balanced shards by imageshards {dataset.get("imageshards_version", "")}. '
        f"Features are the records' own keys; dataset.json holds the counts per shard and "
        f'label, rejected.jsonl the inputs left out and why.{_resize_text(dataset)}'
    )


def _resize_text(dataset):
    setting = dataset.get('resize')
    if not setting:
        return ''
    return (
        f' Images with a shorter side over {setting["shorter_side"]} pixels are stored resized '
        f'to it ({setting["filter"]}, JPEG quality {setting["quality"]}; '
        f'image/original_height, image/original_width and image/original_sha256 describe the '
        f'input).'
    )


def files(dataset):
    """{file name: bytes} of the TFDS metadata of a build, dataset_info.json last.

    TFDS writes them into a local temporary folder (its file layer need not reach the build's
    storage); the caller puts them beside dataset.json.
    """
    if shard_formats.of_build(dataset).tfds_file_format is None:
        return {}  # shards TFDS does not read (Parquet: rows, not its serialized examples)
    info = dataset_info(dataset)
    with tempfile.TemporaryDirectory(prefix='imageshards-tfds-') as folder:
        info.write_to_directory(folder)
        names = sorted(
            os.listdir(folder), key=lambda name: (name == layout.DATASET_INFO_JSON, name)
        )
        written = {}
        for name in names:
            with open(os.path.join(folder, name), 'rb') as f:
                written[name] = f.read()
    return written


def problems(output_dir, dataset):
    """[(file, message)] where the TFDS metadata in `output_dir` does not describe dataset.json.

    The files are read with TFDS (from a local copy: its file layer need not reach the build's
    storage) and compared with what dataset.json gives: the splits, their shard lengths, bytes
    and file names, the supervised keys, every feature and each ClassLabel's names.
    """
    import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

    if not files(dataset):
        return []
    expected = dataset_info(dataset)
    where = lambda name: storage.join(output_dir, name)
    with tempfile.TemporaryDirectory(prefix='imageshards-tfds-') as folder:
        missing = [name for name in files(dataset) if not _copy(where(name), folder, name)]
        if missing:
            hint = 'tfds.builder_from_directory needs it; rebuild with --overwrite'
            return [(where(name), f'missing: {hint}') for name in missing]
        try:
            found = tfds.core.dataset_info.read_from_json(
                os.path.join(folder, layout.DATASET_INFO_JSON)
            )
            found_features = tfds.features.FeatureConnector.from_config(folder)
        except (ValueError, KeyError, TypeError, json_format.ParseError) as e:
            return [(where(layout.FEATURES_JSON), f'TFDS cannot read the metadata: {e}')]
    info_problems = _split_problems(found.splits, expected.as_proto.splits)
    if found.supervised_keys != expected.as_proto.supervised_keys:
        keys = [item.feature_key for item in found.supervised_keys.tuple.items]
        wanted = [item.feature_key for item in expected.as_proto.supervised_keys.tuple.items]
        info_problems.append(f'supervised keys are {keys}, not {wanted}')
    found_problems = [(where(layout.DATASET_INFO_JSON), message) for message in info_problems]
    for name, message in _feature_problems(found_features, expected.features):
        found_problems.append((where(name), message))
    return found_problems


def _copy(path, folder, name):
    """Copies a file of the build into `folder`; False if it does not exist."""
    if not storage.exists(path):
        return False
    with open(os.path.join(folder, name), 'wb') as f:
        f.write(storage.read(path))
    return True


def _split_problems(found, expected):
    """Messages where the found splits (SplitInfo protos) differ from the expected ones."""
    found, expected = {s.name: s for s in found}, {s.name: s for s in expected}
    if sorted(found) != sorted(expected):
        return [f'splits {sorted(found)}, but dataset.json has {sorted(expected)}']
    messages = []
    for name, split in expected.items():
        for field, what in (
            ('shard_lengths', 'shard lengths'),
            ('num_bytes', 'bytes'),
            ('filepath_template', 'file names'),
        ):
            value, wanted = getattr(found[name], field), getattr(split, field)
            if value != wanted:
                messages.append(
                    f'split {name} has {what} {_plain(value)}, but dataset.json says '
                    f'{_plain(wanted)}'
                )
    return messages


def _plain(value):
    return list(value) if not isinstance(value, (str, int)) else value


def _feature_problems(found, expected):
    """[(file name, message)] where the found FeaturesDict differs from the expected one."""
    messages = []
    for key in sorted(set(expected.keys()) - set(found.keys())):
        messages.append((layout.FEATURES_JSON, f'no feature {key}, which the records have'))
    for key in sorted(set(found.keys()) - set(expected.keys())):
        messages.append((layout.FEATURES_JSON, f'feature {key}, which the records do not have'))
    for key in sorted(set(found.keys()) & set(expected.keys())):
        have, want = found[key], expected[key]
        if type(have) is not type(want) or have.to_json_content() != want.to_json_content():
            messages.append((layout.FEATURES_JSON, f'feature {key} is {have!r}, not {want!r}'))
        elif hasattr(want, 'names') and have.names != want.names:
            labels_txt = key.replace('/', '.') + layout.LABELS_TXT_SUFFIX
            messages.append(
                (labels_txt, f'{key} names {have.names}, but dataset.json has {want.names}')
            )
    return messages
