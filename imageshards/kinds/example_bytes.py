"""Records as bytes: the `tensorflow.Example` of a record of a kind's schema (imageshards/kinds/),
serialized without TensorFlow, so that Beam workers writing shards need not import it (seconds
and hundreds of MB per worker process). The bytes are those of TensorFlow's `example_pb2` with
deterministic serialization; tests hold the two to it. `example_class` is the message class,
from the .proto's schema, for reading records.

Apart from the schema (features.py and the kinds), for the tf.Transform graphs follow the
schema's modules (pipelines/analysis/graph_cache.py), not how records are written.
"""

import functools
import operator
import struct

from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory

from imageshards.kinds import features


def encode_example(kind, values):
    """Serializes one record of `kind` (a RecordKind); byte-identical for identical values,
    whatever the process.

    The bytes are those of the protobuf runtime's deterministic serialization of a
    `tensorflow.Example` (map entries sorted by key), written out directly: six times faster
    per record than filling a message, which counts at millions of records (tests hold the two
    to each other and to TensorFlow). A writer of many records keeps the kind's `Plan` and
    calls its `encode`, which does not look the kind up again per record.

    Args:
        values: {key: value} with every key of `kind.schema`; bytes features take `bytes` or
            `str` (UTF-8), int64 features `int`, float features `float` (stored as float32),
            list types a tuple of those.
    """
    return plan(kind).encode(values)


@functools.cache
def plan(kind) -> 'Plan':
    """The Plan that encodes the records of `kind`, made once per kind in a process."""
    return Plan(kind)


class Plan:
    """How the records of one kind are encoded: a step per feature, in the serialized order (a
    run of repeating features one step, its values got at once with operator.itemgetter; a
    single bytes or int64 value a step of its own kind; any other type the general `_entry`)."""

    def __init__(self, kind):
        self._kind = kind
        ordered = _sorted_schema(kind)
        self._steps, self._size = _steps(ordered), len(ordered)

    def encode(self, values) -> bytes:
        """The record of `values` (see `encode_example`)."""
        parts = [b'']  # Example.features' header, once the rest's length is known
        try:
            if len(values) != self._size:
                raise KeyError
            for step, key, field, run in self._steps:
                if step is _RUN:  # features whose values repeat: encoded once per value tuple
                    parts.append(run[key(values)])
                elif step is _BYTES:  # the image's bytes among them: copied once, by the join
                    data = values[key]
                    data = data.encode('utf-8') if isinstance(data, str) else data
                    parts += (field[len(data)], data)  # the entry's fields before the bytes
                elif step is _INT:
                    parts.append(_int_entry(field, values[key]))
                else:
                    parts.append(_entry(key, step, values[key]))
        except KeyError:
            expected = sorted(key for key, _, _ in _sorted_schema(self._kind))
            raise ValueError(
                f'record keys {sorted(values)} do not match the schema of {self._kind} {expected}'
            ) from None
        parts[0] = _header(0x0A, sum(map(len, parts)))
        return b''.join(parts)


_RUN, _BYTES, _INT = 'run', 'bytes', 'int64'


class _Table(dict):
    """Encoded pieces by what they are made of, each made once (`make`) when first asked for;
    at most _MAX_ENTRIES kept."""

    def __missing__(self, key):
        if len(self) > _MAX_ENTRIES:
            self.clear()
        made = self[key] = self.make(key)
        return made

    def make(self, key):
        raise NotImplementedError


class _Run(_Table):
    """Consecutive features (in the serialized order) whose values repeat from record to
    record: their entries, encoded together, by their values' tuple."""

    def __init__(self, keys_and_kinds):
        super().__init__()
        self.keys_and_kinds = keys_and_kinds

    def make(self, key):
        values = key if len(self.keys_and_kinds) > 1 else (key,)
        return b''.join(
            _entry(name, kind, one) for (name, kind), one in zip(self.keys_and_kinds, values)
        )


def _steps(ordered):
    """((step, key or getter, key field or _BytesPrefixes, _Run or None), ...) that encode a
    record's features of `ordered` (`_sorted_schema`) in the serialized order."""
    steps, run = [], []
    for index, (key, kind, repeating) in enumerate(ordered):
        if repeating:
            run.append((key, kind))
            if index + 1 < len(ordered) and ordered[index + 1][2]:
                continue  # the run goes on
            getter = operator.itemgetter(*(key for key, _ in run))
            steps.append((_RUN, getter, None, _Run(tuple(run))))
            run = []
        elif kind in (_BYTES, _INT):  # the constant itself, which Plan.encode tests by `is`
            field = _BytesPrefixes(_KEY_FIELDS[key]) if kind == _BYTES else _KEY_FIELDS[key]
            steps.append((_BYTES if kind == _BYTES else _INT, key, field, None))
        else:
            steps.append((kind, key, None, None))
    return tuple(steps)


class _BytesPrefixes(_Table):
    """The map entry of one bytes feature up to its value, by the value's length (what `_entry`
    writes before the bytes)."""

    def __init__(self, key_field):
        super().__init__()
        self.key_field = key_field

    def make(self, size):
        bytes_list = _header(0x0A, size)  # BytesList.value
        feature = _header(0x0A, len(bytes_list) + size)  # Feature.bytes_list
        entry_value = _header(0x12, len(feature) + len(bytes_list) + size)
        fields = (self.key_field, entry_value, feature, bytes_list)
        return _header(0x0A, sum(map(len, fields)) + size) + b''.join(fields)


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
    values = value if kind.endswith(features.LIST) else (value,)
    if kind.startswith('int64'):  # Feature.int64_list (3) holding a packed Int64List
        numbers = b''.join(_varint(v) for v in values)
        feature = _delimited(0x1A, _delimited(0x0A, numbers) if numbers else b'')
    elif kind.startswith('float'):  # Feature.float_list (2) holding a packed FloatList
        numbers = struct.pack(f'<{len(values)}f', *values)
        feature = _delimited(0x12, _delimited(0x0A, numbers) if numbers else b'')
    else:  # Feature.bytes_list (1) holding a BytesList
        data = (v.encode('utf-8') if isinstance(v, str) else v for v in values)
        feature = _delimited(0x0A, b''.join(_delimited(0x0A, d) for d in data))
    return _delimited(0x0A, _KEY_FIELDS[key] + _delimited(0x12, feature))


# Features whose values repeat from record to record: their entries are encoded once per value
# (at most _MAX_ENTRIES kept per run of them).
_REPEATING = frozenset(
    [
        features.FORMAT,
        features.HEIGHT,
        features.WIDTH,
        features.CHANNELS,
        features.LABEL,
        features.LABEL_TEXT,
    ]
)
_MAX_ENTRIES = 100_000


@functools.cache
def _sorted_schema(kind):
    """[(key, kind, whether its values repeat)] in the order the protobuf runtime's
    deterministic serialization writes map entries: by key bytes, a key after the longer keys it
    is a prefix of (upb's order)."""
    pairs = sorted(
        kind.schema.items(),
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
