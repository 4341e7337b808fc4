"""Where an input's bytes are: a file of its own, or a part of a file that holds many inputs (a
member of a tar or zip archive, a row of an array, a record of a TFRecord file), and what makes
an input small.

A listed input carries its stable key (its path relative to the listing's base: the input root,
a glob's base or a manifest's folder; for an input inside a container, its path as if the
container were extracted), which seeds the shuffle. An input with a file of its own is found
from the key and the base (`source_path`). One inside a container carries a `Source` as well,
written as text in the listing and the image metadata (`Source.encode`): the container, the
member's name for people (`container!member`, the form a manifest may name), how its bytes are
reached and what they hold. Validation, deduplication and the writer all read an input's bytes
through one `Reader` (pipelines/core/reading.py), so that a new form of input is a new way of
listing it (pipelines/inputs/) and, at most, a new `how` or `content` here.

How a source's bytes are reached (`how`):
    RANGE       bytes `offset` to `offset + length` of the container: an uncompressed tar's
                member, a stored zip member, a row of an uncompressed array, a TFRecord record
    ZIP         a zip member (`zip_entry`: where its local header is, its sizes and CRC-32),
                inflated if deflated: every member of a zip is read on its own
    GZIP        bytes `offset` to `offset + length` of the gzip-decompressed container (a
                .tar.gz, a .gz IDX file): SEQUENTIAL, read by going through the file
    ZIP_STREAM  bytes `offset` to `offset + length` of a deflated zip member (an array of a
                compressed .npz): SEQUENTIAL
What the bytes are (`content`): IMAGE, encoded image bytes as they are; PIXELS, a uint8 array
row of `shape` (height, width, channels), stored as a lossless PNG; EXAMPLE, a framed TFRecord
record of a `tf.train.Example`, whose `image/encoded` is the image.

A sequential source cannot be read on its own without decompressing its container from the
start: its container's inputs are validated in one work item, in the container's order, and on
the local runner their bytes are kept for the writer (pipelines/local/spill.py).
"""

import typing

from imageshards import storage

# Inputs of at most this many bytes are small: the local runner keeps their bytes beside the
# build until the end (pipelines/local/spill.py), which the free-space check counts.
SMALL_INPUT_BYTES = 16 << 10

RANGE, ZIP, GZIP, ZIP_STREAM = 'range', 'zip', 'gzip', 'zip-stream'
IMAGE, PIXELS, EXAMPLE = 'image', 'pixels', 'example'
SEQUENTIAL = frozenset([GZIP, ZIP_STREAM])
MEMBER_SEPARATOR = '!'  # `archive.tar!class/img.jpg`: a member, as people and manifests name it


def source_path(base: str, key: str) -> str:
    """The path or URI of the input with this stable key (see `InputEntry.key`)."""
    if key[:1] == '/' or storage.is_uri(key):  # absolute already
        return key
    if base and base[-1] != '/' and '://' not in base:  # a local folder: os.path.join's result
        return f'{base}/{key}'
    return storage.join(base, key)


class ZipEntry(typing.NamedTuple):
    """What the central directory of a zip says of a member."""

    header_offset: int  # where its local header is
    compressed_size: int
    size: int
    crc32: int
    method: int  # 0 stored, 8 deflated


class Source(typing.NamedTuple):
    """Where the bytes of an input inside a container are (see the module's docstring)."""

    container: str  # the file that holds them: an absolute local path or a URI
    member: str  # the input's name inside it, for people
    how: str = RANGE
    offset: int = 0
    length: int = 0  # bytes of the input as the container holds them (PIXELS: raw pixels)
    content: str = IMAGE
    shape: tuple = ()  # PIXELS: (height, width, channels)
    zip_entry: tuple = ()  # ZIP, ZIP_STREAM: the member's ZipEntry

    @property
    def display(self) -> str:
        """`container!member`: what records, rejected.jsonl and messages name."""
        return f'{self.container}{MEMBER_SEPARATOR}{self.member}'

    @property
    def sequential(self) -> bool:
        return self.how in SEQUENTIAL

    @property
    def stream(self) -> tuple:
        """What a sequential source's stream is: its container (and zip member)."""
        return self.container, self.how, tuple(self.zip_entry)

    def encode(self) -> str:
        """The source as one line of text (`decode` reads it): fields, then the container's
        length, then `container!member` (either may hold any character)."""
        numbers = ','.join(
            [
                self.how,
                self.content,
                str(self.offset),
                str(self.length),
                'x'.join(map(str, self.shape)),
                'x'.join(map(str, self.zip_entry)),
            ]
        )
        return f'{numbers}:{len(self.container)}:{self.display}'

    @classmethod
    def decode(cls, text) -> 'Source':
        numbers, size, rest = text.split(':', 2)
        how, content, offset, length, shape, zip_entry = numbers.split(',')
        size = int(size)
        return cls(
            rest[:size],
            rest[size + 1 :],
            how,
            int(offset),
            int(length),
            content,
            tuple(int(n) for n in shape.split('x')) if shape else (),
            ZipEntry(*(int(n) for n in zip_entry.split('x'))) if zip_entry else (),
        )


def display_path(base: str, key: str, source: str) -> str:
    """What names an input for people: its file, or `container!member` (`source`: its
    encoded Source, '' for an input with a file of its own)."""
    return Source.decode(source).display if source else source_path(base, key)


def is_sequential(source: str) -> bool:
    """Whether an encoded Source is sequential ('' is a file: not)."""
    return bool(source) and source.split(',', 1)[0] in SEQUENTIAL


def stream_of(source: str) -> tuple | None:
    """The stream an encoded sequential Source is read from, else None."""
    if not is_sequential(source):
        return None
    return Source.decode(source).stream
