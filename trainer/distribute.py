"""Where training runs: the cluster of TF_CONFIG, the distribution strategy, precision, devices,
and the folders each worker writes to.

Only the chief writes the model, the logs and metrics.json. Under MultiWorkerMirroredStrategy
every worker saves checkpoints and exports the model, since saving may run collective ops that
need all of them (TensorFlow's multi-worker guide); the others write to a local throw-away
folder, removed at the end, and all of them resume from the chief's checkpoints.
"""

import contextlib
import json
import logging
import os
import shutil
import tempfile

import keras
import tensorflow as tf

_LOG = logging.getLogger(__name__)


def cluster_spec():
    """(task_type, task_index, number of workers) from TF_CONFIG; ('chief', 0, 1) without it."""
    tf_config = json.loads(os.environ.get('TF_CONFIG') or '{}')
    cluster = tf_config.get('cluster', {})
    task = tf_config.get('task', {})
    workers = len(cluster.get('chief', [])) + len(cluster.get('worker', []))
    return task.get('type', 'chief'), int(task.get('index', 0)), max(workers, 1)


def is_chief():
    task_type, task_index, _ = cluster_spec()
    return task_type == 'chief' or (
        task_type == 'worker' and task_index == 0 and 'chief' not in _cluster_roles()
    )


def _cluster_roles():
    return json.loads(os.environ.get('TF_CONFIG') or '{}').get('cluster', {})


class KerasMultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """MultiWorkerMirroredStrategy with a `reduce` that Keras 3's fit() and evaluate() can use.

    Keras 3 (3.15 here) reduces in two ways that MultiWorkerMirroredStrategy rejects
    (keras-team/keras#20585), so that fit() fails before its first step: the first (images,
    labels) batch of every fit and evaluate, a nest, to learn its shapes (and no collective
    reduces uint8 images); and each step's scalar metrics with axis=0. This reduces a nest
    part by part, as MirroredStrategy does, integers other than int32/int64 as float32, and
    scalars across replicas only.
    """

    def reduce(self, reduce_op, value, axis):
        return tf.nest.map_structure(lambda part: self._reduce_one(reduce_op, part, axis), value)

    def _reduce_one(self, reduce_op, value, axis):
        local = self.experimental_local_results(value)[0]
        if local.shape.rank == 0:
            axis = None
        if local.dtype.is_floating or local.dtype in (tf.int32, tf.int64):
            return super().reduce(reduce_op, value, axis)
        return tf.cast(super().reduce(reduce_op, self._as_float32(value), axis), local.dtype)

    @tf.function
    def _as_float32(self, value):
        # In a tf.function: run() outside one warns of its eager overhead every time.
        return self.run(tf.cast, args=(value, tf.float32))


def choose_strategy():
    """MultiWorkerMirrored for several workers, Mirrored for several GPUs, else the default."""
    _, _, workers = cluster_spec()
    if workers > 1:
        return KerasMultiWorkerMirroredStrategy()
    if len(tf.config.list_physical_devices('GPU')) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def set_precision(mode):
    """Sets Keras' global policy for --mixed-precision `mode`; returns its name.

    on: mixed_float16; auto: that where a GPU is present, else float32; bfloat16: as auto where
    a GPU is present (every GPU with tensor cores computes float16, only newer ones bfloat16),
    else mixed_bfloat16 where the CPU computes bfloat16 itself (AVX512-BF16 or AMX: a training
    step of the compact segmenter 0.26 s against 0.32 s in float32 on this project's 2-core
    machine, bench/RESULTS.md, "The segmenter's loss at 1/4"), else float32, logged (a CPU
    without them emulates bfloat16, slower than float32); off: float32."""
    gpu = bool(tf.config.list_physical_devices('GPU'))
    policy = 'float32'
    if mode == 'on' or (mode in ('auto', 'bfloat16') and gpu):
        policy = 'mixed_float16'
    elif mode == 'bfloat16' and cpu_computes_bfloat16():
        policy = 'mixed_bfloat16'
    elif mode == 'bfloat16':
        _LOG.info('--mixed-precision bfloat16: this CPU has no AVX512-BF16 or AMX: float32')
    keras.mixed_precision.set_global_policy(policy)
    return policy


def cpu_computes_bfloat16(cpuinfo='/proc/cpuinfo') -> bool:
    """Whether the CPU's flags (Linux) name an instruction set that computes bfloat16."""
    try:
        with open(cpuinfo, encoding='utf-8') as f:
            flags = next((line for line in f if line.startswith('flags')), '')
    except OSError:
        return False
    return bool({'avx512_bf16', 'amx_bf16'} & set(flags.split()))


def wait_for_all(strategy):
    """Returns once every worker has called it (at once under a single worker).

    A run whose workers end with work of their own, outside collectives (a detector's test
    split scored by pycocotools on each worker, trainer/objects_train.py), ends them unevenly: a
    worker that exits while the chief is still at work is reported by the chief's coordination
    service as crashed, and a collective after that (a save) would fail. One all-reduce, which
    no worker leaves before all have joined it, keeps them together to the end.
    """
    if cluster_spec()[2] > 1:
        strategy.reduce(tf.distribute.ReduceOp.SUM, tf.constant(1.0), axis=None)


@contextlib.contextmanager
def output_dirs(config):
    """Yields (checkpoint dir, model dir) this worker writes to.

    The chief's are the job's; another worker's are in a local temporary folder (under $TMPDIR),
    removed when the block ends: nothing it saves is ever read, and local disk spares the
    shared bucket its writes.
    """
    if is_chief():
        yield config.resolved_checkpoint_dir, config.resolved_model_dir
        return
    task_type, task_index, _ = cluster_spec()
    scratch = tempfile.mkdtemp(prefix=f'imageshards-{task_type}-{task_index}-')
    _LOG.info('not the chief: checkpoints and the export go to %s (then removed)', scratch)
    try:
        yield os.path.join(scratch, 'checkpoints'), os.path.join(scratch, 'model')
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def check_devices(config):
    """Raises ValueError where the devices at hand cannot run `config` as it asks."""
    gpus = tf.config.list_physical_devices('GPU')
    if config.require_gpu and not gpus:
        raise ValueError(
            '--require-gpu: TensorFlow sees no GPU. On Vertex AI, the CUDA and cuDNN libraries '
            'of the container may not be those this TensorFlow needs (docs/vertex.md)'
        )
    if config.xla and cluster_spec()[2] > 1 and not gpus:
        raise ValueError(
            '--xla with several workers needs GPUs: XLA cannot compile the collectives of '
            'MultiWorkerMirroredStrategy for CPUs (TensorFlow aborts); leave out --xla'
        )
