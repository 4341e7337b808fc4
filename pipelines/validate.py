"""ValidateImages: read and check every input once, keep metadata, reject with reasons.

Work items are chunks of listed inputs: the byte range of one line of the listing file, read
here, so that the runner moves two numbers per chunk rather than the line. A chunk's local files
are read and checked one after the other: the check is mostly Python holding the GIL, and the
local runner has a worker process per core. On `gs://`, a thread pool reads concurrently to
hide per-object latency. The metadata of a chunk's valid images leaves as one block
(pipelines/blocks.py).
"""

import concurrent.futures
import functools
import hashlib
import logging
import os
import threading
import time

import apache_beam as beam
import google.auth
import google_crc32c
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from google.auth import exceptions as auth_exceptions
from google.cloud import storage
from PIL import Image

from imageshards import features
from pipelines import blocks
from pipelines import images
from pipelines import progress
from pipelines.blocks import ImageMeta
from pipelines.inputs import is_uri
from pipelines.listing import read_work_item

_LOG = logging.getLogger(__name__)

NAMESPACE = 'imageshards'
REJECTED = 'rejected'
MISSING_LEVEL_REASON = 'missing_label_level'


def rejection(entry, reason, detail):
    """One line of rejected.jsonl."""
    return {'id': entry.id, 'path': entry.path, 'reason': reason, 'detail': detail}


def read_file(path):
    """All bytes of an input file or object.

    gs:// objects are read with a google-cloud-storage client kept per thread, in one request.
    Beam's FileSystems makes a new client for every call and fetches the object's metadata
    before its bytes: about 6 ms of CPU per object, more than decoding the image (measured
    against a GCS emulator; see docs/dataflow.md).
    """
    if path.startswith('gs://'):
        bucket, _, name = path[len('gs://') :].partition('/')
        return _gcs_client().bucket(bucket).blob(name).download_as_bytes()
    if not is_uri(path):  # Beam's FileSystems costs ~20 us per call to find the local one
        return _read_local(path)
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return f.read()


def _read_local(path):
    """A local file's bytes in as few calls as the OS allows (a third of `open().read()`'s
    cost, which goes to Python's buffered file objects)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        parts = [os.read(fd, size)]
        while len(parts[-1]) and sum(map(len, parts)) < size:  # reads stop at 2 GiB
            parts.append(os.read(fd, size - sum(map(len, parts))))
        return b''.join(parts) if len(parts) > 1 else parts[0]
    finally:
        os.close(fd)


_THREAD_STATE = threading.local()


def _gcs_client():
    """This thread's GCS client (a client's connection pool is not meant to be shared)."""
    client = getattr(_THREAD_STATE, 'gcs_client', None)
    if client is None:
        credentials, project = _gcs_credentials()
        if credentials is None:
            client = storage.Client.create_anonymous_client()
        else:
            client = storage.Client(project=project, credentials=credentials)
        _THREAD_STATE.gcs_client = client
    return client


@functools.cache
def _gcs_credentials():
    """(credentials, project) of Application Default Credentials, looked up once per process.

    On Dataflow, those of the worker service account. (None, None) where there are none: public
    data can still be read anonymously, as Beam does.
    """
    try:
        return google.auth.default()
    except auth_exceptions.DefaultCredentialsError as e:
        _LOG.warning('no Google credentials (%s); reading gs:// anonymously', e)
        return None, None


def reencoded_path(output_dir, sha256):
    """Where a `paths` build keeps the lossless copy of an image TensorFlow cannot decode as is."""
    return FileSystems.join(output_dir, 'reencoded', f'{sha256}.png')


def level_ids(entry, levels, allow_missing):
    """The label level ids of an entry, in level order; raises MissingLevel where one has no
    value, unless `allow_missing` (then its id is -1).

    Args:
        levels: [(level, {name: id})] in the build's level order.
    """
    names = [level for level, _ in levels]
    missing = [level for level in names if not entry.levels.get(level)]
    if missing and not allow_missing:
        raise MissingLevel(
            f'no value for label level {", ".join(missing)} (of {", ".join(names)}); '
            f'pass --allow-missing-levels to keep such images with id -1'
        )
    return tuple(
        ids.get(entry.levels.get(level, ''), features.MISSING_LEVEL) for level, ids in levels
    )


class MissingLevel(ValueError):
    """An input without a value for a label level."""


class _ValidateChunk(beam.DoFn):
    """Work item -> a block of its valid images' ImageMeta; rejections to the REJECTED output.

    Its arguments are those of ValidateImages.
    """

    def __init__(
        self,
        listing_path,
        label_ids,
        max_pixels,
        io_threads,
        total,
        store,
        reencode_dir=None,
        levels=(),
        allow_missing_levels=False,
    ):
        self._listing_path = listing_path
        self._label_ids = label_ids
        self._levels = levels  # [(level, {name: id})]
        self._allow_missing_levels = allow_missing_levels
        self._max_pixels = max_pixels
        self._io_threads = io_threads
        self._total = total
        self._store = store
        self._reencode_dir = reencode_dir  # set for `paths` builds
        self._pool = None
        self._listed = beam.metrics.Metrics.counter(NAMESPACE, 'listed')
        self._valid = beam.metrics.Metrics.counter(NAMESPACE, 'validated')
        self._reencoded = beam.metrics.Metrics.counter(NAMESPACE, 'reencoded')

    def setup(self):
        # Pillow refuses at open beyond twice this; our own check rejects beyond it.
        Image.MAX_IMAGE_PIXELS = self._max_pixels
        if self._io_threads > 1:
            self._pool = concurrent.futures.ThreadPoolExecutor(self._io_threads)

    def teardown(self):
        if self._pool:
            self._pool.shutdown()

    def process(self, item):
        entries = read_work_item(self._listing_path, item)
        self._listed.inc(len(entries))
        # The bytes each record will store, kept for the writer (local runner, examples).
        payloads = None if self._reencode_dir else self._store.payloads()
        valid = []
        for outcome in (self._pool.map if self._pool else map)(self._validate, entries):
            if isinstance(outcome, dict):
                beam.metrics.Metrics.counter(NAMESPACE, f'rejected_{outcome["reason"]}').inc()
                yield beam.pvalue.TaggedOutput(REJECTED, outcome)
                continue
            meta, stored = outcome
            if payloads and len(stored) <= blocks.PAYLOAD_MAX_BYTES:
                payload, offset = payloads.add(stored)
                meta = meta._replace(payload=payload, payload_offset=offset)
            valid.append(meta)
        if payloads:
            payloads.close()
        self._valid.inc(len(valid))
        progress.advance(progress.VALIDATE, len(entries))
        if valid:
            yield from self._store.put('validated', [blocks.pack(valid)])

    def _validate(self, entry):
        """(ImageMeta, the bytes its record stores) of a valid input, else its rejection."""
        if entry.reject:
            return rejection(entry, entry.reject, entry.detail)
        try:  # before reading: a rejected row costs no read
            levels = level_ids(entry, self._levels, self._allow_missing_levels)
        except MissingLevel as e:
            return rejection(entry, MISSING_LEVEL_REASON, str(e))
        try:
            data = read_file(entry.path)
        except Exception as e:  # every failure to read becomes a rejection with its cause
            reason = 'missing_file' if not _exists(entry.path) else 'read_error'
            return rejection(entry, reason, f'{type(e).__name__}: {e}')
        try:
            info, stored = images.inspect_image(data, self._max_pixels)
        except images.Rejected as e:
            return rejection(entry, e.reason, e.detail)
        source_sha256 = b''
        if info.reencoded:
            self._reencoded.inc()
            source_sha256 = hashlib.sha256(data).digest()
            if self._reencode_dir:
                _write_once(reencoded_path(self._reencode_dir, info.sha256), stored)
        meta = ImageMeta(
            entry.id,
            entry.key,
            self._label_ids[entry.label],
            entry.split,
            info.format,
            info.height,
            info.width,
            info.channels,
            bytes.fromhex(info.sha256),
            info.num_bytes,
            source_sha256,
            google_crc32c.value(data),
            info.reencoded,
            levels,
        )
        return meta, data if stored is None else stored


def _exists(path):
    try:
        return FileSystems.exists(path)
    except Exception:  # an unreachable store is not a missing file
        return True


def _write_once(path, data):
    """Content-addressed write: an existing file already holds these bytes."""
    if FileSystems.exists(path):
        return
    temporary = f'{path}.tmp-{threading.get_ident()}-{time.monotonic_ns()}'
    with FileSystems.create(temporary) as f:
        f.write(data)
    FileSystems.rename([temporary], [path])


class ValidateImages(beam.PTransform):
    """Work items -> blocks of ImageMeta (main output) and rejections (`REJECTED` output).

    Args:
        listing_path: the listing file whose byte ranges the work items are.
        label_ids: label name -> id.
        store: the BlockStore that keeps the blocks.
        reencode_dir: for `paths` builds, the output folder of lossless copies.
        levels: [(level, {name: id})] of a build with label levels, in level order.
        allow_missing_levels: an input missing a level value gets id -1 instead of being
            rejected as `missing_label_level`.

    The arguments go to `_ValidateChunk`, the DoFn that does the work.
    """

    def __init__(self, *args, **kwargs):
        super().__init__()
        self._fn = _ValidateChunk(*args, **kwargs)

    def expand(self, items):
        return items | 'Decode' >> beam.ParDo(self._fn).with_outputs(REJECTED, main='valid')
