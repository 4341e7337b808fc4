"""DropDuplicates: keep one of each set of byte-identical images, the first in listing order."""

import apache_beam as beam

from pipelines.inputs import source_path
from pipelines.validate import NAMESPACE

DUPLICATES = 'duplicates'


class _KeepFirst(beam.DoFn):
    """(source sha256, [ImageMeta]) -> [first ImageMeta]; the others to DUPLICATES."""

    def __init__(self, input_base):
        self._input_base = input_base
        self._dropped = beam.metrics.Metrics.counter(NAMESPACE, 'duplicates')

    def process(self, grouped):
        digest, metas = grouped
        kept, *others = sorted(metas, key=lambda meta: meta.id)
        for meta in others:
            self._dropped.inc()
            yield beam.pvalue.TaggedOutput(
                DUPLICATES,
                {
                    'id': meta.id,
                    'path': source_path(self._input_base, meta.key),
                    'sha256': digest.hex(),
                    'duplicate_of_id': kept.id,
                    'duplicate_of_path': source_path(self._input_base, kept.key),
                },
            )
        yield [kept]


class DropDuplicates(beam.PTransform):
    """Chunks of ImageMeta -> chunks without byte-identical repeats, and the repeats."""

    def __init__(self, input_base):
        super().__init__()
        self._input_base = input_base

    def expand(self, chunks):
        return (
            chunks
            | 'KeyBySha256' >> beam.FlatMap(lambda metas: [(m.content_digest, m) for m in metas])
            | 'GroupBySha256' >> beam.GroupByKey()
            # (source sha256, [ImageMeta])
            | 'KeepFirst'
            >> beam.ParDo(_KeepFirst(self._input_base)).with_outputs(DUPLICATES, main='unique')
        )
