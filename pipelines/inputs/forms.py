"""What --input is, detected from names and content (and said in the log), or named by
--input-form; and the inputs of a form other than a tree or manifest.

    tree            a folder <root>/<class>/... of image files, or a glob of them
    manifest        a .csv or .jsonl manifest (pipelines/inputs/manifests.py)
    archive         .tar, .tar.gz, .tgz or .zip archives of a class tree
    coco, voc, yolo  detection sets: a COCO .json, a VOC folder, a YOLO data.yaml, or
                    archives of any (pipelines/inputs/object_archives.py)
    class-archives  archives of images named after their class (`n01440764.tar`, ...)
    webdataset      WebDataset shards (pipelines/inputs/archive_inputs.py)
    idx             MNIST IDX files; arrays: .npz/.npy (pipelines/inputs/arrays.py)
    tfrecord        TFRecord files of tf.train.Examples (pipelines/inputs/tfrecord_inputs.py)

A .csv or .jsonl is a manifest. A folder that holds folders or image files at its top, and a
glob with a wildcard in a folder or naming image files, is a tree, as every build before these
forms was. Otherwise the files the input names (the file; the files at the folder's top; the
glob's matches) decide: archives, IDX images files, .npz/.npy arrays, TFRecord files (by name,
or by their first bytes), one kind at a time. An archive's first members tell its form: samples
of an image and a `.cls` or `.json` of one key are WebDataset's; images in folders a tree's;
images at the top a class's (unless --labels-file gives their labels: then a tree's); an
`Annotations/*.xml`, a .yaml or a COCO-named .json a detection set's (object_archives.form_in).
"""

import itertools
import logging
import os
import posixpath
import re
import typing

from imageshards import folder_top
from imageshards import storage
from pipelines.core.settings import ARCHIVE
from pipelines.core.settings import ARRAYS
from pipelines.core.settings import AUTO
from pipelines.core.settings import CLASS_ARCHIVES
from pipelines.core.settings import COCO
from pipelines.core.settings import IDX
from pipelines.core.settings import MANIFEST
from pipelines.core.settings import OBJECT_FORMS
from pipelines.core.settings import TFRECORD
from pipelines.core.settings import TREE
from pipelines.core.settings import VOC
from pipelines.core.settings import WEBDATASET
from pipelines.core.settings import YOLO
from pipelines.inputs import archive_inputs
from pipelines.inputs import object_archives
from pipelines.inputs import tar_and_zip
from pipelines.inputs.class_names import ClassNames
from pipelines.inputs.entries import GLOB_CHARS
from pipelines.inputs.entries import IDX_IMAGES
from pipelines.inputs.entries import IMAGE_EXTENSIONS
from pipelines.inputs.entries import TFRECORD_SUFFIXES
from pipelines.inputs.entries import extension
from pipelines.inputs.entries import is_glob
from pipelines.inputs.entries import is_manifest
from pipelines.inputs.label_files import LabelsFile

_LOG = logging.getLogger(__name__)
CONTAINER_FORMS = (ARCHIVE, CLASS_ARCHIVES, WEBDATASET, IDX, ARRAYS, TFRECORD)
_KIND_FORMS = {'archive': (ARCHIVE, CLASS_ARCHIVES, WEBDATASET, *OBJECT_FORMS), 'idx': (IDX,)}
_KIND_FORMS.update({'arrays': (ARRAYS,), 'tfrecord': (TFRECORD,)})
_WORDS = {
    ARCHIVE: 'archives of a class tree',
    CLASS_ARCHIVES: 'per-class archives, each named after its class',
    WEBDATASET: 'WebDataset shards',
    IDX: 'MNIST IDX files',
    ARRAYS: 'NumPy arrays',
    TFRECORD: 'TFRecord files of tf.train.Examples',
    COCO: 'a COCO annotation file',
    VOC: 'a Pascal VOC folder',
    YOLO: 'a YOLO data.yaml',
}
_PEEK_MEMBERS = 2000  # an archive's first members, which tell its form


class Detected(typing.NamedTuple):
    """What --input is."""

    form: str
    files: tuple = ()  # of a container form: the files that hold the inputs, sorted
    base: str = ''  # the folder they are in (the glob's fixed part)


def detect(spec, form=AUTO, labels_file=None) -> Detected:
    """What `spec` is: `form` (--input-form), or detected where it is `auto`.

    Raises:
        ValueError: in one line that says what was found, for an input of no known form, or
            not of the form named.
    """
    if is_manifest(spec) or form == MANIFEST:
        return Detected(MANIFEST)
    if form == TREE:
        return Detected(TREE)
    path = storage.absolute(spec)
    objects = form if form in OBJECT_FORMS else _objects_form(path) if form == AUTO else None
    if objects:
        if form == AUTO:
            _LOG.info('--input %s: %s (--input-form overrides)', spec, _WORDS[objects])
        return Detected(objects, (path,), posixpath.dirname(path.rstrip('/')))
    folder = path.endswith('/**') and storage.is_uri(path)  # an object store's folder, as listed
    if folder:
        path, spec = path[: -len('/**')], spec[: -len('/**')]
    if is_glob(spec):
        if form == AUTO and _tree_glob(spec):
            return Detected(TREE)
        files, base = storage.match(path), _glob_base(path)
        if form == AUTO and (not files or any(_kind(f) == 'image' for f in files)):
            return Detected(TREE)
    elif not folder and _is_file(path):  # (a folder is no object: asked once, by the launcher)
        files, base = [path], posixpath.dirname(path)
    else:
        if not storage.is_uri(path) and not storage.exists(path):
            return Detected(TREE)  # listing says it does not exist
        files, has_folders = folder_top.list_top(path)
        if form == AUTO and (has_folders or any(_kind(f) == 'image' for f in files) or not files):
            return Detected(TREE)
        base = path.rstrip('/')
    found = _form_of(spec, files, form, labels_file)
    files = tuple(f for f in files if _kind(f, found.form) in _accepted(found.form))
    if form == AUTO:
        _LOG.info(
            '--input %s: %s (%d files; detected from their names and content, '
            '--input-form overrides)',
            spec,
            _WORDS[found.form] + (' in archives' if found.form in OBJECT_FORMS else ''),
            len(files),
        )
    return found._replace(files=files, base=base)


def _objects_form(path):
    """COCO for a .json file, YOLO for a .yaml data file, VOC for a folder with Annotations/
    and JPEGImages/ (on an object store, one named like VOC2012: other builds ask no more of
    it; --input-form voc for any); None for anything else."""
    lower = path.lower()
    if lower.endswith('.json'):
        return COCO
    if lower.endswith(('.yaml', '.yml')):
        return YOLO
    if is_glob(path):
        return None
    if storage.is_uri(path):
        named = re.match(r'^VOC\d{4}$', posixpath.basename(path.rstrip('/')))
        return VOC if named and _voc_folder(path) else None
    return VOC if os.path.isdir(path) and _voc_folder(path) else None


def _voc_folder(path):
    return all(storage.exists(storage.join(path, name)) for name in ('Annotations', 'JPEGImages'))


def _tree_glob(spec):
    """Whether a glob is a tree's: a wildcard in a folder, `**`, or a name of an image
    extension."""
    folder, _, name = spec.rpartition('/')
    return bool(GLOB_CHARS.search(folder)) or '**' in name or extension(name) in IMAGE_EXTENSIONS


def _glob_base(pattern):
    prefix = pattern[: GLOB_CHARS.search(pattern).start()]
    return prefix.rsplit('/', 1)[0] if '/' in prefix else storage.absolute('.')


def _is_file(path):
    if not storage.is_uri(path):
        return os.path.isfile(path)
    try:
        return storage.match(path) == [path]
    except Exception:  # pylint: disable=broad-except  # a bucket alone, an unreadable one
        return False


def _kind(path, form=None):
    """What a file is by its name: archive, idx (images; an IDX labels file is idx-labels),
    arrays, tfrecord, image; else None (or, where `form` is tfrecord, tfrecord: any file)."""
    name = path.rsplit('/', 1)[-1].lower()
    if tar_and_zip.kind(name):
        return 'archive'
    if IDX_IMAGES.match(name):
        return 'idx'
    if 'labels-idx1-ubyte' in name or 'labels.idx1-ubyte' in name:
        return 'idx-labels'
    if name.endswith(('.npz', '.npy')):
        return 'arrays'
    if any(suffix in name for suffix in TFRECORD_SUFFIXES) or '-of-' in name:
        return 'tfrecord'
    if extension(name) in IMAGE_EXTENSIONS:
        return 'image'
    return 'tfrecord' if form == TFRECORD else None


def _looks_like_tfrecord(path):
    from pipelines.inputs import tfrecord_inputs  # pylint: disable=import-outside-toplevel

    return tfrecord_inputs.looks_like_tfrecord(path)


def _accepted(form):
    return {kind for kind, forms in _KIND_FORMS.items() if form in forms}


def _form_of(spec, files, form, labels_file):
    """The Detected form of `files`, as named (checked) or detected."""
    kinds = {}
    for path in files:
        kind = _kind(path, form)
        if kind is None and form == AUTO and len(kinds) == 0 and len(files) <= 100:
            kind = 'tfrecord' if _looks_like_tfrecord(path) else None
        kinds.setdefault(kind, []).append(path)
    if form != AUTO:
        if not any(kinds.get(kind) for kind in _accepted(form)):
            raise ValueError(
                f'--input {spec}: --input-form {form} expects {_WORDS[form]}; found {_found(kinds)}'
            )
        return Detected(form)
    usable = [kind for kind in kinds if kind in _KIND_FORMS]
    if len(usable) != 1:
        what = 'no files of a form it reads' if not usable else 'files of several forms'
        raise ValueError(
            f'--input {spec}: {what}: found {_found(kinds)}; expected a folder of class folders, '
            'a .csv/.jsonl manifest, archives (.tar, .tar.gz, .tgz, .zip), MNIST IDX files, '
            '.npz/.npy arrays or TFRecord files, one form at a time (--input-form names it)'
        )
    if usable[0] == 'archive':
        return Detected(_archive_form(kinds['archive'][0], labels_file))
    return Detected(_KIND_FORMS[usable[0]][0])


def _found(kinds):
    words = {None: 'other files', 'idx-labels': 'IDX labels files', 'image': 'images'}
    parts = [
        f'{len(paths)} {words.get(kind) or kind + " files"} ({", ".join(_names(paths))})'
        for kind, paths in kinds.items()
    ]
    return ', '.join(parts) or 'nothing'


def _names(paths, shown=3):
    names = [path.rsplit('/', 1)[-1] for path in paths[:shown]]
    return names + ['...'] if len(paths) > shown else names


def _archive_form(container, labels_file):
    """WEBDATASET, a detection set's form (COCO, VOC, YOLO: object_archives.form_in), ARCHIVE
    or CLASS_ARCHIVES, from the first members of an archive."""
    if labels_file:
        return ARCHIVE
    peeked = list(itertools.islice(tar_and_zip.members(container, marked=False), _PEEK_MEMBERS))
    names = [m.name for m in peeked if not m.reject]
    images = [name for name in names if extension(name) in IMAGE_EXTENSIONS]
    parts = [archive_inputs.sample_part(name) for name in names]
    labelled = {key for key, part in parts if part in archive_inputs.LABEL_EXTENSIONS}
    if any(archive_inputs.sample_part(name)[0] in labelled for name in images):
        return WEBDATASET
    objects = object_archives.form_in([m.name for m in peeked])  # a cut member's name tells too
    if objects:
        return objects
    if images and all('/' not in name for name in images):
        return CLASS_ARCHIVES
    return ARCHIVE


def tree_labeling(inputs):
    """The archive_inputs.Labeling of a tree whose labels come from --labels-file (`inputs`:
    the InputSettings), else None."""
    if not inputs.labels_file:
        return None
    class_names = ClassNames(inputs.class_names)
    labels = LabelsFile(inputs.labels_file, inputs, inputs.label_separator, class_names)
    return archive_inputs.Labeling(tuple(inputs.label_levels), labels, class_names, None)


def container_entries(detected, scan, inputs, index_archives=None):
    """The InputEntry of a container form's inputs (sets what `scan` learns of them); `inputs`:
    the InputSettings; `index_archives`: what gives archives' members, where not this process
    (archive_inputs.archive_entries)."""
    levels = tuple(inputs.label_levels)
    if inputs.labels_file and detected.form not in (ARCHIVE, CLASS_ARCHIVES):
        raise ValueError(
            f'--labels-file gives the labels of a tree or an archive of one; --input is '
            f'{_WORDS[detected.form]}, which hold their labels'
        )
    if levels and detected.form not in (ARCHIVE, CLASS_ARCHIVES):
        raise ValueError(f'--label-levels: {_WORDS[detected.form]} have no label levels')
    if not detected.files:
        raise ValueError(f'--input {scan.base} holds no {_WORDS[detected.form]}')
    scan.form = detected.form
    class_names = ClassNames(inputs.class_names)
    # Imported here: numpy and protobuf cost the early listing of a tree 0.2 s.
    # pylint: disable=import-outside-toplevel
    if detected.form in (IDX, ARRAYS):
        from pipelines.inputs import arrays

        return arrays.array_entries(detected.files, class_names)
    if detected.form == TFRECORD:
        from pipelines.inputs import tfrecord_inputs

        return tfrecord_inputs.record_entries(detected.files, scan, class_names)
    labels = None
    if inputs.labels_file:
        labels = LabelsFile(inputs.labels_file, inputs, inputs.label_separator, class_names)
    labeling = archive_inputs.Labeling(levels, labels, class_names, scan)
    return archive_inputs.archive_entries(
        detected.files, detected.form, scan, labeling, index_archives
    )
