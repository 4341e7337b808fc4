"""What listing produces: the inputs of a build (and on the way, the members of an archive), and
the rules of their paths.

Paths are local (absolute) or URIs that Beam's FileSystems read. A URL carrying credentials is
never used, and `redact` removes them from anything shown.
"""

import collections
import dataclasses
import re
import typing

from imageshards import file_names
from imageshards.file_names import display
from imageshards.kinds import registry as kinds
from pipelines.core import sources
from pipelines.core.context import ListingSummary
from pipelines.core.sources import SMALL_INPUT_BYTES

IMAGE_EXTENSIONS = frozenset(
    ['.jpg', '.jpeg', '.jpe', '.jfif', '.png', '.gif', '.bmp', '.webp', '.tif', '.tiff']
)
# MNIST's images files: train-images-idx3-ubyte[.gz], t10k-images.idx3-ubyte, ...
IDX_IMAGES = re.compile(r'^(?P<prefix>.*?)[-.]?images[-.]idx3[-.]ubyte(?P<gz>\.gz)?$')
TFRECORD_SUFFIXES = ('.tfrecord', '.tfrecords', '.tfrec', '.record', '.records')
MANIFEST_COLUMNS = ('path', 'label', 'split', 'group')
MULTI_LABEL_COLUMN = 'labels'  # in place of `label`: several labels per image
# URL user info (user:password@), which must never be used or shown.
USERINFO = re.compile(r'^([a-zA-Z][a-zA-Z0-9+.-]*://)[^/?#]*@')
_WEB_SCHEMES = ('http://', 'https://', 'ftp://')


class InputEntry(typing.NamedTuple):
    """One input of the build. `reject` holds a reason code when listing already rejected it.

    In a multi-label build `label` is a sorted tuple of names (empty: no label), and so is
    each level's value.
    """

    id: int
    # What workers read: an absolute local path or a URI. A local name that is not UTF-8 is
    # the str Python lists (imageshards/file_names.py), in JSON its `to_json` object.
    path: str
    key: str  # stable key: the path relative to the input root, seeds the shuffle
    label: str
    split: str = ''  # set only by a manifest's split column
    reject: str = ''
    detail: str = ''
    levels: dict = {}  # label level -> value ('' or absent: missing); never mutated
    size: int = -1  # bytes, as listing found them (a local stat, an object store's listing)
    # An input inside a container (an archive's member, an array's row, a TFRecord record):
    # its encoded pipelines.core.sources.Source; `path` is then `container!member`.
    source: str = ''
    group: str = ''  # a manifest's group column: images of one group share a split
    # What its reader found of the image's annotation, as JSON data (boxes, masks, a weight),
    # for the build's kind to make its record's (imageshards/kinds/); None: none.
    annotation: object = None

    def to_json(self) -> list:
        """The entry as a JSON list (a listing file's): a path or key that is not UTF-8 as
        file_names.to_json's object in its place."""
        fields = list(self)
        if self.path.isascii() and self.key.isascii() and self.source.isascii():
            return fields  # nearly every entry: file_names.is_utf8's own first test
        for index in _PATH_FIELDS:
            if not file_names.is_utf8(fields[index]):
                fields[index] = file_names.to_json(fields[index])
        return fields

    @classmethod
    def from_json(cls, fields) -> 'InputEntry':
        """An entry from its JSON list (`to_json`): lists, a multi-label entry's labels and
        level values, become tuples again."""
        for index in _PATH_FIELDS:
            if index < len(fields) and isinstance(fields[index], dict):
                fields[index] = file_names.from_json(fields[index])
        if isinstance(fields[_LABEL_FIELD], list):  # in place: a namedtuple's _replace costs
            fields[_LABEL_FIELD] = tuple(fields[_LABEL_FIELD])  # more than the rest together
            if len(fields) > _LEVELS_FIELD:
                levels = fields[_LEVELS_FIELD]
                fields[_LEVELS_FIELD] = {level: tuple(values) for level, values in levels.items()}
        if len(fields) == _NUM_FIELDS:  # as written: the tuple as it is, without cls(*fields)'s
            return tuple.__new__(cls, fields)  # call per input
        return cls(*fields)


# InputEntry.path, .key and .source
_PATH_FIELDS = tuple(
    InputEntry._fields.index(name)  # pylint: disable=protected-access
    for name in ('path', 'key', 'source')
)
_LABEL_FIELD = InputEntry._fields.index('label')  # pylint: disable=protected-access
_LEVELS_FIELD = InputEntry._fields.index('levels')  # pylint: disable=protected-access
_NUM_FIELDS = len(InputEntry._fields)  # pylint: disable=protected-access


def names_of(value) -> tuple:
    """The names of a label or level value: a multi-label tuple as it is, a name as a 1-tuple,
    a missing ('') value as none."""
    if isinstance(value, tuple):
        return value
    return (value,) if value else ()


@dataclasses.dataclass
class Listing:
    """Every input in memory (tests and small inputs; a build streams an InputScan instead)."""

    entries: list  # [InputEntry], in id order
    labels: list  # sorted names of the labels of the entries not rejected here
    skipped: dict  # reason -> number of files that are not inputs (hidden, not an image)
    skipped_examples: list  # a few skipped paths, for the log
    base: (
        str  # what relative keys are relative to: the root, the glob's base, the manifest's folder
    )
    label_levels: dict = dataclasses.field(default_factory=dict)  # level -> sorted names

    @property
    def num_skipped(self) -> int:
        return sum(self.skipped.values())


@dataclasses.dataclass
class InputScan:
    """The inputs of a build, produced one at a time in id order, never all in memory.

    `skipped` and `skipped_examples` are complete once `entries` is exhausted.
    """

    base: str  # what relative keys are relative to
    entries: typing.Iterator  # of InputEntry
    skipped: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    skipped_examples: list = dataclasses.field(default_factory=list)
    # Label levels in order: declared, or (a JSONL manifest) added as rows name them.
    levels: list = dataclasses.field(default_factory=list)
    multi_label: bool = False  # several labels per image (a manifest's `labels`)
    form: str = 'tree'  # what --input is (pipelines/inputs/forms.py)
    kind: str = kinds.DEFAULT  # what its records hold (imageshards/kinds/)
    kind_options: dict = dataclasses.field(default_factory=dict)  # complete with `entries`
    classes: list = None  # the labels in the input's own order (a COCO file's categories)
    # Lines of rejected_annotations.jsonl of annotations of no input (complete with `entries`)
    annotation_rejections: list = dataclasses.field(default_factory=list)
    # How the pipeline joins annotations to these inputs (a COCO file's: coco_join.py); None
    annotation_join: dict = None

    def skip(self, reason, path) -> None:
        self.skipped[reason] += 1
        if len(self.skipped_examples) < 20:
            self.skipped_examples.append(path)


class ListingCounts:
    """What the pipeline needs to know of the inputs, counted as they stream past."""

    def __init__(self, max_image_bytes=None):
        # inputs larger than this are rejected unread (too_large): their bytes are not counted
        self._max_bytes = max_image_bytes if max_image_bytes is not None else float('inf')
        self.num_inputs = 0
        self.input_bytes = 0  # of the inputs not rejected whose size listing knows
        # of those of them at most SMALL_INPUT_BYTES, or in a sequential source: the bytes the
        # local runner keeps beside the build (pipelines/local/spill.py)
        self.small_input_bytes = 0
        self.rejected = collections.Counter()  # reason -> inputs rejected by listing
        self._labels = set()
        self._groups = collections.Counter()  # (manifest split, label or label set) -> images
        self._rank_groups = collections.Counter()  # multi-label: (split, first label) -> images
        self._level_values = collections.defaultdict(set)  # level -> values seen
        self._multi_levels = set()  # levels where some image has several values
        self.grouped = False  # some input has a group of its own (a manifest's group column)
        self.annotations = 0  # the annotations of the inputs (a detection's objects)

    def add(self, entry) -> InputEntry:
        self.num_inputs += 1
        if entry.annotation.__class__ is dict:
            self.annotations += len(entry.annotation.get('objects') or ())
            self.annotations += len(entry.annotation.get('rejected') or ())
        if entry.reject:
            self.rejected[entry.reject] += 1
        else:
            if 0 < entry.size <= self._max_bytes:
                self.input_bytes += entry.size
                if entry.size <= SMALL_INPUT_BYTES or sources.is_sequential(entry.source):
                    self.small_input_bytes += entry.size
            label = entry.label
            if label.__class__ is str:  # one label (names_of's, without its call per input)
                if label:
                    self._labels.add(label)
            else:
                self._labels.update(label)
                self._rank_groups[(entry.split, label[:1])] += 1  # by its first (rank_class)
            self._groups[(entry.split, label)] += 1
            if entry.group:
                self.grouped = True
            if entry.levels:
                self._add_levels(entry.levels)
        return entry

    def _add_levels(self, levels):
        for level, value in levels.items():
            self._level_values[level].update(names_of(value))
            if isinstance(value, tuple) and len(value) > 1:
                self._multi_levels.add(level)

    @property
    def labels(self) -> list:
        return sorted(self._labels)

    def to_json(self) -> dict:
        """The counts as JSON-ready data (`from_json` makes them again)."""
        return {
            'num_inputs': self.num_inputs,
            'input_bytes': self.input_bytes,
            'small_input_bytes': self.small_input_bytes,
            'rejected': dict(self.rejected),
            'labels': self.labels,
            'groups': [[split, label, n] for (split, label), n in self._groups.items()],
            'level_values': {level: sorted(v) for level, v in self._level_values.items()},
            'multi_levels': sorted(self._multi_levels),
            'grouped': self.grouped,
            'annotations': self.annotations,
        }

    @classmethod
    def from_json(cls, data) -> 'ListingCounts':
        counts = cls()
        counts.num_inputs = data['num_inputs']
        counts.input_bytes = data['input_bytes']
        counts.small_input_bytes = data['small_input_bytes']
        counts.rejected.update(data['rejected'])
        counts._labels.update(data['labels'])  # pylint: disable=protected-access
        for split, label, n in data['groups']:
            label = tuple(label) if isinstance(label, list) else label
            counts._groups[(split, label)] = n  # pylint: disable=protected-access
        for level, values in data['level_values'].items():
            counts._level_values[level].update(values)  # pylint: disable=protected-access
        counts._multi_levels.update(data['multi_levels'])  # pylint: disable=protected-access
        counts.grouped = data['grouped']
        counts.annotations = data.get('annotations', 0)
        return counts

    def label_levels(self, levels) -> dict:
        """{level: sorted names} for `levels` in order (a level may have no names)."""
        return {level: sorted(self._level_values[level]) for level in levels}

    def summary(self, scan) -> ListingSummary:
        return ListingSummary(
            list(scan.classes) if scan.classes is not None else self.labels,
            self.num_inputs,
            dict(scan.skipped),
            scan.base,
            max((self._rank_groups or self._groups).values(), default=0),
            self.label_levels(scan.levels),
            self.manifest_splits,
            scan.multi_label,
            tuple(level for level in scan.levels if level in self._multi_levels),
            len(self._groups),
            self.input_bytes,
            self.small_input_bytes,
            self.grouped,
            scan.kind,
            dict(scan.kind_options),
            self._annotations(scan),
            scan.annotation_join,
        )

    def _annotations(self, scan):
        if not kinds.named(scan.kind).has_objects:
            return {}
        orphans = list(scan.annotation_rejections)
        return {'read': self.annotations + len(orphans), 'rejected': orphans}

    @property
    def manifest_splits(self) -> dict:
        """{split: images} that a manifest's split column places (not by --splits)."""
        placed = collections.Counter()
        for (split, _), images in self._groups.items():
            if split:
                placed[split] += images
        return dict(sorted(placed.items()))


MAX_SIDE_BYTES = 1 << 20  # the most read of an archive's label member (.cls, .json) in listing


class ArchiveMember(typing.NamedTuple):
    """One member of an archive (pipelines/inputs/tar_and_zip.py), in the archive's order."""

    name: str  # its path as if extracted (`./a/b.jpg` is `a/b.jpg`); the raw name if unusable
    size: int  # of its bytes, as extracted
    source: sources.Source = None
    reject: str = ''  # why it cannot be an input
    detail: str = ''
    data: bytes = None  # its bytes, where asked for (a small label member)

    def cut_at(self, end, container) -> 'ArchiveMember':
        """The member, `truncated_archive` where its bytes run past `end`, where the archive's
        (decompressed) bytes end."""
        source = self.source
        if source is None or source.offset + source.length <= end:
            return self
        return ArchiveMember(
            self.name,
            self.size,
            None,
            'truncated_archive',
            f'{container} ends at byte {end:,}, inside this member (its {self.size:,} bytes from '
            f'byte {source.offset:,}): cut short; members after it, if any, are lost with it',
        )


def safe_name(raw) -> tuple:
    """(an archive member's name as if extracted, problem detail or ''): `./a//b.jpg` is
    `a/b.jpg`; an absolute name, a drive letter or a `..` component is a problem."""
    name = raw.replace('\\', '/')
    if name.startswith('/') or (len(name) > 1 and name[1] == ':'):
        return raw, f'{raw!r} is an absolute name; such members are never extracted or read'
    parts = [part for part in name.split('/') if part not in ('', '.')]
    if '..' in parts:
        return raw, f'{raw!r} climbs out of the archive with ..; never extracted or read'
    return '/'.join(parts), ''


GLOB_CHARS = re.compile(r'[*?\[]')


def is_glob(spec) -> bool:
    """Whether --input is a glob (`data/*/*.jpg`)."""
    return bool(GLOB_CHARS.search(spec))


def is_manifest(spec) -> bool:
    return spec.lower().endswith(('.csv', '.jsonl'))


def redact(path) -> str:
    """`path` without credentials: URL user info, and the query of web URLs (signed URLs)."""
    path = USERINFO.sub(r'\1***@', path)
    if path.lower().startswith(_WEB_SCHEMES) and '?' in path:
        path = path.split('?', 1)[0] + '?***'
    return path


def inside(path, root) -> bool:
    return path == root or path.startswith(root.rstrip('/') + '/')


def tree_labels(relative, levels):
    """(label, {level: value}) of a file at `relative` below a tree's root.

    Without levels, the label is the first folder. With levels, folder i is the value of level
    i (first folder = first level) and the label is the folders of the levels joined by '/'
    (`birds/sparrow`): the finest class, which stays distinct where two families hold a
    species of the same name. A file with fewer folders than levels misses the deeper ones.
    A label is text: a folder whose name is not UTF-8 is the label its name shows, each byte
    that does not decode as \\xNN (`caf\\xe9`; imageshards/file_names.py).
    """
    if not levels:
        first, slash, _ = relative.partition('/')
        return (display(first) if slash else ''), {}
    values = [display(value) for value in relative.split('/')[:-1][: len(levels)]]
    return '/'.join(values), dict(zip(levels, values))


def extension(relative):
    """posixpath.splitext(relative)[1].lower(), at a third of its cost."""
    name = relative.rpartition('/')[2].lstrip('.')  # leading dots start no extension
    dot = name.rfind('.')
    return name[dot:].lower() if dot > 0 else ''
