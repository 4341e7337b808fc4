"""DropDuplicates: keep one of each set of byte-identical images, the first in listing order.

Images are grouped by the top bits of their content digest, so that byte-identical images meet
in one group, and a group holds blocks of metadata rather than one element per image.
"""

import collections
import typing

import apache_beam as beam

from imageshards import file_names
from imageshards.kinds import objects
from pipelines.core import blocks
from pipelines.core import counters
from pipelines.core.sources import display_path

DUPLICATES = 'duplicates'


def digest_bucket(digest, bucket_bits):
    """The group of images with this content digest: its top `bucket_bits` bits."""
    if not bucket_bits:
        return 0
    return int.from_bytes(digest[:8].ljust(8, b'\0'), 'big') >> (64 - bucket_bits)


class _KeyByDigestBucket(beam.DoFn):
    """Block ref -> (digest bucket, block ref of its images in that bucket) per bucket."""

    def __init__(self, store, bucket_bits):
        self._store, self._bucket_bits = store, bucket_bits

    def process(self, ref):
        buckets = collections.defaultdict(list)
        for meta in blocks.unpack(self._store.get(ref)):
            buckets[digest_bucket(meta.content_digest, self._bucket_bits)].append(meta)
        refs = self._store.put('by-digest', [blocks.pack(metas) for metas in buckets.values()])
        yield from zip(buckets, refs)


class _KeepFirst(beam.DoFn):
    """(digest bucket, [block ref]) -> a block of the first of each content; the others to
    DUPLICATES."""

    def __init__(self, input_base, store):
        self._input_base = input_base
        self._store = store
        self._dropped = counters.counter('duplicates')

    def process(self, grouped):
        _, refs = grouped
        by_digest = collections.defaultdict(list)
        for meta in self._store.metas(refs):
            by_digest[meta.content_digest].append(meta)
        kept = []
        for digest, metas in by_digest.items():
            first, *others = sorted(metas, key=lambda meta: meta.id)
            kept.append(first)
            for meta in others:
                self._dropped.inc()
                yield beam.pvalue.TaggedOutput(DUPLICATES, self._duplicate(digest, meta, first))
        yield from self._store.put('unique', [blocks.pack(kept)])

    def _duplicate(self, digest, meta, kept):
        row = {  # paths that are not UTF-8 with their bytes (imageshards/file_names.py)
            'id': meta.id,
            **file_names.to_json(display_path(self._input_base, meta.key, meta.source), 'path'),
            'sha256': digest.hex(),
            'duplicate_of_id': kept.id,
            **file_names.to_json(
                display_path(self._input_base, kept.key, kept.source), 'duplicate_of_path'
            ),
        }
        if meta.annotation:  # a build of objects: how many are dropped with the image
            lost = objects.count_objects(meta.annotation)
            if lost:
                row['annotations'] = lost
        return row


class Deduplicated(typing.NamedTuple):
    """DropDuplicates' outputs."""

    blocks: beam.PCollection  # block refs of the images kept
    duplicates: beam.PCollection  # duplicates.jsonl lines


class DropDuplicates(beam.PTransform):
    """Block refs of ImageMeta -> Deduplicated: the blocks without byte-identical repeats, and
    the repeats.

    Args:
        input_base: what image keys are relative to (for the paths of duplicates.jsonl).
        store: the BlockStore that keeps the blocks (default: inline).
        bucket_bits: top bits of the digest that group images; 2**bits groups.
    """

    def __init__(self, input_base, *, store=None, bucket_bits=0):
        super().__init__()
        self._input_base = input_base
        self._store = store or blocks.BlockStore()
        self._bucket_bits = bucket_bits

    def expand(self, refs):
        outputs = (
            refs
            | 'KeyBySha256' >> beam.ParDo(_KeyByDigestBucket(self._store, self._bucket_bits))
            | 'GroupBySha256' >> beam.GroupByKey()
            # (digest bucket, [block ref])
            | 'KeepFirst'
            >> beam.ParDo(_KeepFirst(self._input_base, self._store)).with_outputs(
                DUPLICATES, main='unique'
            )
        )
        return Deduplicated(outputs.unique, outputs[DUPLICATES])
