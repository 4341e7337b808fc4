"""The record spec: our serialization is TensorFlow's, byte for byte, for every feature type
and every kind's schema (imageshards/kinds/)."""

import dataclasses
import hashlib
import typing

import pytest

from imageshards.kinds import example_bytes
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards.kinds.classification import Classification

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


def _message_bytes(message, schema, values):
    """The deterministic serialization of `values` filled into a `tensorflow.Example` message
    (TensorFlow's own class, or example_bytes.example_class())."""
    for key, kind in schema.items():
        value = values[key] if kind.endswith(features.LIST) else (values[key],)
        feature = message.features.feature[key]
        if kind.startswith('int64'):
            feature.int64_list.value.extend(value)
        elif kind.startswith('float'):
            feature.float_list.value.extend(value)
        else:
            feature.bytes_list.value.extend(
                v.encode('utf-8') if isinstance(v, str) else v for v in value
            )
    return message.SerializeToString(deterministic=True)


def _tensorflow_bytes(tf, fmt, values, levels=()):
    return _message_bytes(tf.train.Example(), Classification(fmt, levels=levels).schema, values)


@pytest.mark.parametrize(
    'fmt, extra',
    [
        (features.EXAMPLES, {features.ENCODED: bytes(range(256)) * 40}),
        (features.PATHS, {features.PATH: '/data/cat/ü.png'}),
    ],
)
def test_encoding_matches_tensorflow_deterministic_serialization(tf, fmt, extra):
    values = {**VALUES, **extra}
    ours = example_bytes.encode_example(Classification(fmt), values)
    assert ours == _tensorflow_bytes(tf, fmt, values)
    parsed = tf.io.parse_single_example(ours, Classification(fmt).feature_spec())
    assert parsed[features.LABEL].numpy() == -1
    assert parsed[features.LABEL_TEXT].numpy().decode('utf-8') == 'ñandú 鳥'
    assert parsed[features.ID].numpy() == 2**40 + 3


def test_encoding_refuses_records_that_do_not_match_the_schema():
    with pytest.raises(ValueError, match='do not match'):
        example_bytes.encode_example(Classification(), VALUES)  # no image/encoded
    with pytest.raises(ValueError, match='unknown format'):
        Classification('pixels')


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
    encoded = example_bytes.encode_example(Classification(fmt), values)
    assert hashlib.sha256(encoded).hexdigest() == GOLDEN[fmt]
    assert not any(key.startswith(features.LEVEL_PREFIX) for key in Classification(fmt).schema)


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
    ours = example_bytes.encode_example(Classification(levels=levels), values)
    assert ours == _tensorflow_bytes(tf, features.EXAMPLES, values, levels)
    parsed = tf.io.parse_single_example(ours, Classification(levels=levels).feature_spec())
    assert parsed['image/label/family'].numpy() == 1
    assert parsed['image/label/family/text'].numpy() == b'fish'
    assert parsed['image/label/species'].numpy() == -1
    with pytest.raises(ValueError, match='do not match'):  # a level's features are required
        example_bytes.encode_example(Classification(levels=('family', 'species', 'genus')), values)


@dataclasses.dataclass(frozen=True, kw_only=True)
class _EveryType(Classification):
    """A kind whose records hold every feature type: float and float lists among them."""

    name: typing.ClassVar[str] = 'every-type-for-tests'

    def own_schema(self):
        return {**super().own_schema(), 'x/score': 'float', 'x/scores': 'float_list'}


def _random_value(rng, kind, ints, lengths):
    if kind == 'int64':
        return rng.choice(ints + [rng.randrange(-(2**63), 2**63)])
    if kind == 'float':
        return rng.choice([0.0, -0.0, 1.5, -3.25e38, 1e-45, float('inf'), rng.uniform(-9, 9)])
    if kind == 'float_list':
        return tuple(rng.uniform(-1e6, 1e6) for _ in range(rng.choice([0, 1, 4, 40])))
    return rng.choice(
        [b'', 'ü', bytes(rng.randrange(256) for _ in range(200))]
        + [bytes([rng.randrange(256)]) * rng.choice(lengths)] * 3
    )


@pytest.mark.parametrize(
    'kind',
    [Classification(levels=('family', 'species')), _EveryType(levels=('family',), grouped=True)],
    ids=['levels', 'every-type'],
)
def test_encoding_equals_the_protobuf_runtime_on_random_records(kind):
    """The hand-written wire format against the message class, over edge values."""
    import random  # pylint: disable=import-outside-toplevel

    rng = random.Random(3)
    ints = [0, 1, -1, 127, 128, 2**31, -(2**63), 2**63 - 1, 300, -300]
    # Lengths around the one-, two- and three-byte varints of each nested length field.
    lengths = [122, 123, 124, 125, 126, 127, 128, 16375, 16377, 16379, 16381, 16383, 16384, 70000]
    for _ in range(300):
        values = {key: _random_value(rng, t, ints, lengths) for key, t in kind.schema.items()}
        expected = _message_bytes(example_bytes.example_class()(), kind.schema, values)
        assert example_bytes.encode_example(kind, values) == expected


def test_float_features_are_what_tensorflow_writes_and_parses(tf):
    kind = _EveryType()
    values = {
        **VALUES,
        **PAYLOADS[features.EXAMPLES],
        'x/score': 0.1,
        'x/scores': (1.5, -2.0, 3.25),
    }
    ours = example_bytes.encode_example(kind, values)
    assert ours == _message_bytes(tf.train.Example(), kind.schema, values)
    parsed = tf.io.parse_example([ours], kind.feature_spec())
    assert parsed['x/score'].dtype == tf.float32
    assert parsed['x/score'].numpy().tolist() == pytest.approx([0.1])
    assert parsed['x/scores'].values.numpy().tolist() == [1.5, -2.0, 3.25]


def test_multi_label_records_hold_lists_as_tensorflow_serializes_them(tf):
    levels = ('family', 'species')
    kind = Classification(levels=levels, multi_label=True)
    schema = kind.schema
    label_keys = [features.LABEL, features.LABEL_TEXT]
    label_keys += [
        key for level in levels for key in (f'image/label/{level}', f'image/label/{level}/text')
    ]
    assert [schema[key] for key in label_keys] == [
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
        ours = example_bytes.encode_example(kind, values)
        assert ours == _message_bytes(tf.train.Example(), schema, values)
        parsed = tf.io.parse_example([ours], kind.feature_spec())
        assert parsed[features.LABEL].values.numpy().tolist() == list(labels)
        assert [n.decode() for n in parsed[features.LABEL_TEXT].values.numpy()] == list(names)
        assert parsed['image/label/species'].values.numpy().tolist() == []
    # A single-label build's schema is unchanged by the multi-label kinds.
    assert (
        Classification(levels=levels).schema
        == Classification(levels=levels, multi_label=False).schema
    )
    assert all(not t.endswith(features.LIST) for t in Classification(levels=levels).schema.values())


def test_a_kind_round_trips_through_json_and_dataset_json():
    kind = Classification(features.PATHS, levels=('a', 'b'), multi_label=True, grouped=True)
    assert kinds.from_json(kinds.to_json(kind)) == kind
    dataset = {
        'format': features.PATHS,
        'labels': ['x'],
        'label_levels': {'a': [], 'b': []},
        'multi_label': True,
        'grouping': {'groups': {}},
    }
    assert kinds.of_build(dataset) == kind
    assert kinds.of_build({**dataset, 'kind': 'classification'}) == kind
    with pytest.raises(ValueError, match='unknown record kind'):
        kinds.of_build({**dataset, 'kind': 'pixels'})


def test_a_kind_of_a_feature_type_records_cannot_hold_is_refused():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class _Strings(Classification):
        name: typing.ClassVar[str] = 'strings-for-tests'

        def own_schema(self):
            return {**super().own_schema(), 'x/names': 'string_list'}

    with pytest.raises(ValueError, match=r"strings-for-tests: feature types \{'x/names'"):
        assert not _Strings().schema  # raises before
    assert _EveryType().schema['x/scores'] == 'float_list'  # every type it holds is known
