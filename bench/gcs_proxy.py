"""An HTTP proxy between a build and the GCS emulator that answers more like Cloud Storage: a
delay on every request and faults at given rates (standard library only).

Cloud Storage answers a request in 20 to 60 ms, and now and then with 429 Too Many Requests,
503 Service Unavailable or a connection reset; the emulator (tests/gcs_emulator.py) answers in
microseconds and never fails. Builds pointed at a proxy (`STORAGE_EMULATOR_HOST=proxy.url`)
meet both, and the proxy counts what they asked:

    with FaultProxy(emulator_url, latency=0.03, faults=[Fault(503, 0.3), Fault(RESET, 0.05)]):
        ...

Each request is read whole, held `latency` seconds, then either answered with the first fault
whose draw it meets (`Fault`: a status, or RESET, the connection closed with a TCP reset before
any answer; LOST: forwarded to the emulator first, so that the request takes effect and its
answer is lost; STALL: held a while longer, then forwarded), or forwarded to the emulator and
its answer relayed. A new client connection
costs `connect_latency` once (the TCP and TLS handshakes). Draws come from one seeded
`random.Random`; which request meets which draw depends on the order in which concurrent
requests arrive.
"""

import collections
import contextlib
import dataclasses
import http.client
import http.server
import json
import random
import re
import socket
import struct
import threading
import time
import urllib.parse

RESET = 'reset'  # the connection reset before an answer; the request never arrives
LOST = 'lost'  # the request takes effect, then its connection is reset: the answer is lost
STALL = 'stall'  # the request waits STALL_SECONDS more, then is answered as any other
STALL_SECONDS = 2.0
# Not relayed: the proxy's own connection speaks for itself (and says when and who answers).
_HOP_BY_HOP = {'connection', 'keep-alive', 'transfer-encoding', 'content-length', 'host'}
_OWN = _HOP_BY_HOP | {'date', 'server'}
_UPSTREAM_CONNECTIONS = 4  # the emulator serves one at a time; its listen backlog is 5
_REASONS = {429: 'rateLimitExceeded', 500: 'backendError', 503: 'backendError'}


@dataclasses.dataclass
class Fault:
    """Answer a share `rate` of the requests it matches with `status` (an HTTP status, RESET,
    LOST or STALL).

    Args:
        ops: the operations it applies to (`operation`'s names); None: all.
        path: a regular expression the request must contain, in its decoded path and query or
            the first KB of its body (where an upload names its object); None: any.
        times: the most requests it answers; None: no limit.
    """

    status: object
    rate: float = 1.0
    ops: frozenset = None
    path: str = None
    times: int = None
    injected: int = 0

    def matches(self, op, path):
        if self.times is not None and self.injected >= self.times:
            return False
        return (self.ops is None or op in self.ops) and (
            self.path is None or re.search(self.path, path) is not None
        )


def operation(method, path, query):
    """The kind of a JSON API request: read (an object's bytes), stat (its metadata), list,
    upload, copy, delete, batch, or other."""
    if path.startswith('/batch/'):
        return 'batch'
    if path.startswith('/upload/'):
        return 'upload'
    if path.startswith('/download/') or 'media' in query.get('alt', ()):
        return 'read'
    if '/copyTo/' in path or '/rewriteTo/' in path:
        return 'copy'
    if method == 'DELETE':
        return 'delete'
    if method == 'GET' and re.search(r'/b/[^/]+/o$', path):
        return 'list'
    if method == 'GET' and '/o/' in path:
        return 'stat'
    return 'other'


class Record(collections.Counter):
    """What the proxy saw: requests by operation and by fault, plus the timing of each request
    (`spans`: (start, end, operation, decoded path), in monotonic seconds)."""

    def __init__(self):
        super().__init__()
        self.spans = []

    def requests(self, ops=None):
        return sum(n for key, n in self.items() if key.startswith('op:') and _in(key, ops))

    def faults(self):
        return sum(n for key, n in self.items() if key.startswith('fault:'))

    def mean_in_flight(self, after=None):
        """Requests in flight on average while any was (the time they took, over the time
        during which at least one ran), of those that started `after` (monotonic seconds)."""
        spans = [span[:2] for span in self.spans if after is None or span[0] > after]
        busy, end = 0.0, None
        for start, stop in sorted(spans):
            if end is None or start > end:
                busy += stop - start
                end = stop
            elif stop > end:
                busy += stop - end
                end = stop
        return sum(stop - start for start, stop in spans) / busy if busy else 0.0


def _in(key, ops):
    return ops is None or key[len('op:') :] in ops


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'  # keep-alive, as Cloud Storage's clients expect

    def setup(self):
        super().setup()
        time.sleep(self.server.proxy.connect_latency)

    def log_message(self, *args):
        pass

    def do_any(self):
        proxy = self.server.proxy
        started = time.monotonic()
        body = self._body()
        parsed = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(parsed.path)
        op = operation(self.command, path, urllib.parse.parse_qs(parsed.query))
        time.sleep(proxy.latency)
        said = f'{path}?{urllib.parse.unquote(parsed.query)} {body[:1024].decode("latin-1")}'
        fault = proxy.draw(op, said)
        if fault == STALL:
            time.sleep(STALL_SECONDS)
        if fault in (LOST, STALL, None):
            answer = proxy.forward(self.command, self.path, self.headers, body)
        proxy.done(op, path, fault, started)  # before the client hears: it may count at once
        if fault in (RESET, LOST):
            self._reset()
        elif fault not in (STALL, None):
            self._send(*_error(fault))
        else:
            self._send(*answer)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_any

    def _body(self):
        if self.headers.get('Transfer-Encoding', '').lower() == 'chunked':
            parts = []
            while size := int(self.rfile.readline().split(b';')[0], 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            self.rfile.readline()
            return b''.join(parts)
        return self.rfile.read(int(self.headers.get('Content-Length') or 0))

    def _send(self, status, headers, body):
        self.send_response(status)
        for name, value in headers:
            if name.lower() not in _OWN:
                self.send_header(name, value)
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        if self.command != 'HEAD':
            self.wfile.write(body)

    def _reset(self):
        """Closes the connection with a TCP reset (SO_LINGER 0), as a dropped one looks."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
        self.connection.close()
        self.close_connection = True


def _error(status):
    reason = _REASONS.get(status, 'error')
    message = f'{http.HTTPStatus(status).phrase} (injected by bench/gcs_proxy.py)'
    body = {'error': {'code': status, 'message': message, 'errors': [{'reason': reason}]}}
    return status, [('Content-Type', 'application/json')], json.dumps(body).encode()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # a build opens many connections at once

    def handle_error(self, request, client_address):
        pass  # a client that drops its connection (after a reset, a retry) is no news


class FaultProxy:
    """A running proxy to `upstream` (the emulator's URL) on a free loopback port; a context
    manager. `url` is what STORAGE_EMULATOR_HOST takes; `record` what it has seen.

    Args:
        latency: seconds added to every request.
        faults: the Faults, tried in order; a request meets at most one.
        connect_latency: seconds added to each new connection (default: `latency`).
        seed: of the draws.
    """

    def __init__(self, upstream, latency=0.0, faults=(), connect_latency=None, seed=0):
        self.upstream = urllib.parse.urlsplit(upstream)
        self.latency = latency
        self.connect_latency = latency if connect_latency is None else connect_latency
        self.faults = list(faults)
        self.record = Record()
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._upstream_slots = threading.BoundedSemaphore(_UPSTREAM_CONNECTIONS)
        self._server = _Server(('127.0.0.1', 0), _Handler)
        self._server.proxy = self
        self.url = f'http://127.0.0.1:{self._server.server_address[1]}'
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def reset(self, faults=()):
        """Forgets what it has seen and sets new faults."""
        with self._lock:
            self.faults = list(faults)
            self.record = Record()

    @contextlib.contextmanager
    def faulting(self, *faults):
        """These faults for the duration of a `with` block, then none."""
        self.reset(faults)
        try:
            yield self.record
        finally:
            self.faults = []

    def draw(self, op, path):
        """The fault this request meets (its status, RESET, LOST or STALL), or None."""
        with self._lock:
            for fault in self.faults:
                if fault.matches(op, path) and self._random.random() < fault.rate:
                    fault.injected += 1
                    return fault.status
        return None

    def done(self, op, path, fault, started):
        with self._lock:
            self.record[f'op:{op}'] += 1
            if fault is not None:
                self.record[f'fault:{fault}'] += 1
            self.record.spans.append((started, time.monotonic(), op, path))

    def forward(self, method, target, headers, body):
        """(status, headers, body) of the emulator's answer to the request."""
        with self._upstream_slots:
            connection = http.client.HTTPConnection(
                self.upstream.hostname, self.upstream.port, timeout=60
            )
            try:
                sent = {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}
                connection.request(method, target, body=body, headers=sent)
                response = connection.getresponse()
                return self._relayed(response.status, response.getheaders(), response.read())
            finally:
                connection.close()

    def _relayed(self, status, headers, body):
        """An answer of the emulator with its own address replaced by the proxy's, where it
        names itself: an upload session's Location, an object's mediaLink (the clients follow
        them, and would go round the proxy)."""
        own, mine = self.upstream.netloc.encode(), urllib.parse.urlsplit(self.url).netloc.encode()
        headers = [(k, v.replace(own.decode(), mine.decode())) for k, v in headers]
        kind = dict((k.lower(), v) for k, v in headers).get('content-type', '')
        if kind.startswith(('application/json', 'multipart/')):
            body = body.replace(own, mine)
        return status, headers, body
