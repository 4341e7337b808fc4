"""TFRecord files of `tf.train.Example`s as inputs: TF Model Garden's `build_imagenet_data.py`
output, an earlier build, any records with the standard keys, re-sharded, re-split or validated
without writing an image to disk.

Each record is an input: its image is `image/encoded`, its label `image/class/text` (a name, or
several: a multi-label build), else `image/class/label` (an integer, named by --class-names; or
several). Its key names the file and the record (`train-00000-of-01024/000042`, zero-padded so
that keys sort in file order), and a record is a byte range of its file that any worker reads
on its own (the writer checks its framing again); a GZIP-compressed file (`.gz`) is read through
in one work item. Listing reads every record once for its labels, and holds each record's place
and labels (about 0.2 KB a record) until it knows whether the build is multi-label.

A record that is not an Example is `not_an_example`, one without `image/encoded` is
`no_image_feature`, one without a label `no_label`; where a file's framing breaks (a bad
checksum, a file cut short), the records before are kept and the rest of the file is one
`corrupt_record` rejection.
"""

import gzip

from imageshards import records
from imageshards import storage
from imageshards.shard_formats import tfrecord
from pipelines.core import sources
from pipelines.core.sources import Source
from pipelines.inputs.class_names import UnknownClass
from pipelines.inputs.entries import TFRECORD_SUFFIXES
from pipelines.inputs.entries import InputEntry

ENCODED, LABEL, TEXT = 'image/encoded', 'image/class/label', 'image/class/text'
_GZIP_MAGIC = b'\x1f\x8b'


def looks_like_tfrecord(path) -> bool:
    """Whether a file starts as a TFRecord file does: a length and its masked CRC-32C (or is a
    gzip file named as one)."""
    with storage.open_read(path) as f:
        head = f.read(12)
    if head.startswith(_GZIP_MAGIC):
        return any(suffix in path.lower() for suffix in TFRECORD_SUFFIXES)
    crc = int.from_bytes(head[8:], 'little')
    return len(head) == 12 and tfrecord.masked_crc32c(head[:8]) == crc


def record_entries(files, scan, class_names):
    """InputEntry of every record of the TFRecord `files`, file after file; sets
    `scan.multi_label` where any record has other than one label."""
    found = [(path, list(_records(path, class_names))) for path in files]
    scan.multi_label = any(
        isinstance(label, tuple) and len(label) != 1
        for _, records_of in found
        for _, _, label, _, _ in records_of
    )
    next_id = 0
    for path, records_of in found:
        name = path.rstrip('/').rsplit('/', 1)[-1]
        width = len(str(max(len(records_of) - 1, 0)))
        for index, (offset, length, label, reject, detail) in enumerate(records_of):
            how = sources.GZIP if _compressed(path) else sources.RANGE
            source = Source(path, str(index), how, offset, length, sources.EXAMPLE)
            if not scan.multi_label and isinstance(label, tuple):
                label = label[0] if label else ''
            elif scan.multi_label and not isinstance(label, tuple):
                label = (label,) if label else ()
            yield InputEntry(
                next_id,
                source.display if length else f'{path}@{offset}',
                f'{name}/{index:0{width}d}',
                label,
                reject=reject,
                detail=detail,
                size=length,
                source=source.encode() if length and not reject else '',
            )
            next_id += 1


def _compressed(path):
    with storage.open_read(path) as f:
        return f.read(2) == _GZIP_MAGIC


def _records(path, class_names):
    """(offset, framed length, label, reject, detail) of each record of a file, then one for
    the rest of a file whose framing breaks (length 0)."""
    with storage.open_read(path) as raw:
        f = gzip.GzipFile(fileobj=raw) if _compressed(path) else raw
        offset = 0
        try:
            for record in tfrecord.read_records(f, path):
                framed = tfrecord.FRAMING_BYTES + len(record)
                yield (offset, framed, *_label(record, path, offset, class_names))
                offset += framed
        except (tfrecord.CorruptRecordError, OSError, EOFError) as e:
            yield offset, 0, '', 'corrupt_record', f'{e}: the rest of {path} is not read'


def _label(record, path, offset, class_names):
    """(label or tuple of labels, reject, detail) of a record."""
    try:
        example = records.parse_example(record)
    except records.NotAnExampleError as e:
        return '', 'not_an_example', f'the record at byte {offset:,} of {path}: {e}'
    feature = example.features.feature
    if ENCODED not in feature or len(feature[ENCODED].bytes_list.value) != 1:
        return '', 'no_image_feature', f'the record at byte {offset:,} has no {ENCODED}'
    try:
        names = [value.decode('utf-8') for value in _values(feature, TEXT)]
        if not names:
            names = [class_names.name(value) for value in _values(feature, LABEL)]
    except UnicodeDecodeError:
        return '', 'no_label', f'{TEXT} of the record at byte {offset:,} is not UTF-8'
    except UnknownClass as e:
        return '', 'unknown_class', str(e)
    names = [name.strip() for name in names]
    if not names or not all(names):
        return '', 'no_label', f'the record at byte {offset:,} has no {TEXT} or {LABEL}'
    return (names[0] if len(names) == 1 else tuple(sorted(set(names)))), '', ''


def _values(feature, key):
    if key not in feature:
        return []
    kind, values = records.feature_values(feature[key])
    return values if kind in ('bytes', 'int64') else []
