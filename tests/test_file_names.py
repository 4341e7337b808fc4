"""File names that are not UTF-8 (imageshards/file_names.py): their bytes survive JSON and
records, and the JSON stays valid UTF-8 that any reader can parse."""

import json
import os
import random

import pytest

from imageshards import features
from imageshards import file_names
from imageshards import records

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
    schema = features.record_schema(features.PATHS)
    values = {key: 0 if kind == 'int64' else b'' for key, kind in schema.items()}
    values[features.FILENAME] = file_names.to_bytes(file_names.from_bytes(b'in/' + LATIN1))
    example = records.parse_example(features.encode_example(features.PATHS, values))
    kind, stored = records.feature_values(example.features.feature[features.FILENAME])
    assert (kind, stored) == ('bytes', [b'in/' + LATIN1])
