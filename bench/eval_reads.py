"""Batches decoded in one call each against image by image, for evaluation and for training.

make_dataset on a build's split, 224x224 in batches of 64 (training: ImageNet's crop areas):
  a batch per call   the default: each batch's records decoded by one tf.map_fn
                     (trainer/record_decoding.py)
  image by image     the per-record map that skip_bad_images, paths builds and patches use,
                     forced here for the same records (without skip_bad_images' ignore_errors)
Images/s and CPU time per image of this process, medians of alternated rounds
(bench/resized_reads.alternate). The CPU time per image says what each costs even on a machine
under load; images/s depends on the load.

    python -m bench.eval_reads --shards bench/out/resize-photos-20000-256 --rounds 6
"""

import argparse
import contextlib

from bench.resized_reads import BATCH
from bench.resized_reads import SIZE
from bench.resized_reads import alternate
from trainer.input_options import IMAGENET_CROP_AREA


@contextlib.contextmanager
def _image_by_image():
    """make_dataset decodes record by record while this is open."""
    from trainer import record_decoding  # pylint: disable=import-outside-toplevel

    decodes_batches = record_decoding.decodes_batches
    record_decoding.decodes_batches = lambda parse, opts: False
    try:
        yield
    finally:
        record_decoding.decodes_batches = decodes_batches


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--shards', required=True, help='an imageshards build')
    parser.add_argument('--split', default='train', help='large enough for warm-up + batches')
    parser.add_argument('--rounds', type=int, default=4)
    parser.add_argument('--batches', type=int, default=40)
    args = parser.parse_args(argv)
    from trainer import dataset_info  # pylint: disable=import-outside-toplevel
    from trainer import input_pipeline  # pylint: disable=import-outside-toplevel

    info = dataset_info.load(args.shards)

    def made(training, per_image=False):
        def make():
            with _image_by_image() if per_image else contextlib.nullcontext():
                return input_pipeline.make_dataset(
                    args.shards,
                    args.split,
                    BATCH,
                    training=training,
                    image_size=SIZE,
                    info=info,
                    crop_area=IMAGENET_CROP_AREA,
                )

        return make

    contenders = {
        'evaluation, a batch per call': made(False),
        'evaluation, image by image': made(False, per_image=True),
        'training, a batch per call': made(True),
        'training, image by image': made(True, per_image=True),
    }
    alternate(contenders, args.rounds, args.batches, warm=(args.shards,))


if __name__ == '__main__':
    main()
