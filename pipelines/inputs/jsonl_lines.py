"""The lines of an untrusted JSONL file, read a block at a time, each bounded as it is read.

Reading a file a line at a time (`for line in f`, `readline`) holds a line whole before its
length is known: a manifest of one 5 GB line is held whole before anything can refuse it. So
`lines` reads READ_BYTES at a time and refuses a line over MAX_LINE_BYTES (16 MiB, json_guard's
bound on a COCO file's strings; a row is some KB) as soon as that many of its bytes are read,
in one line naming the file and the line. The manifests' JSONL (manifests.py, with columns
chosen by name manifest_columns.py) and Vertex AI's import files (vertex.py, vertex_objects.py)
are all read so.
"""

from pipelines.inputs import json_guard

MAX_LINE_BYTES = json_guard.MAX_STRING_BYTES  # a JSONL line: longer is refused, unread
READ_BYTES = 1 << 20  # read at once, however long the lines


def lines(f, where):
    """(number, line) of each line of the stream `f`, its line break kept, read READ_BYTES at
    a time: a line longer than MAX_LINE_BYTES is refused (ValueError, naming `where` and the
    line) as soon as that many of it are read, never held whole.

    Lines are those of iterating a binary file: they end at b'\\n' only. `f` is binary as
    storage.open_read opens files (local, gs://, decompressed); a text stream gives str lines,
    its bound counted in characters (a character is 1 to 4 bytes, so still bounded).
    """
    block = f.read(READ_BYTES)
    newline = b'\n' if isinstance(block, bytes) else '\n'
    number, pending = 0, block[:0]
    while block:
        *ended, pending = (pending + block).split(newline)
        for line in ended:
            number += 1
            _bounded(line, where, number)
            yield number, line + newline
        _bounded(pending, where, number + 1)
        block = f.read(READ_BYTES)
    if pending:
        yield number + 1, pending


def _bounded(line, where, number):
    if len(line) > MAX_LINE_BYTES:
        unit = 'bytes' if isinstance(line, bytes) else 'characters'
        raise ValueError(
            f'{where}: line {number} is longer than {MAX_LINE_BYTES:,} {unit}: not a row this '
            'reads (input files are untrusted, read a block at a time)'
        )
