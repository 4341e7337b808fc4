"""Archives on an object store indexed by the build's workers, not by the launcher: a pipeline of
one step (IndexArchives), run before the build's, reads each archive on a worker of its own and
writes its members (archive_inputs.archive_members) to a small index file; the listing then
takes each archive's members from its index, in the archives' order (`indexed`).

A tar has no table of contents: its headers are spread through it, so indexing one means reading
it through (on Cloud Storage, in Beam's 16 MiB requests). Indexed by the launcher, ImageNet's
1,000 per-class tars (~140 GB) went through one process before the job started; here the
launcher reads about 20 bytes an archive member (a gzip of JSON lists of its name, size, where
its bytes are, a rejection), whatever the size of the members (bench/RESULTS.md, "Archives
indexed by the workers"). The listing made from the indexes is the listing made from the
archives, entry for entry: the same function lists each archive, and the launcher turns the
members into entries as before, so that ids, keys, order, counts and rejections are the same.

Local archives are read by the listing itself (this machine reads them whoever does), and so are
those of a Dataflow `--dry_run`, which runs nothing: pipelines/runner.py decides.
"""

import base64
import concurrent.futures
import gzip
import json
import logging

import apache_beam as beam

from imageshards import console
from imageshards import pool
from imageshards import storage
from pipelines.core.sources import Source
from pipelines.inputs import archive_inputs
from pipelines.inputs.entries import ArchiveMember

_LOG = logging.getLogger(__name__)
_READERS = 16  # index files read at once by the launcher (a request each)
_READ_AHEAD = 64  # index files read ahead of the listing, at most


def indexed(run_indexing, files, form, folder):
    """(container, its members) of each archive in `files`, in turn, as archive_inputs.read_here
    gives them: indexed into `folder` by the pipeline `run_indexing(IndexArchives(...))` runs
    (on the build's runner), read back from there; the folder removed once read (or the listing
    given up).

    Raises:
        ValueError: where an archive is no archive at all, at its turn, as read_here would.
    """
    paths = [index_path(folder, position) for position in range(len(files))]
    try:
        _LOG.info(
            "indexing %s on the workers, in a pipeline run before the build's",
            console.plural(len(files), 'archive'),
        )
        run_indexing(IndexArchives(files, form, folder))
        with concurrent.futures.ThreadPoolExecutor(_READERS) as readers:
            yield from zip(files, pool.bounded_map(readers, _read_index, paths, _READ_AHEAD))
    finally:
        if storage.is_local(folder):
            storage.delete_tree(folder)
        else:  # by name: listing the folder would cost what reading the indexes did
            storage.delete(paths)


def index_path(folder, position):
    """The index file of the archive at `position` in the listing's order."""
    return storage.join(folder, f'{position:07d}.json.gz')


class IndexArchives(beam.PTransform):
    """A pipeline's root: every archive of `files` indexed into `folder`, one a worker at a time.

    Args:
        files: the archives, in the listing's order (an index file is named by its position).
        form: ARCHIVE, CLASS_ARCHIVES or WEBDATASET (what of a member is kept: its bytes too,
            for a WebDataset shard's label members).
        folder: where the index files go (removed by `indexed` once read).
    """

    def __init__(self, files, form, folder):
        super().__init__()
        self._files = list(files)
        self._form = form
        self._folder = folder

    def expand(self, pipeline):
        return (
            pipeline
            | 'Archives' >> beam.Create(list(enumerate(self._files)))
            # (position, archive): spread, so that each worker takes archives of its own
            | 'SpreadArchives' >> beam.Reshuffle()
            | 'IndexEachArchive' >> beam.ParDo(_IndexArchive(self._form, self._folder))
        )


class _IndexArchive(beam.DoFn):
    """(position, archive) -> its index file written (an archive that is none: the ValueError's
    message, for the listing to raise at its turn); yields its member count."""

    def __init__(self, form, folder):
        super().__init__()
        self._form = form
        self._folder = folder
        self._members = beam.metrics.Metrics.counter('archive_index', 'members_indexed')

    def process(self, element):
        position, container = element
        try:
            found = archive_inputs.archive_members(container, self._form)
            document = {'members': [_fields(member) for member in found]}
        except ValueError as e:
            found, document = [], {'error': str(e)}
        data = gzip.compress(json.dumps(document).encode('ascii'), mtime=0)
        storage.write_atomically(index_path(self._folder, position), data)
        self._members.inc(len(found))
        yield len(found)


def _fields(member):
    """An ArchiveMember as a JSON list (`_member` reads it back)."""
    source = member.source.encode() if member.source is not None else None
    data = base64.b64encode(member.data).decode('ascii') if member.data is not None else None
    return [member.name, member.size, source, member.reject, member.detail, data]


def _member(fields):
    name, size, source, reject, detail, data = fields
    source = Source.decode(source) if source is not None else None
    data = base64.b64decode(data) if data is not None else None
    return ArchiveMember(name, size, source, reject, detail, data)


def _read_index(path):
    """The members of an archive from its index file; raises ValueError where it was none."""
    document = json.loads(gzip.decompress(storage.read(path)))
    if 'error' in document:
        raise ValueError(document['error'])
    return [_member(fields) for fields in document['members']]
