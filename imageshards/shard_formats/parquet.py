"""Parquet shards (`ParquetFormat`): one row per image, the table Hugging Face `datasets`,
pandas, DuckDB and BigQuery read, with the features `datasets.load_dataset("parquet", ...)` shows
without a loading script.

A row holds every feature of its record (the build's kind's schema), as columns:
    image                  Hugging Face's `Image` struct: `bytes` (the encoded image) and `path`
                           (the image's key, as text)
    label                  `ClassLabel` with the build's names (a multi-label build: a list
                           of them); `label_text` its name(s) (image/class/label and /text)
    label_<level>          `ClassLabel` of the level's names (-1 where missing), and
                           `label_<level>_text`
    filename, path         the key and the path as bytes (`binary`): a file name is bytes, and
                           not every one is UTF-8 (imageshards/file_names.py)
    objects                (detection builds) a struct of lists, one entry per object:
                           `bbox` ([ymin, xmin, ymax, xmax] fractions, float32), `label`
                           (`ClassLabel`), `text` and the other image/object/* features;
                           TFDS's objects/bbox and objects/label are these (parquet_objects.py)
    every other feature    its key without `image/`, `/` as `_` (`image/key/sha256` is
                           `key_sha256`): text as `string`, int64 as `int64`, float as `float`,
                           a list type as a list of those
The schema metadata holds `huggingface` (the `datasets` features, as `Dataset.to_parquet`
writes them) and `imageshards` (each feature's key, type and column), from which a row becomes
its record again (the same `tensorflow.Example` bytes as a TFRecord build's): `imageshards
verify`, `inspect` and the trainer read a Parquet build through the records it holds.

Row groups hold 100 rows, what `datasets` writes for images (a reader streams a row group at a
time; a random read of one row reads its group). Pages carry CRC32 checksums, which reading
checks. The image column and the objects' masks are neither compressed (an encoded image does
not shrink) nor dictionary-encoded; the others are Snappy-compressed, as `datasets` and pandas
write.
"""

import dataclasses
import hashlib
import json

from imageshards.kinds import example_bytes
from imageshards.kinds import features
from imageshards.shard_formats import parquet_objects
from imageshards.shard_formats.shard_format import CorruptRecordError
from imageshards.shard_formats.shard_format import ShardFormat
from imageshards.shard_formats.shard_format import WrittenShard
from imageshards.shard_formats.shard_format import local_copy

ROWS_PER_GROUP = 100
IMAGE = 'image'
_IMAGE_BYTES = 'image.bytes'
_BINARY = (features.FILENAME, features.PATH)  # file names: bytes, which may not be UTF-8
_METADATA = b'imageshards'
_LABEL_COLUMNS = {features.LABEL: 'label', features.LABEL_TEXT: 'label_text'}


@dataclasses.dataclass(frozen=True)
class _Schema:
    """A schema as example_bytes.plan takes it (a kind's `schema`), from a file's metadata."""

    items: tuple

    @property
    def schema(self):
        return dict(self.items)


class ParquetFormat(ShardFormat):
    """Parquet shards, one row per image. Writing needs the records' schema and names:
    `for_records(kind, names)` gives the format that writes them."""

    name = 'parquet'
    suffix = '.parquet'
    position_word = 'row'

    def __init__(self, schema=None, names=None, binary=_BINARY):
        self._schema, self._names, self._binary = schema, names, tuple(binary)

    def for_records(self, kind, names) -> 'ParquetFormat':
        """The format writing `kind`'s records; ValueError naming a label that cannot be a
        Parquet string (a folder's name that is not UTF-8), before anything is written."""
        for name in [*names.labels, *(n for _, level in names.levels for n in level)]:
            _utf8(name.encode('utf-8', 'surrogateescape'), 'a label')
        return ParquetFormat(dict(kind.schema), names, kind.binary_keys)

    def encoder(self, kind):
        """A row's values as the writer made them: no `tensorflow.Example` made to be parsed
        again (the records are rows, written from the values)."""
        del kind
        return _as_row

    def write(self, path, records, files, temp_dir) -> WrittenShard:
        """Writes `records`, the values of each row (`encoder`), as a Parquet file."""
        import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel

        if self._schema is None:
            raise ValueError('ParquetFormat writes records of a kind: use for_records(kind, names)')
        columns = _columns(self._schema)
        arrow_schema = _arrow_schema(self._schema, columns, self._names, self._binary)
        leaves, stored = _leaf_names(arrow_schema)
        count = 0
        with files.created_whole(path, temp_dir) as raw:
            f = _HashingWriter(raw)
            with pq.ParquetWriter(
                f,
                arrow_schema,
                compression={**dict.fromkeys(leaves, 'SNAPPY'), **dict.fromkeys(stored, 'NONE')},
                use_dictionary=leaves,
                write_statistics=leaves,
                write_page_checksum=True,
            ) as writer:
                for rows in _groups(records, ROWS_PER_GROUP):  # each a {key: value} of a record
                    table = _table(rows, self._schema, columns, arrow_schema, self._binary)
                    writer.write_table(table)
                    count += len(rows)
        return WrittenShard(count, f.num_bytes, f.sha256.hexdigest(), False)

    def read(self, f, name):
        with local_copy(f, self.suffix) as local:
            yield from self._read_local(local, name)

    def _read_local(self, path, name):
        import pyarrow  # pylint: disable=import-outside-toplevel
        import pyarrow.parquet as pq  # pylint: disable=import-outside-toplevel

        position = 0
        try:
            parquet = pq.ParquetFile(path, page_checksum_verification=True)
            schema, columns = _stored_schema(parquet.schema_arrow.metadata, name)
            plan = example_bytes.plan(_Schema(tuple(sorted(schema.items()))))
            for group in range(parquet.num_row_groups):
                table = parquet.read_row_group(group)
                for values in _values(table, schema, columns):
                    yield position, plan.encode(values)
                    position += 1
        except (pyarrow.ArrowException, OSError) as e:
            raise CorruptRecordError(f'{name}: unreadable at row {position} ({e})') from e

    def tf_records(self, path):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        def records(name):  # a Python generator; the path may be a tensor (tf.data's interleave)
            name = name.decode('utf-8')
            with tf.io.gfile.GFile(name, 'rb') as f:
                for _, record in self.read(f, name):
                    yield record

        dataset = tf.data.Dataset.from_generator(
            records, args=(path,), output_signature=tf.TensorSpec((), tf.string)
        )
        return dataset


def column_name(key) -> str:
    """The column of a feature key (other than the image's): `image/key/sha256` -> `key_sha256`,
    `image/class/label` -> `label`."""
    if key in _LABEL_COLUMNS:
        return _LABEL_COLUMNS[key]
    return key.removeprefix('image/').replace('/', '_')


def _columns(schema):
    """{key: column} of a schema: the image's bytes and key go into the `image` struct too, a
    detection record's objects into `objects` (parquet_objects.py)."""
    nested = parquet_objects.columns(schema)
    found = {key: column_name(key) for key in schema if key not in (features.ENCODED, *nested)}
    if features.ENCODED in schema:
        found[features.ENCODED] = _IMAGE_BYTES
    named = [*found.values(), *([parquet_objects.COLUMN] if nested else [])]
    clashes = {c for c in named if named.count(c) > 1}
    if clashes:
        raise ValueError(f'features that would share Parquet columns: {sorted(clashes)}')
    return {**found, **nested}


def _arrow_type(key, type_, binary):
    import pyarrow as pa  # pylint: disable=import-outside-toplevel

    base = type_.removesuffix(features.LIST)
    if base == 'int64':
        one = pa.int64()
    elif base == 'float':
        one = pa.float32()
    else:
        one = pa.binary() if key in binary else pa.string()
    return pa.list_(one) if type_.endswith(features.LIST) else one


def _arrow_schema(schema, columns, names, binary):
    import pyarrow as pa  # pylint: disable=import-outside-toplevel

    fields = []
    if features.ENCODED in schema:
        fields.append(pa.field(IMAGE, pa.struct([('bytes', pa.binary()), ('path', pa.string())])))
    first = parquet_objects.first(columns)
    for key, type_ in schema.items():
        if key == first:
            own = lambda k: _arrow_type(k, schema[k], binary)
            fields.append(pa.field(parquet_objects.COLUMN, parquet_objects.arrow_type(schema, own)))
        elif key != features.ENCODED and not parquet_objects.holds(columns[key]):
            fields.append(pa.field(columns[key], _arrow_type(key, type_, binary)))
    stored = {'features': schema, 'columns': columns}
    metadata = {
        _METADATA: json.dumps(stored, sort_keys=True).encode('utf-8'),
        b'huggingface': json.dumps(
            {'info': {'features': _hf_features(schema, columns, names, binary)}}
        ),
    }
    return pa.schema(fields, metadata=metadata)


def _hf_features(schema, columns, names, binary):
    """The `datasets` features of the columns, as `Features.to_dict()` writes them."""
    found = {IMAGE: {'_type': 'Image'}} if features.ENCODED in schema else {}
    first = parquet_objects.first(columns)
    for key, type_ in schema.items():
        if key == first:
            feature = lambda k: _hf_feature(k, schema[k], names, binary)
            found[parquet_objects.COLUMN] = parquet_objects.hf_feature(schema, names, feature)
        elif key != features.ENCODED and not parquet_objects.holds(columns[key]):
            found[columns[key]] = _hf_feature(key, type_, names, binary)
    return found


def _hf_feature(key, type_, names, binary):
    levels = dict(names.levels) if names else {}
    base = type_.removesuffix(features.LIST)
    level = key.removeprefix(features.LEVEL_PREFIX)
    if key == features.LABEL and names:
        one = {'names': list(names.labels), '_type': 'ClassLabel'}
    elif key.startswith(features.LEVEL_PREFIX) and level in levels:
        one = {'names': list(levels[level]), '_type': 'ClassLabel'}
    else:
        dtype = {'int64': 'int64', 'float': 'float32'}.get(base)
        dtype = dtype or ('binary' if key in binary else 'string')
        one = {'dtype': dtype, '_type': 'Value'}
    return {'feature': one, '_type': 'List'} if type_.endswith(features.LIST) else one


def _leaf_names(arrow_schema):
    """(leaves compressed, with dictionaries and statistics; leaves stored as they are: encoded
    images and masks)."""
    leaves, stored = [], []
    for field in arrow_schema:
        if hasattr(field.type, 'value_type'):  # a list: its values' column
            leaves.append(f'{field.name}.list.element')
        elif not field.type.num_fields:
            leaves.append(field.name)
        elif field.name == parquet_objects.COLUMN:
            nested, as_is = parquet_objects.leaf_names(field.type)
            leaves, stored = leaves + nested, stored + as_is
        else:
            names = [f'{field.name}.{child.name}' for child in field.type]
            leaves += [n for n in names if n != _IMAGE_BYTES]
            stored += [n for n in names if n == _IMAGE_BYTES]
    return leaves, stored


def _groups(records, size):
    rows = []
    for record in records:
        rows.append(record)
        if len(rows) == size:
            yield rows
            rows = []
    if rows:
        yield rows


def _as_row(values):
    return values


def _table(rows, schema, columns, arrow_schema, binary):
    """A table of `rows` (each the {key: value} of a record) in the schema's columns."""
    import pyarrow as pa  # pylint: disable=import-outside-toplevel

    data = {}
    for key, type_ in schema.items():
        found = [row[key] for row in rows]
        if type_.startswith('bytes') and key not in binary and key != features.ENCODED:
            found = _texts(found, key, type_.endswith(features.LIST))
        data[key] = found
    keys = {column: key for key, column in columns.items()}
    arrays = []
    for field in arrow_schema:
        if field.name == IMAGE:
            paths = [_text(name) for name in data[features.FILENAME]]
            arrays.append(
                pa.StructArray.from_arrays(
                    [pa.array(data[features.ENCODED], pa.binary()), pa.array(paths, pa.string())],
                    names=['bytes', 'path'],
                )
            )
        elif field.name in keys:
            arrays.append(pa.array(data[keys[field.name]], field.type))
        else:
            arrays.append(parquet_objects.array(data, field.type))
    return pa.Table.from_arrays(arrays, schema=arrow_schema)


def _texts(values, key, listed):
    """A text column's values as str (a value may be given as bytes, UTF-8)."""
    if listed:
        return [[_str(value, key) for value in each] for each in values]
    return [_str(value, key) for value in values]


def _str(value, key):
    return value if isinstance(value, str) else _utf8(value, key)


def _utf8(value, key):
    try:
        return value.decode('utf-8')
    except UnicodeDecodeError as e:
        raise ValueError(
            f'{key}: {value[:40]!r} is not UTF-8 text, which a Parquet string column needs; '
            f'build it with --shard-format tfrecord or array_record'
        ) from e


def _text(name):
    """A file name (bytes, or a str) as text for people: bytes that are not UTF-8 as \\xNN."""
    if isinstance(name, str):
        name = name.encode('utf-8', 'surrogateescape')
    return name.decode('utf-8', 'backslashreplace')


def _stored_schema(metadata, name):
    """(schema, columns) from a file's `imageshards` metadata."""
    stored = (metadata or {}).get(_METADATA)
    if stored is None:
        raise CorruptRecordError(f'{name}: a Parquet file without imageshards metadata')
    stored = json.loads(stored)
    return stored['features'], stored['columns']


def _values(table, schema, columns):
    """The records' values ({key: value}) of a table's rows."""
    data = parquet_objects.values(table, columns)
    for key, column in columns.items():
        if key in data:
            continue
        if column == _IMAGE_BYTES:
            data[key] = table.column(IMAGE).combine_chunks().field('bytes').to_pylist()
        else:
            data[key] = table.column(column).to_pylist()
    for row in range(table.num_rows):
        values = {}
        for key, type_ in schema.items():
            value = data[key][row]
            if type_.startswith('bytes'):
                value = (
                    tuple(_bytes(v) for v in value)
                    if type_.endswith(features.LIST)
                    else _bytes(value)
                )
            elif type_.endswith(features.LIST):
                value = tuple(value)
            values[key] = value
        yield values


def _bytes(value):
    return value.encode('utf-8') if isinstance(value, str) else value


class _HashingWriter:
    """A binary file being written whose bytes go into a sha256 and a count, for pyarrow."""

    closed = False

    def __init__(self, f):
        self._f = f
        self.sha256 = hashlib.sha256()
        self.num_bytes = 0

    def write(self, data):
        view = memoryview(data)  # pyarrow's buffer, not copied
        self._f.write(view)
        self.sha256.update(view)
        self.num_bytes += view.nbytes
        return view.nbytes

    def tell(self):
        return self.num_bytes

    def flush(self):
        pass

    def close(self):
        self.closed = True

    def writable(self):
        return True

    def seekable(self):
        return False
