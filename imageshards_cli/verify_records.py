"""The checks `imageshards verify` runs on every record: keys and kinds, label and level ids
against their texts and dataset.json, ids seen once, and (in batches, with TensorFlow) each
image's sha256 and decoded size."""

import concurrent.futures
import hashlib
import typing

from imageshards import file_names
from imageshards import records
from imageshards import storage
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards_cli.verify_objects import ObjectChecker
from pipelines.validation.resize import target_size


class ImageJob(typing.NamedTuple):
    """What the image check needs of one record."""

    offset: str  # where the record is, in its format's words ('byte 1234')
    payload: object  # the encoded bytes, or for a `paths` build the path (str) to read them from
    height: int
    width: int
    sha256: str


class Checked(typing.NamedTuple):
    """What RecordChecker.check found of one record."""

    label: object  # its label's name (a tuple of names in a multi-label build), None if unclear
    job: object  # the ImageJob of its image, None where the record lacks what it needs
    levels: dict  # {level: name, '' if missing} (tuples of names in a multi-label build)
    format: object  # its image/format (str), None where missing
    record_id: object = None  # its image/id (int), None where missing
    group: object = None  # its image/group (str), None where missing or not in the schema
    objects: object = None  # a build of objects: (objects, Counter of their class names)


class RecordChecker:
    """Checks each record's keys, label and id; keeps what the image and count checks need."""

    def __init__(self, dataset, problems):
        kind = kinds.of_build(dataset)
        self._levels = dataset.get('label_levels') or {}
        self._multi = kind.multi_label
        self._resize = dataset.get('resize')
        self._schema = kind.schema
        self._payload_key = kind.payload_key
        self._labels = dataset['labels']
        self._problems = problems
        # One bit per input: ids are positions in the listing, below counts.inputs.
        self._num_ids = max(dataset['counts']['inputs'], 0)
        self._seen = bytearray((self._num_ids + 7) // 8)
        self._objects = ObjectChecker(dataset, problems) if kind.has_objects else None

    def check(self, where, offset, record):
        """The Checked of one record."""
        try:
            example = records.parse_example(record)
        except records.NotAnExampleError as e:
            self._problems.add(where, str(e), offset)
            return Checked(None, None, {}, None)  # nothing of it can be told
        values = self._scalars(where, offset, records.example_values(example))
        if features.ID in values:
            self._check_id(where, offset, values[features.ID])
        if self._resize:
            self._check_resized(where, offset, values)
        needed = (features.HEIGHT, features.WIDTH, features.SHA256, self._payload_key)
        job = None
        if all(key in values for key in needed):
            payload = values[self._payload_key]
            if self._payload_key == features.PATH:  # its bytes, as on disk (file_names.py)
                payload = file_names.from_bytes(payload)
            job = ImageJob(
                offset,
                payload,
                values[features.HEIGHT],
                values[features.WIDTH],
                values[features.SHA256].decode('ascii', 'replace'),
            )
        levels = {
            level: self._level_name(where, offset, values, level, names)
            for level, names in self._levels.items()
        }
        stored = values.get(features.FORMAT)
        stored = stored.decode('utf-8', 'replace') if stored is not None else None
        group = values.get(features.GROUP)
        group = group.decode('utf-8', 'surrogateescape') if group is not None else None
        label = self._label_name(where, offset, values)
        objects = self._objects.check(where, offset, values) if self._objects else None
        return Checked(label, job, levels, stored, values.get(features.ID), group, objects)

    def _level_name(self, where, offset, values, level, names):
        """The record's name in `level` ('' where missing), or None if it cannot be told."""
        level_id = values.get(features.level_label(level))
        text = values.get(features.level_text(level))
        if level_id is None or text is None:
            return None
        if self._multi:
            what = f'{features.level_label(level)} (label_levels.{level})'
            return self._names(where, offset, level_id, text, names, what)
        text = text.decode('utf-8', 'replace')
        if level_id == features.MISSING_LEVEL and not text:
            return ''
        if not 0 <= level_id < len(names) or names[level_id] != text:
            self._problems.add(
                where,
                f'{features.level_label(level)} {level_id} with text {text!r} does not match '
                f'dataset.json label_levels.{level}',
                offset,
            )
            return None
        return text

    def _scalars(self, where, offset, values):
        """{key: value} of the schema's keys that hold exactly one value of the right kind, or
        any number of them for a list kind (the value: a tuple)."""
        for key in sorted(set(values) - set(self._schema)):
            self._problems.add(where, f'unexpected feature {key}', offset)
        scalars = {}
        for key, kind in self._schema.items():
            found, items = values.get(key, (None, []))
            listed = kind.endswith(features.LIST)
            if key not in values:
                self._problems.add(where, f'missing feature {key}', offset)
            elif listed and found == kind[: -len(features.LIST)]:
                scalars[key] = tuple(items)
            elif found != kind or len(items) != 1:
                self._problems.add(
                    where, f'{key} holds {len(items)} {found} values, not one {kind}', offset
                )
            else:
                scalars[key] = items[0]
        return scalars

    def _names(self, where, offset, ids, texts, names, what):
        """The names of a multi-label record's ids (a tuple), checked: sorted, distinct, in
        range, each with its text; None where they cannot be told."""
        texts = tuple(text.decode('utf-8', 'replace') for text in texts)
        problem = ''
        if list(ids) != sorted(set(ids)):
            problem = f'{what} ids {list(ids)} are not sorted and distinct'
        elif not all(0 <= i < len(names) for i in ids):
            problem = f'{what} ids {list(ids)} are not all indices of its names'
        elif len(texts) != len(ids) or any(names[i] != t for i, t in zip(ids, texts)):
            problem = f'{what} ids {list(ids)} do not name their texts {list(texts)}'
        if problem:
            self._problems.add(where, problem, offset)
            return None
        return texts

    def _label_name(self, where, offset, values):
        label, text = values.get(features.LABEL), values.get(features.LABEL_TEXT)
        if label is None or text is None:
            return None
        if self._multi:
            return self._names(where, offset, label, text, self._labels, 'image/class/label')
        text = text.decode('utf-8', 'replace')
        if not 0 <= label < len(self._labels):
            self._problems.add(
                where, f'image/class/label {label} is not an index of dataset.json labels', offset
            )
            return text
        if self._labels[label] != text:
            self._problems.add(
                where,
                f'image/class/label {label} is {self._labels[label]!r} in dataset.json but '
                f'image/class/text is {text!r}',
                offset,
            )
        return self._labels[label]

    def _check_resized(self, where, offset, values):
        """A resizing build's record: stored at the size --resize-shorter-side makes of its
        original (or as the original, where that is not larger); a resize is a new file."""
        keys = (features.HEIGHT, features.WIDTH, features.ORIGINAL_HEIGHT, features.ORIGINAL_WIDTH)
        if not all(key in values for key in keys):
            return
        height, width, original_height, original_width = (values[key] for key in keys)
        side = self._resize['shorter_side']
        wanted = target_size(original_width, original_height, side)
        resized = wanted is not None
        wanted = wanted or (original_width, original_height)
        if (width, height) != wanted:
            self._problems.add(
                where,
                f'image is {height}x{width} (height x width), but --resize-shorter-side {side} '
                f'makes {wanted[1]}x{wanted[0]} of its original {original_height}x{original_width}',
                offset,
            )
        elif resized and values.get(features.ORIGINAL_SHA256) == values.get(features.SHA256):
            self._problems.add(
                where,
                'image/original_sha256 is image/key/sha256, but the image was resized',
                offset,
            )

    def _check_id(self, where, offset, record_id):
        if not 0 <= record_id < self._num_ids:
            self._problems.add(
                where, f'image/id {record_id} is outside [0, counts.inputs={self._num_ids})', offset
            )
            return
        byte, bit = divmod(record_id, 8)
        if self._seen[byte] >> bit & 1:
            self._problems.add(
                where, f'image/id {record_id} occurs again (an earlier record has it)', offset
            )
        self._seen[byte] |= 1 << bit


class ImageChecker:
    """Checks a batch of images: sha256 of their bytes, and decoded size with TensorFlow."""

    def __init__(self, io_threads):
        import tensorflow as tf  # pylint: disable=import-outside-toplevel

        self._tf = tf
        self._io = concurrent.futures.ThreadPoolExecutor(io_threads)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def decoded_shapes(encoded):
            def shape(data):
                image = tf.io.decode_image(data, channels=3, expand_animations=False)
                return tf.shape(image)[:2]

            # In a graph, map_fn decodes in parallel on TensorFlow's threads, without the GIL.
            return tf.map_fn(shape, encoded, fn_output_signature=tf.int32, parallel_iterations=16)

        self._decoded_shapes = decoded_shapes

    def close(self):
        self._io.shutdown()

    def check(self, shard_batch):
        """Checks one (where, [ImageJob]) batch: returns ([(where, offset, message)], decoded)."""
        where, jobs = shard_batch
        # Only a `paths` build has files to read; their latency (on gs://) is hidden by threads.
        in_records = isinstance(jobs[0].payload, bytes)
        reads = map(_image_bytes, jobs) if in_records else self._io.map(_image_bytes, jobs)
        found, readable = [], []
        for job, data in zip(jobs, reads):
            if isinstance(data, Exception):
                found.append((where, job.offset, f'cannot read image/path {job.payload}: {data}'))
                continue
            if hashlib.sha256(data).hexdigest() != job.sha256:
                found.append((where, job.offset, 'image/key/sha256 does not match the image bytes'))
            readable.append((job, data))
        shapes = self._shapes([data for _, data in readable])
        for (job, _), shape in zip(readable, shapes):
            if isinstance(shape, str):
                found.append((where, job.offset, f'image does not decode: {shape}'))
            elif shape != (job.height, job.width):
                found.append(
                    (
                        where,
                        job.offset,
                        f'image decodes to {shape[0]}x{shape[1]} (height x width), '
                        f'but the record says {job.height}x{job.width}',
                    )
                )
        return found, len(shapes)

    def _shapes(self, encoded):
        """[(height, width) or error text] of each encoded image."""
        if not encoded:
            return []
        try:
            shapes = self._decoded_shapes(self._tf.constant(encoded)).numpy().tolist()
            return [tuple(shape) for shape in shapes]
        except self._tf.errors.OpError:
            # One undecodable image fails the whole batch; decode one at a time to say which.
            return [self._shape(data) for data in encoded]

    def _shape(self, data):
        try:
            return tuple(self._decoded_shapes(self._tf.constant([data])).numpy()[0].tolist())
        except self._tf.errors.OpError as e:
            return e.message.strip().split('\n')[0]


def _image_bytes(job):
    """The bytes of a record's image, or the exception that reading them raised."""
    if isinstance(job.payload, bytes):
        return job.payload
    try:
        return storage.read(job.payload)
    except OSError as e:
        return e
