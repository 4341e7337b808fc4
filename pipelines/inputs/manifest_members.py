"""Members of archives as a manifest names them: `data/train.tar!cats/1.jpg` (the form records
and rejected.jsonl give an input inside an archive). Each archive a manifest names is indexed
once (pipelines/inputs/tar_and_zip.py), when a row first names it, and the member read from it
where it is.
"""

from pipelines.core import sources
from pipelines.inputs import tar_and_zip
from pipelines.inputs.entries import ArchiveMember
from pipelines.inputs.entries import safe_name


def split_member(raw) -> tuple | None:
    """(archive, member) of a path that names an archive's member (`data/train.tar!cats/1.jpg`,
    the form records and rejected.jsonl give), else None."""
    lower = raw.lower()
    for suffix in tar_and_zip.SUFFIXES:
        at = lower.find(suffix + sources.MEMBER_SEPARATOR)
        if at > 0:
            end = at + len(suffix)
            return raw[:end], raw[end + 1 :]
    return None


class MemberIndex:
    """The members of the archives a manifest names, by name; each archive indexed once, when
    a row first names it (holds their members)."""

    def __init__(self):
        self._archives = {}  # archive -> {name: Member}, or the ValueError it raised

    def find(self, archive, name) -> ArchiveMember:
        """The member `name` of `archive` (a Member rejected as `missing_file` where it has
        none; raises ValueError, in one line, where it is no archive)."""
        if archive not in self._archives:
            try:
                self._archives[archive] = {
                    m.name: m for m in tar_and_zip.members(archive) if m.name
                }
            except (ValueError, OSError) as e:
                self._archives[archive] = ValueError(f'{archive}: {e}')
        found = self._archives[archive]
        if isinstance(found, ValueError):
            raise found
        member = found.get(safe_name(name)[0])
        if member is None:
            return ArchiveMember(
                name, -1, None, 'missing_file', f'{archive} has no member {name!r}'
            )
        return member


def located(entry, raw_path, confinement, members):
    """The entry with the path, key and size a row's path names (an archive's member: with its
    source, or its rejection); raises Refused where it may not be read."""
    in_archive = split_member(raw_path)
    if in_archive is None:
        path, key, size = confinement.resolve(raw_path)
        return entry._replace(path=path, key=key, size=size)
    archive, key = confinement.resolve(in_archive[0])[:2]
    try:
        member = members.find(archive, in_archive[1])
    except ValueError as e:
        path = f'{archive}{sources.MEMBER_SEPARATOR}{in_archive[1]}'
        return entry._replace(path=path, key=path, reject='unreadable_archive', detail=str(e))
    path = f'{archive}{sources.MEMBER_SEPARATOR}{member.name}'
    key = f'{key}{sources.MEMBER_SEPARATOR}{member.name}'
    if member.reject:
        return entry._replace(path=path, key=key, reject=member.reject, detail=member.detail)
    source = member.source.encode()
    return entry._replace(path=path, key=key, size=member.size, source=source)
