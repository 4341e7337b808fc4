"""dataset.json: what a build says about itself, and reading a build by it (`Build`).

Keys (those of `REQUIRED_KEYS` always; `label_levels` ... with label levels; `analysis` unless
built with --no-analyze):
    format, seed, input, labels            `labels[i]` is the name of label id i
    kind, shard_format                     what the records hold (imageshards/kinds/) and the
                                           shards' file format (imageshards/shard_formats/),
                                           where not a classification in TFRecord files
    label_levels, allow_missing_levels     {level: names}; ids are positions
    multi_label, multi_label_levels        a multi-label build: records hold id lists; the
                                           levels where some image has several values
    resize                                 --resize-shorter-side's setting: {shorter_side,
                                           quality, filter, jpeg, png}; counts.resized
    counts                                 inputs == written + rejected + duplicates, skipped,
                                           reencoded, rejected_by_reason, skipped_by_reason
    splits                                 {split: num_records, num_shards, class_counts,
                                           formats, [level_counts, level_missing,] shards:
                                           [{path, index_file, num_records, num_bytes, sha256,
                                           class_counts, formats, ...}]}; `index_file` is the
                                           shard's index file, `formats` {stored format:
                                           records} (builds before them have none)
    features                               the records' schema (their kind's)
    grouping                               a build with groups, --near-duplicates or
                                           --splits-from: what keeps images in one split, and
                                           how well it held (imageshards/grouping_facts.py; each
                                           split then has its own: its SPLIT_KEYS)
    analysis                               the analysis split's statistics
    imageshards_version, created
Readers take shard paths from here, never from a glob.

A build is complete once `_SUCCESS` exists beside dataset.json (it is written last).
`load(..., complete=True)` is how the trainer and the tools that read like it (report, preview)
load a build: an unfinished one is refused. The build itself (before its last step), `inspect`
and `verify` (which reports a missing `_SUCCESS`) read what is there.

Files are read through `files`: this package's storage (Beam's FileSystems) by default, or any
object with the same `join`, `exists` and `read` (the trainer passes tf.io.gfile's:
trainer/dataset_info.py). How dataset.json is made from a build's facts and checked:
imageshards/dataset_facts.py.
"""

import collections
import dataclasses
import functools
import json

from imageshards import layout
from imageshards import storage
from imageshards.kinds import features
from imageshards.kinds import registry as kinds
from imageshards.shard_formats import registry as shard_formats

REQUIRED_KEYS = (
    ('dataset.json', ('format', 'labels', 'counts', 'splits')),
    ('counts', ('inputs', 'written', 'rejected', 'duplicates')),
    ('split', ('num_records', 'num_shards', 'class_counts', 'shards')),
    ('shard', ('path', 'num_records', 'num_bytes', 'sha256', 'class_counts')),
)
SHARD_KEYS = REQUIRED_KEYS[3][1]
# Of every shard since imageshards wrote index files, where its format keeps one: its index
# file, relative to the build (for TFRecord, DALI's tfrecord2idx format).
INDEX_KEY = 'index_file'
LEVEL_KEYS = ('level_counts', 'level_missing')  # of every split and shard, with label levels
# Of every split and shard since imageshards counted them: {stored format: records}. A reader
# whose split holds JPEGs alone decodes them without asking each record's format.
FORMATS_KEY = 'formats'


GROUPING = 'grouping'


class NotABuildError(FileNotFoundError):
    """A folder without dataset.json."""


class IncompleteBuildError(FileNotFoundError):
    """A build without _SUCCESS: it did not finish, or is still running."""


def is_build(output_dir, files=storage):
    """Whether `output_dir` is a build's output directory (it holds a dataset.json)."""
    return files.exists(files.join(output_dir.rstrip('/'), layout.DATASET_JSON))


def is_complete(output_dir, files=storage):
    """Whether the build in `output_dir` finished: its `_SUCCESS` exists."""
    return files.exists(files.join(output_dir.rstrip('/'), layout.SUCCESS))


def load(output_dir, *, complete, files=storage):
    """The dataset.json of the build in `output_dir`, as a dict.

    Args:
        complete: refuse a build that did not finish (no `_SUCCESS`).
        files: the file layer to read with (see the module's docstring).
    Raises:
        NotABuildError: there is no dataset.json.
        IncompleteBuildError: `complete`, and there is no `_SUCCESS`.
    """
    output_dir = output_dir.rstrip('/')
    path = files.join(output_dir, layout.DATASET_JSON)
    if not files.exists(path):
        raise NotABuildError(
            f'no {layout.DATASET_JSON} in {output_dir}: not the output directory of '
            f'`imageshards build` (where {layout.DATASET_JSON} and {layout.SUCCESS} are)'
        )
    if complete and not is_complete(output_dir, files):
        raise IncompleteBuildError(
            f'{output_dir} has no {layout.SUCCESS}: the build there did not finish (or is still '
            f'running); rerun `imageshards build` with --overwrite'
        )
    return json.loads(files.read(path).decode('utf-8'))


def format_counts(formats):
    """{format: records}, in name order (`formats`), of an iterable of stored formats or of a
    {format: records} mapping (a Counter summed over shards)."""
    return dict(sorted(collections.Counter(formats).items()))


def encode(dataset):
    """The bytes of dataset.json (byte-identical for the same build, but for `created`)."""
    return json.dumps(dataset, indent=2, ensure_ascii=False).encode('utf-8') + b'\n'


def split_entry(output_dir, splits, split):
    """The entry of `split` in dataset.json's `splits`; ValueError, naming them, if none."""
    if split not in splits:
        raise ValueError(
            f'split {split!r} is not in {output_dir}/{layout.DATASET_JSON} '
            f'(splits: {", ".join(splits) or "none"})'
        )
    return splits[split]


def shard_paths(output_dir, splits, split, join=storage.join):
    """The full paths of a split's shards, in the build's order (ValueError: no such split).

    Args:
        splits: dataset.json's `splits`.
    """
    entry = split_entry(output_dir, splits, split)
    return [join(output_dir, shard['path']) for shard in entry['shards']]


@dataclasses.dataclass(frozen=True)
class Build:
    """A finished build, as its dataset.json describes it: what the trainer and the tools read.

    Attributes:
        data_dir: the build's output directory.
        raw: the whole dataset.json.
        files: the file layer it was read with (storage, or tf.io.gfile's).
    """

    data_dir: str
    raw: dict
    files: object = storage

    @classmethod
    def load(cls, data_dir, *, complete=True, files=storage):
        """The build in `data_dir` (NotABuildError, IncompleteBuildError: see `load`)."""
        data_dir = data_dir.rstrip('/')
        return cls(data_dir, load(data_dir, complete=complete, files=files), files)

    @property
    def format(self):
        """'examples' or 'paths'."""
        return self.raw['format']

    @functools.cached_property
    def kind(self):
        """The RecordKind of the records (imageshards/kinds/)."""
        return kinds.of_build(self.raw)

    @functools.cached_property
    def shard_format(self):
        """The ShardFormat of the shard files (imageshards/shard_formats/)."""
        return shard_formats.of_build(self.raw)

    @property
    def labels(self):
        """Label names, by id."""
        return tuple(self.raw['labels'])

    @property
    def num_classes(self):
        return len(self.raw['labels'])

    @property
    def splits(self):
        """{split: its entry in dataset.json}, in the build's order."""
        return self.raw['splits']

    @property
    def counts(self):
        return self.raw['counts']

    @property
    def label_levels(self):
        """{level: names} of a build with label levels (ids are positions); else {}."""
        return {level: tuple(names) for level, names in self.raw.get('label_levels', {}).items()}

    @property
    def multi_label(self):
        """Whether records hold lists of label (and level) ids: `"multi_label": true`."""
        return bool(self.raw.get('multi_label', False))

    @property
    def multi_label_levels(self):
        """The label levels where some image has more than one value (a multi-label build's
        `multi_label_levels`); any other level holds at most one id per image."""
        return tuple(self.raw.get('multi_label_levels', ()))

    @property
    def resize(self):
        """--resize-shorter-side's setting ({shorter_side, quality, ...}), or None."""
        return self.raw.get('resize')

    def check_levels(self, levels):
        """Raises ValueError unless the build has every label level of `levels`."""
        unknown = [level for level in levels if level not in self.label_levels]
        if unknown:
            have = ', '.join(self.label_levels) or 'none'
            raise ValueError(
                f'--label-levels {",".join(unknown)}: not label levels of {self.data_dir} '
                f'(it has: {have}); build with label/<level> manifest columns or --label-levels'
            )

    def jpeg_only(self, split):
        """Whether the split's records store JPEGs and nothing else; False where the build did
        not count its formats (before `formats`) or stores paths, whose files may change."""
        if self.format != features.EXAMPLES:
            return False
        return set(self.split(split).get(FORMATS_KEY, ())) == {'jpeg'}

    def largest_sides(self):
        """(largest height, largest width) of the analysis split's images; None without an
        analysis (a build made with --no-analyze)."""
        analysis = self.raw.get('analysis')
        if not analysis:
            return None
        return analysis['height']['max'], analysis['width']['max']

    def split(self, name):
        """The split's entry in dataset.json (ValueError: the build has no such split)."""
        return split_entry(self.data_dir, self.splits, name)

    def shard_paths(self, split):
        """The split's shard files, in the build's order."""
        return shard_paths(self.data_dir, self.splits, split, join=self.files.join)

    def num_records(self, split):
        return self.split(split)['num_records']

    def class_counts(self, split):
        """Records per label id, in label order."""
        counts = self.split(split)['class_counts']
        return [counts.get(name, 0) for name in self.labels]

    def with_splits(self, splits):
        """This build with `splits` in place of its own (a test reads one shard of a split)."""
        return dataclasses.replace(self, raw={**self.raw, 'splits': splits})
