"""Archives as inputs, read where they are: a tar, .tar.gz or zip of a class tree; per-class
archives named after their class (ImageNet's training set: `n01440764.tar`, ...); WebDataset
shards.

An image's key is its path as if the archive were extracted: inside a tree's archive its
member's path (below the one folder that holds everything, where an archive was made of the
tree's root folder: `flower_photos/daisy/1.jpg` is `daisy/1.jpg`), inside a class's archive
`<class>/<member>`, so that a build from an archive of a tree is the build of the tree itself,
record for record. Ids follow the keys' order within each archive, and the archives' order (by
name); the listing keeps each archive's members in the archive's order, so that a work item
reads one stretch of it. Labels come from the folders, as in a tree (with --label-levels, one
level per folder), or from --labels-file by file name (pipelines/inputs/label_files.py).

WebDataset shards hold samples: members grouped by key, the part of the name before its first
dot (`000123.jpg`, `000123.cls`), consecutive in the tar. A sample's image is its member of an
image extension, its label its `.cls` (a name, or an integer named by --class-names) or its
`.json` (`label`, or `labels` for several: a multi-label build). Its key is
`<shard>/<image member>`.
"""

import json
import logging
import re

from imageshards.file_names import display
from pipelines.core.settings import CLASS_ARCHIVES
from pipelines.core.settings import VOC
from pipelines.core.settings import WEBDATASET
from pipelines.core.settings import YOLO
from pipelines.inputs import tar_and_zip
from pipelines.inputs.class_names import UnknownClass
from pipelines.inputs.entries import IMAGE_EXTENSIONS
from pipelines.inputs.entries import InputEntry
from pipelines.inputs.entries import extension
from pipelines.inputs.entries import tree_labels

_LOG = logging.getLogger(__name__)
LABEL_EXTENSIONS = ('cls', 'json')
# WebDataset's own split of a member's name into its sample's key and the rest (`base_plus_ext`)
_SAMPLE = re.compile(r'^((?:.*/|)[^.]+)[.]([^/]*)$')
_IMAGE_SUFFIXES = frozenset(suffix[1:] for suffix in IMAGE_EXTENSIONS)


def archive_entries(files, form, scan, labeling, index_archives=None):
    """InputEntry of every member of the archives `files`, archive after archive, ids from 0.

    Args:
        form: ARCHIVE, CLASS_ARCHIVES or WEBDATASET.
        scan: the InputScan (what is not an input is counted in its `skipped`).
        labeling: the Labeling of the inputs (their labels, and rows of a labels file).
        index_archives: what gives each archive's members, `index_archives(files, form)`, as
            `read_here` does (pipelines/inputs/archive_index.py: from indexes made by the
            build's workers); None: `read_here`.
    """
    next_id, seen = 0, set()
    for container, found in (index_archives or read_here)(files, form):
        say_where_cut(container, found)
        if form == WEBDATASET:
            entries = _samples(container, found, scan, labeling)
        else:
            entries = _tree_members(container, found, form, scan, labeling, seen)
        yield from _numbered(entries, next_id)
        next_id += len(entries)
    yield from labeling.unused_rows(next_id)


def read_here(files, form):
    """(container, its members) of each archive in `files`, in turn, read by this process."""
    for container in files:
        yield container, archive_members(container, form)


def archive_members(container, form) -> list:
    """The members of an archive as listing takes them (tar_and_zip.members; of a WebDataset
    shard, with the bytes of its label members; of a VOC or YOLO set, with those of its small
    annotation files); raises ValueError where it is no archive."""
    wanted = _is_label_member if form == WEBDATASET else _annotation_member(form)
    return list(tar_and_zip.members(container, want_data=wanted))


def _is_label_member(name):
    return sample_part(name)[1] in LABEL_EXTENSIONS


# The members of a detection set whose bytes the listing reads (pipelines/inputs/voc.py, yolo.py;
# a COCO file is streamed from the archive, whatever its size: object_archives.py).
_ANNOTATION_SUFFIXES = {VOC: ('.xml', '.txt'), YOLO: ('.yaml', '.yml', '.txt')}


def _annotation_member(form):
    suffixes = _ANNOTATION_SUFFIXES.get(form)
    return (lambda name: name.lower().endswith(suffixes)) if suffixes else None


def say_where_cut(container, found):
    """Says in the log that an archive ends early, or cannot be read on, and where (the members
    before are built; the rejection is counted as any other)."""
    for member in found:
        if member.reject in ('truncated_archive', 'corrupt_archive'):
            word = 'incomplete' if member.reject == 'truncated_archive' else 'damaged'
            _LOG.warning(
                'the archive %s is %s: %s (%s rejected as %s)',
                display(container),
                word,
                member.detail,
                display(f'{container}!{member.name}'),
                member.reject,
            )
            return


def _numbered(entries, first_id):
    """The entries, in their order, with ids from `first_id` in the order of their keys."""
    order = sorted(range(len(entries)), key=lambda i: entries[i].key)
    ids = [0] * len(entries)
    for rank, i in enumerate(order):
        ids[i] = first_id + rank
    return [entry._replace(id=ids[i]) for i, entry in enumerate(entries)]


def _tree_members(container, found, form, scan, labeling, seen):
    """The archive's members (`found`) as entries (ids to come), in its order."""
    prefix = tar_and_zip.stem(container) + '/' if form == CLASS_ARCHIVES else ''
    root = '' if prefix else _root_folder(found)
    entries = []
    for member in found:
        shown = f'{container}!{member.name}'
        key = prefix + member.name[len(root) :]
        if member.reject:
            entries.append(_rejected(member, shown, key))
            continue
        if key.startswith('.') or '/.' in key:
            scan.skip('hidden', display(shown))
            continue
        if extension(key) not in IMAGE_EXTENSIONS:
            scan.skip('not_image', display(shown))
            continue
        entry = InputEntry(-1, shown, key, '', size=member.size, source=member.source.encode())
        if key in seen:
            entry = entry._replace(
                reject='duplicate_member', detail=f'an earlier archive holds {key} too'
            )
        seen.add(key)
        entries.append(labeling.labeled(entry))
    return entries


def _rejected(member, shown, key):
    return InputEntry(-1, shown, key, '', reject=member.reject, detail=member.detail)


def _root_folder(found):
    """The folder that holds every image of an archive of a tree's root (`flower_photos/`),
    where each of them is in a class folder below it; else ''."""
    names = [m.name for m in found if not m.reject and extension(m.name) in IMAGE_EXTENSIONS]
    tops = {name.split('/', 1)[0] for name in names}
    if len(tops) == 1 and all(name.count('/') >= 2 for name in names):
        return tops.pop() + '/'
    return ''


def _samples(container, found, scan, labeling):
    """A WebDataset shard's members (`found`) as entries of its samples (ids to come), in its
    order."""
    shard = container.rstrip('/').rsplit('/', 1)[-1]
    entries, group, group_key = [], [], None
    for member in found:
        key, part = sample_part(member.name)
        if group and key != group_key:
            entries += _sample_entries(group, shard, container, scan, labeling)
            group = []
        group.append((part, member))
        group_key = key
    if group:
        entries += _sample_entries(group, shard, container, scan, labeling)
    return entries


def sample_part(name):
    """(sample key, the rest of the name, lowercased) of a member's name, as WebDataset splits
    it."""
    found = _SAMPLE.match(name)
    return (found.group(1), found.group(2).lower()) if found else (name, '')


def _sample_entries(group, shard, container, scan, labeling):
    """The entries of one sample: its image, and the members that are not part of one."""
    entries, image, label_parts = [], None, {}
    for part, member in group:
        shown = f'{container}!{member.name}'
        if member.reject:
            entries.append(_rejected(member, shown, f'{shard}/{member.name}'))
        elif part in _IMAGE_SUFFIXES and image is None:
            image = member
        elif part in LABEL_EXTENSIONS:
            label_parts[part] = member.data
        else:
            scan.skip('not_image', display(shown))
    if image is None:
        return entries
    entry = InputEntry(
        -1,
        f'{container}!{image.name}',
        f'{shard}/{image.name}',
        '',
        size=image.size,
        source=image.source.encode(),
    )
    entries.append(labeling.sample_labeled(entry, label_parts))
    return entries


def sample_label(parts, class_names):
    """(label or labels, problem) of a sample's label members: `.cls` text (a name, or an
    integer), or `.json` with `label` or `labels`."""
    if 'cls' in parts:
        text = parts['cls'].decode('utf-8', 'replace').strip()
        if not text:
            return '', 'its .cls is empty'
        return class_names.name(text), ''
    if 'json' not in parts:
        return '', 'the sample has no .cls or .json label'
    try:
        found = json.loads(parts['json'])
    except ValueError as e:
        return '', f'its .json is not JSON: {e}'
    if not isinstance(found, dict) or not ({'label', 'labels'} & set(found)):
        return '', 'its .json has no "label" or "labels"'
    if 'labels' in found:
        values = found['labels'] if isinstance(found['labels'], list) else [found['labels']]
        return tuple(sorted({class_names.name(_text(v)) for v in values})), ''
    return class_names.name(_text(found['label'])), ''


def _text(value):
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) else str(value)


class Labeling:
    """The labels of an archive's inputs: from the folders of their keys (with label levels),
    from a labels file, or from a WebDataset sample's label members.

    Args:
        levels: --label-levels (folders of the key).
        labels_file: a label_files.LabelsFile, or None.
        class_names: the ClassNames of integer labels.
        scan: the InputScan, whose `multi_label` a sample's labels decide.
    """

    def __init__(self, levels, labels_file, class_names, scan):
        self._levels = levels
        self._labels_file = labels_file
        self._class_names = class_names
        self._scan = scan
        self._form = None  # of a WebDataset's labels: 'label' or 'labels', from the first
        if labels_file is not None and scan is not None:
            scan.multi_label = labels_file.multi_label

    def labeled(self, entry) -> InputEntry:
        """An image of a tree's archive (or a tree) with its label, or its rejection."""
        if entry.reject:
            return entry
        if self._labels_file is not None:
            label, reject, detail = self._labels_file.labels(entry.key)
            return entry._replace(label=label, reject=reject, detail=detail)
        label, levels = tree_labels(entry.key, self._levels)
        if not label:
            detail = 'the image is at the top of the archive, not in a class folder'
            return entry._replace(reject='no_label', detail=detail)
        return entry._replace(label=label, levels=levels)

    def sample_labeled(self, entry, parts) -> InputEntry:
        """A WebDataset sample's image with the label of its label members, or a rejection."""
        try:
            label, problem = sample_label(parts, self._class_names)
        except UnknownClass as e:
            return entry._replace(reject='unknown_class', detail=str(e))
        if problem:
            return entry._replace(reject='no_label', detail=problem)
        form = 'labels' if isinstance(label, tuple) else 'label'
        if self._form is None:
            self._form = form
            self._scan.multi_label = form == 'labels'
        if form != self._form:
            detail = f'its .json has "{form}", the shard\'s first sample "{self._form}"'
            return entry._replace(reject='mixed_label_forms', detail=detail)
        return entry._replace(label=label)

    def relabeled(self, entries, scan):
        """A tree's entries (in id order) labeled by the labels file, then its rows that named
        no image (the tree's `no_label` for a file directly under its root is lifted: a labels
        file names such files)."""
        scan.multi_label = self._labels_file.multi_label
        next_id = 0
        for entry in entries:
            if entry.reject == 'no_label':
                entry = entry._replace(reject='', detail='')
            yield self.labeled(entry._replace(label=''))
            next_id = entry.id + 1
        yield from self.unused_rows(next_id)

    def unused_rows(self, first_id) -> list:
        """The rows of the labels file that named no image, as rejections."""
        return self._labels_file.unused_rows(first_id) if self._labels_file else []
