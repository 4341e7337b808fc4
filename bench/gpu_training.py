"""GPU training throughput: does the input pipeline keep the accelerator busy?

ResNet-50 (from scratch), mixed precision (`mixed_float16`) on a GPU, batch 128 at 224x224,
Keras fit for a fixed number of steps after warm-up, in one process:
  make_dataset   the trainer's input: shards -> interleave -> shuffle -> crop while decoding ->
                 augmentation -> prefetch (training=True, augment='standard')
  synthetic      the same shapes and dtypes from memory (tf.data from_tensors(...).repeat())
  patches        make_dataset with --patches-per-image K (K random patches per decoded image)
  synthetic      ... against synthetic batches of the patches' shape
make_dataset / synthetic near 1.0 means the GPU, not the input, sets the pace. Each input is
also timed alone first (no model): what the host's cores can deliver.

    python -m bench.gpu_training --count 20000             # builds the 500x375 photos once
    python -m bench.gpu_training --steps 20 --batch 16     # a quick check on a CPU
    KERAS_BACKEND=jax python -m bench.gpu_training --shards DIR   # model in JAX (see below)

Runs on a CPU too (float32, slow); the figures that matter come from a GPU. The input is
tf.data whatever the Keras backend; with KERAS_BACKEND=jax (or torch) the model runs in that
framework, so a GPU machine with only a CPU build of TensorFlow measures the same question: can
the input pipeline, on the host's cores, feed what the GPU consumes. `--shards` takes a build
made elsewhere (`imageshards build`), to carry to a machine without Beam.
"""

import argparse
import os
import time

import keras
import tensorflow as tf

from bench.input_throughput import _rate
from bench.input_throughput import _shards
from trainer import dataset_info
from trainer import input_pipeline
from trainer.input_options import IMAGENET_CROP_AREA
from trainer.model import build_model

AUTOTUNE = tf.data.AUTOTUNE


class _StepClock(keras.callbacks.Callback):
    """Seconds of the steps after `warmup`."""

    def __init__(self, warmup):
        super().__init__()
        self._warmup, self._step, self.start, self.seconds = warmup, 0, None, None

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        if self._step == self._warmup:
            self.start = time.perf_counter()

    def on_train_end(self, logs=None):
        self.seconds = time.perf_counter() - self.start


def _synthetic(like, num_classes):
    images, labels = next(iter(like))
    images = tf.random.stateless_uniform(images.shape, [1, 2], 0, 255, dtype=tf.int32)
    labels = tf.random.stateless_uniform(labels.shape, [3, 4], 0, num_classes, dtype=tf.int32)
    pair = (tf.cast(images, tf.uint8), tf.cast(labels, like.element_spec[1].dtype))
    return tf.data.Dataset.from_tensors(pair).repeat().prefetch(AUTOTUNE)


def _accelerators():
    """The GPUs the Keras backend computes on (names), or [] on a CPU."""
    backend = keras.backend.backend()
    if backend == 'jax':
        import jax  # pylint: disable=import-outside-toplevel

        return [str(device) for device in jax.devices() if device.platform == 'gpu']
    if backend == 'torch':
        import torch  # pylint: disable=import-outside-toplevel

        return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return [gpu.name for gpu in tf.config.list_physical_devices('GPU')]


def _images_per_second(model_fn, dataset, steps, warmup, batch):
    model = model_fn()
    model.compile(
        optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
        loss='sparse_categorical_crossentropy',
    )
    clock = _StepClock(warmup)
    model.fit(dataset, steps_per_epoch=warmup + steps, epochs=1, verbose=0, callbacks=[clock])
    return steps * batch / clock.seconds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--count', type=int, default=20_000)
    parser.add_argument('--batch', type=int, default=128)
    parser.add_argument('--steps', type=int, default=200)
    parser.add_argument('--warmup', type=int, default=20)
    parser.add_argument('--patches-per-image', type=int, default=8)
    parser.add_argument('--patch-size', type=int, default=224)
    parser.add_argument('--work-dir', default=os.path.join(os.path.dirname(__file__), 'out'))
    parser.add_argument('--shards', help='an existing build to read (default: build --count)')
    args = parser.parse_args(argv)
    gpus = _accelerators()
    if gpus:
        keras.mixed_precision.set_global_policy('mixed_float16')
    print(f'Keras backend: {keras.backend.backend()}; host cores: {os.cpu_count()}', flush=True)
    print(f'devices: {gpus or "no GPU, float32 on the CPU"}', flush=True)
    out = args.shards or _shards(args.work_dir, args.count)[0]
    info = dataset_info.load(out)
    size = (224, 224)

    def model_fn(image_size=size):
        return build_model('resnet50', info.num_classes, image_size)

    real = input_pipeline.make_dataset(
        out,
        'train',
        args.batch,
        training=True,
        image_size=size,
        augment='standard',
        info=info,
        crop_area=IMAGENET_CROP_AREA,  # the figures in bench/RESULTS.md were measured with it
    )
    patches = input_pipeline.make_dataset(
        out,
        'train',
        args.batch,
        training=True,
        info=info,
        patches_per_image=args.patches_per_image,
        patch_size=args.patch_size,
    )
    patch_size = (args.patch_size, args.patch_size)
    runs = {
        'make_dataset': (model_fn, real),
        'synthetic': (model_fn, _synthetic(real, info.num_classes)),
        f'patches x{args.patches_per_image}': (lambda: model_fn(patch_size), patches),
        'synthetic patches': (lambda: model_fn(patch_size), _synthetic(patches, info.num_classes)),
    }
    for name, dataset in (('make_dataset', real), (f'patches x{args.patches_per_image}', patches)):
        # What the host's cores deliver with no model beside them: the pipeline's ceiling.
        rate = _rate(dataset, args.steps // 2, warmup=args.warmup // 2)
        print(f'{name + " alone":<22}{rate:>9.0f} images/s', flush=True)
    rates = {}
    for name, (make_model, dataset) in runs.items():
        rates[name] = _images_per_second(make_model, dataset, args.steps, args.warmup, args.batch)
        print(f'{name:<22}{rates[name]:>9.0f} images/s', flush=True)
    print(f'make_dataset / synthetic: {rates["make_dataset"] / rates["synthetic"]:.2f}')
    patch_names = [name for name in rates if name.startswith('patches')]
    print(f'patches / synthetic patches: {rates[patch_names[0]] / rates["synthetic patches"]:.2f}')


if __name__ == '__main__':
    main()
