"""Grain's own reading of an ArrayRecord build, for bench/epoch_shuffle.py: what a JAX user writes.

    source       grain.sources.ArrayRecordDataSource over the split's shard paths
    map_dataset  MapDataset: source -> shuffle(seed) (a new permutation each epoch) -> repeat
                 -> random_map(DecodeCrop) -> to_iter_dataset(ReadOptions: read threads) -> batch
    data_loader  DataLoader: IndexSampler(shuffle, seed), [DecodeCrop, Batch], worker processes
    order        (ids, labels) of epochs of the MapDataset's shuffle, nothing decoded

`DecodeCrop` is the trainer's training crop done the way a Grain pipeline does it, with Pillow
(Grain's own examples decode with it) instead of TensorFlow: the tf.Example parsed with protobuf
(imageshards/kinds/example_bytes.py, no TensorFlow), a random-resized crop of ImageNet's areas
(8% to all of the image, aspect 3/4 to 4/3, ten tries, then the whole image), decoded DCT-scaled
where the crop is at least twice the output (`Image.draft`, as the trainer's dct_scaling), cut and
resized bilinearly to 224x224 in one `resize(box=...)` (Pillow's bilinear widens its filter when it
shrinks, TensorFlow's does not: a little more work per pixel here).
"""

import io
import math

import grain
import numpy as np
from PIL import Image

from imageshards.kinds import example_bytes
from imageshards.kinds import features
from trainer.input_options import IMAGENET_CROP_AREA

SIZE = (224, 224)  # (height, width)
RATIO = (3 / 4, 4 / 3)
ATTEMPTS = 10


def parse(record) -> tuple:
    """(encoded image, label, image id) of a serialized tf.Example of a build."""
    feature = example_bytes.example_class().FromString(record).features.feature
    return (
        feature[features.ENCODED].bytes_list.value[0],
        feature[features.LABEL].int64_list.value[0],
        feature[features.ID].int64_list.value[0],
    )


def crop_box(width, height, rng) -> tuple:
    """(left, top, width, height) of a random-resized crop of a width x height image."""
    for _ in range(ATTEMPTS):
        area = rng.uniform(*IMAGENET_CROP_AREA) * width * height
        aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        w, h = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1)), w, h
    return 0, 0, width, height


def decode_crop(encoded, rng) -> np.ndarray:
    """A random-resized crop of an encoded image, 224x224 RGB uint8."""
    image = Image.open(io.BytesIO(encoded))
    full_width = image.size[0]
    left, top, w, h = crop_box(*image.size, rng)
    shrink = min(w / SIZE[1], h / SIZE[0])  # how much larger than the output the crop is
    if shrink >= 2:
        image.draft('RGB', (image.size[0] / shrink, image.size[1] / shrink))
    scale = image.size[0] / full_width  # of the decoded image against the stored one
    box = (left * scale, top * scale, (left + w) * scale, (top + h) * scale)
    return np.asarray(
        image.convert('RGB').resize((SIZE[1], SIZE[0]), Image.Resampling.BILINEAR, box=box)
    )


class DecodeCrop(grain.transforms.RandomMap):
    """Serialized record -> (224x224 image, label), for a MapDataset or a DataLoader."""

    def random_map(self, element, rng):
        encoded, label, _ = parse(element)
        return decode_crop(encoded, rng), np.int64(label)


def source(paths):
    return grain.sources.ArrayRecordDataSource(list(paths))


def map_dataset(paths, batch, seed=0, threads=16):
    """Endless batches of (images, labels): Grain's MapDataset read by `threads` threads."""
    return (
        grain.MapDataset.source(source(paths))
        .shuffle(seed=seed)
        .repeat()
        .random_map(DecodeCrop(), seed=seed)
        .to_iter_dataset(grain.ReadOptions(num_threads=threads))
        .batch(batch, drop_remainder=True)
    )


def data_loader(paths, batch, workers, seed=0):
    """Endless batches of (images, labels): Grain's DataLoader with `workers` processes."""
    data = source(paths)
    sampler = grain.samplers.IndexSampler(num_records=len(data), shuffle=True, seed=seed)
    return grain.DataLoader(
        data_source=data,
        sampler=sampler,
        operations=[DecodeCrop(), grain.transforms.Batch(batch, drop_remainder=True)],
        worker_count=workers,
    )


def order(paths, epochs, seed=0) -> tuple:
    """(ids, labels), each [epochs, records], in the order the MapDataset's shuffle reads."""
    data = source(paths)
    shuffled = grain.MapDataset.source(data).shuffle(seed=seed).repeat(epochs)
    parsed = np.array([parse(record)[1:] for record in shuffled]).reshape(epochs, len(data), 2)
    return parsed[..., 1], parsed[..., 0]
