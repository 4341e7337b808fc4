"""Flags and typed configuration of training (`python -m trainer.task`).

Defaults follow Vertex AI's conventions: where `--job-dir` does not say otherwise, the model
goes to `AIP_MODEL_DIR`, checkpoints to `AIP_CHECKPOINT_DIR` and TensorBoard logs to
`AIP_TENSORBOARD_LOG_DIR` when Vertex sets them, else under the job directory. A YAML file
given with `--config` holds defaults for any flag (with underscores); the command line wins.
"""

import argparse
import dataclasses
import os
import posixpath

from imageshards import configfile
from trainer.model import MODELS


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    data: str
    job_dir: str
    model: str = 'small_cnn'
    epochs: int = 10
    batch_size: int = 64
    image_size: tuple = (224, 224)
    steps_per_epoch: int = 0  # 0: from the split's record count
    augment: str = 'none'
    seed: int = 0
    learning_rate: float = 1e-3
    train_split: str = 'train'
    val_split: str = 'val'  # skipped when the build has no such split
    crop_area: tuple = (0.08, 1.0)  # random-resized crops cover this share of an image
    patches_per_image: int = 0
    patch_size: int = 0
    skip_bad_images: bool = False
    deterministic: bool = True
    shuffle_buffer: int = 4096
    cycle_length: int = 8
    checkpoint_every: int = 500  # steps; checkpoints are also written at each epoch's end
    mixed_precision: str = 'auto'  # auto: mixed_float16 when a GPU is present
    xla: bool = False
    require_gpu: bool = False  # fail at the start when TensorFlow sees no GPU
    label_levels: tuple = ()  # one softmax head per label level instead of the primary label
    model_dir: str = ''
    checkpoint_dir: str = ''
    log_dir: str = ''

    @property
    def resolved_model_dir(self):
        return self.model_dir or os.environ.get('AIP_MODEL_DIR') or _join(self.job_dir, 'model')

    @property
    def resolved_checkpoint_dir(self):
        return (
            self.checkpoint_dir
            or os.environ.get('AIP_CHECKPOINT_DIR')
            or _join(self.job_dir, 'checkpoints')
        )

    @property
    def resolved_log_dir(self):
        return (
            self.log_dir or os.environ.get('AIP_TENSORBOARD_LOG_DIR') or _join(self.job_dir, 'logs')
        )


def _join(base, name):
    return posixpath.join(base.rstrip('/'), name)


def parse_image_size(text):
    """`224`, `224,224` or `160,224` -> (height, width)."""
    if isinstance(text, (list, tuple)):
        parts = list(text)
    else:
        parts = [part for part in str(text).replace('x', ',').split(',') if part.strip()]
    sizes = tuple(int(part) for part in parts)
    if len(sizes) == 1:
        sizes = sizes * 2
    if len(sizes) != 2 or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f'--image-size: expected H,W or one number, got {text}')
    return sizes


def parse_label_levels(text):
    """`family,species` (or a YAML list) -> ('family', 'species'), unique and non-empty."""
    names = text if isinstance(text, (list, tuple)) else str(text).split(',')
    levels = tuple(str(name).strip() for name in names if str(name).strip())
    if len(set(levels)) != len(levels) or any('/' in level for level in levels):
        raise argparse.ArgumentTypeError(f'--label-levels: expected unique level names, got {text}')
    return levels


def parse_range(text):
    """`0.5,1` -> (0.5, 1.0), within (0, 1]."""
    low, high = (
        float(part) for part in (text if isinstance(text, (list, tuple)) else str(text).split(','))
    )
    if not 0 < low <= high <= 1:
        raise argparse.ArgumentTypeError(f'expected 0 < min <= max <= 1, got {text}')
    return (low, high)


def build_arg_parser():
    parser = argparse.ArgumentParser(
        prog='python -m trainer.task',
        description='Train an image classifier on the shards of an imageshards build.',
    )
    add = parser.add_argument
    add('--config', help='YAML file with defaults for these flags')
    add('--data', help='output directory of `imageshards build` (local, gs:// or /gcs/...)')
    add('--job-dir', help='where the model, checkpoints, logs and metrics.json go')
    add('--model', choices=MODELS, default=TrainConfig.model)
    add('--epochs', type=int, default=TrainConfig.epochs)
    add('--batch-size', type=int, default=TrainConfig.batch_size, help='global batch size')
    add('--image-size', type=parse_image_size, default=TrainConfig.image_size, help='H,W or N')
    add('--steps-per-epoch', type=int, default=0, help='override the count from dataset.json')
    add(
        '--augment',
        default=TrainConfig.augment,
        help="'none', 'standard', or name[=value],... (see trainer/augment.py)",
    )
    add('--seed', type=int, default=0)
    add('--learning-rate', type=float, default=TrainConfig.learning_rate)
    add('--train-split', default=TrainConfig.train_split)
    add('--val-split', default=TrainConfig.val_split)
    add(
        '--crop-area',
        type=parse_range,
        default=TrainConfig.crop_area,
        help='min,max share of an image a training crop covers (default 0.08,1)',
    )
    add('--patches-per-image', type=int, default=0, help='K random patches per image')
    add('--patch-size', type=int, default=0)
    add(
        '--skip-bad-images',
        action='store_true',
        help='skip (count and log) undecodable images instead of failing',
    )
    add(
        '--no-deterministic',
        dest='deterministic',
        action='store_false',
        help='let parallel input steps reorder records (faster, not reproducible)',
    )
    add('--shuffle-buffer', type=int, default=TrainConfig.shuffle_buffer)
    add('--cycle-length', type=int, default=TrainConfig.cycle_length)
    add('--checkpoint-every', type=int, default=TrainConfig.checkpoint_every, help='steps')
    add('--mixed-precision', choices=('auto', 'on', 'off'), default='auto')
    add('--xla', action='store_true', help='compile the train step with XLA (jit_compile)')
    add(
        '--require-gpu',
        action='store_true',
        help='stop with an error when TensorFlow sees no GPU (set by submit-training for jobs '
        'with accelerators, which would otherwise train on the CPU)',
    )
    add(
        '--label-levels',
        type=parse_label_levels,
        default=(),
        help='e.g. family,species: one softmax head per label level of the build (its '
        'dataset.json label_levels) on a shared backbone, instead of the primary label',
    )
    add('--model-dir', default='', help='default: $AIP_MODEL_DIR or JOB_DIR/model')
    add('--checkpoint-dir', default='', help='default: $AIP_CHECKPOINT_DIR or JOB_DIR/checkpoints')
    add('--log-dir', default='', help='default: $AIP_TENSORBOARD_LOG_DIR or JOB_DIR/logs')
    return parser


def parse_train_args(argv):
    """A TrainConfig from a command line (and the YAML file it names)."""
    parser = build_arg_parser()
    configfile.apply_defaults(
        parser,
        argv,
        convert={
            'image_size': parse_image_size,
            'crop_area': parse_range,
            'label_levels': parse_label_levels,
        },
    )
    args = parser.parse_args(argv)
    for flag in ('data', 'job_dir'):
        if not getattr(args, flag):
            parser.error(
                f'--{flag.replace("_", "-")} is required (on the command line or in --config)'
            )
    values = vars(args)
    values.pop('config')
    return TrainConfig(**values)
