"""The record spec: our serialization is TensorFlow's, byte for byte."""

import hashlib

import pytest

from imageshards import example_bytes
from imageshards import features

VALUES = {
    features.FORMAT: 'jpeg',
    features.HEIGHT: 375,
    features.WIDTH: 500,
    features.CHANNELS: 3,
    features.LABEL: -1,
    features.LABEL_TEXT: 'ñandú 鳥',
    features.FILENAME: 'gs://bucket/a b/ü.jpg',
    features.SHA256: 'ab' * 32,
    features.ID: 2**40 + 3,
}


def _tensorflow_bytes(tf, fmt, values, levels=()):
    example = tf.train.Example()
    for key, kind in features.record_schema(fmt, levels).items():
        value = values[key]
        if kind == 'int64':
            example.features.feature[key].int64_list.value.append(value)
        else:
            example.features.feature[key].bytes_list.value.append(
                value.encode('utf-8') if isinstance(value, str) else value
            )
    return example.SerializeToString(deterministic=True)


@pytest.mark.parametrize(
    'fmt, extra',
    [
        (features.EXAMPLES, {features.ENCODED: bytes(range(256)) * 40}),
        (features.PATHS, {features.PATH: '/data/cat/ü.png'}),
    ],
)
def test_encoding_matches_tensorflow_deterministic_serialization(tf, fmt, extra):
    values = {**VALUES, **extra}
    ours = example_bytes.encode_example(fmt, values)
    assert ours == _tensorflow_bytes(tf, fmt, values)
    parsed = tf.io.parse_single_example(ours, features.feature_spec(fmt))
    assert parsed[features.LABEL].numpy() == -1
    assert parsed[features.LABEL_TEXT].numpy().decode('utf-8') == 'ñandú 鳥'
    assert parsed[features.ID].numpy() == 2**40 + 3


def test_encoding_refuses_records_that_do_not_match_the_schema():
    with pytest.raises(ValueError, match='do not match'):
        example_bytes.encode_example(features.EXAMPLES, VALUES)  # no image/encoded
    with pytest.raises(ValueError, match='unknown format'):
        features.record_schema('pixels')


# sha256 of encode_example(fmt, VALUES + payload) as written before label levels existed: a
# build without levels must keep writing exactly these bytes.
GOLDEN = {
    features.EXAMPLES: 'c9288cf9d6e6d0d4d8b59fe83fb7adaa0a1af58d9d1a6e410958d17bed531265',
    features.PATHS: '1fba8afcd9e8ee733297941725248e96789f2c241f1d95569bc584aa7b25aafc',
}
PAYLOADS = {
    features.EXAMPLES: {features.ENCODED: bytes(range(256)) * 40},
    features.PATHS: {features.PATH: '/data/cat/ü.png'},
}


@pytest.mark.parametrize('fmt', features.FORMATS)
def test_records_without_levels_keep_their_golden_bytes(fmt):
    values = {**VALUES, **PAYLOADS[fmt]}
    assert hashlib.sha256(example_bytes.encode_example(fmt, values)).hexdigest() == GOLDEN[fmt]
    assert not any(key.startswith(features.LEVEL_PREFIX) for key in features.record_schema(fmt))


def test_label_levels_add_an_id_and_a_text_feature_per_level(tf):
    levels = ('family', 'species')
    values = {
        **VALUES,
        **PAYLOADS[features.EXAMPLES],
        'image/label/family': 1,
        'image/label/family/text': 'fish',
        'image/label/species': features.MISSING_LEVEL,
        'image/label/species/text': '',
    }
    ours = example_bytes.encode_example(features.EXAMPLES, values, levels)
    assert ours == _tensorflow_bytes(tf, features.EXAMPLES, values, levels)
    parsed = tf.io.parse_single_example(ours, features.feature_spec(features.EXAMPLES, levels))
    assert parsed['image/label/family'].numpy() == 1
    assert parsed['image/label/family/text'].numpy() == b'fish'
    assert parsed['image/label/species'].numpy() == -1
    with pytest.raises(ValueError, match='do not match'):  # a level's features are required
        example_bytes.encode_example(features.EXAMPLES, values, ('family', 'species', 'genus'))


def test_encoding_equals_the_protobuf_runtime_on_random_records():
    """The hand-written wire format against the message class, over edge values."""
    import random  # pylint: disable=import-outside-toplevel

    rng = random.Random(3)
    levels = ('family', 'species')
    ints = [0, 1, -1, 127, 128, 2**31, -(2**63), 2**63 - 1, 300, -300]
    # Lengths around the one-, two- and three-byte varints of each nested length field.
    lengths = [122, 123, 124, 125, 126, 127, 128, 16375, 16377, 16379, 16381, 16383, 16384, 70000]
    for _ in range(300):
        values = {}
        for key, kind in features.record_schema(features.EXAMPLES, levels).items():
            if kind == 'int64':
                values[key] = rng.choice(ints + [rng.randrange(-(2**63), 2**63)])
            else:
                values[key] = rng.choice(
                    [b'', 'ü', bytes(rng.randrange(256) for _ in range(200))]
                    + [bytes([rng.randrange(256)]) * rng.choice(lengths)] * 3
                )
        message = example_bytes.example_class()()
        for key, kind in features.record_schema(features.EXAMPLES, levels).items():
            value = values[key]
            if kind == 'int64':
                message.features.feature[key].int64_list.value.append(value)
            else:
                message.features.feature[key].bytes_list.value.append(
                    value.encode('utf-8') if isinstance(value, str) else value
                )
        assert example_bytes.encode_example(features.EXAMPLES, values, levels) == (
            message.SerializeToString(deterministic=True)
        )


def test_multi_label_records_hold_lists_as_tensorflow_serializes_them(tf):
    levels = ('family', 'species')
    schema = features.record_schema(features.EXAMPLES, levels, multi_label=True)
    assert [schema[key] for key in features.label_keys(levels)] == [
        'int64_list',
        'bytes_list',
        'int64_list',
        'bytes_list',
        'int64_list',
        'bytes_list',
    ]
    # Several labels, one, none (an image with no label), each with its names in id order.
    for labels, names in (((0, 3, 2**40), ('ant', 'bee', 'ñandú')), ((5,), ('x',)), ((), ())):
        values = {
            **VALUES,
            **PAYLOADS[features.EXAMPLES],
            features.LABEL: labels,
            features.LABEL_TEXT: names,
            'image/label/family': labels[:1],
            'image/label/family/text': names[:1],
            'image/label/species': (),
            'image/label/species/text': (),
        }
        ours = example_bytes.encode_example(features.EXAMPLES, values, levels, multi_label=True)
        example = tf.train.Example()
        for key, kind in schema.items():
            value = values[key] if kind.endswith(features.LIST) else (values[key],)
            if kind.startswith('int64'):
                example.features.feature[key].int64_list.value.extend(value)
            else:
                example.features.feature[key].bytes_list.value.extend(
                    v.encode('utf-8') if isinstance(v, str) else v for v in value
                )
        assert ours == example.SerializeToString(deterministic=True)
        spec = features.feature_spec(features.EXAMPLES, levels, multi_label=True)
        parsed = tf.io.parse_example([ours], spec)
        assert parsed[features.LABEL].values.numpy().tolist() == list(labels)
        assert [n.decode() for n in parsed[features.LABEL_TEXT].values.numpy()] == list(names)
        assert parsed['image/label/species'].values.numpy().tolist() == []
    # A single-label build's schema and bytes are unchanged by the multi-label kinds.
    assert features.record_schema(features.EXAMPLES, levels) == features.record_schema(
        features.EXAMPLES, levels, multi_label=False
    )
