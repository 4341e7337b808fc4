"""Flags and typed configuration of training (`python -m trainer.task`).

Defaults follow Vertex AI's conventions: where `--job-dir` does not say otherwise, the model
goes to `AIP_MODEL_DIR`, checkpoints to `AIP_CHECKPOINT_DIR` and TensorBoard logs to
`AIP_TENSORBOARD_LOG_DIR` when Vertex sets them, else under the job directory. A YAML file
given with `--config` holds defaults for any flag (with underscores); the command line wins.
"""

import dataclasses
import os
import posixpath

from imageshards import configfile
from imageshards import features
from imageshards import flags

# The models of trainer/model.py; named here so that parsing flags imports no Keras.
MODELS = ('small_cnn', 'resnet50', 'efficientnet_b0')
# Random-resized crops: the ImageNet recipe keeps 8% to all of an image, which suits a large
# training set of large images. A small one has few images to see varied, and crops that keep a
# twelfth of an image hide what its label is about more often than they teach: below
# LARGE_TRAINING_SET images, `auto` keeps half to all of each image.
IMAGENET_CROP_AREA = (0.08, 1.0)
SMALL_SET_CROP_AREA = (0.5, 1.0)
LARGE_TRAINING_SET = 100_000
# A multi-label image's labels say what it shows anywhere in it: a crop that cuts a labelled
# object out keeps a label the image no longer shows, and so does evaluation's central crop.
# So a multi-label build trains, evaluates and serves whole images (bench/multilabel_crops.py:
# shapes' test micro F1 0.96 with neither crop, 0.89 with 0.8-1 crops, 0.80 with 0.08-1).
MULTI_LABEL_CROP_AREA = (1.0, 1.0)
CENTRAL_CROP = 0.875  # of each side: the Inception/ResNet evaluation recipe
MULTI_LABEL_EVAL_CROP = 1.0


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
    test_split: str = 'test'  # evaluated once at the end, when the build has it
    crop_area: tuple | str = 'auto'  # share of an image a random crop covers (resolve_crop_area)
    eval_crop: float | str = 'auto'  # evaluation's and serving's central crop (resolve_eval_crop)
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
    label_levels: tuple = ()  # one head per label level instead of the primary label
    hierarchy: str = 'auto'  # derive nested coarse levels from finer ones (trainer/hierarchy.py)
    model_dir: str = ''
    checkpoint_dir: str = ''
    log_dir: str = ''
    verbose: bool = False

    def input_options(self):
        """make_dataset's arguments for training that this configuration sets
        (trainer/input_pipeline.py)."""
        return {
            'seed': self.seed,
            'image_size': self.image_size,
            'augment': self.augment,
            'label_levels': self.label_levels,
            'patches_per_image': self.patches_per_image,
            'patch_size': self.patch_size,
            'skip_bad_images': self.skip_bad_images,
            'deterministic': self.deterministic,
            'shuffle_buffer': self.shuffle_buffer,
            'cycle_length': self.cycle_length,
            'area_range': self.crop_area,
        }

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


def resolve_crop_area(crop_area, train_records, multi_label=False):
    """The (min, max) crop area for `crop_area` ('auto' or a range), a training split size and
    whether the build is multi-label."""
    if crop_area != 'auto':
        return tuple(crop_area)
    if multi_label:
        return MULTI_LABEL_CROP_AREA
    return IMAGENET_CROP_AREA if train_records >= LARGE_TRAINING_SET else SMALL_SET_CROP_AREA


def resolve_eval_crop(eval_crop, multi_label=False):
    """The share of each side evaluation's and serving's central crop keeps."""
    if eval_crop != 'auto':
        return float(eval_crop)
    return MULTI_LABEL_EVAL_CROP if multi_label else CENTRAL_CROP


def parse_image_size(text):
    """`224`, `224,224` or `160,224` -> (height, width)."""
    if isinstance(text, (list, tuple)):
        parts = list(text)
    else:
        parts = [part for part in str(text).replace('x', ',').split(',') if part.strip()]
    try:
        sizes = tuple(int(part) for part in parts)
    except ValueError:
        sizes = ()
    if len(sizes) == 1:
        sizes = sizes * 2
    if len(sizes) != 2 or min(sizes) < 1:
        raise ValueError(f'expected H,W or one number of pixels, got {text!r}')
    return sizes


def parse_range(text):
    """`0.5,1` -> (0.5, 1.0), within (0, 1]."""
    parts = text if isinstance(text, (list, tuple)) else str(text).split(',')
    try:
        low, high = (float(part) for part in parts)
    except ValueError:
        raise ValueError(f'expected two numbers min,max such as 0.5,1, got {text!r}') from None
    if not 0 < low <= high <= 1:
        raise ValueError(f'expected 0 < min <= max <= 1, got {text!r}')
    return (low, high)


def parse_crop_area(text):
    """`auto` or a range (parse_range)."""
    return 'auto' if str(text).strip() == 'auto' else parse_range(text)


def parse_eval_crop(text):
    """`auto` or a share in (0, 1]."""
    if str(text).strip() == 'auto':
        return 'auto'
    try:
        share = float(text)
    except ValueError:
        share = 0.0
    if not 0 < share <= 1:
        raise ValueError(
            f'expected auto or a share of each side in (0, 1], such as 0.875, got {text!r}'
        )
    return share


_MODEL_HELP = (
    'small_cnn: three conv blocks, for quick runs; resnet50, efficientnet_b0: keras.applications '
    'models trained from scratch (random initial weights, nothing downloaded)'
)
_CROP_HELP = (
    'min,max share of an image a training crop keeps, or auto: 0.5,1 for a training split under '
    f'{LARGE_TRAINING_SET:,} images, the ImageNet recipe 0.08,1 from there on; a multi-label '
    'build 1,1 (no crop: a crop can cut out an object its labels name; measured on shapes, test '
    'micro F1 0.96 without crops, 0.89 with 0.8,1 crops, 0.80 with 0.08,1)'
)
_EVAL_CROP_HELP = (
    'share of each side of the central crop that evaluation and the served model see, or auto: '
    f'{CENTRAL_CROP} (the Inception/ResNet recipe), a multi-label build the whole image (1)'
)


def build_arg_parser():
    parser = flags.ArgumentParser(
        prog='python -m trainer.task',
        description='Train an image classifier on the shards of an imageshards build.',
    )
    add = parser.add_argument
    count, positive = flags.integer(minimum=1), flags.number(above=0)
    add('--config', help='YAML file with defaults for these flags')
    add('--data', help='output directory of `imageshards build` (local, gs:// or /gcs/...)')
    add('--job-dir', help='where the model, checkpoints, logs and metrics.json go')
    add('--model', choices=MODELS, default=TrainConfig.model, help=_MODEL_HELP)
    add('--epochs', type=count, default=TrainConfig.epochs, help='passes over the training split')
    add('--batch-size', type=count, default=TrainConfig.batch_size, help='global batch size')
    add(
        '--image-size',
        type=flags.words(parse_image_size),
        default=TrainConfig.image_size,
        help='H,W or N: the size images are cropped and resized to',
    )
    add(
        '--steps-per-epoch',
        type=flags.integer(minimum=0),
        default=TrainConfig.steps_per_epoch,
        help="0: from the split's record count in dataset.json",
    )
    add(
        '--augment',
        default=TrainConfig.augment,
        help="'none', 'standard', or name[=value],... (see trainer/augment.py)",
    )
    add(
        '--seed',
        type=flags.integer(),
        default=TrainConfig.seed,
        help='fixes initial weights, order and crops',
    )
    add('--learning-rate', type=positive, default=TrainConfig.learning_rate, help='Adam')
    add('--train-split', default=TrainConfig.train_split, help='the split to train on')
    add('--val-split', default=TrainConfig.val_split, help='evaluated each epoch, if present')
    add('--test-split', default=TrainConfig.test_split, help='evaluated at the end, if present')
    add(
        '--crop-area',
        type=flags.words(parse_crop_area),
        default=TrainConfig.crop_area,
        help=_CROP_HELP,
    )
    add(
        '--eval-crop',
        type=flags.words(parse_eval_crop),
        default=TrainConfig.eval_crop,
        help=_EVAL_CROP_HELP,
    )
    add(
        '--patches-per-image',
        type=flags.integer(minimum=0),
        default=TrainConfig.patches_per_image,
        help='K random patches per image instead of one crop (0: crops)',
    )
    add(
        '--patch-size',
        type=flags.integer(minimum=0),
        default=TrainConfig.patch_size,
        help='side of a patch',
    )
    add(
        '--skip-bad-images',
        action='store_true',
        help='skip (count and log) undecodable images instead of failing; images are then '
        'decoded one call each, not a batch per call (about 15%% fewer images/s on 2 cores)',
    )
    add(
        '--no-deterministic',
        dest='deterministic',
        action='store_false',
        help='let parallel input steps reorder records (faster, not reproducible)',
    )
    add('--shuffle-buffer', type=count, default=TrainConfig.shuffle_buffer, help='records')
    add('--cycle-length', type=count, default=TrainConfig.cycle_length, help='shards read at once')
    add(
        '--checkpoint-every',
        type=flags.integer(minimum=0),
        default=TrainConfig.checkpoint_every,
        help="steps (and at each epoch's end)",
    )
    add(
        '--mixed-precision',
        choices=('auto', 'on', 'off'),
        default=TrainConfig.mixed_precision,
        help='mixed_float16; auto: when a GPU is present',
    )
    add('--xla', action='store_true', help='compile the train step with XLA (jit_compile)')
    add(
        '--require-gpu',
        action='store_true',
        help='stop with an error when TensorFlow sees no GPU (set by submit-training for jobs '
        'with accelerators, which would otherwise train on the CPU)',
    )
    add(
        '--label-levels',
        type=flags.words(features.parse_label_levels),
        default=(),
        help='e.g. family,species: one head per label level of the build (its dataset.json '
        'label_levels) on a shared backbone, instead of the primary label: a softmax, or for a '
        "multi-label build's levels with several values per image one sigmoid per class",
    )
    add(
        '--hierarchy',
        choices=('auto', 'off'),
        default=TrainConfig.hierarchy,
        help='auto: a label level whose classes each hold whole classes of a finer trained level '
        '(in the training split) is derived from it: its probabilities are the finer ones summed '
        'and its served answer agrees with the finer one; off: an independent head per level',
    )
    add('--model-dir', default='', help='default: $AIP_MODEL_DIR or JOB_DIR/model')
    add('--checkpoint-dir', default='', help='default: $AIP_CHECKPOINT_DIR or JOB_DIR/checkpoints')
    add('--log-dir', default='', help='default: $AIP_TENSORBOARD_LOG_DIR or JOB_DIR/logs')
    add('--verbose', action='store_true', help="also show TensorFlow's and Keras' own log lines")
    return parser


CONVERT = {
    'image_size': parse_image_size,
    'crop_area': parse_crop_area,
    'eval_crop': parse_eval_crop,
    'label_levels': features.parse_label_levels,
}


def parse_train_args(argv):
    """A TrainConfig from a command line (and the YAML file it names).

    Raises:
        ValueError: the YAML file holds an unknown key or a wrong value.
    """
    parser = build_arg_parser()
    configfile.apply_defaults(parser, argv, convert=CONVERT)
    args = parser.parse_args(argv)
    for flag in ('data', 'job_dir'):
        if not getattr(args, flag):
            parser.error(
                f'--{flag.replace("_", "-")} is required (on the command line or in --config)'
            )
    values = vars(args)
    values.pop('config')
    return TrainConfig(**values)


def parse_with_trainer_yaml(parser, argv):
    """A tool's flags, defaulting to the trainer YAML's settings (a wrong file: usage error)."""
    try:
        configfile.apply_defaults_of(parser, argv, build_arg_parser(), convert=CONVERT)
    except ValueError as e:
        parser.error(str(e))
    return parser.parse_args(argv)
