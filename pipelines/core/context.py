"""What every step of a build knows once its inputs are listed: the listing's facts
(`ListingSummary`, made by pipelines/inputs/) and the build's context (`BuildContext`).

A BuildContext holds the flags (`BuildConfig`), the listing's facts and where things go. The
launcher makes one; `build_pipeline` hands each step what it needs of it, and Finalize takes it
whole (it pickles into the step: everything in it is plain data).
"""

import dataclasses
import logging
import typing

from imageshards import console
from imageshards import dataset_facts
from imageshards import file_names
from imageshards import layout
from imageshards import storage
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards.kinds.record_kind import LabelNames
from imageshards.shard_formats import registry as shard_formats
from pipelines.core.settings import AnalysisSettings
from pipelines.core.settings import AssignSettings
from pipelines.core.settings import BuildConfig
from pipelines.core.settings import FinishSettings
from pipelines.core.settings import GroupingSettings
from pipelines.core.settings import Sample
from pipelines.core.settings import TransformBy
from pipelines.core.settings import TransformSettings
from pipelines.core.settings import ValidationSettings
from pipelines.core.settings import WriteSettings

_LOG = logging.getLogger(__name__)
MANY_LABEL_SETS = 2_000_000  # a multi-label plan this large is worth a word (docs/scaling.md)


class ListingSummary(typing.NamedTuple):
    """What the pipeline needs to know of a build's inputs once they are listed."""

    labels: list
    num_inputs: int
    skipped: dict
    base: str
    largest_group: int  # images of the most common (manifest split, label), in a multi-label
    # build (split, first label of the set): the groups the shuffle ranks
    label_levels: dict = {}  # level -> sorted names (ids are positions), in level order
    manifest_splits: dict = {}  # split -> images a manifest's split column places
    multi_label: bool = False  # several labels per image
    multi_label_levels: tuple = ()  # the levels where some image has several values
    num_groups: int = 0  # distinct (manifest split, label or label set)
    input_bytes: int = 0  # of the inputs whose size listing knows (ListingCounts)
    small_input_bytes: int = 0  # of those of at most SMALL_INPUT_BYTES
    grouped: bool = False  # some input has a group of its own (a manifest's group column)
    kind: str = kinds.DEFAULT  # what the records hold (imageshards/kinds/), as the inputs say
    kind_options: dict = {}  # the kind's options the inputs decide (a detection's masks)
    # A kind of objects: {'read': annotations its reader found, 'rejected': [lines of
    # rejected_annotations.jsonl of those of no input (a COCO annotation of an unknown image)]}
    annotations: dict = {}
    # How the pipeline joins annotations to the inputs (a COCO file's, read by a worker:
    # pipelines/inputs/coco_join.py), plain data; None: the listing holds them
    annotation_join: dict = None

    @property
    def num_skipped(self) -> int:
        return sum(self.skipped.values())

    def log(self) -> None:
        """Logs what was listed: inputs, labels, levels, what a manifest placed, and what is
        worth a warning (one label; a multi-label plan of very many label sets)."""
        _LOG.info(
            'listed %s with %s (skipped %s%s)',
            console.plural(self.num_inputs, 'input'),
            console.plural(len(self.labels), 'label'),
            console.plural(self.num_skipped, 'file'),
            f': {self.skipped}' if self.num_skipped else '',
        )
        for level, names in self.label_levels.items():
            _LOG.info('label level %s: %s', level, console.plural(len(names), 'name'))
        if self.manifest_splits:
            _LOG.info(
                "the manifest's split column places %s itself (%s), whatever --splits says; "
                '--splits divides the rest',
                console.plural(sum(self.manifest_splits.values()), 'input'),
                ', '.join(f'{split} {n:,}' for split, n in self.manifest_splits.items()),
            )
        if self.multi_label and self.num_groups > MANY_LABEL_SETS:
            _LOG.warning(
                'the inputs hold %s distinct label sets: the split plan holds each (~100 bytes '
                'and ~40 us of one core apiece, docs/scaling.md), so planning takes ~%s',
                f'{self.num_groups:,}',
                console.duration(self.num_groups * 40e-6),
            )
        if len(self.labels) == 1:
            _LOG.warning(
                'every input has the label %r: a classifier cannot learn from one class, and '
                'the trainer refuses such a build; give images of two or more labels',
                self.labels[0],
            )


@dataclasses.dataclass(frozen=True)
class BuildContext:
    """A build's configuration, inputs and folders.

    Attributes:
        config: the flags.
        listing: the ListingSummary of the inputs.
        listing_path: the listing file (its lines are the work items).
        output_dir: OUT, absolute, without a trailing '/'.
        transform_dir: where the tf.Transform output is staged and TFT keeps its temporary files
            (the build's temporary folder, but for a local run with an object-store output).
        transform_by: who writes the tf.Transform output (TransformBy): nobody (--no-analyze),
            the pipeline's steps, or the launcher after the pipeline.
        lock_build: the token of the build's output lock (imageshards/output_lock.py), which
            Finalize checks is still this build's before it writes `_SUCCESS`; None: no lock.
    """

    config: BuildConfig
    listing: ListingSummary
    listing_path: str
    output_dir: str
    transform_dir: str
    transform_by: TransformBy
    lock_build: str = None

    def __post_init__(self):
        if (self.transform_by is TransformBy.NOBODY) == self.config.analyze:
            raise ValueError(
                f'a build {"with" if self.config.analyze else "without"} the analysis cannot '
                f'have its tf.Transform output written by {self.transform_by.value}'
            )

    @classmethod
    def create(
        cls,
        config,
        listing,
        listing_path,
        output_dir,
        *,
        transform_dir=None,
        lock_build=None,
        transform_by=None,
    ) -> 'BuildContext':
        """A context whose tf.Transform work goes to `transform_dir`, by default the build's
        temporary folder, and is written by `transform_by`, by default the pipeline's steps
        (nobody without the analysis)."""
        if transform_by is None:
            transform_by = TransformBy.PIPELINE if config.analyze else TransformBy.NOBODY
        transform_dir = transform_dir or storage.join(output_dir, layout.TEMP_DIR)
        return cls(
            config, listing, listing_path, output_dir, transform_dir, transform_by, lock_build
        )

    @property
    def temp_dir(self) -> str:
        """OUT/.imageshards-tmp: everything a build writes before it is complete."""
        return storage.join(self.output_dir, layout.TEMP_DIR)

    @property
    def transform_staging(self) -> str:
        """Where transform_fn/, transformed_metadata/ and metadata/ wait for Finalize."""
        return storage.join(self.transform_dir, layout.TRANSFORM_STAGING)

    @property
    def tft_temp_dir(self) -> str:
        return storage.join(self.transform_dir, layout.TFT_TEMP_DIR)

    @property
    def analysis_in_pipeline(self) -> bool:
        """Whether steps of the pipeline write the tf.Transform output."""
        return self.transform_by is TransformBy.PIPELINE

    @property
    def completes_in_pipeline(self) -> bool:
        """Whether Finalize writes `_SUCCESS`; else the launcher does, after the tf.Transform
        output."""
        return self.transform_by is not TransformBy.LAUNCHER

    @property
    def validation(self) -> ValidationSettings:
        """What validation checks of every input and keeps of a valid one."""
        config = self.config
        return ValidationSettings(
            label_ids=self.label_ids,
            kind=self.kind,
            levels=tuple(self.level_ids),
            allow_missing_levels=config.allow_missing_levels,
            max_pixels=config.max_pixels,
            max_image_bytes=config.max_image_bytes,
            io_threads=config.threads,
            reencode_dir=self.output_dir if config.format == features.PATHS else None,
            resize=config.resize,
            group_pattern=config.group_pattern,
            near_duplicates=config.near_duplicates,
        )

    @property
    def grouping(self) -> GroupingSettings | None:
        """What keeps images together in one split; None where nothing does (then the build is
        made exactly as before groups existed)."""
        config = self.config
        groups = bool(self.listing.grouped or config.group_pattern)
        if not (groups or config.near_duplicates or config.splits_from):
            return None
        return GroupingSettings(
            fractions=config.splits,
            seed=config.seed,
            groups=groups,
            near_duplicates=config.near_duplicates,
            distance=config.near_duplicate_distance,
            max_cluster_size=config.max_cluster_size,
            splits_from=config.splits_from and storage.absolute(config.splits_from).rstrip('/'),
            labels=tuple(self.listing.labels),
        )

    @property
    def transform_settings(self) -> TransformSettings:
        """What the build's tf.Transform graph is made of, and where it is staged."""
        return TransformSettings(
            labels=tuple(self.listing.labels),
            kind=self.kind.core(),
            image_size=self.config.transform_image_size,
            staging_dir=self.transform_staging,
            temp_dir=self.tft_temp_dir,
        )

    @property
    def assignment(self) -> AssignSettings:
        """How images are assigned to splits and shards."""
        config = self.config
        return AssignSettings(
            config.seed, config.splits, config.num_shards, config.shard_size_mb * 1e6
        )

    @property
    def kind(self) -> kinds.RecordKind:
        """What the build's records hold: the kind the inputs say, in the build's format."""
        config, grouping = self.config, self.grouping
        return kinds.named(self.listing.kind).for_build(
            config.format, bool(config.resize), bool(grouping and grouping.groups), self.listing
        )

    @property
    def names(self) -> LabelNames:
        """The names the records' label and level ids stand for."""
        levels = self.listing.label_levels.items()
        return LabelNames(tuple(self.listing.labels), tuple((k, tuple(v)) for k, v in levels))

    @property
    def finishing(self) -> FinishSettings:
        """What Finalize makes the build's last files of."""
        config, listing = self.config, self.listing
        return FinishSettings(
            output_dir=self.output_dir,
            facts=self.facts,
            dedup=config.dedup,
            transform_staging=self.transform_staging if self.analysis_in_pipeline else None,
            completes=self.completes_in_pipeline,
            lock_build=self.lock_build,
            listing_base=listing.base,
            grouping=self.grouping,
            grouped_by=('column',) * listing.grouped + ('pattern',) * bool(config.group_pattern),
            group_pattern=config.group_pattern,
            fractions=None if listing.manifest_splits else config.splits,
        )

    @property
    def analysis(self) -> AnalysisSettings | None:
        """What the analysis measures and states; None without it (--no-analyze)."""
        config = self.config
        if not config.analyze:
            return None
        sample = Sample(config.analysis_split, config.analysis_sample, config.analysis_size)
        return AnalysisSettings(sample, config.transform_image_size, tuple(self.listing.labels))

    @property
    def writing(self) -> WriteSettings:
        """What the writer needs to make the records and shards."""
        config, analysis = self.config, self.analysis
        return WriteSettings(
            kind=self.kind,
            names=self.names,
            shard_format=shard_formats.named(config.shard_format).for_records(
                self.kind, self.names
            ),
            input_base=self.listing.base,
            output_dir=self.output_dir,
            temp_dir=self.temp_dir,
            seed=config.seed,
            io_threads=config.threads,
            resize=config.resize,
            max_image_bytes=config.max_image_bytes,
            sample=analysis and analysis.sample,
        )

    @property
    def label_ids(self) -> dict:
        """{label name: id}."""
        return {name: i for i, name in enumerate(self.listing.labels)}

    @property
    def level_ids(self) -> list:
        """[(level, {name: id})] in the build's level order."""
        return [
            (level, {name: i for i, name in enumerate(names)})
            for level, names in self.listing.label_levels.items()
        ]

    @property
    def facts(self) -> dataset_facts.BuildFacts:
        """What dataset.json states about the build (imageshards/dataset_json.py)."""
        return dataset_facts.BuildFacts(
            kind=self.kind,
            seed=self.config.seed,
            input=file_names.display(self.config.input),  # text: a name's bytes as \\xNN
            labels=self.listing.labels,
            label_levels=self.listing.label_levels,
            allow_missing_levels=self.config.allow_missing_levels,
            inputs=self.listing.num_inputs,
            skipped=dict(self.listing.skipped),
            multi_label_levels=self.listing.multi_label_levels,
            fractions=self.config.splits,
            manifest_splits=self.listing.manifest_splits,
            resize=self.config.resize.describe() if self.config.resize else None,
            shard_format=self.config.shard_format,
            annotations=self.listing.annotations,
        )
