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
from imageshards import flags
from imageshards.kinds import features
from trainer import config_help
from trainer import input_options
from trainer.input_options import InputOptions

SMALL_CNN = 'small_cnn'  # the model of trainer/model.py's own; any other is keras.applications'
SELECT_BY = ('loss', 'accuracy', 'micro_f1')
IMAGENET = 'imagenet'
TASKS = ('auto', 'detection', 'instance_segmentation', 'semantic_segmentation')


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How the model learns: where its weights start, the phases, the optimizer and the loss
    (trainer/recipe.py). Defaults: bench/transfer.py, bench/RESULTS.md "The recipe"."""

    init_from: str = ''  # trained weights to start from (trainer/warm_start.py); '': random
    frozen_epochs: int = 1  # with init_from: epochs that train the heads alone
    learning_rate: float = 3e-3  # AdamW's peak rate (with init_from: the heads' first epochs)
    fine_tune_learning_rate: float = 1e-3  # with init_from: the whole model's, after them
    warmup_epochs: float = 1.0  # linear warm-up at the start of each phase (at most half of it)
    lr_schedule: str = 'cosine'  # warm-up then cosine decay to 0 in each phase, or constant
    weight_decay: float = 0.05  # AdamW's, decoupled; not of biases and BatchNorm's scale, offset
    label_smoothing: float = 0.1  # softmax heads only
    class_weights: str = 'none'  # or balanced: each class weighted inversely to its count
    select_by: str = 'loss'  # the validation metric whose best epoch is kept

    @property
    def from_weights(self) -> bool:
        return bool(self.init_from)


RECIPE_FLAGS = tuple(field.name for field in dataclasses.fields(Recipe))


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    data: str
    job_dir: str
    model: str = SMALL_CNN
    epochs: int = 10
    batch_size: int = 64
    image_size: tuple = input_options.IMAGE_SIZE
    steps_per_epoch: int = 0  # 0: from the split's record count
    seed: int = 0
    train_split: str = 'train'
    val_split: str = 'val'  # skipped when the build has no such split
    test_split: str = 'test'  # evaluated once at the end, when the build has it
    input: InputOptions = InputOptions()  # how the data is read (trainer/input_pipeline.py)
    recipe: Recipe = Recipe()  # how the model learns
    checkpoint_every: int = 500  # steps; checkpoints are also written at each epoch's end
    mixed_precision: str = 'auto'  # auto: mixed_float16 when a GPU is present; or bfloat16
    xla: bool = False
    require_gpu: bool = False  # fail at the start when TensorFlow sees no GPU
    label_levels: tuple = ()  # one head per label level instead of the primary label
    task: str = 'auto'  # a detection build's: detection or semantic_segmentation (auto: its kind)
    hierarchy: str = 'auto'  # derive nested coarse levels from finer ones (trainer/hierarchy.py)
    model_dir: str = ''
    checkpoint_dir: str = ''
    log_dir: str = ''
    verbose: bool = False

    @property
    def resolved_model_dir(self) -> str:
        return self.model_dir or os.environ.get('AIP_MODEL_DIR') or _join(self.job_dir, 'model')

    @property
    def resolved_checkpoint_dir(self) -> str:
        return (
            self.checkpoint_dir
            or os.environ.get('AIP_CHECKPOINT_DIR')
            or _join(self.job_dir, 'checkpoints')
        )

    @property
    def resolved_log_dir(self) -> str:
        return (
            self.log_dir or os.environ.get('AIP_TENSORBOARD_LOG_DIR') or _join(self.job_dir, 'logs')
        )


def _join(base, name):
    return posixpath.join(base.rstrip('/'), name)


def build_arg_parser() -> flags.ArgumentParser:
    parser = flags.ArgumentParser(
        prog='python -m trainer.task',
        description='Train an image classifier on the shards of an imageshards build.',
    )
    _declare_flags(parser.add_argument)
    return parser


def add_trainer_flags(parser, names) -> None:
    """Declares the trainer's flags `names` (`'--augment'`, ...) on another command's `parser`,
    as the trainer declares them: `imageshards preview` and `report` read a build as training
    will."""
    declared = {}
    _declare_flags(lambda *strings, **kwargs: declared.update({strings[0]: (strings, kwargs)}))
    for name in names:
        strings, kwargs = declared[name]
        parser.add_argument(*strings, **kwargs)


def _declare_flags(add):
    """Declares every flag of the trainer with `add` (an ArgumentParser's add_argument)."""
    count = flags.integer(minimum=1)
    add('--config', help='YAML file with defaults for these flags')
    add('--data', help='output directory of `imageshards build` (local, gs:// or /gcs/...)')
    add('--job-dir', help='where the model, checkpoints, logs and metrics.json go')
    add(
        '--model',
        type=flags.words(_model_name),
        default=TrainConfig.model,
        help=config_help.MODEL_HELP,
    )
    add('--epochs', type=count, default=TrainConfig.epochs, help='passes over the training split')
    add('--batch-size', type=count, default=TrainConfig.batch_size, help='global batch size')
    add(
        '--image-size',
        type=flags.words(input_options.parse_image_size),
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
        '--seed',
        type=flags.integer(),
        default=TrainConfig.seed,
        help='fixes initial weights, order and crops',
    )
    add('--train-split', default=TrainConfig.train_split, help='the split to train on')
    add('--val-split', default=TrainConfig.val_split, help='evaluated each epoch, if present')
    add('--test-split', default=TrainConfig.test_split, help='evaluated at the end, if present')
    _add_recipe_flags(add)
    _add_input_flags(add)
    _add_run_flags(add)


def _add_recipe_flags(add):
    """Flags of Recipe's fields."""
    recipe, rate = Recipe(), flags.number(above=0)
    add('--init-from', default=recipe.init_from, metavar='SOURCE', help=config_help.INIT_FROM_HELP)
    add(
        '--frozen-epochs',
        type=flags.integer(minimum=0),
        default=recipe.frozen_epochs,
        help=config_help.FROZEN_HELP,
    )
    add(
        '--learning-rate',
        type=rate,
        default=recipe.learning_rate,
        help="AdamW's peak rate (with --init-from: the heads' in the frozen epochs)",
    )
    add(
        '--fine-tune-learning-rate',
        type=rate,
        default=recipe.fine_tune_learning_rate,
        help="with --init-from: the whole model's peak rate after the frozen epochs",
    )
    add(
        '--warmup-epochs',
        type=flags.words(_non_negative),
        default=recipe.warmup_epochs,
        help='the rate rises linearly from 0 over the first epochs of each phase (at most half '
        'of the phase), then --lr-schedule cosine takes it down to 0 at the phase end',
    )
    add(
        '--lr-schedule',
        choices=('cosine', 'constant'),
        default=recipe.lr_schedule,
        help='after the warm-up: a cosine down to 0 at the end of each phase, or the peak rate',
    )
    add(
        '--weight-decay',
        type=flags.words(_non_negative),
        default=recipe.weight_decay,
        help="AdamW's decoupled weight decay (not of biases, BatchNorm's scale and offset)",
    )
    add(
        '--label-smoothing',
        type=flags.words(_smoothing),
        default=recipe.label_smoothing,
        help='of softmax heads (a multi-label head has none)',
    )
    add(
        '--class-weights',
        choices=('none', 'balanced'),
        default=recipe.class_weights,
        help="balanced: each class of a softmax head weighs total / (classes x the class's "
        'images) in the loss, from the training split counts in dataset.json',
    )
    add(
        '--select-by',
        choices=SELECT_BY,
        default=recipe.select_by,
        help='the validation metric whose best epoch is kept, exported and evaluated on the test '
        'split (accuracy: of softmax heads, micro_f1: of multi-label heads, their mean when '
        'there are several); without a validation split, the last epoch',
    )


def _add_input_flags(add):
    """Flags of InputOptions' first fields (input_options.FLAGS)."""
    options, count = InputOptions(), flags.integer(minimum=1)
    add(
        '--augment',
        default=options.augment,
        help="'auto' (classification: none; detection and segmentation: 'objects'), 'none', "
        "'standard', 'objects', or name[=value],... (see trainer/augment.py)",
    )
    add(
        '--crop-area',
        type=flags.words(input_options.parse_crop_area),
        default=options.crop_area,
        help=config_help.CROP_HELP,
    )
    add(
        '--eval-crop',
        type=flags.words(input_options.parse_eval_crop),
        default=options.eval_crop,
        help=config_help.EVAL_CROP_HELP,
    )
    add(
        '--patches-per-image',
        type=flags.integer(minimum=0),
        default=options.patches_per_image,
        help='K random patches per image instead of one crop (0: crops)',
    )
    add(
        '--patch-size',
        type=flags.integer(minimum=0),
        default=options.patch_size,
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
    add('--shuffle-buffer', type=count, default=options.shuffle_buffer, help='records')
    add('--cycle-length', type=count, default=options.cycle_length, help='shards read at once')


def _add_run_flags(add):
    """Flags of where and how the run goes: checkpoints, devices, heads, folders."""
    add(
        '--checkpoint-every',
        type=flags.integer(minimum=0),
        default=TrainConfig.checkpoint_every,
        help="steps (and at each epoch's end)",
    )
    add(
        '--mixed-precision',
        choices=('auto', 'on', 'bfloat16', 'off'),
        default=TrainConfig.mixed_precision,
        help='on: mixed_float16; auto: that when a GPU is present; bfloat16: as auto on a GPU, '
        'mixed_bfloat16 on a CPU with AVX512-BF16 or AMX, float32 on other CPUs',
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
    add('--task', choices=TASKS, default=TrainConfig.task, help=config_help.TASK_HELP)
    add('--model-dir', default='', help='default: $AIP_MODEL_DIR or JOB_DIR/model')
    add('--checkpoint-dir', default='', help='default: $AIP_CHECKPOINT_DIR or JOB_DIR/checkpoints')
    add('--log-dir', default='', help='default: $AIP_TENSORBOARD_LOG_DIR or JOB_DIR/logs')
    add('--verbose', action='store_true', help="also show TensorFlow's and Keras' own log lines")


def _model_name(text):
    """A --model: small_cnn or a keras.applications name (checked when the model is built)."""
    name = str(text).strip()
    if not name:
        raise ValueError('expected small_cnn or a keras.applications model name')
    return name


def _non_negative(text):
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = -1.0
    if not value >= 0:
        raise ValueError(f'expected a number of 0 or more, got {text!r}')
    return value


def _smoothing(text):
    value = _non_negative(text)
    if not value < 1:
        raise ValueError(f'expected a share in [0, 1), such as 0.1, got {text!r}')
    return value


CONVERT = {
    'image_size': input_options.parse_image_size,
    'crop_area': input_options.parse_crop_area,
    'eval_crop': input_options.parse_eval_crop,
    'label_levels': features.parse_label_levels,
}


def parse_train_args(argv) -> TrainConfig:
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
    options = InputOptions(**{name: values.pop(name) for name in input_options.FLAGS})
    recipe = Recipe(**{name: values.pop(name) for name in RECIPE_FLAGS})
    return TrainConfig(**values, input=options, recipe=recipe)


def parse_with_trainer_yaml(parser, argv) -> argparse.Namespace:
    """A tool's flags, defaulting to the trainer YAML's settings (a wrong file: usage error)."""
    try:
        configfile.apply_defaults_of(parser, argv, build_arg_parser(), convert=CONVERT)
    except ValueError as e:
        parser.error(str(e))
    return parser.parse_args(argv)
