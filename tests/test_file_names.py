"""File names that are not UTF-8 (imageshards/file_names.py): their bytes survive JSON and
records, and the JSON stays valid UTF-8 that any reader can parse."""

import json
import os
import random

import pytest

from imageshards import file_names
from imageshards import records
from imageshards.kinds import example_bytes
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards.shard_formats import tfrecord
from imageshards_cli import inspect
from imageshards_cli import verify

import images_for_tests as imgs

LATIN1 = b'latin1_\xe9t\xe9.jpg'  # the name: a Latin-1 archive's


def _through_json(fields):
    """`fields` written as a JSON line and read back, insisting the text is strict UTF-8."""
    text = json.dumps(fields, ensure_ascii=False).encode('utf-8')  # raises on a lone surrogate
    assert b'\\ud' not in text.lower()  # no surrogate escapes either
    return json.loads(text.decode('utf-8', 'strict'))


def test_a_latin1_name_on_disk_round_trips_through_json_to_its_file(tmp_path):
    (tmp_path / 'cats').mkdir()
    with open(os.path.join(os.fsencode(tmp_path), b'cats', LATIN1), 'wb') as f:
        f.write(b'the image')
    (listed,) = os.listdir(tmp_path / 'cats')  # as a build lists it: surrogate-escaped str
    path = f'cats/{listed}'
    fields = file_names.to_json(path)
    assert fields == {
        'path': 'cats/latin1_\\xe9t\\xe9.jpg',
        'path_b64': 'Y2F0cy9sYXRpbjFf6XTpLmpwZw==',
    }
    read = file_names.from_json(_through_json(fields))
    with open(tmp_path / read, 'rb') as f:
        assert f.read() == b'the image'
    assert file_names.to_bytes(read) == b'cats/' + LATIN1


@pytest.mark.parametrize('name', ['cat.jpg', 'été.jpg', '猫/ねこ.png', 'emoji_🐈.jpg', 'a b,c"d'])
def test_a_utf8_name_is_written_as_it_always_was(name):
    assert file_names.to_json(name) == {'path': name}
    assert json.dumps(file_names.to_json(name, 'kept')) == json.dumps({'kept': name})
    assert file_names.from_json(_through_json(file_names.to_json(name))) == name
    assert file_names.to_bytes(name) == name.encode('utf-8')


def test_every_byte_string_a_name_can_be_round_trips():
    rng = random.Random(24)
    names = [bytes([b]) for b in range(1, 256) if b != ord('/')]
    names += [
        bytes(rng.choice(range(1, 256)) for _ in range(rng.randint(1, 40))) for _ in range(500)
    ]
    for data in names:
        path = file_names.from_bytes(data)
        fields = _through_json(file_names.to_json(path, 'duplicate'))
        assert file_names.to_bytes(file_names.from_json(fields, 'duplicate')) == data
        assert isinstance(fields['duplicate'], str)  # `path` stays a string for every reader


def test_a_name_no_disk_can_hold_is_refused_with_a_readable_line():
    with pytest.raises(file_names.UnrepresentableName, match=r'^\\ud800\.jpg is not a file name'):
        file_names.to_bytes('\ud800.jpg')  # a manifest's "\ud800": not surrogateescape's
    assert file_names.display('\ud800.jpg') == '\\ud800.jpg'


def test_a_malformed_b64_field_is_an_error_not_a_wrong_name():
    with pytest.raises(ValueError, match='path_b64 is not base64'):
        file_names.from_json({'path': 'x', 'path_b64': 'not base64!'})


def test_image_filename_holds_the_names_bytes():
    schema = kinds.Classification(features.PATHS).schema
    values = {key: 0 if kind == 'int64' else b'' for key, kind in schema.items()}
    values[features.FILENAME] = file_names.to_bytes(file_names.from_bytes(b'in/' + LATIN1))
    example = records.parse_example(
        example_bytes.encode_example(kinds.Classification(features.PATHS), values)
    )
    kind, stored = records.feature_values(example.features.feature[features.FILENAME])
    assert (kind, stored) == ('bytes', [b'in/' + LATIN1])


@pytest.fixture(scope='module')
def latin1_builds(tmp_path_factory):
    """{format: output} of a tree whose cat folder holds the issue's Latin-1 name, and another
    Latin-1 name with the bytes of cat/img_0000.jpg, listed after it (for duplicates.jsonl)."""
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    root = tmp_path_factory.mktemp('latin1') / 'in'
    imgs.write_tree(root, 3, ('cat', 'dog'))
    cats = os.fsencode(root / 'cat')
    for name, data in ((LATIN1, imgs.jpeg(40)), (b'zz_\xe9cho.jpg', imgs.jpeg(0))):
        with open(cats + b'/' + name, 'wb') as f:
            f.write(data)
    outputs = {'input': root}
    for fmt in features.FORMATS:
        outputs[fmt] = root.parent / fmt
        argv = ['--input', str(root), '--output', str(outputs[fmt]), '--format', fmt, '--dedup']
        launcher.run(argv + ['--no-analyze', '--direct_running_mode=in_memory'])
    return outputs


def _records(shard):
    with open(shard, 'rb') as f:
        return list(tfrecord.read_records(f, str(shard)))


def test_a_valid_image_with_a_latin1_name_is_built_with_its_names_bytes(latin1_builds, capsys):
    out, root = latin1_builds[features.EXAMPLES], os.fsencode(latin1_builds['input'])
    assert (out / 'rejected.jsonl').read_text() == ''
    (shard,) = (out / 'train').glob('*.tfrecord')  # and its index file beside it
    names = {
        bytes(records.feature_values(example.features.feature[features.FILENAME])[1][0])
        for example in map(records.parse_example, _records(shard))
    }
    assert root + b'/cat/' + LATIN1 in names
    (duplicate,) = map(json.loads, (out / 'duplicates.jsonl').read_text().splitlines())
    copy = root + b'/cat/zz_\xe9cho.jpg'
    assert file_names.to_bytes(file_names.from_json(duplicate)) == copy
    assert duplicate['path'] == file_names.display(file_names.from_bytes(copy))
    assert duplicate['duplicate_of_path'].endswith('/cat/img_0000.jpg')
    assert verify.main([str(out)]) == 0
    assert inspect.main([str(out), '-n', '20']) == 0
    assert repr(root + b'/cat/' + LATIN1) in capsys.readouterr().out


def test_a_paths_build_of_a_latin1_name_is_verified_and_trained_from(latin1_builds, tf):
    out = latin1_builds[features.PATHS]
    assert verify.main([str(out)]) == 0
    from trainer import input_pipeline  # pylint: disable=import-outside-toplevel

    dataset = input_pipeline.make_dataset(
        str(out), 'train', 4, training=False, image_size=(16, 16), with_ids=True
    )
    ids = [int(i) for _, _, batch in dataset for i in batch.numpy()]
    assert sorted(ids) == [0, 1, 2, 3, 5, 6, 7]  # every image but the duplicate (id 4)
    del tf


def test_a_class_folder_that_is_not_utf8_is_the_label_its_name_shows(tmp_path):
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    root = tmp_path / 'in'
    imgs.write_tree(root, 2, ('dogs',))
    cafe = os.fsencode(root) + b'/caf\xe9'
    os.mkdir(cafe)
    for i in range(2):
        with open(cafe + f'/{i}.jpg'.encode(), 'wb') as f:
            f.write(imgs.jpeg(i, 1))
    out = tmp_path / 'out'
    argv = ['--no-analyze', '--direct_running_mode=in_memory']
    dataset = launcher.run(['--input', str(root), '--output', str(out), *argv])
    assert dataset['labels'] == ['caf\\xe9', 'dogs'] and dataset['counts']['written'] == 4
    assert verify.main([str(out)]) == 0
    with pytest.raises(ValueError, match=r'--output .*/out_\\xe9 is not a UTF-8 name'):
        launcher.run(['--input', str(root), '--output', os.fsdecode(cafe + b'/../out_\xe9')])


def test_a_jsonl_manifest_names_a_latin1_file_by_path_b64(latin1_builds, tmp_path):
    """The form rejected.jsonl and duplicates.jsonl give such a name is one a JSONL manifest
    takes back: `path_b64` in place of `path`'s bytes; a bad one rejects its row alone."""
    from pipelines import launcher  # pylint: disable=import-outside-toplevel

    root = latin1_builds['input']
    rows = [
        {
            **file_names.to_json(os.fsdecode(os.fsencode(root / 'cat') + b'/' + LATIN1)),
            'label': 'x',
        },
        {'path': str(root / 'cat' / 'img_0000.jpg'), 'label': 'y'},
        {'path': 'whatever', 'path_b64': 'not base64!', 'label': 'y'},
    ]
    assert 'path_b64' in rows[0]
    manifest = tmp_path / 'images.jsonl'
    manifest.write_text(''.join(json.dumps(row) + '\n' for row in rows))
    out = tmp_path / 'out'
    launcher.run(
        ['--input', str(manifest), '--output', str(out), '--allow-root', str(root)]
        + ['--no-analyze', '--direct_running_mode=in_memory']
    )
    (rejected,) = map(json.loads, (out / 'rejected.jsonl').read_text().splitlines())
    assert rejected['reason'] == 'malformed_row' and 'path_b64 is not base64' in rejected['detail']
    (shard,) = (out / 'train').glob('*.tfrecord')
    names = {
        bytes(records.feature_values(example.features.feature[features.FILENAME])[1][0])
        for example in map(records.parse_example, _records(shard))
    }
    assert os.fsencode(root / 'cat') + b'/' + LATIN1 in names and len(names) == 2
