"""A build's records as one object: `RecordKind`, what every record holds, and what a kind adds.

Every record holds its image (`image/encoded`, or `image/path` in a `paths` build) and what
describes it: its format, height, width and channels, the input it came from, the sha256 of its
bytes and its id (imageshards/kinds/features.py names the keys); a build with --resize-shorter-side
adds the original's size and digest, one with groups the image's group. A kind adds its own
features: a classification build its labels and label levels
(imageshards/kinds/classification.py); a kind of one's own, what its images carry (boxes,
masks, weights). The kind says, in one place:

    schema          {key: type} of its records: 'bytes', 'int64' or 'float', with
                    features.LIST for a list of them (what dataset.json's `features` holds)
    feature_spec    the `tf.io.parse_example` spec the trainer, the analysis and tools parse with
    values          how an image's metadata (and its annotation) becomes a record's values
    multi_label     whether an image's label is a set of ids, each of which it is counted and
                    stratified by (splits and shards), or one id
    annotation      what of an input's annotation its record needs, packed into the image's
                    metadata, which the shuffle carries and never opens
    feature_docs    what each feature holds, in words (TFDS metadata states them)
    tfds_feature    the TFDS feature of each key that TFDS metadata states
    headline        what `imageshards inspect` says of a record first

A kind is configuration: equal kinds compare equal and hash alike (caches and the shipped
tf.Transform graphs are keyed by them), and it pickles into the steps that need it.
"""

import dataclasses
import functools
import typing

from imageshards.kinds import features

# Where the features every kind shares stand in a schema, and the classification labels among
# them: the order dataset.json states them in; a kind's other features follow, in its order.
_ORDER = (
    features.ENCODED,
    features.PATH,
    features.FORMAT,
    features.HEIGHT,
    features.WIDTH,
    features.CHANNELS,
    features.LABEL,
    features.LABEL_TEXT,
    features.FILENAME,
    features.SHA256,
    features.ID,
    *features.ORIGINAL_KEYS,
    features.GROUP,
)
_IMAGE = {
    features.FORMAT: 'bytes',
    features.HEIGHT: 'int64',
    features.WIDTH: 'int64',
    features.CHANNELS: 'int64',
    features.FILENAME: 'bytes',
    features.SHA256: 'bytes',
    features.ID: 'int64',
}
_DOCS = {
    features.ENCODED: 'the image file as stored (JPEG, or a lossless PNG re-encoding)',
    features.PATH: 'where the image file is; a paths build stores no pixels',
    features.FORMAT: 'the encoding of the stored bytes, e.g. jpeg or png',
    features.HEIGHT: 'height of the image in pixels',
    features.WIDTH: 'width of the image in pixels',
    features.CHANNELS: 'channels of the stored image (1 for grey); it decodes to 3',
    features.FILENAME: 'the input the image came from',
    features.SHA256: 'sha256 of the image bytes, hex',
    features.ID: "the input's position in listing order (measures the shuffle)",
    features.ORIGINAL_HEIGHT: 'height of the input image (as shown), before --resize-shorter-side',
    features.ORIGINAL_WIDTH: 'width of the input image (as shown), before --resize-shorter-side',
    features.ORIGINAL_SHA256: "sha256 of the input file's bytes, hex",
    features.GROUP: "the image's group (empty: none); a group's images share a split",
}


@dataclasses.dataclass(frozen=True)
class RecordKind:
    """What the records of a build hold. Subclasses (frozen dataclasses, their fields keyword
    only) name themselves (`name`, dataset.json's `kind`) and add their features with
    `own_schema` and `add_values`.

    Attributes:
        format: `examples` (the image's bytes in the record) or `paths` (its file's path).
        original: records also keep their original's size and digest (features.ORIGINAL_KEYS:
            a build with --resize-shorter-side).
        grouped: records also name their group (features.GROUP: a build with groups).
    """

    name: typing.ClassVar[str] = None
    # Whether records hold objects, which dataset.json accounts for one by one (`object_counts`)
    has_objects: typing.ClassVar[bool] = False
    format: str = features.EXAMPLES
    _: dataclasses.KW_ONLY  # the rest by name: a kind's options are many, all booleans or lists
    original: bool = False
    grouped: bool = False

    def __post_init__(self):
        if self.format not in features.FORMATS:
            raise ValueError(f'unknown format {self.format!r}; expected one of {features.FORMATS}')

    def core(self) -> 'RecordKind':
        """This kind without the features that only say where an image came from (its
        original's size and digest, its group): what a build's tf.Transform graph reads of its
        records and depends on (pipelines/analysis/graph_cache.py)."""
        return dataclasses.replace(self, original=False, grouped=False)

    @functools.cached_property
    def payload_key(self) -> str:
        """The key of what a record stores of its image: its bytes, or its file's path."""
        return features.ENCODED if self.format == features.EXAMPLES else features.PATH

    @functools.cached_property
    def keeps_original(self) -> bool:
        """Whether records keep their original's size and digest (features.ORIGINAL_KEYS): a
        build of image bytes with --resize-shorter-side."""
        return self.original and self.format == features.EXAMPLES

    @functools.cached_property
    def schema(self) -> dict:
        """{key: type} of every feature of the records, in dataset.json's order (made once:
        not to be changed)."""
        schema = {self.payload_key: 'bytes', **_IMAGE}
        if self.keeps_original:
            schema.update(features.ORIGINAL_KEYS)
        if self.grouped:
            schema[features.GROUP] = 'bytes'
        own = self.own_schema()
        unknown = {
            key: t for key, t in own.items() if t.removesuffix(features.LIST) not in features.TYPES
        }
        if unknown:
            raise ValueError(f'{self.name}: feature types {unknown} are not of {features.TYPES}')
        schema.update(own)
        place = {key: i for i, key in enumerate(_ORDER)}
        return dict(sorted(schema.items(), key=lambda item: place.get(item[0], len(place))))

    def own_schema(self) -> dict:
        """{key: type} of the features this kind adds to every record's."""
        return {}

    @property
    def binary_keys(self) -> tuple:
        """The bytes features that hold data, not text (file names, which may not be UTF-8;
        a kind's masks): what a format of typed columns stores as binary."""
        return (features.FILENAME, features.PATH)

    def feature_spec(self, keys=None) -> dict:
        """The `tf.io.parse_example` spec of the records (of `keys` of them, if given): a list
        type is a `VarLenFeature` (a SparseTensor per batch); imports TensorFlow."""
        schema = self.schema
        return features.parse_spec({key: schema[key] for key in keys or schema})

    def values(self, meta, names, filename, payload) -> dict:
        """{key: value} of the record of an image (for example_bytes.encode_example).

        Args:
            meta: the image's ImageMeta (pipelines/core/blocks.py).
            names: the build's LabelNames.
            filename: the bytes of `image/filename`.
            payload: the record's image bytes (`examples`) or path's bytes (`paths`).
        """
        values = {
            features.FORMAT: meta.format,
            features.HEIGHT: meta.height,
            features.WIDTH: meta.width,
            features.CHANNELS: meta.channels,
            features.FILENAME: filename,
            features.SHA256: meta.sha256.hex(),
            features.ID: meta.id,
            self.payload_key: payload,
        }
        if self.keeps_original:
            values[features.ORIGINAL_HEIGHT] = meta.original_height or meta.height
            values[features.ORIGINAL_WIDTH] = meta.original_width or meta.width
            values[features.ORIGINAL_SHA256] = meta.content_digest.hex()
        if self.grouped:
            values[features.GROUP] = meta.group
        self.add_values(values, meta, names)
        return values

    def add_values(self, values, meta, names) -> None:
        """Adds the values of this kind's own features (`own_schema`) to a record's `values`."""
        del values, meta, names

    @property
    def multi_label(self) -> bool:
        """Whether an image's label (ImageMeta.label) is a set of ids, a sorted tuple of them,
        each of which it is counted and stratified by; else one id. A kind whose images hold
        several labels (a classification with `multi_label`, the classes of a detection's
        objects) says so."""
        return False

    def annotation(self, entry, height, width, label_ids, files=None) -> 'Annotated':
        """What an input's annotation (InputEntry.annotation, as its reader found it) gives
        its record, packed (ImageMeta.annotation), checked against the image's size as shown
        (`height`, `width`); `label_ids` maps the build's label names to ids, `files` holds the
        bytes of `annotation_files(entry)`. Nothing, for a kind without annotations.

        Raises:
            ValueError: an annotation this kind cannot use (the input is then rejected as
                `bad_annotation`, with the message).
        """
        del height, width, label_ids, files
        if entry.annotation:
            raise ValueError(f'a {self.name} build takes no annotation')
        return Annotated(b'')

    def annotation_files(self, entry) -> dict:
        """{name: path} of files an input's annotation names (a mask), which validation reads
        and hands to `annotation`."""
        del entry
        return {}

    def object_counts(self, meta):
        """(objects, of them clipped, their class ids) a record's annotation holds, for a kind
        of objects (counted into dataset.json's `annotations`); None for a kind without them."""
        del meta

    def feature_docs(self, names) -> dict:
        """{key: what it holds} of every feature, for TFDS metadata (of a list feature: of the
        list); `names` the build's LabelNames."""
        del names
        return dict(_DOCS)

    def tfds_features(self, names) -> dict:
        """{name: tfds.features feature} of the records' TFDS FeaturesDict: each key its
        `tfds_feature`, a list of values a `Sequence` of it; imports TFDS."""
        import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

        docs = self.feature_docs(names)
        connectors = {}
        for key, type_ in self.schema.items():
            listed = type_.endswith(features.LIST)  # the doc goes to the Sequence
            connector = self.tfds_feature(key, None if listed else docs[key], names)
            if listed:
                connector = tfds.features.Sequence(connector, doc=docs[key])
            connectors[key] = connector
        return connectors

    def tfds_feature(self, key, doc, names):
        """The `tfds.features` feature of `key` (its documentation `doc`; `names` the build's
        LabelNames), for TFDS metadata; imports TFDS."""
        import numpy as np  # pylint: disable=import-outside-toplevel
        import tensorflow_datasets as tfds  # pylint: disable=import-outside-toplevel

        del names
        kind = self.schema[key]
        if key == features.ENCODED:
            return tfds.features.Image(shape=(None, None, 3), doc=doc)
        if kind.startswith('bytes'):
            return tfds.features.Text(doc=doc)
        dtype = np.int64 if kind.startswith('int64') else np.float32
        return tfds.features.Scalar(dtype, doc=doc)

    def facts(self) -> dict:
        """What dataset.json states of the kind beside its `features` (`from_dataset` reads
        them back): its name."""
        return {'kind': self.name}

    @classmethod
    def from_dataset(cls, dataset) -> 'RecordKind':
        """The kind of a build, from its dataset.json (a dict)."""
        return cls(**common_options(dataset), **cls.dataset_options(dataset))

    @classmethod
    def for_build(cls, fmt, original, grouped, listing) -> 'RecordKind':
        """The kind of a build's records in format `fmt`, whether they keep their original's
        size (`original`) and name their group (`grouped`), with the options of this kind the
        listing learned of the inputs (`listing_options`)."""
        return cls(format=fmt, original=original, grouped=grouped, **cls.listing_options(listing))

    @classmethod
    def listing_options(cls, listing) -> dict:
        """This kind's own options (its fields beyond RecordKind's) from what the listing
        learned of a build's inputs (a ListingSummary)."""
        del listing
        return {}

    @classmethod
    def dataset_options(cls, dataset) -> dict:
        """This kind's own options from a build's dataset.json (a dict)."""
        del dataset
        return {}

    def headline(self, scalar) -> list:
        """What `imageshards inspect` says of a record first ('cat', '32x24 jpeg', 'id 17'):
        `scalar(key)` is a record's single value of `key` (text for bytes), or None;
        `scalar(key, listed=True)` its list of values (None where it has no such key)."""
        parts = []
        height, width = scalar(features.HEIGHT), scalar(features.WIDTH)
        if height is not None and width is not None:
            parts.append(f'{width}x{height} {scalar(features.FORMAT) or ""}'.rstrip())
        if scalar(features.ID) is not None:
            parts.append(f'id {scalar(features.ID)}')
        return parts


def common_options(dataset) -> dict:
    """The options of RecordKind itself, from a build's dataset.json."""
    return {
        'format': dataset['format'],
        'original': bool(dataset.get('resize')),
        'grouped': 'groups' in (dataset.get('grouping') or {}),
    }


class Annotated(typing.NamedTuple):
    """What a kind makes of an input's annotation (`RecordKind.annotation`)."""

    data: bytes  # packed into ImageMeta.annotation
    dropped: tuple = ()  # objects.DroppedObject of the parts not written, with their reasons
    clipped: int = 0  # parts written after clipping to the image
    labels: tuple = None  # the image's label ids, where the annotation decides them


class LabelNames(typing.NamedTuple):
    """The names a build's ids stand for: its labels and each label level's names, by id."""

    labels: tuple = ()
    levels: tuple = ()  # ((level, (names, ...)), ...) in the build's level order

    @classmethod
    def of_dataset(cls, dataset) -> 'LabelNames':
        levels = dataset.get('label_levels') or {}
        return cls(tuple(dataset['labels']), tuple((k, tuple(v)) for k, v in levels.items()))
