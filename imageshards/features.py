"""The record contract: one feature spec for the shard writer, the trainer's parser and serving.

Keys follow the TF Model Garden / TFDS image conventions, plus `image/id` (the input's position
in listing order, so the shuffle can be measured) and, for path manifests, `image/path`. A build
with label levels (`label/<level>` manifest columns, or `--label-levels` for a tree) adds
`image/label/<level>` (int64 id, -1 where missing) and `image/label/<level>/text` (the name, or
empty) per level; a build without levels has exactly the keys above.

A build with --resize-shorter-side stores the image at its reduced size (`image/height` and
`image/width` are those of the stored image, `image/key/sha256` the digest of its bytes) and
adds the original's: `image/original_height` and `image/original_width` (as a viewer shows it,
EXIF orientation applied) and `image/original_sha256` (hex sha256 of the input file's bytes,
what --dedup compares), on every record, also one stored as it was; a build without it has
none of these keys.

A build with groups (a manifest's `group` column, --group-pattern) adds `image/group`, the
name of the image's group (empty: none), from which `verify` counts the groups of each split.

A multi-label build (several labels per image: a `labels` manifest column) stores each label and
level feature as a list, as TF Model Garden's multi-label decoder (`VarLenFeature(tf.int64)` on
`image/class/label`) and TFDS's `Sequence(ClassLabel)` read them: the image's label ids, sorted,
and their names in the same order; an image without a label has empty lists.

Records are `tensorflow.Example` protos, serialized here without TensorFlow, so that Beam
workers writing shards need not import it (seconds and hundreds of MB per worker process). The bytes
are those of TensorFlow's `example_pb2` with deterministic serialization; tests hold the two to
it. `example_class` is the message class, from the .proto's schema, for reading records.
"""

import functools
import operator
import re

from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory

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
ORIGINAL_HEIGHT = 'image/original_height'
ORIGINAL_WIDTH = 'image/original_width'
ORIGINAL_SHA256 = 'image/original_sha256'
ORIGINAL_KEYS = {ORIGINAL_HEIGHT: 'int64', ORIGINAL_WIDTH: 'int64', ORIGINAL_SHA256: 'bytes'}
GROUP = 'image/group'
LEVEL_PREFIX = 'image/label/'
MISSING_LEVEL = -1  # the id of a missing level value (--allow-missing-levels)
# A label level names features (image/label/<level>), dataset.json keys and the trainer's heads.
LEVEL_NAME = re.compile(r'^[A-Za-z0-9_][A-Za-z0-9_.-]*$')

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


def level_label(level):
    """The int64 feature holding a record's id in label level `level`."""
    return f'{LEVEL_PREFIX}{level}'


def level_text(level):
    """The bytes feature holding a record's name in label level `level` ('' where missing)."""
    return f'{LEVEL_PREFIX}{level}/text'


def check_level_name(name, where):
    """Raises ValueError unless `name` can name a label level."""
    if not LEVEL_NAME.match(name):
        raise ValueError(
            f'{where}: label level {name!r} must be non-empty letters, digits, _ . - '
            f'(no /, not starting with . or -)'
        )


def parse_label_levels(text):
    """`family,species` (or a YAML list) -> ('family', 'species'): valid, unique level names
    (the build's and the trainer's --label-levels)."""
    names = text if isinstance(text, (list, tuple)) else str(text).split(',')
    levels = tuple(str(name).strip() for name in names)
    for name in levels:
        check_level_name(name, '--label-levels')
    repeated = sorted({name for name in levels if levels.count(name) > 1})
    if repeated:
        raise ValueError(f'--label-levels: {repeated} named more than once in {text!r}')
    return levels


def record_schema(fmt, levels=(), multi_label=False, original=False, grouped=False):
    """Returns {key: 'bytes' | 'int64' | 'bytes_list' | 'int64_list'} for the records of an
    `examples` or `paths` build.

    Args:
        fmt: `examples` or `paths`.
        levels: the build's label level names, in order (a dict's keys will do).
        multi_label: a multi-label build: labels and levels are lists.
        original: records also keep their original's size and digest (ORIGINAL_KEYS: a build
            with --resize-shorter-side).
        grouped: records also name their group (GROUP: a build with groups).
    """
    if fmt == EXAMPLES:
        schema = {ENCODED: 'bytes', **_COMMON, **(ORIGINAL_KEYS if original else {})}
    elif fmt == PATHS:
        schema = {PATH: 'bytes', **_COMMON}
    else:
        raise ValueError(f'unknown format {fmt!r}; expected one of {FORMATS}')
    if grouped:
        schema[GROUP] = 'bytes'
    for level in levels:
        schema[level_label(level)] = 'int64'
        schema[level_text(level)] = 'bytes'
    if multi_label:
        for key in (LABEL, LABEL_TEXT, *(k for k in schema if k.startswith(LEVEL_PREFIX))):
            schema[key] += LIST
    return schema


LIST = '_list'  # the suffix of a kind of several values: 'int64_list', 'bytes_list'


def label_keys(levels=()):
    """The keys that hold labels: `image/class/label`, `image/class/text` and the levels'."""
    return (
        LABEL,
        LABEL_TEXT,
        *(key for level in levels for key in (level_label(level), level_text(level))),
    )


def feature_spec(fmt, levels=(), multi_label=False, original=False):
    """The `tf.io.parse_example` spec for the records of a build in format `fmt`: a list kind
    is a `VarLenFeature` (a SparseTensor per batch)."""
    import tensorflow as tf

    dtypes = {'bytes': tf.string, 'int64': tf.int64}
    return {
        key: tf.io.VarLenFeature(dtypes[kind[: -len(LIST)]])
        if kind.endswith(LIST)
        else tf.io.FixedLenFeature([], dtypes[kind])
        for key, kind in record_schema(fmt, levels, multi_label, original).items()
    }


def encode_example(fmt, values, levels=(), multi_label=False, original=False, grouped=False):
    """Serializes one record; byte-identical for identical values, whatever the process.

    The bytes are those of the protobuf runtime's deterministic serialization of a
    `tensorflow.Example` (map entries sorted by key), written out directly: six times faster
    per record than filling a message, which counts at millions of records (tests hold the two
    to each other and to TensorFlow).

    Args:
        fmt: `examples` or `paths`.
        values: {key: value} with every key of `record_schema(fmt, levels, multi_label,
            original)`; bytes features take `bytes` or `str` (UTF-8), int64 features take
            `int`, list kinds a tuple of those.
        levels: the build's label level names.
        multi_label: a multi-label build's records.
        original: records with the original's size and digest (ORIGINAL_KEYS).
        grouped: records naming their group (GROUP).
    """
    steps, size = _steps(fmt, tuple(levels), multi_label, original, grouped)
    parts = []
    try:
        if len(values) != size:
            raise KeyError
        for step, key, key_field, run in steps:
            if step is _RUN:  # features whose values repeat: encoded once per value tuple
                value = key(values)
                parts.append(run.get(value) or run.encode(value))  # an entry is never empty
            elif step is _BYTES:  # the image's bytes among them: copied once, by the join
                _append_bytes_entry(parts, key_field, values[key])
            elif step is _INT:
                parts.append(_int_entry(key_field, values[key]))
            else:
                parts.append(_entry(key, step, values[key]))
    except KeyError:
        ordered = _sorted_schema(fmt, tuple(levels), multi_label, original, grouped)
        raise ValueError(
            f'record keys {sorted(values)} do not match the {fmt} schema '
            f'{sorted(key for key, _, _ in ordered)}'
        ) from None
    features_bytes = b''.join(parts)
    return _header(0x0A, len(features_bytes)) + features_bytes  # Example.features


_RUN, _BYTES, _INT = 'run', 'bytes', 'int64'


class _Run(dict):
    """Consecutive features (in the serialized order) whose values repeat from record to
    record: their entries, encoded together, by their values' tuple."""

    def __init__(self, keys_and_kinds):
        super().__init__()
        self.keys_and_kinds = keys_and_kinds

    def encode(self, value):
        values = value if len(self.keys_and_kinds) > 1 else (value,)
        if len(self) > _MAX_ENTRIES:
            self.clear()
        self[value] = b''.join(
            _entry(key, kind, one) for (key, kind), one in zip(self.keys_and_kinds, values)
        )
        return self[value]


@functools.cache
def _steps(fmt, levels, multi_label, original, grouped):
    """((step, key or getter, key field, _Run or None), ...) that encode a record's features in
    the serialized order, and their number. A run of repeating features is one step, its
    values got at once (operator.itemgetter); a single bytes or int64 value has a step of its
    own kind; any other kind (a list) the general `_entry`."""
    ordered = _sorted_schema(fmt, levels, multi_label, original, grouped)
    steps, run = [], []
    for index, (key, kind, repeating) in enumerate(ordered):
        if repeating:
            run.append((key, kind))
            if index + 1 < len(ordered) and ordered[index + 1][2]:
                continue  # the run goes on
            getter = operator.itemgetter(*(key for key, _ in run))
            steps.append((_RUN, getter, None, _Run(tuple(run))))
            run = []
        elif kind in (_BYTES, _INT):  # the constant itself, which encode_example tests by `is`
            steps.append((_BYTES if kind == _BYTES else _INT, key, _KEY_FIELDS[key], None))
        else:
            steps.append((kind, key, None, None))
    return tuple(steps), len(ordered)


def _append_bytes_entry(parts, key_field, value):
    """Appends to `parts` the pieces of the map entry `_entry` makes of a bytes feature."""
    data = value.encode('utf-8') if isinstance(value, str) else value
    bytes_list = _header(0x0A, len(data))  # BytesList.value
    feature = _header(0x0A, len(bytes_list) + len(data))  # Feature.bytes_list
    entry_value = _header(0x12, len(feature) + len(bytes_list) + len(data))  # entry value
    size = len(key_field) + len(entry_value) + len(feature) + len(bytes_list) + len(data)
    parts += (_header(0x0A, size), key_field, entry_value, feature, bytes_list, data)


def _int_entry(key_field, value):
    """The map entry `_entry` makes of a single int64 feature, its key field given."""
    numbers = _varint(value)
    int64_list = _header(0x0A, len(numbers)) + numbers  # Int64List.value, packed
    feature = _header(0x1A, len(int64_list)) + int64_list  # Feature.int64_list
    entry_value = _header(0x12, len(feature)) + feature
    return _header(0x0A, len(key_field) + len(entry_value)) + key_field + entry_value


def _entry(key, kind, value):
    """One map entry of Features.feature: its key and the Feature holding `value` (a tuple of
    values for a list kind)."""
    values = value if kind.endswith(LIST) else (value,)
    if kind.startswith('int64'):  # Feature.int64_list (3) holding a packed Int64List
        numbers = b''.join(_varint(v) for v in values)
        feature = _delimited(0x1A, _delimited(0x0A, numbers) if numbers else b'')
    else:  # Feature.bytes_list (1) holding a BytesList
        data = (v.encode('utf-8') if isinstance(v, str) else v for v in values)
        feature = _delimited(0x0A, b''.join(_delimited(0x0A, d) for d in data))
    return _delimited(0x0A, _KEY_FIELDS[key] + _delimited(0x12, feature))


# Features whose values repeat from record to record: their entries are encoded once per value
# (at most _MAX_ENTRIES kept per run of them).
_REPEATING = frozenset([FORMAT, HEIGHT, WIDTH, CHANNELS, LABEL, LABEL_TEXT])
_MAX_ENTRIES = 100_000


@functools.cache
def _sorted_schema(fmt, levels, multi_label, original, grouped):
    """[(key, kind, whether its values repeat)] in the order the protobuf runtime's
    deterministic serialization writes map entries: by key bytes, a key after the longer keys it
    is a prefix of (upb's order)."""
    pairs = sorted(
        record_schema(fmt, levels, multi_label, original, grouped).items(),
        key=functools.cmp_to_key(lambda a, b: _upb_key_order(a[0], b[0])),
    )
    for key, _ in pairs:
        if key not in _KEY_FIELDS:
            _KEY_FIELDS[key] = _delimited(0x0A, key.encode('utf-8'))
    return tuple((key, kind, key in _REPEATING) for key, kind in pairs)


def _upb_key_order(a, b):
    a, b = a.encode('utf-8'), b.encode('utf-8')
    common = min(len(a), len(b))
    if a[:common] != b[:common]:
        return -1 if a[:common] < b[:common] else 1
    return (len(a) < len(b)) - (len(a) > len(b))  # the longer key first


_KEY_FIELDS = {}  # key -> the map entry's key field, encoded


def _varint(value):
    """A protobuf varint; negative int64 values take ten bytes, as two's complement."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_ONE_BYTE = [bytes((i,)) for i in range(0x80)]


def _delimited(tag, payload):
    """A length-delimited field: its tag byte, the payload's length, the payload."""
    return _header(tag, len(payload)) + payload


def _header(tag, size):
    """The tag byte and length of a length-delimited field of `size` bytes."""
    if size < 0x80:
        return _HEADERS[tag][size]
    if size < 0x4000:  # two bytes of varint: most images' lengths
        return bytes((tag, (size & 0x7F) | 0x80, size >> 7))
    return bytes((tag,)) + _varint(size)


_HEADERS = {tag: [bytes((tag, size)) for size in range(0x80)] for tag in (0x0A, 0x12, 0x1A)}


@functools.cache
def example_class():
    """The `tensorflow.Example` message class, built from tensorflow/core/example/*.proto.

    It lives in a private descriptor pool, so it cannot clash with TensorFlow's own.
    """
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name='imageshards/tensorflow_example.proto', package='tensorflow', syntax='proto3'
    )

    def message(name, *fields, nested=None):
        added = proto.message_type.add(name=name)
        if nested:
            added.nested_type.append(nested)
        for number, (field_name, field_type, label, type_name, oneof) in enumerate(fields, 1):
            extra = {'type_name': type_name} if type_name else {}
            if oneof:
                extra['oneof_index'] = 0
            added.field.add(name=field_name, number=number, type=field_type, label=label, **extra)
        return added

    repeated, optional = field.LABEL_REPEATED, field.LABEL_OPTIONAL
    message('BytesList', ('value', field.TYPE_BYTES, repeated, '', False))
    message('FloatList', ('value', field.TYPE_FLOAT, repeated, '', False))
    message('Int64List', ('value', field.TYPE_INT64, repeated, '', False))
    feature = message(
        'Feature',
        ('bytes_list', field.TYPE_MESSAGE, optional, '.tensorflow.BytesList', True),
        ('float_list', field.TYPE_MESSAGE, optional, '.tensorflow.FloatList', True),
        ('int64_list', field.TYPE_MESSAGE, optional, '.tensorflow.Int64List', True),
    )
    feature.oneof_decl.add(name='kind')
    entry = descriptor_pb2.DescriptorProto(name='FeatureEntry')
    entry.options.map_entry = True
    entry.field.add(name='key', number=1, type=field.TYPE_STRING, label=optional)
    entry.field.add(
        name='value',
        number=2,
        type=field.TYPE_MESSAGE,
        label=optional,
        type_name='.tensorflow.Feature',
    )
    message(
        'Features',
        ('feature', field.TYPE_MESSAGE, repeated, '.tensorflow.Features.FeatureEntry', False),
        nested=entry,
    )
    message('Example', ('features', field.TYPE_MESSAGE, optional, '.tensorflow.Features', False))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName('tensorflow.Example'))
