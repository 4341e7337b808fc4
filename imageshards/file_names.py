r"""File names as bytes: every name a local disk can hold is kept, and written to JSON so that a
reader in any language gets its bytes back.

A POSIX file name is bytes. Python lists a local folder as `str`: the bytes decoded with the
file system's encoding (UTF-8 on Linux), each byte that does not decode becoming a lone
surrogate (`os.fsdecode`, PEP 383's surrogateescape: b'\xe9' -> '\udce9'), which `os.fsencode`
turns back into the same bytes. A build keeps a path as that `str` throughout, and:

* a record's `image/filename` holds the path's bytes (`to_bytes`), the name exactly as on disk:
  a bytes feature, as in every `tf.train.Example` (TFDS's `Text` feature is bytes on disk too);
* in JSON (`rejected.jsonl`, `duplicates.jsonl`, the listing), a path that is valid UTF-8 is a
  string, as it always was: `{"path": "cats/été.jpg"}`. One that is not keeps a readable `path`
  (each byte that does not decode as `\xNN`: for people, not for opening a file) and gains
  `path_b64`, the standard base64 of its bytes, which a reader uses in place of `path` wherever
  it is present (`to_json`, `from_json`):
  `{"path": "cats/latin1_\\xe9t\\xe9.jpg", "path_b64": "Y2F0cy9sYXRpbjFf6XTpLmpwZw=="}`.

Why this form: a lone surrogate in a JSON string (`"\udce9"`, what `json.dumps` writes for a
surrogate-escaped `str`) is not Unicode; RFC 8259 leaves its reading undefined (Go reads U+FFFD,
Rust's serde_json refuses it, a strict UTF-8 decoder refuses the file). An object in place of
the string (`"path": {"bytes_b64": ...}`) would change the field's type under every reader of
`path`, for one name in a million. A field beside it keeps `path` a string for everyone, and
ASCII base64 reads the same in every language.

A `str` that no disk can hold (a surrogate that surrogateescape does not make, such as a
manifest's `"\ud800"`) raises UnrepresentableName: such an input is rejected, with a reason.
"""

import base64
import binascii
import os

B64_SUFFIX = '_b64'


class UnrepresentableName(ValueError):
    """A path that is no file name's bytes."""


def to_bytes(path):
    """The bytes of a local path (`str` as Python lists it, or `bytes`), as on disk."""
    if isinstance(path, bytes):
        return path
    try:
        return os.fsencode(path)
    except UnicodeEncodeError as e:
        raise UnrepresentableName(
            f'{display(path)} is not a file name this system can hold ({e.reason})'
        ) from e


def from_bytes(data):
    """The `str` Python uses for the local path whose bytes are `data` (`os.fsdecode`)."""
    return os.fsdecode(data)


def is_utf8(path):
    """Whether a `str` path is valid Unicode (so UTF-8 in JSON as it is)."""
    if path.isascii():  # nearly every path, checked in C without encoding it
        return True
    try:
        path.encode('utf-8')
        return True
    except UnicodeEncodeError:
        return False


def display(path):
    r"""A path as valid UTF-8 text for people: bytes that do not decode shown as \xNN."""
    if is_utf8(path):
        return path
    try:
        return os.fsencode(path).decode('utf-8', 'backslashreplace')
    except UnicodeEncodeError:  # unrepresentable: show its code points
        return path.encode('utf-8', 'backslashreplace').decode('ascii')


def to_json(path, key='path'):
    """{key: path} for a UTF-8 path; else {key: display(path), key + '_b64': its bytes}."""
    if is_utf8(path):
        return {key: path}
    return {key: display(path), key + B64_SUFFIX: base64.b64encode(to_bytes(path)).decode('ascii')}


def from_json(fields, key='path'):
    """The path that `to_json` wrote under `key` in `fields` (a dict read from JSON)."""
    encoded = fields.get(key + B64_SUFFIX)
    if encoded is None:
        return fields[key]
    try:
        return from_bytes(base64.b64decode(encoded, validate=True))
    except (binascii.Error, TypeError) as e:
        raise ValueError(f'{key}{B64_SUFFIX} is not base64: {encoded!r}') from e
