"""The record contract: one feature spec for the shard writer, the trainer's parser and serving.

Keys follow the TF Model Garden / TFDS image conventions, plus `image/id` (the input's position
in listing order, so the shuffle can be measured) and, for path manifests, `image/path`.
TensorFlow is imported lazily: listing and planning a build must not pay for it.
"""

ENCODED = 'image/encoded'
FORMAT = 'image/format'
HEIGHT = 'image/height'
WIDTH = 'image/width'
CHANNELS = 'image/channels'
LABEL = 'image/class/label'
LABEL_TEXT = 'image/class/text'
FILENAME = 'image/filename'
SHA256 = 'image/key/sha256'
ID = 'image/id'
PATH = 'image/path'

EXAMPLES = 'examples'
PATHS = 'paths'
FORMATS = (EXAMPLES, PATHS)

_COMMON = {
        FORMAT: 'bytes',
        HEIGHT: 'int64',
        WIDTH: 'int64',
        CHANNELS: 'int64',
        LABEL: 'int64',
        LABEL_TEXT: 'bytes',
        FILENAME: 'bytes',
        SHA256: 'bytes',
        ID: 'int64',
}


def record_schema(fmt):
    """Returns {key: 'bytes' | 'int64'} for the records of an `examples` or `paths` build."""
    if fmt == EXAMPLES:
        return {ENCODED: 'bytes', **_COMMON}
    if fmt == PATHS:
        return {PATH: 'bytes', **_COMMON}
    raise ValueError(f'unknown format {fmt!r}; expected one of {FORMATS}')


def feature_spec(fmt):
    """The `tf.io.parse_example` spec for the records of a build in format `fmt`."""
    import tensorflow as tf
    dtypes = {'bytes': tf.string, 'int64': tf.int64}
    return {key: tf.io.FixedLenFeature([], dtypes[kind])
            for key, kind in record_schema(fmt).items()}


def encode_example(fmt, values):
    """Serializes one record; byte-identical for identical values, whatever the process.

    Args:
        fmt: `examples` or `paths`.
        values: {key: value} with every key of `record_schema(fmt)`; bytes features take `bytes`
            or `str` (UTF-8), int64 features take `int`.
    """
    from tensorflow.core.example import example_pb2
    schema = record_schema(fmt)
    if set(values) != set(schema):
        raise ValueError(f'record keys {sorted(values)} do not match the {fmt} schema {sorted(schema)}')
    example = example_pb2.Example()
    feature_map = example.features.feature
    for key, kind in schema.items():
        value = values[key]
        if kind == 'int64':
            feature_map[key].int64_list.value.append(value)
        else:
            feature_map[key].bytes_list.value.append(value.encode('utf-8') if isinstance(value, str) else value)
    # Map fields serialize in arbitrary order unless asked; shards must be byte-identical.
    return example.SerializeToString(deterministic=True)
