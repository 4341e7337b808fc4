"""The flags of `imageshards build` that say how images are split: --splits, and the flags that
keep images together in one split (groups, near-duplicates, an earlier build's splits;
docs/building/splits.md)."""

from imageshards import flags
from imageshards import layout
from pipelines.core.groups import parse_group_pattern
from pipelines.core.settings import BuildConfig


def parse_splits(text) -> tuple:
    """Parses `train=0.8,val=0.1,test=0.1` into (('train', 0.8), ...); fractions must sum to 1."""
    splits = []
    for part in str(text).split(','):
        name, sep, fraction = part.strip().partition('=')
        name = name.strip()
        if not sep or not layout.SPLIT_NAME.match(name):
            raise ValueError(f'--splits: expected name=fraction, got {part!r} in {text!r}')
        try:
            value = float(fraction)
        except ValueError:
            raise ValueError(f'--splits: {fraction!r} is not a number in {text!r}') from None
        if not 0 <= value <= 1:
            raise ValueError(f'--splits: fraction {value} of {name!r} is outside [0, 1]')
        if name in dict(splits):
            raise ValueError(f'--splits: {name!r} appears twice in {text!r}')
        splits.append((name, value))
    total = sum(value for _, value in splits)
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f'--splits: fractions sum to {total:g}, not 1, in {text!r}')
    return tuple(splits)


def add_split_flags(parser) -> None:
    """The flags that keep images together in one split (docs/building/splits.md)."""
    parser.add_argument(
        '--group-pattern',
        type=flags.words(parse_group_pattern),
        default=BuildConfig.group_pattern,
        metavar='REGEX',
        help="the group of an image whose manifest row names none: the pattern's group named "
        "'group', or its first, in the image's key (its path below the input root); every "
        'image of a group lands in one split',
    )
    parser.add_argument(
        '--near-duplicates',
        action='store_true',
        help='find near-duplicates (re-encoded, resized, cropped, brightened, blurred copies, '
        'frames of a pan) by perceptual hashes of each image and nine 90%% windows of it, '
        'verified on aligned thumbnails, and keep each cluster of them in one split; '
        'OUT/near_duplicates.jsonl lists the clusters',
    )
    parser.add_argument(
        '--near-duplicate-distance',
        type=flags.integer(minimum=0, maximum=16),
        default=BuildConfig.near_duplicate_distance,
        metavar='BITS',
        help='two images are candidate near-duplicates when the 64-bit hashes of a window of '
        'each differ in at most this many bits (bench/RESULTS.md measures the default)',
    )
    parser.add_argument(
        '--max-cluster-size',
        type=flags.integer(minimum=2),
        default=None,
        metavar='N',
        help='a near-duplicate cluster of more images (blank or uniform ones share a hash) is '
        'reported, not kept in one split (default: 1%% of the images, at least 16)',
    )
    parser.add_argument(
        '--splits-from',
        metavar='PREVIOUS_OUTPUT',
        default=BuildConfig.splits_from,
        help='an earlier build (local or gs://): its images (matched by key, or by content for '
        'a renamed file) keep their splits; new images join their group or cluster, the others '
        "fill each split's label mix",
    )


def check_split_flags(parser, values) -> None:
    """Usage errors of the near-duplicate flags; fills in the automatic cluster cap."""
    distance = values['near_duplicate_distance'] != BuildConfig.near_duplicate_distance
    if distance and not values['near_duplicates']:
        parser.error('--near-duplicate-distance tunes --near-duplicates; give both')
    if values['max_cluster_size'] is not None and not values['near_duplicates']:
        parser.error('--max-cluster-size caps --near-duplicates clusters; give both')
    values['max_cluster_size'] = values['max_cluster_size'] or 0


def yaml_splits(value):
    """A YAML `splits:` value: `train=0.8,val=0.2` or a mapping {train: 0.8, val: 0.2}."""
    if isinstance(value, dict):
        value = ','.join(f'{name}={fraction}' for name, fraction in value.items())
    return parse_splits(value)
