"""Training epochs of a random-access build: a new permutation of the whole split every epoch.

A build whose shards can be read record by record (ArrayRecord: its format's `random_access`)
needs no shard interleave and no shuffle buffer. A training epoch reads:

    the split's records as keys 0..N-1 (the shards one after another, in dataset.json's order)
    -> epoch e's order: a permutation of the keys fixed by (seed, e) alone (`epoch_order`)
    -> worker w of W: positions w, w+W, w+2W, ... of it (disjoint parts; the W workers' batches
       of one step together are one stretch of the permutation, whatever W is)
    -> from position `start` on: a resumed epoch reads nothing before its first unread record
    -> chunks of READ_CHUNK keys read in parallel, each in one Python call: keys mapped to
       (shard, position) with numpy, then read one by one (the library lets go of the GIL
       while it reads)
    -> (serialized record, its position in the epoch)

What follows is trainer/input_pipeline.py's as for any build: the same batches, parsing, decoding
and augmentation; a small split's epoch (trainer/small_splits.py) reads its part of the
permutation once more after its end, to fill its last batch. Evaluation reads the shards in
order, as for any build.

The permutation is in the spirit of Grain's IndexSampler (a fresh one per epoch from a seed), made
without Grain: an argsort of PCG64's raw stream seeded with (seed, epoch). NumPy keeps a bit
generator's stream the same across its versions (NEP 19), which it does not promise for
`Generator.permutation`, so a run resumed under another NumPy reads the same order.

Shards are opened by their format (`ShardFormat.random_reader`), at a local path (the library
reads no other): on Vertex AI, `gs://` through the Cloud Storage FUSE mount at /gcs/ (`local_path`
of imageshards/shard_formats/array_record.py).
"""

import threading

import numpy as np
import tensorflow as tf

from imageshards.shard_formats import registry as shard_formats

AUTOTUNE = tf.data.AUTOTUNE
# Records per read call: the Python work of a call (mapping keys to shards, the numpy_function's
# own) is shared by this many records (bench/epoch_shuffle.py measures it).
READ_CHUNK = 256


def epoch_order(seed, epoch, num_records) -> np.ndarray:
    """Epoch `epoch`'s order of record keys 0..num_records-1 for `seed` (a permutation, int64)."""
    entropy = [int(seed) % 2**64, int(epoch)]  # SeedSequence takes non-negative integers
    bits = np.random.PCG64(np.random.SeedSequence(entropy)).random_raw(num_records)
    return np.argsort(bits, kind='stable').astype(np.int64)


def records_per_worker(num_records, workers) -> list:
    """[records of an epoch that each of `workers` input pipelines reads]."""
    return [len(range(worker, num_records, workers)) for worker in range(workers)]


class SplitReader:
    """A split's ArrayRecord shards read by record key, for one of `workers` input pipelines.

    Readers are opened on first read and shared by tf.data's threads (the library's reader is
    thread-safe, as Grain's ArrayRecordDataSource relies on).
    """

    def __init__(self, shard_format, paths, counts, worker=0, workers=1):
        self._format = shard_format
        self._paths = list(paths)
        self._ends = np.cumsum(np.asarray(counts, np.int64))
        self._starts = self._ends - np.asarray(counts, np.int64)
        self.num_records = int(self._ends[-1]) if len(self._ends) else 0
        self.worker, self.workers = worker, workers
        self._readers = None
        self._lock = threading.Lock()

    @classmethod
    def of_split(cls, info, split, input_context=None):
        """The reader of `split` of a build (a dataset_json.Build) for this input pipeline."""
        counts = [shard['num_records'] for shard in info.split(split)['shards']]
        worker, workers = 0, 1
        if input_context:
            worker, workers = input_context.input_pipeline_id, input_context.num_input_pipelines
        return cls(info.shard_format, info.shard_paths(split), counts, worker, workers)

    @property
    def per_worker(self) -> int:
        """Records of an epoch that this input pipeline reads."""
        return records_per_worker(self.num_records, self.workers)[self.worker]

    def worker_order(self, seed, epoch) -> np.ndarray:
        """The keys this input pipeline reads in epoch `epoch`, in order."""
        return epoch_order(seed, epoch, self.num_records)[self.worker :: self.workers]

    def read(self, keys) -> np.ndarray:
        """The serialized records of `keys` (record keys of the split), in their order.

        One library read per record: a read of many stages them all, then copies them again
        into Python, out of the CPU's caches; one at a time costs less CPU per record, the
        Python call included (bench/epoch_shuffle.py, the reader alone).
        """
        readers = self._open()
        keys = np.asarray(keys, np.int64)
        shards = np.searchsorted(self._ends, keys, side='right')
        places = list(zip(shards.tolist(), (keys - self._starts[shards]).tolist()))
        records = np.empty(len(keys), dtype=object)  # bytes kept whole (no NUL-trimmed 'S')
        try:
            records[:] = [readers[shard].read([position])[0] for shard, position in places]
        except (RuntimeError, ValueError, OSError) as e:
            raise self._unreadable(places, e) from e
        return records

    def _unreadable(self, places, error):
        """A CorruptRecordError naming the first of `places` (shard, position) not read."""
        for shard, position in places:
            try:
                self._readers[shard].read([position])
            except (RuntimeError, ValueError, OSError):
                break
        return shard_formats.CorruptRecordError(
            f'{self._paths[shard]}: cannot read record {position} ({error}); check the build '
            f'with `imageshards verify`'
        )

    def _open(self) -> list:
        """The shards' readers, opened on first use."""
        with self._lock:
            if self._readers is None:
                self._readers = [self._format.random_reader(path) for path in self._paths]
        return self._readers

    def epoch_records(self, seed, epoch, start, opts) -> tf.data.Dataset:
        """(serialized record, position in the epoch) of this pipeline's part of epoch `epoch`,
        from position `start` on (both may be tensors)."""
        count = self.per_worker
        order = tf.numpy_function(
            lambda e: self.worker_order(seed, int(e)), [epoch], tf.int64, stateful=False
        )
        order.set_shape([count])

        def read(first):
            chunk = tf.numpy_function(self.read, [order[first : first + READ_CHUNK]], tf.string)
            return tf.ensure_shape(chunk, [None])

        chunks = tf.data.Dataset.range(start, count, READ_CHUNK).map(
            read, num_parallel_calls=AUTOTUNE, deterministic=opts.deterministic
        )
        return tf.data.Dataset.zip(chunks.unbatch(), tf.data.Dataset.range(start, count))
