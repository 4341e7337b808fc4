"""Records of a build -> what the input pipeline decodes: the encoded image (or its file's
bytes, in a `paths` build), the label(s), image/id and the record's position in its epoch.

Parsing is vectorized: `tf.io.parse_example` over a batch of serialized records, labels made
per batch (trainer/labels.py). `RecordParser(records)` yields one dict per record (the batch
split again); `RecordParser.batches` keeps whole batches, for a pipeline that decodes a batch
in one function call (trainer/input_pipeline.py).
"""

import tensorflow as tf

from imageshards.kinds import features
from trainer import labels as labels_lib

AUTOTUNE = tf.data.AUTOTUNE


class RecordParser:
    """Records (or (record, position) pairs) -> dicts of 'source', 'label', 'id', 'position'.

    Without `with_source`, the image (or its path) is neither parsed nor read. The label is
    the primary label's or a dict of `levels`' (trainer/labels.py).
    """

    def __init__(self, info, parse_batch, levels, with_source=True):
        self._reader = labels_lib.LabelReader(info, levels)
        self._paths = info.format == features.PATHS
        self._parse_batch = parse_batch
        self._with_source = with_source
        self._source = info.kind.payload_key
        keys = [features.ID, self._source] if with_source else [features.ID]
        self._wanted = {**self._reader.spec(), **info.kind.feature_spec(keys)}

    @property
    def reads_files(self):
        """Whether the images are files read after parsing (a `paths` build)."""
        return self._paths and self._with_source

    def _parse_some(self, serialized, positions=None):
        parsed = tf.io.parse_example(serialized, self._wanted)
        out = {'label': self._reader.labels(parsed), 'id': parsed[features.ID]}
        if self._with_source:
            out['source'] = parsed[self._source]
        if positions is not None:
            out['position'] = positions
        return out

    def _parsed(self, batched, batch_size=None):
        """Parsed batches; with `batch_size` (whole batches), every value's first dimension is
        that size, as batching decoded records would make it (Keras' metrics rely on it)."""

        def parse(serialized, positions=None):
            out = self._parse_some(serialized, positions)
            if batch_size:
                tf.nest.map_structure(lambda t: t.set_shape([batch_size, *t.shape[1:]]), out)
            return out

        with_positions = isinstance(batched.element_spec, tuple)
        return batched.map(
            (lambda s, p: parse(s, p)) if with_positions else parse,
            num_parallel_calls=AUTOTUNE,
            deterministic=True,
        )

    def __call__(self, records):
        parsed = self._parsed(records.batch(self._parse_batch)).unbatch()
        if self.reads_files:
            # The two-stage design: only paths were shuffled; images are read now, in parallel.
            parsed = parsed.map(
                lambda r: {**r, 'source': tf.io.read_file(r['source'])},
                num_parallel_calls=AUTOTUNE,
                deterministic=True,
            )
        return parsed

    def batches(self, records, batch_size, drop_remainder=True):
        """Batches of `batch_size` records, each one parsed dict of batched values (without
        `drop_remainder`, the last may hold fewer: then no batch has a static size); not for a
        build whose images are files (`reads_files`)."""
        if self.reads_files:
            raise ValueError('batches of a paths build would read their files one by one')
        batched = records.batch(batch_size, drop_remainder=drop_remainder)
        return self._parsed(batched, batch_size if drop_remainder else None)
