"""A JSON stream's sizes bounded as it is read: what a streaming parser is given of an untrusted
file (a COCO annotation file, pipelines/inputs/coco.py).

ijson streams a file's items, but builds each string, number and item whole before anything
sees it: a 5 GB string in a 5 GB file would be held whole, and a nesting a million deep kept as
a million open containers. `Guarded` passes the bytes on and checks each chunk first, with NumPy
over the whole chunk (a few milliseconds a megabyte): the longest string, the longest token
outside strings (a number, `true`, ...), and the nesting depth, each against its limit, with
what it needs carried from chunk to chunk. A file past a limit stops with one line that says
which and where; the parser then never sees those bytes. Whether the JSON is valid is still the
parser's to say.

A quote ends a string unless an odd run of backslashes comes before it. Outside strings only
the parser decides what is valid, so a backslash there (invalid JSON) counts as it would inside.

Where the parser finds the JSON invalid, `syntax_error` says so in one line, with the byte:
yajl (ijson's parser) says where in the bytes it was last given, by an excerpt of them around
that place, which is found in the chunk `Guarded` last gave it (where the excerpt is found at
several places, the line gives the chunk's bytes instead).
"""

import numpy as np

MAX_STRING_BYTES = 16 << 20  # a compressed RLE of a large mask is some 100 KB
MAX_TOKEN_BYTES = 100  # a number or literal: 17 significant digits and an exponent need 25
MAX_DEPTH = 64  # a COCO file nests 5 deep: {annotations: [{segmentation: [[x, y, ...]]}]}
BLOCK_BYTES = 1 << 20  # read and checked at once (a parser asks for 64 KB at a time)
_QUOTE, _BACKSLASH = ord('"'), ord('\\')
_OPENS, _CLOSES = b'[{', b']}'
_BREAKS = b',:[]{}"'  # and whitespace: what ends a number or literal


class Guarded:
    """A binary stream (`read(n)`) of JSON `f` whose sizes are checked as they are read; a
    ValueError names `where` and the first limit passed."""

    def __init__(self, f, where):
        self._f, self._where = f, where
        self._ready, self._at = b'', 0  # checked bytes not yet read
        self._offset = 0  # of the next chunk in the stream
        self._in_string = False
        self._backslashes = 0  # ending the last chunk, inside a string
        self._string = 0  # bytes of the string open at the last chunk's end
        self._token = 0  # bytes of the token open at the last chunk's end
        self._depth = 0
        self._given = (0, b'')  # (where in the stream, the bytes) of the last read

    def read(self, size=-1):
        if size is None or size < 0:
            return b''.join(iter(lambda: self.read(BLOCK_BYTES), b''))
        if self._at == len(self._ready):
            self._ready, self._at = self._f.read(max(size, BLOCK_BYTES)), 0
            if self._ready:
                self._check(np.frombuffer(self._ready, np.uint8))
                self._offset += len(self._ready)
        data = self._ready[self._at : self._at + size]
        self._given = (self._offset - len(self._ready) + self._at, data)
        self._at += len(data)
        return data

    def syntax_error(self, error) -> str:
        """One line of the parser's `error` (an ijson.JSONError raised reading this stream):
        the file, the byte where the JSON is invalid, and what yajl says is wrong there."""
        message = error.args[0] if error.args else str(error)
        if isinstance(message, str):  # bytes where its excerpt cuts a UTF-8 character
            message = message.encode('utf-8', 'surrogateescape')
        lines = message.split(b'\n')
        what = lines[0].decode('utf-8', 'replace')[:200]
        start, data = self._given
        excerpt = len(lines) > 2 and b'(right here)' in lines[2]
        found = _excerpt_offsets(data, lines[1]) if excerpt else []
        if not data:
            where = f'at its end (byte {start:,})'
        elif len(found) == 1:
            where = f'near byte {start + found[0]:,}'
        else:
            where = f'in bytes {start:,} to {start + len(data):,}'
        return f'{self._where} is not valid JSON {where}: {what}'

    def _check(self, chunk):
        quotes = self._unescaped_quotes(chunk)
        self._check_strings(chunk, quotes)
        self._check_tokens(chunk, quotes)
        self._check_nesting(chunk, quotes)
        self._in_string ^= bool(len(quotes) % 2)

    def _outside(self, positions, quotes):
        """Whether each of `positions` (none of them a quote) lies outside strings: an even
        number of quotes before it, counting the string open at the chunk's start."""
        return (np.searchsorted(quotes, positions) + self._in_string) % 2 == 0

    def _check_nesting(self, chunk, quotes):
        """The depth at each bracket outside strings, from the last chunk's."""
        brackets = np.flatnonzero(_any_of(chunk, _OPENS + _CLOSES))
        brackets = brackets[self._outside(brackets, quotes)]
        steps = np.where(_any_of(chunk[brackets], _OPENS), 1, -1)
        depth = self._depth + np.cumsum(steps)
        if len(depth) and depth.max() > MAX_DEPTH:
            self._refuse(
                f'nests deeper than {MAX_DEPTH}', int(brackets[np.argmax(depth > MAX_DEPTH)])
            )
        self._depth = int(depth[-1]) if len(depth) else self._depth

    def _unescaped_quotes(self, chunk):
        """Positions of the chunk's quotes that open or close a string; sets the backslashes
        that end the chunk (a quote after them in the next chunk may be escaped)."""
        quotes = np.flatnonzero(chunk == _QUOTE)
        before = np.zeros(len(quotes), bool)
        before[quotes > 0] = chunk[quotes[quotes > 0] - 1] == _BACKSLASH
        escaped = np.zeros(len(quotes), bool)
        for i in np.flatnonzero(before | (quotes == 0)):  # rare: a backslash, or a chunk's edge
            escaped[i] = self._run_of_backslashes(chunk, int(quotes[i])) % 2 == 1
        tail = len(chunk) - 1
        run = 0
        while tail >= 0 and chunk[tail] == _BACKSLASH:
            run, tail = run + 1, tail - 1
        self._backslashes = run + (self._backslashes if tail < 0 else 0)
        return quotes[~escaped]

    def _run_of_backslashes(self, chunk, at):
        run = 0
        while at - run - 1 >= 0 and chunk[at - run - 1] == _BACKSLASH:
            run += 1
        return run + (self._backslashes if at - run == 0 else 0)

    def _check_strings(self, chunk, quotes):
        """The longest string the chunk holds or ends (the one open at the last chunk's end
        carried on), and the bytes of the one it leaves open."""
        carried = self._in_string  # the first string began in an earlier chunk
        edges = np.concatenate([[-1], quotes]) if carried else quotes
        opened, closed = edges[0::2].astype(np.int64), edges[1::2].astype(np.int64)
        lengths = closed - opened[: len(closed)] - 1  # the bytes between the quotes
        if carried and len(lengths):
            lengths[0] += self._string
        if len(opened) > len(closed):  # a string still open at the chunk's end
            before = self._string if carried and len(opened) == 1 else 0
            self._string = before + len(chunk) - int(opened[-1]) - 1
            lengths = np.append(lengths, self._string)
        else:
            self._string = 0
        if len(lengths) and lengths.max() > MAX_STRING_BYTES:
            at = max(0, int(opened[int(np.argmax(lengths))]))
            self._refuse(f'a string of more than {MAX_STRING_BYTES:,} bytes', at)

    def _check_tokens(self, chunk, quotes):
        """The longest run of bytes outside strings between two that end a token, the one open
        at the last chunk's end carried on. Runs are measured over all bytes (a quote ends
        one, so a run lies wholly inside a string or wholly outside), and only where one is
        over the limit is it asked where they lie."""
        breaks = np.flatnonzero((chunk <= 32) | _any_of(chunk, _BREAKS))
        carried = 0 if self._in_string else self._token
        if not len(breaks):  # one run, inside a string or not, as the chunk began
            self._token = 0 if self._in_string else carried + len(chunk)
            if self._token > MAX_TOKEN_BYTES:
                self._refuse(f'a number or literal of more than {MAX_TOKEN_BYTES} bytes', 0)
            return
        inner = int(np.diff(breaks).max()) - 1 if len(breaks) > 1 else 0
        if max(int(breaks[0]) + carried, inner) > MAX_TOKEN_BYTES:
            self._long_tokens(breaks, quotes, carried)
        last = int(breaks[-1]) + 1
        outside = last < len(chunk) and bool(self._outside(np.array([last]), quotes)[0])
        self._token = len(chunk) - last if outside else 0
        if self._token > MAX_TOKEN_BYTES:
            self._refuse(f'a number or literal of more than {MAX_TOKEN_BYTES} bytes', last)

    def _long_tokens(self, breaks, quotes, carried):
        """Refuses the first run over the limit that lies outside strings (the runs inside
        them are the strings' business)."""
        starts = np.concatenate([[0], breaks[:-1] + 1])
        runs = breaks - starts
        runs[0] += carried
        long = np.flatnonzero(runs > MAX_TOKEN_BYTES)
        long = long[self._outside(starts[long], quotes)]
        if len(long):
            at = int(starts[long[0]])
            self._refuse(f'a number or literal of more than {MAX_TOKEN_BYTES} bytes', at)

    def _refuse(self, what, at):
        raise ValueError(
            f'{self._where}: {what} near byte {self._offset + at:,}: not a file this reads '
            f'(annotation files are untrusted input, bounded as they stream)'
        )


def _excerpt_offsets(data, excerpt):
    """The offsets `at` in `data` that yajl would show as `excerpt`: 40 - at spaces and
    data[:at + 30] where `at` < 30, else 10 spaces and data[at - 30 : at + 30], its line
    breaks shown as spaces."""
    shown = data.replace(b'\n', b' ').replace(b'\r', b' ')
    found = [at for at in range(min(30, len(shown) + 1)) if excerpt == _excerpt(shown, at)]
    if not excerpt.startswith(b' ' * 10):
        return found
    body = excerpt[10:]
    start = shown.find(body)
    while start >= 0:  # the excerpt's bytes start 30 before the place (or end `data`)
        at = start + 30
        if at <= len(shown) and excerpt == _excerpt(shown, at):
            found.append(at)
        start = shown.find(body, start + 1)
    return found


def _excerpt(shown, at):
    if at < 30:
        return b' ' * (40 - at) + shown[: at + 30]
    return b' ' * 10 + shown[at - 30 : at + 30]


def _any_of(values, chars):
    """Whether each of `values` (uint8) is one of the bytes `chars`."""
    found = values == chars[0]
    for char in chars[1:]:
        found |= values == char
    return found
