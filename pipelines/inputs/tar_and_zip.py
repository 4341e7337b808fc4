"""The members of a tar (also gzip-compressed) or zip archive, listed without extracting it: for
each, its name as if extracted and where its bytes are (a pipelines.core.sources.Source), or why
it cannot be an input.

An uncompressed tar is indexed by its headers (Python's `tarfile`, reading each header and
seeking past the data), a zip by its central directory (`zipfile`): each member is then a part of
the archive that any worker reads on its own. A .tar.gz holds no index: it is listed by reading
it through, and its members are read again in one pass (a sequential source).

Archives are untrusted input (docs/reliability.md). Nothing in one is extracted or followed:
* a name that is absolute or climbs out with `..` is `unsafe_member_name`; a symbolic or hard
  link is `archive_link` and a device or FIFO `not_a_regular_file`, never followed or opened;
* a member cut short by the archive's end is `truncated_archive`, and bytes where a header
  should be, which end the listing of the archive, `corrupt_archive` (every whole member
  before them is kept);
* a zip member that is encrypted (`encrypted_member`) or compressed otherwise than stored or
  deflated (`unsupported_compression`) is refused; so is one whose data overlaps another's
  (`zip_bomb`: the overlapping-files bomb), and the one that inflates past its declared size
  is stopped there when read (pipelines/core/reading.py);
* a later member of the same name replaces an earlier one, as extraction would: the earlier
  is `duplicate_member`.
"""

import gzip
import stat
import struct
import tarfile
import typing
import zipfile
import zlib

from imageshards import storage
from pipelines.core import sources
from pipelines.core.sources import Source
from pipelines.core.sources import ZipEntry

TAR, TAR_GZ, ZIP = 'tar', 'tar.gz', 'zip'
SUFFIXES = {'.tar': TAR, '.tar.gz': TAR_GZ, '.tgz': TAR_GZ, '.zip': ZIP}
MAX_SIDE_BYTES = 1 << 20  # the most read of a label member (.cls, .json) while listing
_ZIP_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
_BLOCK = tarfile.BLOCKSIZE


class Member(typing.NamedTuple):
    """One member of an archive, in the archive's order."""

    name: str  # its path as if extracted (`./a/b.jpg` is `a/b.jpg`); the raw name if unusable
    size: int  # of its bytes, as extracted
    source: Source = None
    reject: str = ''  # why it cannot be an input
    detail: str = ''
    data: bytes = None  # its bytes, where asked for (a small label member)


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


def members(container, want_data=None, marked=True) -> typing.Iterator[Member]:
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
            found = _zip_members(raw, container, want_data)
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


def safe_name(raw) -> tuple:
    """(name as if extracted, problem detail or ''): `./a//b.jpg` is `a/b.jpg`; an absolute name,
    a drive letter or a `..` component is a problem."""
    name = raw.replace('\\', '/')
    if name.startswith('/') or (len(name) > 1 and name[1] == ':'):
        return raw, f'{raw!r} is an absolute name; such members are never extracted or read'
    parts = [part for part in name.split('/') if part not in ('', '.')]
    if '..' in parts:
        return raw, f'{raw!r} climbs out of the archive with ..; never extracted or read'
    return '/'.join(parts), ''


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
    listing early."""
    compressed = kind(container) == TAR_GZ
    size = float('inf') if compressed else raw.seek(0, 2)  # a .tar.gz's: known at its end
    raw.seek(0)
    f = gzip.GzipFile(fileobj=raw) if compressed else raw
    how = sources.GZIP if compressed else sources.RANGE
    try:
        tar = tarfile.open(fileobj=f, mode='r:')  # pylint: disable=consider-using-with
    except (tarfile.ReadError, OSError, EOFError, zlib.error) as e:
        raise ValueError(f'{container} is not a readable tar archive: {e}') from None
    problem = None
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
            yield _cut(member, size, container)
    tail = _ending(f, tar.offset, problem, compressed)
    if tail:
        yield Member(f'@{tar.offset}', 0, None, *tail)


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
    of zeros, or the end of the file).

    A .tar.gz that cannot be decompressed further ends where it fails: its members before are
    kept (validation rejects the one it cuts), the rest is lost, said in one rejection. A member
    cut short by the end of a tar is rejected as truncated_archive itself (`_cut`).
    """
    if problem and compressed and 'unexpected end of data' not in problem:
        reason = 'truncated_archive' if 'EOFError' in problem else 'corrupt_archive'
        detail = f'the archive cannot be decompressed past byte {offset:,} of its contents'
        return reason, f'{detail} ({problem}): anything after is lost'
    try:
        f.seek(offset)
        block = f.read(_BLOCK)
        end = _file_end(f, compressed)
    except (OSError, EOFError, zlib.error) as e:
        detail = f'the archive cannot be decompressed past byte {offset:,} of its contents ({e})'
        return 'corrupt_archive', detail + ': anything after is lost'
    if problem or not block.strip(b'\0'):
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


def _tar_member(info, container, how):
    name, unsafe = safe_name(info.name)
    if unsafe:
        return Member(name, info.size, None, 'unsafe_member_name', unsafe)
    if info.issym() or info.islnk():
        kind_of = 'symbolic' if info.issym() else 'hard'
        detail = f'a {kind_of} link to {info.linkname!r}: links in archives are never followed'
        return Member(name, 0, None, 'archive_link', detail)
    if info.isdir():
        return Member(name, 0, None, 'directory', '')
    if not info.isreg() or info.issparse():
        detail = 'a device, FIFO or sparse file in the archive, not a regular file'
        return Member(name, info.size, None, 'not_a_regular_file', detail)
    return Member(name, info.size, Source(container, name, how, info.offset_data, info.size))


def _cut(member, end, container):
    """A member whose bytes run past the archive's end is `truncated_archive`."""
    source = member.source
    if source is None or source.offset + source.length <= end:
        return member
    return Member(
        member.name,
        member.size,
        None,
        'truncated_archive',
        f'{container} ends at byte {end:,}, inside this member (its {member.size:,} bytes from '
        f'byte {source.offset:,}): cut short; members after it, if any, are lost with it',
    )


def _zip_members(raw, container, want_data):
    """The members of a zip, by their place in the file; of one without a central directory
    (cut short), those its local headers show, then a rejection for the rest."""
    try:
        archive = zipfile.ZipFile(raw)  # pylint: disable=consider-using-with
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        yield from _scanned_zip_members(raw, container)
        return
    infos = sorted(archive.infolist(), key=lambda info: info.header_offset)
    overlapping = _overlapping(infos, archive.start_dir)
    for info in infos:
        member = _zip_member(info, container, overlapping)
        if want_data and not member.reject and want_data(member.name):
            with archive.open(info) as f:
                member = member._replace(data=f.read(MAX_SIDE_BYTES))
        if member.reject != 'directory':
            yield member


_LOCAL = struct.Struct('<4s2xHH4xIIIHH')  # signature, flags, method, CRC, sizes, name, extra


def _scanned_zip_members(raw, container):
    """The members of a zip whose central directory is missing, from their local headers, as
    far as each one's size is known; then what ends the scan, as a rejection."""
    offset, size = 0, raw.seek(0, 2)
    while True:
        raw.seek(offset)
        header = raw.read(_LOCAL.size)
        if len(header) < _LOCAL.size or header[:4] != b'PK\x03\x04':
            break
        _, flags, method, crc, compressed_size, file_size, name_length, extra_length = (
            _LOCAL.unpack(header)
        )
        raw_name = raw.read(name_length).decode('utf-8' if flags & 0x800 else 'cp437')
        data_offset = offset + _LOCAL.size + name_length + extra_length
        if flags & 8 or data_offset + compressed_size > size:
            break  # sizes in a descriptor after the data, or cut short: not known here
        info = zipfile.ZipInfo(raw_name)
        info.flag_bits, info.compress_type, info.CRC = flags, method, crc
        info.compress_size, info.file_size, info.header_offset = (
            compressed_size,
            file_size,
            offset,
        )
        member = _zip_member(info, container, set())
        if member.reject != 'directory':
            yield member
        offset = data_offset + compressed_size
    if offset == 0 and not size:
        raise ValueError(f'{container} is an empty file, not a zip archive')
    if offset == 0:
        raise ValueError(f'{container} is not a zip archive (no member header at its start)')
    yield Member(
        f'@{offset}',
        0,
        None,
        'truncated_archive',
        f'the archive has no central directory (cut short?); its members are read from their '
        f'own headers up to byte {offset:,} of {size:,}, and anything after is lost',
    )


def _overlapping(infos, directory_offset):
    """The header offsets of members whose data overlaps the next member's (or the central
    directory): a zip bomb's members share one stream of data."""
    ends = [info.header_offset for info in infos[1:]] + [directory_offset]
    return {
        info.header_offset
        for info, end in zip(infos, ends)
        if info.header_offset + 30 + len(info.orig_filename) + info.compress_size > end
    }


def _zip_member(info, container, overlapping):
    name, unsafe = safe_name(info.filename)
    mode = info.external_attr >> 16
    if unsafe:
        return Member(name, info.file_size, None, 'unsafe_member_name', unsafe)
    if info.is_dir():
        return Member(name, 0, None, 'directory', '')
    if stat.S_ISLNK(mode):
        detail = 'a symbolic link: links in archives are never followed'
        return Member(name, 0, None, 'archive_link', detail)
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG):
        detail = 'a device, FIFO or socket in the archive, not a regular file'
        return Member(name, info.file_size, None, 'not_a_regular_file', detail)
    if info.flag_bits & 1:
        return Member(name, info.file_size, None, 'encrypted_member', 'the member is encrypted')
    if info.compress_type not in _ZIP_METHODS:
        detail = f'compression method {info.compress_type}; only stored and deflated are read'
        return Member(name, info.file_size, None, 'unsupported_compression', detail)
    if info.header_offset in overlapping:
        detail = 'its data overlaps another member: a zip bomb, whose members share one stream'
        return Member(name, info.file_size, None, 'zip_bomb', detail)
    entry = ZipEntry(
        info.header_offset, info.compress_size, info.file_size, info.CRC, info.compress_type
    )
    return Member(
        name,
        info.file_size,
        Source(container, name, sources.ZIP, 0, info.file_size, zip_entry=entry),
    )
