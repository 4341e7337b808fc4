"""Detection sets packed in archives, as users export them: a Pascal VOC tar
(`VOCtrainval_11-May-2012.tar`), a YOLO export zip that holds its data.yaml, a COCO export that
holds its annotation file and its images, or a COCO file's --image-root as an archive; .tar,
.tar.gz, .tgz or .zip, local or on an object store, read where they are.

The archives' members are indexed as a tree's archive's are (pipelines/inputs/archive_inputs.py:
by this process, or, on an object store, by the build's workers), with the bytes of the small
annotation files (VOC's XML and lists, YOLO's yaml and label files). The set is then read by its
own reader (voc.py, yolo.py, coco.py) through an ArchiveFolder, as if the archives were
extracted: its keys, records and counts are the extracted set's. A COCO annotation file is
streamed from its member, whatever its size. Images and VOC masks are read from their members
by validation and the writer (pipelines/core/sources.py), never by this process.

Every member is accounted for. An image whose member cannot be read (a link, an unsafe name, cut
short) is rejected with the member's reason; a YOLO label file or VOC mask that cannot be read
rejects its image; any other member the archive's index rejects (a VOC XML cut short, the rest
of an archive cut short, `@<offset>`) is a rejected input of its own, after the set's. An image
an annotation names that the archives lack is `missing_file`, or `truncated_archive` where an
archive is cut short (it may have been lost with the rest).

Where the set is in the archive: the folder holding `Annotations/` (VOC); the folder of the one
data.yaml (YOLO), with its `path` where that stays inside the archive (an export's `path` names
where it was made); the one COCO .json (an archive of several: extract the one to build, and
give the archive as --image-root), its images found as beside a file (`images/` beside its
folder, else its folder). An archive given as --image-root holds the images below its one top
folder (`train2017.zip`'s `train2017/`) where all of them are in one, else below its root.
"""

import bisect
import logging
import posixpath
import re

from imageshards import storage
from pipelines.core.settings import COCO
from pipelines.core.settings import VOC
from pipelines.core.settings import YOLO
from pipelines.inputs import archive_inputs
from pipelines.inputs import object_inputs
from pipelines.inputs import tar_and_zip
from pipelines.inputs.confinement import Refused
from pipelines.inputs.entries import InputEntry

_LOG = logging.getLogger(__name__)
_VOC_XML = re.compile(r'(^|/)Annotations/[^/]+\.xml$', re.IGNORECASE)
_VOC_IMAGES = re.compile(r'(^|/)JPEGImages/[^/]+$')
_YOLO_LABELS = re.compile(r'(^|/)labels/(.+/)?[^/]+\.txt$')
_COCO_NAME = re.compile(r'(^|/)annotations/[^/]+\.json$|coco[^/]*\.json$|instances[^/]*\.json$')
_CUT = ('truncated_archive', 'corrupt_archive')
# The readers (voc.py, yolo.py, coco.py) and pipelines/core/reading.py are imported when a set is
# read, not with the listing: forms.py asks `form_in` of every archive, and their imports (PIL,
# ijson) would cost a tree's early listing.
# pylint: disable=import-outside-toplevel


def form_in(names) -> str | None:
    """VOC, YOLO or COCO where an archive's first member names show a detection set (VOC's
    `Annotations/*.xml` or `JPEGImages/`, which a tar may hold first; a .yaml, or YOLO's
    `labels/**.txt`; a .json in `annotations/` or named like COCO's), else None."""
    lowered = [name.lower() for name in names]
    if any(_VOC_XML.search(name) or _VOC_IMAGES.search(name) for name in names):
        return VOC
    if any(name.endswith(('.yaml', '.yml')) or _YOLO_LABELS.search(name) for name in lowered):
        return YOLO
    if any(_COCO_NAME.search(name) for name in lowered):
        return COCO
    return None


def is_archived(detected, inputs) -> bool:
    """Whether a detection set's --input, or a COCO file's --image-root, is archives."""
    archived = any(tar_and_zip.kind(f) for f in detected.files)
    return archived or (detected.form == COCO and bool(tar_and_zip.kind(inputs.image_root or '')))


def scan(spec, detected, inputs, index_archives=None):
    """The InputScan of a detection set in archives (see the module's docstring); `detected`:
    forms.Detected; `index_archives`: what gives archives' members, as for a tree's archives.
    The archives are indexed as its entries are first asked for, as a tree's archives are (a
    launcher whose listing another process makes reads none of them)."""
    found = object_inputs.new_scan(detected.base, detected.form)
    found.entries = _entries(
        spec, detected, inputs, index_archives or archive_inputs.read_here, found
    )
    return found


def _entries(spec, detected, inputs, read, found):
    """The set's entries, read by its reader from the archives; what its reader's scan learns
    (classes, options, rejections of annotations) given to `found` once they are read."""
    archives = [f for f in detected.files if tar_and_zip.kind(f)]
    trees = [ArchiveTree(read(archives, detected.form))] if archives else []
    if detected.form == VOC:
        from pipelines.inputs import voc

        read_set = voc.read_set(trees[0].folder(_voc_root(trees[0], spec)), inputs, spec)
    elif detected.form == YOLO:
        read_set = _yolo_set(trees[0], spec, inputs)
    else:
        if tar_and_zip.kind(inputs.image_root or ''):
            root = storage.absolute(inputs.image_root)
            trees.append(ArchiveTree(read([root], COCO)))
        read_set = _coco_set(spec, trees, inputs, in_archive=bool(archives))
    yield from _with_rejected_members(read_set.entries, trees)
    # What the reader learnt as it read (a COCO file's classes, whether there are masks), once
    # its entries are read, as a scan's are complete (entries.InputScan).
    found.base, found.classes = read_set.base, read_set.classes
    found.kind_options = read_set.kind_options
    found.annotation_rejections = read_set.annotation_rejections
    found.annotation_join = read_set.annotation_join


def _voc_root(tree, spec):
    roots = sorted({_VOC_XML.split(name)[0] for name in tree.names if _VOC_XML.search(name)})
    if len(roots) != 1:
        held = ', '.join(f'{r or "."}/Annotations' for r in roots[:5]) or 'no Annotations/*.xml'
        raise ValueError(
            f'--input {spec}: a Pascal VOC archive holds one VOC folder; found {held}{tree.cut}'
        )
    return roots[0]


def _yolo_set(tree, spec, inputs):
    from pipelines.inputs import yolo

    yamls = [name for name in tree.names if name.lower().endswith(('.yaml', '.yml'))]
    if len(yamls) > 1:
        yamls = [name for name in yamls if posixpath.basename(name) == 'data.yaml']
    if len(yamls) != 1:
        raise ValueError(
            f'--input {spec}: a YOLO archive holds one data.yaml; found {yamls[:5]}{tree.cut}'
        )
    where = tree.where(yamls[0])
    data = yolo.read_yaml(where, tree.read(yamls[0]))
    folder = posixpath.dirname(yamls[0])
    root = _joined(folder, str(data.get('path') or '.'))
    if root is None or not tree.exists(root):
        said = data.get('path')
        _LOG.info('%s: its `path` %r is not in the archive: the set is its folder', where, said)
        root = folder
    return yolo.read_set(tree.folder(root), data, where, inputs)


def _coco_set(spec, trees, inputs, in_archive):
    """The InputScan of a COCO set: its file in an archive (`in_archive`: `trees[0]`'s), or its
    images in one (--image-root: `trees[-1]`'s), or both."""
    from pipelines.inputs import coco

    path, images = storage.absolute(spec), None
    if in_archive:
        annotations, images = _coco_in_archive(trees[0], spec)
    elif storage.exists(path):
        annotations = coco.AnnotationFile(path, storage.open_read)
    else:
        raise ValueError(f'--input annotation file does not exist: {spec}')
    if tar_and_zip.kind(inputs.image_root or ''):
        images = trees[-1].folder(trees[-1].top_folder())
    elif inputs.image_root or images is None:
        images = object_inputs.StoredFolder(coco.image_root(path, inputs.image_root))
    return coco.read_set(annotations, images, inputs)


def _coco_in_archive(tree, spec):
    """(the AnnotationFile of an archive's one COCO file, the folder of its images)."""
    from pipelines.inputs.coco import AnnotationFile

    name = _coco_file(tree, spec)
    source = tree.member(name)[1].source.encode()  # how the pipeline's workers read it too
    annotations = AnnotationFile(tree.where(name), lambda _: tree.open(name), source)
    # Its images where coco.image_root finds a file's: `images/` beside its folder, else its
    # folder (a file at the archive's top has nothing beside its folder).
    folder = posixpath.dirname(name)
    beside = _joined(posixpath.dirname(folder), 'images') if folder else None
    return annotations, tree.folder(beside if beside and tree.exists(beside) else folder)


def _coco_file(tree, spec):
    found = [name for name in tree.names if name.lower().endswith('.json')]
    if not found:
        raise ValueError(f'--input {spec}: the archive holds no COCO annotation file{tree.cut}')
    if len(found) > 1:
        raise ValueError(
            f'--input {spec}: a COCO archive holds one annotation file; found {found[:5]}: '
            'extract the one to build and pass it as --input, with this archive as --image-root'
        )
    return found[0]


def _joined(folder, relative):
    """`relative` below `folder`, in the archive; None where it leads out of it."""
    name = posixpath.normpath(posixpath.join(folder, relative))
    if name.startswith('/') or name == '..' or name.startswith('../'):
        return None
    return '' if name == '.' else name


def _with_rejected_members(entries, trees):
    """The set's entries, then an entry of each member the archives' index rejected that no
    entry took (the rest of an archive cut short, a VOC XML cut short, a link)."""
    next_id = 0
    for entry in entries:
        next_id = max(next_id, entry.id + 1)
        yield entry
    for tree in trees:
        for container, member in tree.unclaimed():
            shown = f'{container}!{member.name}'
            yield InputEntry(next_id, shown, shown, (), reject=member.reject, detail=member.detail)
            next_id += 1


class ArchiveTree:
    """The members of archives, seen as one folder tree extracted (a later archive's member
    replaces an earlier one of its name, as extraction would): names, bytes, streams.

    Args:
        found: (container, its members) of each archive (archive_inputs.read_here, or the
            build's workers' indexes).
    """

    def __init__(self, found):
        self.name = ''  # the first archive: where a name that none holds is said to be
        self._members = {}  # name -> (container, ArchiveMember), those that can be read
        self._rejected = []  # (container, ArchiveMember) the index rejected, in order
        self._claimed = set()  # positions in _rejected that an entry took
        self._cut = ''  # where an archive is cut short
        for container, members in found:
            self.name = self.name or container
            archive_inputs.say_where_cut(container, members)
            for member in members:
                self._add(container, member)
        self.names = sorted(self._members)
        self._rejected_at = {m.name: i for i, (_, m) in enumerate(self._rejected)}

    def _add(self, container, member):
        if member.reject in _CUT:
            self._cut = self._cut or f'{container}!{member.name}: {member.detail}'
        if member.reject:
            self._rejected.append((container, member))
            return
        if member.name in self._members:
            earlier, replaced = self._members[member.name]
            detail = f'{container} holds {member.name} too, and replaces it, as extraction would'
            self._rejected.append(
                (earlier, replaced._replace(reject='duplicate_member', detail=detail))
            )
        self._members[member.name] = (container, member)

    @property
    def cut(self) -> str:
        """' (where an archive is cut short)', for a message that the cut may explain; or ''."""
        return f' ({self._cut})' if self._cut else ''

    def folder(self, prefix) -> 'ArchiveFolder':
        return ArchiveFolder(self, prefix)

    def where(self, name) -> str:
        """`container!name`: where a member is, for records and messages."""
        container = self._members[name][0] if name in self._members else self.name
        return f'{container}!{name}' if name else container

    def exists(self, name) -> bool:
        """Whether `name` is a member, or a folder that holds one."""
        if not name or name in self._members:
            return bool(self.names) if not name else True
        at = bisect.bisect_left(self.names, name + '/')
        return at < len(self.names) and self.names[at].startswith(name + '/')

    def files(self, folder) -> list:
        """The members below `folder`, as names relative to it, sorted."""
        prefix = folder + '/' if folder else ''
        start = bisect.bisect_left(self.names, prefix)
        end = bisect.bisect_left(self.names, prefix + '\U0010ffff')
        return [name[len(prefix) :] for name in self.names[start:end]]

    def member(self, name):
        """(container, ArchiveMember) of a member that can be read, or None."""
        return self._members.get(name)

    def read(self, name, limit=object_inputs.FILE_BYTES) -> bytes:
        """A member's bytes: those its index holds, else read from the archive; TooLarge,
        unread, where its size is over `limit`."""
        if name not in self._members:
            raise ValueError(f'{self.where(name)}: the archive has no such member')
        member = self._members[name][1]
        if member.size > limit:
            raise object_inputs.TooLarge(self.where(name), limit)
        if member.data is not None and len(member.data) == member.size:
            return member.data
        with self.open(name) as f:
            return f.read()

    def open(self, name):
        """A member's bytes as a stream (reading.SourceStream)."""
        if name not in self._members:
            raise ValueError(f'{self.where(name)}: the archive has no such member')
        from pipelines.core.reading import SourceStream

        return SourceStream(self._members[name][1].source)

    def rejection(self, name):
        """(reason, detail) of a member of this name that the index rejected, now taken by an
        entry; else None."""
        at = self._rejected_at.get(name)
        if at is None:
            return None
        self._claimed.add(at)
        member = self._rejected[at][1]
        return member.reject, member.detail

    def missing(self, name) -> tuple:
        """(reason, detail) of a name that no member has."""
        if self._cut:
            return (
                'truncated_archive',
                f'{name} is not in the archives; one is cut short ({self._cut})',
            )
        return 'missing_file', f'{self.name} has no member {name}'

    def top_folder(self) -> str:
        """The one folder every member is in (an archive of a folder), else ''."""
        tops = {name.split('/', 1)[0] for name in self.names}
        if len(tops) == 1 and all('/' in name for name in self.names):
            return tops.pop()
        return ''

    def unclaimed(self) -> list:
        """(container, member) of each rejected member that no entry took."""
        return [found for i, found in enumerate(self._rejected) if i not in self._claimed]


class ArchiveFolder:
    """A folder of an ArchiveTree, as the readers see a StoredFolder (object_inputs.py)."""

    def __init__(self, tree, prefix):
        self._tree = tree
        self._prefix = prefix.strip('/')

    def _name(self, relative):
        name = (
            posixpath.normpath(posixpath.join(self._prefix, relative)) if relative else self._prefix
        )
        return '' if name == '.' else name

    def where(self, relative='') -> str:
        return self._tree.where(self._name(relative))

    def exists(self, relative) -> bool:
        return self._tree.exists(self._name(relative))

    def files(self, relative) -> list:
        return self._tree.files(self._name(relative))

    def read(self, relative, limit=object_inputs.FILE_BYTES) -> bytes:
        return self._tree.read(self._name(relative), limit)

    def open(self, relative):
        return self._tree.open(self._name(relative))

    def file_ref(self, relative):
        """[where, its encoded Source]: what validation reads a VOC mask from."""
        container, member = self._tree.member(self._name(relative))
        return [f'{container}!{member.name}', member.source.encode()]

    def problem(self, relative):
        """(reason, detail) where `relative` is a member the archive's index rejected."""
        return self._tree.rejection(self._name(relative))

    def images(self, relative, inputs):  # pylint: disable=unused-argument  # no --allow-root
        return ArchiveImages(self._tree, self._name(relative))


class ArchiveImages:
    """Where an annotation's image path leads in an archive (as object_inputs' Confinement
    does for a folder): its member below the set's image folder, or a refusal."""

    def __init__(self, tree, folder):
        self._tree = tree
        self._folder = folder

    def resolve(self, raw):
        """(where, key, size, encoded Source) of the image `raw` names; raises Refused (with
        the key) where it leads out of the folder, or its member is missing or rejected."""
        key = posixpath.normpath(raw)
        if key.startswith('/') or key == '..' or key.startswith('../'):
            detail = f'{raw!r} leads out of the image folder {self._tree.where(self._folder)}'
            raise Refused('path_traversal', raw, detail)
        name = posixpath.join(self._folder, key) if self._folder else key
        found = self._tree.member(name)
        if found is not None:
            container, member = found
            return f'{container}!{name}', key, member.size, member.source.encode()
        rejected = self._tree.rejection(name) or self._tree.missing(name)
        raise Refused(*rejected[:1], self._tree.where(name), rejected[1], key=key)
