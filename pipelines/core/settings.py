"""The build's settings, each a frozen record written once: what a step is handed of the
build's flags, so that a setting travels as one value instead of an argument list.

    BuildConfig  what to build: every flag of `imageshards build` (pipelines/core/options.py
                 parses them); pipeline (runner) options live apart, in Beam's PipelineOptions
    ResizeSpec   --resize-shorter-side and --resize-quality (pipelines/validation/resize.py
                 applies it)
    InputSettings  how --input is read: its form, the columns of a label file, class names
    TransformBy  who writes the tf.Transform output, as pipelines/runner.py decides it
    ValidationSettings  what validation checks of every input and keeps of a valid one
    AssignSettings      how images are assigned to splits and shards
    GroupingSettings    what keeps images together in one split (groups, near-duplicates, the
                        splits of an earlier build)
    TransformSettings   what the tf.Transform graph of a build is made of, and where it goes
    WriteSettings       what the writer needs to make a build's records and shards; `Sample`,
                        what it measures of them for the analysis
    AnalysisSettings    what the analysis of a split measures and states
    FinishSettings      what Finalize makes a build's last files of
"""

import dataclasses
import enum
import typing

from imageshards import storage
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards.shard_formats import registry as shard_formats

DEFAULT_QUALITY = 90  # --resize-quality's default (bench/RESULTS.md measures PSNR and size)
# --near-duplicate-distance's default, imagededup's: bench/RESULTS.md, "Splits you can trust",
# measures it.
NEAR_DUPLICATE_DISTANCE = 10


class TransformBy(enum.Enum):
    """Who writes a build's tf.Transform output: one choice, made once (pipelines/runner.py)."""

    NOBODY = 'nobody'  # --no-analyze
    PIPELINE = 'pipeline'  # steps of the build's pipeline: on Dataflow, --analysis-in-pipeline
    LAUNCHER = 'launcher'  # the launcher, after the pipeline (the local runner): from a graph
    # kept or shipped, or written beside the build (pipelines/local/graph_process.py)


@dataclasses.dataclass(frozen=True)
class ResizeSpec:
    """A build's --resize-shorter-side and --resize-quality."""

    shorter_side: int
    quality: int = DEFAULT_QUALITY

    def describe(self) -> dict:
        """dataset.json's `resize`: the setting, and how it is applied."""
        return {
            'shorter_side': self.shorter_side,
            'quality': self.quality,
            'filter': 'lanczos',
            'jpeg': 'baseline, 4:2:0, optimized Huffman tables',
            'png': 'images with alpha, a palette or 1-bit pixels',
        }


# What --input is (--input-form): each form's name, once (pipelines/inputs/forms.py detects
# and reads them); `auto` detects the form from names and content.
AUTO, TREE, MANIFEST, ARCHIVE, CLASS_ARCHIVES, WEBDATASET, IDX, ARRAYS, TFRECORD = INPUT_FORMS = (
    'auto',
    'tree',
    'manifest',
    'archive',
    'class-archives',
    'webdataset',
    'idx',
    'arrays',
    'tfrecord',
)
# Detection and segmentation sets (pipelines/inputs/coco.py, voc.py, yolo.py).
COCO, VOC, YOLO = OBJECT_FORMS = ('coco', 'voc', 'yolo')
INPUT_FORMS += OBJECT_FORMS


@dataclasses.dataclass(frozen=True)
class InputSettings:
    """How --input is read (pipelines/inputs/): its form, where its labels come from, where its
    rows may lead.

    Attributes:
        form: one of INPUT_FORMS; `auto` detects it from names and content (--input-form).
        path_column, label_column, labels_column: the columns (JSONL keys) of a manifest or a
            labels file that hold the path and the label or labels; None: path, label, labels.
        path_template: forms a row's path from its path column (`train/{}.png`); None: as is.
        labels_file: a CSV or JSONL file whose rows give a tree's or archive's labels by file
            name, instead of its folders; None.
        class_names: a file naming integer labels, one name per line; None: the integer.
        label_levels: a tree's label levels, one per folder below the root, coarse to fine; for
            a manifest, the `label/<level>` columns it must have (default: those it has).
        label_separator: what separates the labels of a multi-label CSV cell (None: whitespace).
        allow_roots: folders (local or URIs) that manifest rows may name besides the
            manifest's own.
        follow_symlinks: accept symlinks wherever they lead, and descend symlinked folders.
        image_root: where a COCO annotation file's images are; None: found beside it.
        source_splits: a set's own splits (VOC's ImageSets, YOLO's folders) place its images;
            False where --splits is given, which then splits every image.
        masks: a COCO file's objects keep their masks (--masks) or not (--no-masks); None: as
            the file's first annotations say (pipelines/inputs/coco.py).
    """

    form: str = AUTO
    path_column: str = None
    label_column: str = None
    labels_column: str = None
    path_template: str = None
    labels_file: str = None
    class_names: str = None
    label_levels: tuple = ()
    label_separator: str = None
    allow_roots: tuple = ()
    follow_symlinks: bool = False
    image_root: str = None
    source_splits: bool = True
    masks: bool = None

    @classmethod
    def take_flags(cls, values) -> 'InputSettings':
        """The settings of the parsed flags `values` ({dest: value}), taken out of it; the flag
        --input-form is `form`."""
        values['form'] = values.pop('input_form')
        fields = [field.name for field in dataclasses.fields(cls)]
        return cls(**{name: values.pop(name) for name in fields})

    @classmethod
    def from_json(cls, data) -> 'InputSettings':
        """The settings of `dataclasses.asdict`'s JSON (lists become tuples again)."""
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


@dataclasses.dataclass(frozen=True)
class BuildConfig:
    """What to build; pipeline (runner) options live apart, in Beam's PipelineOptions."""

    input: str
    output: str
    format: str = features.EXAMPLES
    seed: int = 0
    splits: tuple = (('train', 1.0),)
    num_shards: int = 0  # per split; 0 means derive from shard_size_mb
    shard_size_mb: float = 128.0  # target image bytes per shard, when num_shards is 0
    dedup: bool = False
    overwrite: bool = False
    max_pixels: int = 89_478_485  # Pillow's own decompression-bomb threshold
    max_image_bytes: int = 256 << 20  # larger inputs are `too_large`, rejected before a read
    space_check: bool = True  # refuse a local build whose inputs cannot fit on the output's disk
    io_threads: int = 0  # 0: 1 for local inputs, 32 for remote ones (see `threads`)
    chunk_size: int = 256
    inputs: InputSettings = InputSettings()  # how --input is read: its form, labels, roots
    allow_missing_levels: bool = False  # a missing level value gets id -1 instead of a rejection
    analyze: bool = True  # the analysis of the train split and its tf.Transform output
    analysis_size: int = 32  # images are measured resized to this square size
    analysis_split: str = 'train'
    analysis_sample: int = 1000  # images measured for the pixel statistics (analysis/analyze.py)
    transform_image_size: int = 224  # the side of the tf.Transform graph's `image` output
    analysis_in_pipeline: bool = False  # write the TFT output in pipeline steps on the local runner
    resize_shorter_side: int = 0  # images with a longer shorter side are stored resized; 0: none
    resize_quality: int = DEFAULT_QUALITY  # the JPEG quality of the resized images
    group_pattern: str = None  # a regular expression whose group in an image's key is its group
    near_duplicates: bool = False  # near-duplicate clusters stay in one split
    near_duplicate_distance: int = NEAR_DUPLICATE_DISTANCE  # bits apart, at most
    max_cluster_size: int = 0  # a larger near-duplicate cluster is not kept whole; 0: automatic
    splits_from: str = None  # an earlier build whose images keep their splits
    shard_format: str = shard_formats.DEFAULT  # the shards' file format (shard_formats.FORMATS)

    @property
    def resize(self) -> ResizeSpec | None:
        """The ResizeSpec of --resize-shorter-side, or None."""
        if not self.resize_shorter_side:
            return None
        return ResizeSpec(self.resize_shorter_side, self.resize_quality)

    @property
    def split_names(self) -> tuple:
        return tuple(name for name, _ in self.splits)

    @property
    def threads(self) -> int:
        """Concurrent reads and checks per worker.

        Locally, checking is CPU-bound Python (the local runner has a worker process per core),
        and handing files to a thread pool costs more than it saves (GIL hand-offs for every
        image); on gs:// every read waits tens of milliseconds for the network, which
        concurrent reads hide.
        """
        if self.io_threads:
            return self.io_threads
        return 32 if storage.is_uri(self.input) else 1


@dataclasses.dataclass(frozen=True)
class ValidationSettings:
    """What validation checks of every input and keeps of a valid one (pipelines/validation/).

    Attributes:
        label_ids: {label name: id}.
        kind: the RecordKind of the records (its labels, and what it makes of annotations).
        levels: ((level, {name: id}), ...) of a build with label levels, in level order.
        allow_missing_levels: an input missing a level value gets id -1 instead of being
            rejected as `missing_label_level`.
        max_pixels: images declaring more pixels are rejected (decompression bombs).
        max_image_bytes: inputs larger than this are rejected as too_large, unread.
        io_threads: inputs read and checked at once per worker (1: one after the other).
        reencode_dir: a `paths` build's output folder, where lossless copies go; else None.
        resize: the ResizeSpec of a build that stores images larger than it resized, or None.
        group_pattern: --group-pattern, the group of an image whose row names none.
        near_duplicates: keep each valid image's perceptual hash (--near-duplicates).
    """

    label_ids: dict
    kind: kinds.RecordKind = kinds.Classification()
    levels: tuple = ()
    allow_missing_levels: bool = False
    max_pixels: int = BuildConfig.max_pixels
    max_image_bytes: int = BuildConfig.max_image_bytes
    io_threads: int = 1
    reencode_dir: str = None
    resize: ResizeSpec = None
    group_pattern: str = None  # --group-pattern (pipelines/core/groups.py)
    near_duplicates: bool = False  # a perceptual hash of every valid image


@dataclasses.dataclass(frozen=True)
class AssignSettings:
    """How images are assigned to splits and shards (pipelines/assignment/assign.py).

    Attributes:
        seed: the build's seed.
        fractions: (split, fraction) pairs of --splits, for images without a split of their own.
        num_shards: shards per split; 0 derives it from `shard_bytes`.
        shard_bytes: target image bytes per shard.
    """

    seed: int = 0
    fractions: tuple = BuildConfig.splits
    num_shards: int = 0
    shard_bytes: float = BuildConfig.shard_size_mb * 1e6


@dataclasses.dataclass(frozen=True)
class TransformSettings:
    """What a build's tf.Transform graph is made of, and where it is written
    (pipelines/analysis/tft_pipeline.py); its kind and image size key the graphs kept and
    shipped (pipelines/analysis/graph_cache.py). Known once the inputs are listed.

    Attributes:
        labels: the build's label names, by id.
        kind: the RecordKind of the records as the graph reads them (`RecordKind.core`).
        image_size: the side of the transform's `image` output.
        staging_dir: where transform_fn/, transformed_metadata/ and metadata/ are written.
        temp_dir: TFT's own temporary folder.
    """

    labels: tuple
    kind: kinds.RecordKind = kinds.Classification()
    image_size: int = BuildConfig.transform_image_size
    staging_dir: str = None
    temp_dir: str = None

    def to_json(self) -> dict:
        """The settings as JSON-ready data, for the graph process (`from_json` reads them)."""
        return {
            **dataclasses.asdict(self),
            'labels': list(self.labels),
            'kind': kinds.to_json(self.kind),
        }

    @classmethod
    def from_json(cls, data) -> 'TransformSettings':
        kind = kinds.from_json(data['kind'])
        return cls(**{**data, 'labels': tuple(data['labels']), 'kind': kind})


@dataclasses.dataclass(frozen=True)
class GroupingSettings:
    """What keeps images together in one split (pipelines/assignment/grouping.py).

    Attributes:
        fractions: (split, fraction) pairs of --splits.
        seed: the build's seed.
        groups: the images have groups (a manifest's column, --group-pattern).
        near_duplicates: near-duplicate clusters are found and kept in one split.
        distance: the most bits two near-duplicates' hashes differ in.
        max_cluster_size: a larger cluster is reported, not kept whole; 0: automatic.
        splits_from: an earlier build (its output folder) whose images keep their splits.
        labels: the build's label names, by id.
    """

    fractions: tuple
    seed: int = 0
    groups: bool = False
    near_duplicates: bool = False
    distance: int = NEAR_DUPLICATE_DISTANCE
    max_cluster_size: int = 0
    splits_from: str = None
    labels: tuple = ()


class Sample(typing.NamedTuple):
    """What the writer measures for the analysis: the first records of each shard of a split
    (pipelines/writing/sample.py)."""

    split: str  # the split analysed
    size: int  # images measured of it, at most
    image_size: int  # the side they are measured at


@dataclasses.dataclass(frozen=True)
class WriteSettings:
    """What the writer needs to make a build's records and shards (pipelines/writing/).

    Attributes:
        kind: the RecordKind of the records (imageshards/kinds/).
        names: the LabelNames their ids stand for.
        shard_format: the ShardFormat of the shard files (imageshards/shard_formats/).
        input_base: what image keys are relative to (the listing's base).
        output_dir: the build's output directory (a `paths` build's re-encoded copies are there).
        temp_dir: where shards are written before they are staged for Finalize.
        seed: the build's seed (the order of records within a shard).
        io_threads: inputs read at once (> 1 for remote inputs).
        resize: the build's ResizeSpec, or None.
        max_image_bytes: the most read of an input whose record stores a resize or re-encoding
            of it (--max-image-bytes; the others are read up to their validated size).
        sample: the Sample to measure for the analysis, or None (no summaries).
    """

    kind: object
    names: object
    shard_format: object
    input_base: str
    output_dir: str
    temp_dir: str
    seed: int = 0
    io_threads: int = 1
    resize: ResizeSpec = None
    max_image_bytes: int = BuildConfig.max_image_bytes
    sample: Sample = None


@dataclasses.dataclass(frozen=True)
class AnalysisSettings:
    """What the analysis of a build's split measures and states (pipelines/analysis/analyze.py).

    Attributes:
        sample: the Sample the writer measures: the split, how many of its images, at which side.
        transform_image_size: the side of the tf.Transform graph's `image` output.
        labels: the build's label names, by id.
    """

    sample: Sample
    transform_image_size: int = BuildConfig.transform_image_size
    labels: tuple = ()


@dataclasses.dataclass(frozen=True)
class FinishSettings:
    """What Finalize makes a build's last files of: dataset.json and the files beside it, the
    tf.Transform output moved into place, `_SUCCESS` (pipelines/writing/finalize.py).

    Attributes:
        output_dir: OUT, absolute, without a trailing '/'.
        facts: what dataset.json states of the build (imageshards/dataset_facts.BuildFacts).
        dedup: the build writes duplicates.jsonl (--dedup).
        transform_staging: where the pipeline staged the tf.Transform output, for Finalize to
            move into place; None where the pipeline does not write it.
        completes: Finalize writes `_SUCCESS`; else the launcher does, after the tf.Transform
            output.
        lock_build: the token of the build's output lock, checked before `_SUCCESS`; None: none.
        listing_base: what image keys are relative to (near_duplicates.jsonl names paths).
        grouping: the GroupingSettings, or None.
        grouped_by: what gives images their groups: of ('column', 'pattern').
        group_pattern: --group-pattern, or None.
        fractions: (split, fraction) pairs of --splits; None where a manifest's split column
            placed images itself.
    """

    output_dir: str
    facts: object
    dedup: bool = False
    transform_staging: str = None
    completes: bool = True
    lock_build: str = None
    listing_base: str = ''
    grouping: GroupingSettings = None
    grouped_by: tuple = ()
    group_pattern: str = None
    fractions: tuple = None
