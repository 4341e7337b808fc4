"""Which group an image belongs to (images of one group share a split: one patient's scans, one
video's frames, one product's photos): a manifest's `group` column, or `--group-pattern` over
its key.

A pattern is a regular expression searched in the key (the path relative to the input root);
its group named `group`, else its first group, names the image's group: with `_(p\\d+)_`,
`cat/scan_p042_01.jpg` and `dog/scan_p042_02.jpg` are both of group `p042`; with `^[^/]+/([^/]+)/`
every image of a second-level folder is one group. A row's own `group` wins over the pattern. A
key the pattern does not match has no group: the image is placed alone. A group name is text (a
key that is not UTF-8 shows its bytes as \\xNN: imageshards/file_names.py).
"""

import functools
import re

from imageshards import file_names


class SplitConflict(ValueError):
    """Images that must share a split, or keep one, and cannot: the build stops, in one line
    (pipelines/writing/output_guard.py knows its name)."""


MAX_GROUP_BYTES = 1024  # a longer name is no group but a mistake (a whole row in one cell)
NAMED = 'group'


def parse_group_pattern(text) -> str:
    """--group-pattern: a regular expression with a group (`group` by name, or its first)."""
    try:
        compiled = re.compile(text)
    except re.error as e:
        raise ValueError(f'{text!r} is not a regular expression: {e}') from None
    if not compiled.groups:
        raise ValueError(
            f"{text!r} has no group: put the part of the key that names the image's group in "
            f'parentheses, e.g. ^([^/]+)/ for the first folder, or (?P<group>...)'
        )
    return text


@functools.lru_cache(maxsize=4)
def _compiled(pattern):
    return re.compile(pattern)


def group_of(key, own='', pattern=None) -> str:
    """The group of an image with this key: its own (a manifest's column) if it has one, else
    what `pattern` finds in the key, else ''."""
    if own or not pattern:
        return own
    found = _compiled(pattern).search(key)
    if found is None:
        return ''
    text = found.group(NAMED) if NAMED in found.re.groupindex else found.group(1)
    return file_names.display(text or '')
