"""The record spec: our serialization is TensorFlow's, byte for byte."""

import pytest

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


def _tensorflow_bytes(tf, fmt, values):
    example = tf.train.Example()
    for key, kind in features.record_schema(fmt).items():
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
    ours = features.encode_example(fmt, values)
    assert ours == _tensorflow_bytes(tf, fmt, values)
    parsed = tf.io.parse_single_example(ours, features.feature_spec(fmt))
    assert parsed[features.LABEL].numpy() == -1
    assert parsed[features.LABEL_TEXT].numpy().decode('utf-8') == 'ñandú 鳥'
    assert parsed[features.ID].numpy() == 2**40 + 3


def test_encoding_refuses_records_that_do_not_match_the_schema():
    with pytest.raises(ValueError, match='do not match'):
        features.encode_example(features.EXAMPLES, VALUES)  # no image/encoded
    with pytest.raises(ValueError, match='unknown format'):
        features.record_schema('pixels')
