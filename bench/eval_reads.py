"""Evaluation batches decoded in one call each, against image by image, alternated.

make_dataset(training=False), central crops at 224x224 in batches of 64, on a build's split:
  a batch per call   the default: each batch's records decoded by one tf.map_fn
  image by image     skip_bad_images=True: a map per record, then batch (it also pays
                     ignore_errors, as the trainer's per-image path does)
Images/s and CPU time per image of this process, medians of alternated rounds
(bench/resized_reads.alternate).

    python -m bench.eval_reads --shards bench/out/resize-photos-20000-256 --rounds 4
"""

import argparse

from bench.resized_reads import BATCH
from bench.resized_reads import SIZE
from bench.resized_reads import alternate


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

    def evaluation(**settings):
        return lambda: input_pipeline.make_dataset(
            args.shards, args.split, BATCH, training=False, image_size=SIZE, info=info, **settings
        )

    contenders = {
        'evaluation, a batch per call': evaluation(),
        'evaluation, image by image (skip_bad_images)': evaluation(skip_bad_images=True),
    }
    alternate(contenders, args.rounds, args.batches, warm=(args.shards,))


if __name__ == '__main__':
    main()
