"""Flags and typed configuration of `imageshards build`.

App flags are parsed here; everything else on the command line (`--runner`,
`--direct_num_workers`, `--project`, ...) is handed to Beam's `PipelineOptions` untouched. A YAML
file given with `--config` supplies defaults for both: its top-level keys are the app flags
(with underscores) and its `beam:` mapping holds pipeline options. The command line wins.
"""

import contextlib
import io

from imageshards import configfile
from imageshards import flags
from imageshards.kinds import features
from imageshards.shard_formats import registry as shard_formats
from pipelines.core import input_flags
from pipelines.core import settings
from pipelines.core import split_flags
from pipelines.core.settings import BuildConfig
from pipelines.core.settings import InputSettings


def _separator(text):
    """--label-separator: a non-empty string (a tab may be given as \\t)."""
    text = str(text).replace('\\t', '\t')
    if not text:
        raise ValueError('--label-separator: give a separator, or leave it out for whitespace')
    return text


def build_arg_parser() -> flags.ArgumentParser:
    parser = flags.ArgumentParser(
        prog='imageshards build',
        description='Globally shuffle labeled images into balanced TFRecord shards (Apache Beam). '
        "Beam's pipeline options (--runner, --direct_num_workers, --project, ...) go to Beam; "
        'any other flag is an error.',
    )
    parser.add_argument(
        '--config', help='YAML file with defaults for these flags and a beam: mapping'
    )
    parser.add_argument(
        '--input',
        help='directory tree <root>/<class>/..., a glob, a .csv/.jsonl manifest with '
        'path,label[,split][,group], a .tar/.tar.gz/.tgz/.zip of a class tree, per-class tars '
        'named after their class, WebDataset shards, MNIST IDX files, .npz/.npy arrays, or '
        'TFRecord files of tf.train.Examples; local or gs://, alone or as a glob. Archives are '
        'read in place, never extracted: a .tar or .zip by many workers at once, a .tar.gz (and '
        'a .gz IDX file, a compressed .npz) in one sequential work item per file',
    )
    input_flags.add_input_flags(parser)
    parser.add_argument('--output', help='output directory (local or gs://)')
    parser.add_argument(
        '--format',
        choices=features.FORMATS,
        default=BuildConfig.format,
        help='examples: image bytes in tf.train.Example; paths: shuffled path manifests',
    )
    parser.add_argument(
        '--shard-format',
        choices=sorted(shard_formats.FORMATS),
        default=BuildConfig.shard_format,
        help='tfrecord: TensorFlow, TFDS, DALI; array_record: random access for Grain and '
        "TFDS's as_data_source (a new global shuffle every epoch); parquet: one row per image "
        'for Hugging Face datasets, pandas, DuckDB',
    )
    parser.add_argument(
        '--seed', type=flags.integer(), default=BuildConfig.seed, help='shuffle and split seed'
    )
    parser.add_argument(
        '--splits',
        type=flags.words(split_flags.parse_splits),
        default=BuildConfig.splits,
        help='e.g. train=0.8,val=0.1,test=0.1 (a manifest split column wins)',
    )
    shards = parser.add_mutually_exclusive_group()
    shards.add_argument(
        '--num-shards',
        type=flags.integer(minimum=1),
        default=BuildConfig.num_shards,
        help='shards per split (default: from --shard-size-mb)',
    )
    shards.add_argument(
        '--shard-size-mb',
        type=flags.number(above=0),
        default=BuildConfig.shard_size_mb,
        help='target shard size in MB of image bytes',
    )
    parser.add_argument(
        '--dedup',
        action='store_true',
        help='drop byte-identical images, keeping the first in listing order',
    )
    parser.add_argument(
        '--overwrite',
        action='store_true',
        help='write into a non-empty output directory, replacing an earlier build',
    )
    parser.add_argument(
        '--max-pixels',
        type=flags.integer(minimum=1),
        default=BuildConfig.max_pixels,
        help='reject images declaring more pixels than this (decompression bombs)',
    )
    parser.add_argument(
        '--max-image-bytes',
        type=flags.integer(minimum=1),
        default=BuildConfig.max_image_bytes,
        help='reject an input larger than this as too_large, from its size alone, before it is '
        'read (default: %(default)s = 256 MiB, more than any photograph); memory and time per '
        'input stay bounded by it',
    )
    parser.add_argument(
        '--no-space-check',
        dest='space_check',
        action='store_false',
        help="build even where a local --output's disk has less free space than the inputs "
        'listed need (checked before the build starts, with the figures)',
    )
    parser.add_argument(
        '--io-threads',
        type=flags.integer(minimum=1),
        default=BuildConfig.io_threads,
        help='concurrent reads and checks per worker (default: 1 for local inputs, 32 for gs://)',
    )
    parser.add_argument(
        '--allow-root',
        dest='allow_roots',
        action='append',
        default=[],
        metavar='ROOT',
        help="a folder (local or gs://) that manifest rows may name besides the manifest's "
        'own; repeatable. Other paths, .. escapes and other URL schemes are rejected',
    )
    parser.add_argument(
        '--follow-symlinks',
        action='store_true',
        help='read symlinks that lead outside the input root (or the allowed roots) and '
        'descend symlinked folders; without it they are rejected and skipped',
    )
    parser.add_argument(
        '--label-levels',
        type=flags.words(features.parse_label_levels),
        default=InputSettings.label_levels,
        help='label levels, coarse to fine, e.g. family,species: a tree takes them from nested '
        'folders (<root>/<family>/<species>/...); a manifest has label/<level> columns',
    )
    parser.add_argument(
        '--label-separator',
        type=flags.words(_separator),
        default=InputSettings.label_separator,
        help='what separates the labels in one cell of a multi-label CSV manifest (a labels '
        'column, and its label/<level> cells) (default: whitespace)',
    )
    parser.add_argument(
        '--allow-missing-levels',
        action='store_true',
        help='keep images missing a label level value (id -1) instead of rejecting them',
    )
    parser.add_argument(
        '--no-analyze',
        dest='analyze',
        action='store_false',
        help='skip the tf.Transform analysis (transform_fn/, dataset.json "analysis"); the '
        'trainer then scales pixels to [0, 1] instead of normalizing them',
    )
    parser.add_argument(
        '--analysis-size',
        type=flags.integer(minimum=1),
        default=BuildConfig.analysis_size,
        help='side of the square every image is resized to for the pixel mean and standard '
        'deviation',
    )
    parser.add_argument(
        '--analysis-split',
        default=BuildConfig.analysis_split,
        help='the split the analysis reads',
    )
    parser.add_argument(
        '--analysis-sample',
        type=flags.integer(minimum=1),
        default=BuildConfig.analysis_sample,
        help='images of the analysis split whose pixels are measured: a fixed sample chosen by '
        'seed and key; dataset.json states the standard errors',
    )
    parser.add_argument(
        '--transform-image-size',
        type=flags.integer(minimum=1),
        default=BuildConfig.transform_image_size,
        help='side of the normalized image the tf.Transform graph makes of a record',
    )
    parser.add_argument(
        '--analysis-in-pipeline',
        action='store_true',
        help='write the tf.Transform output in steps of the pipeline also on the local runner '
        '(as on Dataflow; every worker then imports TensorFlow)',
    )
    parser.add_argument(
        '--resize-shorter-side',
        type=flags.integer(minimum=1),
        default=BuildConfig.resize_shorter_side,
        metavar='N',
        help='store each image whose shorter side is longer than N resized to N (aspect kept; '
        'decoded at the smallest JPEG DCT scale that covers it, Lanczos, EXIF orientation '
        'applied), as JPEG, or PNG for images with alpha or a palette; smaller ones as they are',
    )
    parser.add_argument(
        '--resize-quality',
        type=flags.integer(minimum=1, maximum=100),
        default=None,
        metavar='Q',
        help=f'JPEG quality of the resized images (default {settings.DEFAULT_QUALITY}; '
        'bench/RESULTS.md measures PSNR and size per quality)',
    )
    split_flags.add_split_flags(parser)
    parser.add_argument(
        '--chunk-size',
        type=flags.integer(minimum=1),
        default=BuildConfig.chunk_size,
        help='images per work item',
    )
    parser.add_argument(
        '--verbose',
        action='store_true',
        help="also show Beam's, TensorFlow's and the workers' own log lines",
    )
    return parser


def is_local_runner(runner) -> bool:
    """Whether a `--runner` value (None: not given) runs the pipeline on this machine."""
    return runner in (None, 'DirectRunner')


def beam_option_names() -> list:
    """Every flag of Beam's PipelineOptions classes (`--runner`, `--direct_num_workers`, ...)."""
    return flags.flag_names(_beam_parser())


def _beam_parser():
    """A parser of every pipeline option, as Beam's PipelineOptions.get_all_options builds it."""
    # pylint: disable=import-outside-toplevel,protected-access
    from apache_beam.options import pipeline_options

    parser = pipeline_options._BeamArgumentParser(allow_abbrev=False)
    classes = {str(cls): cls for cls in pipeline_options.PipelineOptions.__subclasses__()}
    for cls in classes.values():
        cls._add_argparse_args(parser)
    return parser


def check_beam_args(parser, beam_args) -> None:
    """Exits with a usage error naming the first of `beam_args` that no pipeline option knows.

    Beam itself only warns about a flag it does not know and goes on without it: a misspelt
    imageshards flag (`--num_shards 4`) would build with the default instead.
    """
    _, unknown = _beam_parser().parse_known_args(beam_args)
    if unknown:
        parser.error(
            flags.unknown_argument_message(
                unknown,
                parser.flag_names(),
                beam_option_names(),
                elsewhere=" (a flag must be imageshards build's or one of Beam's pipeline options)",
            )
        )


def _check_resize(parser, values):
    """Usage errors of --resize-shorter-side and --resize-quality; fills in the default quality."""
    if values['resize_quality'] is not None and not values['resize_shorter_side']:
        parser.error('--resize-quality sets the JPEG quality of --resize-shorter-side; give both')
    if values['resize_shorter_side'] and values['format'] == features.PATHS:
        parser.error(
            '--resize-shorter-side resizes the images an examples build stores; a paths build '
            'stores none (leave out --format paths, or --resize-shorter-side)'
        )
    if values['resize_quality'] is None:
        values['resize_quality'] = BuildConfig.resize_quality


def parse_build_args(argv) -> tuple:
    """Returns (BuildConfig, beam_args) from a command line."""
    parser, config, beam_args = _parse(argv)
    check_beam_args(parser, beam_args)
    return config, beam_args


def peek_build_config(argv) -> BuildConfig | None:
    """The BuildConfig of a command line, without importing Beam and without a word on
    stdout or stderr; None where the command line is wrong or asks for --help (the build will
    say how, or print it: once)."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return _parse(argv)[1]
    except (SystemExit, ValueError, OSError):
        return None


def _parse(argv):
    """(parser, BuildConfig, beam_args) of a command line, its Beam flags unchecked."""
    parser = build_arg_parser()
    config_beam_args = configfile.apply_defaults(
        parser,
        argv,
        passthrough_key='beam',
        convert={
            'splits': split_flags.yaml_splits,
            'label_levels': features.parse_label_levels,
            'allow_roots': lambda roots: [roots] if isinstance(roots, str) else list(roots),
        },
    )
    args, beam_args = parser.parse_known_args(argv)
    for flag in ('input', 'output'):
        if not getattr(args, flag):
            parser.error(f'--{flag} is required (on the command line or in --config)')
    values = {key: value for key, value in vars(args).items() if key not in ('config', 'verbose')}
    values['allow_roots'] = tuple(values['allow_roots'] or ())
    _check_resize(parser, values)
    split_flags.check_split_flags(parser, values)
    # A set's own splits (VOC's ImageSets, YOLO's folders) hold unless --splits is given.
    values['source_splits'] = values['splits'] == BuildConfig.splits
    inputs = InputSettings.take_flags(values)
    # Config-file pipeline options first, so the same flag on the command line overrides them.
    return parser, BuildConfig(**values, inputs=inputs), config_beam_args + beam_args
