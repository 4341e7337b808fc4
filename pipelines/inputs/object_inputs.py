"""What the readers of detection and segmentation sets share: COCO annotation files
(pipelines/inputs/coco.py), Pascal VOC folders (voc.py) and YOLO data.yaml files (yolo.py),
each named after its --input-form. Each reader gives, per image, an
InputEntry whose `annotation` holds its objects in the one form the detection kind checks
(imageshards/kinds/objects.py), whose label is the set of its objects' classes (what splits and
shards are stratified by), and whose path is confined to the set's image root as a manifest's
rows are. The set's classes, in its own order, are the build's labels.

A reader sees its set through a folder (`StoredFolder`: on a disk or an object store; or an
archive's, pipelines/inputs/object_archives.py), so that a set read from an archive is read by
the same code as the set extracted, and built the same.
"""

from imageshards import storage
from imageshards.kinds.detection import Detection
from pipelines.inputs import confinement as confinement_lib
from pipelines.inputs.confinement import Confinement
from pipelines.inputs.confinement import Refused
from pipelines.inputs.entries import InputEntry
from pipelines.inputs.entries import InputScan

MAX_NAME_BYTES = 4096  # of an image's file name in an annotation file
# The most of an annotation file read whole (a VOC XML, a YOLO data.yaml or label file, a
# labelmap.txt or list of images): untrusted input, never read past this into memory.
FILE_BYTES = 64 << 20


class TooLarge(ValueError):
    """An annotation file over the most read of it (`limit`), read no further."""

    def __init__(self, where, limit):
        super().__init__(f'{where}: more than {limit:,} bytes; not read past them')
        self.limit = limit


def read_file(path, limit=FILE_BYTES) -> bytes:
    """A file's bytes, read whole (of a gs:// object, in one request); TooLarge where it holds
    more than `limit`: a local file unread (its size first), another no further than limit + 1."""
    try:
        return storage.read_input(path, limit)
    except storage.TooLarge:
        raise TooLarge(path, limit) from None


def new_scan(base, form) -> InputScan:
    """The InputScan of a set of objects, read from `base`."""
    return InputScan(base, iter(()), multi_label=True, form=form, kind=Detection.name)


class StoredFolder:
    """A set's folder on a disk or an object store, as the readers see it; an archive's
    (object_archives.ArchiveFolder) answers the same questions of its members."""

    def __init__(self, root):
        self.root = root.rstrip('/')

    def where(self, relative='') -> str:
        """The path of `relative` below the folder, for reading and for messages."""
        return storage.join(self.root, relative) if relative else self.root

    def exists(self, relative) -> bool:
        return storage.exists(self.where(relative))

    def files(self, relative) -> list:
        """Every file below the folder `relative`, as paths relative to it."""
        return storage.relative_files(self.where(relative))

    def read(self, relative, limit=FILE_BYTES) -> bytes:
        """`relative`'s bytes, read whole; TooLarge where it holds more than `limit`."""
        return read_file(self.where(relative), limit)

    def open(self, relative):
        """A file object of `relative`'s bytes, read as a stream."""
        return storage.open_read(self.where(relative))

    def file_ref(self, relative):
        """What an annotation's `files` holds of `relative` (validation reads it)."""
        return self.where(relative)

    def problem(self, relative):  # pylint: disable=unused-argument
        """(reason, detail) where the file cannot be read as it is listed: never, in a folder
        (an archive's member may be cut short)."""
        return None

    def images(self, relative, inputs):
        """The Confinement of image paths below `relative` (`resolve(raw)`)."""
        return confinement(self.where(relative), inputs)


def confinement(root, inputs) -> Confinement:
    """Where a set's image paths may lead: below `root`, or an --allow-root."""
    roots = [confinement_lib.normalize_root(r) for r in inputs.allow_roots]
    return Confinement(root.rstrip('/'), roots, inputs.follow_symlinks)


def image_entry(entry_id, raw, places, annotation, split='') -> InputEntry:
    """The InputEntry of an image at `raw` (a path below the set's image root), its label the
    classes of its objects that are the set's; refused where its path may not be read."""
    confined, classes = places
    if len(raw.encode('utf-8', 'surrogateescape')) > MAX_NAME_BYTES:
        reason, detail = 'invalid_file_name', f'a file name over {MAX_NAME_BYTES} bytes'
        return InputEntry(entry_id, raw[:200], raw[:200], (), split, reason, detail)
    try:
        path, key, size, *source = confined.resolve(raw)  # an archive's member: its source
    except Refused as e:
        entry = InputEntry(entry_id, e.path, e.key or e.path, (), split, e.reason, e.detail)
        return entry._replace(annotation=annotation)
    label = tuple(sorted({o['label'] for o in annotation['objects'] if o.get('label') in classes}))
    entry = InputEntry(entry_id, path, key, label, split, size=size, annotation=annotation)
    return entry._replace(source=source[0]) if source else entry


def unless_unreadable(entry, problem, what) -> InputEntry:
    """The entry, rejected where a file of its annotation (`what`: its labels, its mask) could
    not be read (`problem`: (reason, detail), StoredFolder.problem's), not built without it."""
    if not problem or entry.reject:
        return entry
    return entry._replace(reject=problem[0], detail=f'{what}: {problem[1]}')
