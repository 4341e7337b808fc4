"""What every stage of the build shares: the base below the stages, importing only the
foundation (imageshards/). What more than one stage needs goes here, not into one of them: a
field of the image metadata, a setting of the build, a way to reach an input's bytes.

    blocks.py    image metadata (ImageMeta) packed in blocks, and the BlockStore that keeps them
    context.py   what every step knows once the inputs are listed: ListingSummary, BuildContext
    counters.py  what the steps count: Beam counters, and live counts for the local display
    options.py   the flags of `imageshards build` (and a --config file), parsed into a BuildConfig
    input_flags.py  the flags of what --input is: its form, label columns, label and class files
    split_flags.py  --splits, and the flags that keep images together in a split (groups,
                 near-duplicates, --splits-from)
    sources.py   where an input's bytes are: a file from its stable key, or a part of a
                 container (an archive's member, an array's row, a record: Source); small inputs
    reading.py   an input's bytes read, wherever they are (Reader): the reader validation and
                 the writer share
    groups.py    which group an image belongs to: a manifest's column, --group-pattern
    settings.py  the build's settings as frozen records: BuildConfig, ResizeSpec,
                 ValidationSettings, TransformSettings, GroupingSettings; who writes the
                 tf.Transform output
"""
