"""--splits-from: the splits of an earlier build, which its images keep when the dataset grows.

The earlier build is read from its records (any build: it need not have been made with this
flag), one shard at a time: each record's key (its `image/filename` relative to that build's
input, as its dataset.json names it), the digests of its bytes (`image/key/sha256`, and
`image/original_sha256` where it stores a resize) and its split. An image of this build keeps
the split of the earlier image with its key, or else of one with its content (a renamed or
moved file: its source's digest, or the digest of the bytes it stores).

They travel to the workers as sorted arrays of 64-bit hashes of keys and digests (16 bytes and
a split code per earlier image), looked up by binary search; docs/scaling.md says what that
costs at 100 million images.
"""

import hashlib

import apache_beam as beam
import numpy as np

from imageshards import dataset_json
from imageshards import file_names
from imageshards import records
from imageshards import storage
from imageshards.kinds import features
from imageshards.shard_formats import registry as shard_formats
from pipelines.core.groups import SplitConflict
from pipelines.inputs.listing import input_base

_ENTRY = np.dtype([('key', '<u8'), ('digest', '<u8'), ('stored', '<u8'), ('split', '<i4')])
_ENTRY_ID = np.dtype('<i8')


def key_hash(key) -> int:
    """64 bits of a key, for lookups (a collision only lets a new image share a split)."""
    return int.from_bytes(hashlib.blake2b(file_names.to_bytes(key), digest_size=8).digest(), 'big')


def digest_hash(digest) -> int:
    """64 bits of a sha256 digest (bytes)."""
    return int.from_bytes(digest[:8], 'big') if digest else 0


def shards_of(output_dir) -> tuple:
    """(dataset.json of the earlier build in `output_dir`, [(split index, shard path)]).

    Raises:
        ValueError: it is not a complete build.
    """
    try:
        dataset = dataset_json.load(output_dir, complete=True)
    except (FileNotFoundError, ValueError) as e:
        raise ValueError(f'--splits-from {output_dir}: {e}') from None
    shards = [
        (index, storage.join(output_dir, shard['path']))
        for index, info in enumerate(dataset['splits'].values())
        for shard in info['shards']
    ]
    return dataset, shards


def _read_shard(shard, base, shard_format):
    """(packed _ENTRY records, packed image ids) of one earlier shard (of `shard_format`)."""
    split, path = shard
    entries, ids = [], []
    for _, record in records.shard_records(path, shard_format):
        values = records.example_values(records.parse_example(record))
        name = file_names.from_bytes(values[features.FILENAME][1][0])
        key = name[len(base) + 1 :] if name.startswith(base + '/') else name
        stored = bytes.fromhex(values[features.SHA256][1][0].decode('ascii'))
        source = values.get(features.ORIGINAL_SHA256, (None, [b'']))[1][0]
        source = bytes.fromhex(source.decode('ascii')) if source else stored
        entries.append((key_hash(key), digest_hash(source), digest_hash(stored), split))
        ids.append(values[features.ID][1][0])
    yield np.array(entries, dtype=_ENTRY).tobytes(), np.array(ids, dtype=_ENTRY_ID).tobytes()


class PreviousSplits:
    """An earlier build's images: which split each is in, by key and by content."""

    def __init__(self, build, splits, inputs, parts):
        self.build = build  # its output folder
        self.splits = tuple(splits)  # its split names; a code is an index
        self.inputs = inputs  # its counts.inputs: its image ids are below it
        entries = np.frombuffer(b''.join(p for p, _ in parts), dtype=_ENTRY)
        self.ids = np.frombuffer(b''.join(i for _, i in parts), dtype=_ENTRY_ID)
        self.records = len(entries)
        self._by_key = self._sorted(entries['key'])
        self._by_source = self._sorted(entries['digest'])
        self._by_stored = self._sorted(entries['stored'])
        self._split = entries['split']

    @staticmethod
    def _sorted(hashes):
        order = np.argsort(hashes, kind='stable')
        return hashes[order], order

    @staticmethod
    def _find(table, value):
        hashes, order = table
        at = int(np.searchsorted(hashes, np.uint64(value)))
        return int(order[at]) if at < len(hashes) and hashes[at] == value else -1

    def find(self, meta) -> tuple | None:
        """(split, earlier image id) of the earlier image `meta` is: by key, else by content
        (its source's digest, or the digest of its stored bytes); None: a new image."""
        found = self._find(self._by_key, key_hash(meta.key))
        for table in (self._by_source, self._by_stored):
            for digest in (meta.content_digest, meta.sha256):
                if found < 0:
                    found = self._find(table, digest_hash(digest))
        if found < 0:
            return None
        return self.splits[self._split[found]], int(self.ids[found])

    def check(self, meta, split):
        """Raises SplitConflict where a manifest puts a kept image in another split."""
        if meta.split and meta.split != split:
            raise SplitConflict(
                f'{meta.key} was in split {split} of --splits-from {self.build}, and the '
                f"manifest's split column puts it in {meta.split}; an image never moves "
                f'between splits: remove its split cell or give the earlier split'
            )


class ReadPreviousSplits(beam.PTransform):
    """The pipeline's root -> one PreviousSplits of the build in `output_dir`."""

    def __init__(self, output_dir):
        super().__init__()
        self._output_dir = output_dir
        dataset, self._shards = shards_of(output_dir)  # in the launcher: fails before a job
        self._splits = list(dataset['splits'])
        self._inputs = dataset['counts']['inputs']
        self._base = input_base(dataset['input'])
        self._shard_format = shard_formats.of_build(dataset)

    def expand(self, root):
        return (
            root
            | 'PreviousShards' >> beam.Create(self._shards)
            | 'ReadPreviousShards'
            >> beam.FlatMap(_read_shard, base=self._base, shard_format=self._shard_format)
            # (packed entries, packed ids) of one earlier shard
            | 'CollectPrevious' >> beam.combiners.ToList()
            | 'PreviousSplits'
            >> beam.Map(lambda parts, *args: PreviousSplits(*args, parts), *self._args)
        )

    @property
    def _args(self):
        return self._output_dir, self._splits, self._inputs
