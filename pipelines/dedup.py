"""DropDuplicates: keep one of each set of byte-identical images, the first in listing order."""

import apache_beam as beam

from pipelines.validate import NAMESPACE

DUPLICATES = 'duplicates'


class _KeepFirst(beam.DoFn):
    """(source sha256, [ImageMeta]) -> [first ImageMeta]; the others to DUPLICATES."""

    def __init__(self):
        self._dropped = beam.metrics.Metrics.counter(NAMESPACE, 'duplicates')

    def process(self, grouped):
        sha256, metas = grouped
        kept, *others = sorted(metas, key=lambda meta: meta.id)
        for meta in others:
            self._dropped.inc()
            yield beam.pvalue.TaggedOutput(DUPLICATES, {
                'id': meta.id, 'path': meta.path, 'sha256': sha256,
                'duplicate_of_id': kept.id, 'duplicate_of_path': kept.path})
        yield [kept]


class DropDuplicates(beam.PTransform):
    """Chunks of ImageMeta -> chunks without byte-identical repeats, and the repeats."""

    def expand(self, chunks):
        return (
            chunks
            | 'KeyBySha256' >> beam.FlatMap(lambda metas: [(m.source_sha256, m) for m in metas])
            | 'GroupBySha256' >> beam.GroupByKey()
            # (source sha256, [ImageMeta])
            | 'KeepFirst' >> beam.ParDo(_KeepFirst()).with_outputs(DUPLICATES, main='unique'))
