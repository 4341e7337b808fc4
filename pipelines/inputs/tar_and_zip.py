"""The members of a tar (also gzip-compressed) or zip archive, listed without extracting it: for
each, its name as if extracted and where its bytes are (a pipelines.core.sources.Source), or why
it cannot be an input.

An uncompressed tar is indexed by its headers (Python's `tarfile`, reading each header and
seeking past the data), a zip by its central directory (pipelines/inputs/zip_members.py): each
member is then a part of the archive that any worker reads on its own. A .tar.gz holds no index:
it is listed by reading it through, and its members are read again in one pass (a sequential
source).

Archives are untrusted input (docs/reliability.md). Nothing in one is extracted or followed:
* a name that is absolute or climbs out with `..` is `unsafe_member_name`; a symbolic or hard
  link is `archive_link` and a device or FIFO `not_a_regular_file`, never followed or opened;
* a member cut short by the archive's end is `truncated_archive`; where the end cuts none (a
  tar that ends where a header should be, or in the padding after a member, without its
  end-of-archive blocks), the rest of the archive is, as one rejection named `@<offset>`; bytes
  where a header should be, which end the listing of the archive, are `corrupt_archive` (every
  whole member before either is kept);
* a zip member that is encrypted (`encrypted_member`) or compressed otherwise than stored or
  deflated (`unsupported_compression`) is refused; so is one whose data overlaps another's
  (`zip_bomb`: the overlapping-files bomb), and the one that inflates past its declared size
  is stopped there when read (pipelines/core/reading.py);
* a later member of the same name replaces an earlier one, as extraction would: the earlier
  is `duplicate_member`.
"""

import gzip
import tarfile
import typing
import zlib

from imageshards import storage
from pipelines.core import sources
from pipelines.core.sources import Source
from pipelines.inputs.entries import MAX_SIDE_BYTES
from pipelines.inputs.entries import ArchiveMember
from pipelines.inputs.entries import safe_name
from pipelines.inputs.zip_members import zip_members

TAR, TAR_GZ, ZIP = 'tar', 'tar.gz', 'zip'
SUFFIXES = {'.tar': TAR, '.tar.gz': TAR_GZ, '.tgz': TAR_GZ, '.zip': ZIP}
_BLOCK = tarfile.BLOCKSIZE


def kind(path) -> str | None:
    """TAR, TAR_GZ or ZIP, from an archive's name; None for another file."""
    lower = path.lower()
    for suffix, found in SUFFIXES.items():
        if lower.endswith(suffix):
            return found
    return None


def stem(path) -> str:
    """An archive's name without its folder and suffix (`n01440764.tar` -> `n01440764`)."""
    name = path.rstrip('/').rsplit('/', 1)[-1]
    for suffix in SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return name


def members(container, want_data=None, marked=True) -> typing.Iterator[ArchiveMember]:
    """The members of the archive `container`, in its order, but directories.

    Args:
        want_data: `want_data(name)`: whether to read a member's bytes now (at most
            MAX_SIDE_BYTES of it); None: none.
        marked: mark the members a later one of the same name replaces (holding all of them
            until the end); False: each as it is found (a glance at the first few).

    Raises:
        ValueError: in one line, where the file is no archive of its kind at all.
    """
    with _opened(container) as raw:
        if kind(container) == ZIP:
            found = zip_members(raw, container, want_data)
        else:
            found = _tar_members(raw, container, want_data)
        yield from _marked_duplicates(found) if marked else found


class _opened:  # pylint: disable=invalid-name
    """The container's raw bytes, open (a local file, or a remote object's stream)."""

    def __init__(self, container):
        self._container = container
        self._f = None

    def __enter__(self):
        if storage.is_uri(self._container):
            self._f = storage.open_read(self._container)
        else:
            self._f = open(self._container, 'rb')  # pylint: disable=consider-using-with
        return self._f

    def __exit__(self, *exc_info):
        self._f.close()


def _marked_duplicates(found):
    """The members, an earlier one of a name that a later one repeats marked `duplicate_member`
    (holds every member's name, and the members, until the archive's end)."""
    found = list(found)
    last = {member.name: i for i, member in enumerate(found) if not member.reject}
    for i, member in enumerate(found):
        if not member.reject and last[member.name] != i:
            member = member._replace(
                reject='duplicate_member',
                detail=f'a later member of the archive has the same name {member.name!r} and '
                'replaces it, as extraction would',
            )
        yield member


def _tar_members(raw, container, want_data):
    """The members of a tar or .tar.gz as they are found, then a rejection for what ends the
    listing early.

    Each member is given out once the next header is read: only then is it known that the
    archive does not end inside it (a .tar.gz's size is known only at its end)."""
    compressed = kind(container) == TAR_GZ
    raw.seek(0)
    f = gzip.GzipFile(fileobj=raw) if compressed else raw
    how = sources.GZIP if compressed else sources.RANGE
    try:
        tar = tarfile.open(fileobj=f, mode='r:')  # pylint: disable=consider-using-with
    except (tarfile.ReadError, OSError, EOFError, zlib.error) as e:
        raise ValueError(f'{container} is not a readable tar archive: {e}') from None
    problem, held = None, None
    while problem is None:
        try:
            info = tar.next()
        except (tarfile.ReadError, OSError, EOFError, zlib.error) as e:
            problem = f'{type(e).__name__}: {e}'
            break
        if info is None:
            break
        tar.members.clear()  # kept by tarfile for extraction: a copy of every header
        member = _tar_member(info, container, how)
        if want_data and not member.reject and want_data(member.name):
            member, problem = _with_data(member, f, info)
        if member.reject != 'directory':
            if held is not None:
                yield held
            held = member
    if held is not None and _ends_early(problem):  # perhaps inside the member held
        held = held.cut_at(_readable_end(raw, compressed), container)
    if held is not None:
        yield held
    if held is None or held.reject not in _CUT_SHORT:
        tail = _ending(f, tar.offset, problem, compressed)
        if tail:
            yield ArchiveMember(f'@{tar.offset}', 0, None, *tail)


_CUT_SHORT = ('truncated_archive', 'corrupt_archive')


def _ends_early(problem):
    """Whether what stopped a tar's listing is its (decompressed) bytes' end."""
    return bool(problem) and ('EOFError' in problem or 'unexpected end of data' in problem)


def _with_data(member, f, info):
    """(the member with its bytes, None), or where they cannot be read (member rejected, the
    problem that ends the listing)."""
    try:
        f.seek(info.offset_data)
        return member._replace(data=f.read(min(info.size, MAX_SIDE_BYTES))), None
    except (OSError, EOFError, zlib.error) as e:
        problem = f'{type(e).__name__}: {e}'
        reason = 'truncated_archive' if isinstance(e, EOFError) else 'corrupt_archive'
        return member._replace(source=None, reject=reason, detail=problem), problem


def _ending(f, offset, problem, compressed):
    """(reason, detail) of what ended a tar's listing early, or None at its proper end (a block
    of zeros, whole or cut: every member is whole).

    A member the archive's end cuts is rejected as truncated_archive itself
    (`ArchiveMember.cut_at`); where it cuts none (it ends where the next header should be, or in
    the padding after a member), the rest of the archive is, here. A .tar.gz that cannot be
    decompressed further ends where it fails: its members before are kept, the rest is lost.
    """
    lost = 'cut short: anything after is lost'
    if problem and 'unexpected end of data' in problem:  # in the padding after the last member
        return 'truncated_archive', f'the archive ends after its last whole member, {lost}'
    if problem and compressed:
        reason = 'truncated_archive' if _ends_early(problem) else 'corrupt_archive'
        detail = f'the archive cannot be decompressed past byte {offset:,} of its contents'
        return reason, f'{detail} ({problem}): anything after is lost'
    if problem:
        return 'corrupt_archive', f'the archive cannot be read past byte {offset:,} ({problem})'
    try:
        f.seek(offset)
        block = f.read(_BLOCK)
        end = _file_end(f, compressed)
    except (OSError, EOFError, zlib.error) as e:
        detail = f'the archive cannot be decompressed past byte {offset:,} of its contents ({e})'
        return 'corrupt_archive', detail + ': anything after is lost'
    if not block:
        return (
            'truncated_archive',
            f'the archive ends at byte {end:,} where a header should be, {lost}',
        )
    if not block.strip(b'\0'):
        return None
    if len(block) < _BLOCK:
        return 'truncated_archive', f'the archive ends inside a header at byte {end:,}'
    return (
        'corrupt_archive',
        f'bytes {offset:,} to {end:,} are not a tar header: the rest of the archive is not read',
    )


def _file_end(f, compressed):
    """The size of the (decompressed) archive: a .tar.gz is read on to its end."""
    if not compressed:
        return f.seek(0, 2)
    while f.read(1 << 20):
        pass
    return f.tell()


def _readable_end(raw, compressed):
    """Where the archive's (decompressed) bytes end: a cut .tar.gz's, where decompression
    stops (read again from its start: a gzip stream cut short tells no more)."""
    if not compressed:
        return raw.seek(0, 2)
    raw.seek(0)
    total, pending, inflater = 0, b'', zlib.decompressobj(_GZIP)
    while True:
        pending = pending or raw.read(_GZIP_CHUNK)
        if not pending:
            return total
        try:
            total += len(inflater.decompress(pending, _GZIP_CHUNK))
        except zlib.error:
            return total
        pending = inflater.unconsumed_tail
        if inflater.eof:  # a gzip file may hold several streams, one after another
            pending, inflater = inflater.unused_data, zlib.decompressobj(_GZIP)


_GZIP = 16 + zlib.MAX_WBITS  # a gzip header and trailer around deflated data
_GZIP_CHUNK = 1 << 20


def _tar_member(info, container, how):
    name, unsafe = safe_name(info.name)
    if unsafe:
        return ArchiveMember(name, info.size, None, 'unsafe_member_name', unsafe)
    if info.issym() or info.islnk():
        kind_of = 'symbolic' if info.issym() else 'hard'
        detail = f'a {kind_of} link to {info.linkname!r}: links in archives are never followed'
        return ArchiveMember(name, 0, None, 'archive_link', detail)
    if info.isdir():
        return ArchiveMember(name, 0, None, 'directory', '')
    if not info.isreg() or info.issparse():
        detail = 'a device, FIFO or sparse file in the archive, not a regular file'
        return ArchiveMember(name, info.size, None, 'not_a_regular_file', detail)
    return ArchiveMember(name, info.size, Source(container, name, how, info.offset_data, info.size))
