"""The record contract's words: every feature key, the types a feature's values have, and the
`tf.io.parse_example` spec of a schema. What a build's records hold, which keys and types and
how an image becomes their values, is its kind's (imageshards/kinds/): one object for the
writer, the trainer's parser, serving, TFDS metadata and the tools.

Keys follow the TF Model Garden / TFDS image conventions, plus `image/id` (the input's position
in listing order, so the shuffle can be measured) and, for path manifests, `image/path`. A build
with label levels adds `image/label/<level>` (int64 id, -1 where missing) and
`image/label/<level>/text` (the name, or empty) per level (imageshards/kinds/classification.py).

A build with --resize-shorter-side stores the image at its reduced size (`image/height` and
`image/width` are those of the stored image, `image/key/sha256` the digest of its bytes) and
adds the original's: `image/original_height` and `image/original_width` (as a viewer shows it,
EXIF orientation applied) and `image/original_sha256` (hex sha256 of the input file's bytes,
what --dedup compares), on every record, also one stored as it was; a build without it has
none of these keys. A build with groups (a manifest's `group` column, --group-pattern) adds
`image/group`, the name of the image's group (empty: none), from which `verify` counts the
groups of each split.

A feature's type is `bytes`, `int64` or `float`, and `<type>_list` (LIST) where a record holds
any number of values (a multi-label build's labels): a schema is {key: type}. Records are
`tensorflow.Example` protos, serialized without TensorFlow by imageshards/kinds/example_bytes.py,
which also has the message class for reading them.
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


TYPES = ('bytes', 'int64', 'float')
LIST = '_list'  # the suffix of a type of several values: 'int64_list', 'bytes_list'


def parse_spec(schema) -> dict:
    """The `tf.io.parse_example` spec of records of `schema` ({key: type}): a list type is a
    `VarLenFeature` (a SparseTensor per batch); imports TensorFlow."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    dtypes = {'bytes': tf.string, 'int64': tf.int64, 'float': tf.float32}
    return {
        key: tf.io.VarLenFeature(dtypes[kind[: -len(LIST)]])
        if kind.endswith(LIST)
        else tf.io.FixedLenFeature([], dtypes[kind])
        for key, kind in schema.items()
    }
