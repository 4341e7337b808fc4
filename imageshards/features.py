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

Records are `tensorflow.Example` protos, serialized without TensorFlow by
imageshards/example_bytes.py, which also has the message class for reading them.
"""

import re

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
