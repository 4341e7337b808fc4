"""How the input pipeline reads a build: the settings of trainer/input_pipeline.py, one record.

`InputOptions` is what the trainer's input flags set (`TrainConfig.input`, trainer/config.py)
and what `make_dataset` takes whole; its defaults are the flags' defaults. The crop settings
may be `auto`, which the pipeline resolves from the build (`resolve_crop_area`,
`resolve_eval_crop`). No TensorFlow here: parsing flags imports none.
"""

import dataclasses

IMAGE_SIZE = (224, 224)  # (height, width) of the images the pipeline yields
# Random-resized crops: the ImageNet recipe keeps 8% to all of an image, which suits a large
# training set of large images. A small one has few images to see varied, and crops that keep a
# twelfth of an image hide what its label is about more often than they teach: below
# LARGE_TRAINING_SET images, `auto` keeps half to all of each image.
IMAGENET_CROP_AREA = (0.08, 1.0)
SMALL_SET_CROP_AREA = (0.5, 1.0)
LARGE_TRAINING_SET = 100_000
# A multi-label image's labels say what it shows anywhere in it: a crop that cuts a labelled
# object out keeps a label the image no longer shows, and so does evaluation's central crop.
# So a multi-label build trains, evaluates and serves whole images (bench/multilabel_crops.py,
# bench/RESULTS.md).
MULTI_LABEL_CROP_AREA = (1.0, 1.0)
CENTRAL_CROP = 0.875  # of each side: the Inception/ResNet evaluation recipe
MULTI_LABEL_EVAL_CROP = 1.0
AUTO = 'auto'


@dataclasses.dataclass(frozen=True)
class InputOptions:
    """Settings of the input pipeline (trainer/input_pipeline.py); the first nine are flags."""

    augment: str = AUTO  # 'auto', 'none', 'standard', or a spec (trainer/augment.py)
    crop_area: tuple | str = AUTO  # share of an image a training crop keeps (resolve_crop_area)
    eval_crop: float | str = AUTO  # evaluation's and serving's central crop (resolve_eval_crop)
    patches_per_image: int = 0  # > 0: K random patches per decoded image instead of one crop
    patch_size: int = 0
    skip_bad_images: bool = False  # drop undecodable images (counted, logged), not fail
    deterministic: bool = True  # keep the seeded order in parallel steps
    shuffle_buffer: int = 4096  # records
    cycle_length: int = 8  # shards read at once
    parse_batch: int = 64  # records per vectorized parse
    patch_shuffle_images: int = 64  # the patch shuffle buffer spans this many images (0: none)
    dct_scaling: bool | None = None  # None: if the build's images allow (trainer/preprocess.py)
    jpeg_only: bool | None = None  # None: if the split's dataset.json `formats` are all JPEG
    # Start each shard at a record fixed by (seed, epoch, shard) and wrap around, so that the
    # epochs' orders differ even when every shard is read at once. It costs reading that part
    # of each shard twice (half a shard on average). None: only when a split has fewer than
    # ROTATE_BELOW shards per `cycle_length`, where the shard shuffle alone leaves successive
    # epochs in nearly the same order (bench/RESULTS.md, shuffle quality).
    rotate_shards: bool | None = None

    def resolved(self, train_records, multi_label):
        """These options with `auto` crops resolved for a training split of `train_records`
        records of a (multi-label or not) build."""
        return dataclasses.replace(
            self,
            crop_area=resolve_crop_area(self.crop_area, train_records, multi_label),
            eval_crop=resolve_eval_crop(self.eval_crop, multi_label),
        )


ROTATE_BELOW = 8  # shards per cycle_length below which rotate_shards=None rotates
FLAGS = tuple(field.name for field in dataclasses.fields(InputOptions))[:9]


def resolve_crop_area(crop_area, train_records, multi_label=False) -> tuple:
    """The (min, max) crop area for `crop_area` ('auto' or a range), a training split size and
    whether the build is multi-label."""
    if crop_area != AUTO:
        return tuple(crop_area)
    if multi_label:
        return MULTI_LABEL_CROP_AREA
    return IMAGENET_CROP_AREA if train_records >= LARGE_TRAINING_SET else SMALL_SET_CROP_AREA


def resolve_eval_crop(eval_crop, multi_label=False) -> float:
    """The share of each side evaluation's and serving's central crop keeps."""
    if eval_crop != AUTO:
        return float(eval_crop)
    return MULTI_LABEL_EVAL_CROP if multi_label else CENTRAL_CROP


def parse_image_size(text) -> tuple:
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


def parse_range(text) -> tuple:
    """`0.5,1` -> (0.5, 1.0), within (0, 1]."""
    parts = text if isinstance(text, (list, tuple)) else str(text).split(',')
    try:
        low, high = (float(part) for part in parts)
    except ValueError:
        raise ValueError(f'expected two numbers min,max such as 0.5,1, got {text!r}') from None
    if not 0 < low <= high <= 1:
        raise ValueError(f'expected 0 < min <= max <= 1, got {text!r}')
    return (low, high)


def parse_crop_area(text) -> tuple | str:
    """`auto` or a range (parse_range)."""
    return AUTO if str(text).strip() == AUTO else parse_range(text)


def parse_eval_crop(text) -> float | str:
    """`auto` or a share in (0, 1]."""
    if str(text).strip() == AUTO:
        return AUTO
    try:
        share = float(text)
    except ValueError:
        share = 0.0
    if not 0 < share <= 1:
        raise ValueError(
            f'expected auto or a share of each side in (0, 1], such as 0.875, got {text!r}'
        )
    return share
