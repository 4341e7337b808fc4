"""The members of a zip archive (pipelines/inputs/tar_and_zip.py lists every kind): from its
central directory (`zipfile`), each a part of the archive that any worker reads on its own; or,
where the central directory is missing (a zip cut short), from the members' own local headers,
as far as they go.

A member whose data overlaps another's is `zip_bomb` (the overlapping-files bomb, whose members
share one stream of data); one encrypted, `encrypted_member`; one compressed otherwise than
stored or deflated, `unsupported_compression`; one the file's end cuts, `truncated_archive`.
"""

import stat
import struct
import zipfile

from pipelines.core import sources
from pipelines.core.sources import Source
from pipelines.core.sources import ZipEntry
from pipelines.inputs.entries import MAX_SIDE_BYTES
from pipelines.inputs.entries import ArchiveMember
from pipelines.inputs.entries import safe_name

_ZIP_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)


def zip_members(raw, container, want_data):
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
        name_bytes = raw.read(name_length)
        raw_name = name_bytes.decode('utf-8' if flags & 0x800 else 'cp437')
        data_offset = offset + _LOCAL.size + name_length + extra_length
        if flags & 8 or len(name_bytes) < name_length:
            break  # sizes in a descriptor after the data, or a header cut short: not known here
        if data_offset + compressed_size > size:
            name = safe_name(raw_name)[0]
            where = Source(container, name, sources.ZIP, data_offset, compressed_size)
            yield ArchiveMember(name, file_size, where).cut_at(size, container)
            return
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
    yield ArchiveMember(
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
        return ArchiveMember(name, info.file_size, None, 'unsafe_member_name', unsafe)
    if info.is_dir():
        return ArchiveMember(name, 0, None, 'directory', '')
    if stat.S_ISLNK(mode):
        detail = 'a symbolic link: links in archives are never followed'
        return ArchiveMember(name, 0, None, 'archive_link', detail)
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG):
        detail = 'a device, FIFO or socket in the archive, not a regular file'
        return ArchiveMember(name, info.file_size, None, 'not_a_regular_file', detail)
    if info.flag_bits & 1:
        return ArchiveMember(
            name, info.file_size, None, 'encrypted_member', 'the member is encrypted'
        )
    if info.compress_type not in _ZIP_METHODS:
        detail = f'compression method {info.compress_type}; only stored and deflated are read'
        return ArchiveMember(name, info.file_size, None, 'unsupported_compression', detail)
    if info.header_offset in overlapping:
        detail = 'its data overlaps another member: a zip bomb, whose members share one stream'
        return ArchiveMember(name, info.file_size, None, 'zip_bomb', detail)
    entry = ZipEntry(
        info.header_offset, info.compress_size, info.file_size, info.CRC, info.compress_type
    )
    return ArchiveMember(
        name,
        info.file_size,
        Source(container, name, sources.ZIP, 0, info.file_size, zip_entry=entry),
    )
