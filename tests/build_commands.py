"""`imageshards build` command lines for tests, made from keywords instead of by hand.

    build_flags(root, out, seed=3, num_shards=2)    the flags, for launcher.run and launcher.main
    build_command(root, out, '--direct_num_workers=2')   the installed `imageshards build`
    module_command(root, out)                      `python -m pipelines.build`, the same command

Flags come in one order: --input, --output, then those the keywords name, then `extra` as given,
last, so that a flag a test repeats there wins over a keyword's.
"""

import os
import sys

IMAGESHARDS = os.path.join(os.path.dirname(sys.executable), 'imageshards')  # the installed command
IN_MEMORY = '--direct_running_mode=in_memory'  # the local runner in this process, no workers


def build_flags(
    source=None,
    output=None,
    *extra,
    fmt=None,
    splits=None,
    num_shards=None,
    seed=None,
    analyze=True,
    in_memory=False,
):
    """The flags of a build: --input `source` and --output `output` where given, --format,
    --splits, --num-shards and --seed where given, --no-analyze unless `analyze`, the local
    runner in this process where `in_memory`, then `extra`; every value as a string."""
    flags = [IN_MEMORY] if in_memory else []
    valued = (
        ('--input', source),
        ('--output', output),
        ('--format', fmt),
        ('--splits', splits),
        ('--num-shards', num_shards),
        ('--seed', seed),
    )
    for flag, value in valued:
        if value is not None:
            flags += [flag, str(value)]
    if not analyze:
        flags.append('--no-analyze')
    return flags + [str(flag) for flag in extra]


def build_command(*args, **keywords):
    """The installed `imageshards build` with build_flags(*args, **keywords)."""
    return [IMAGESHARDS, 'build', *build_flags(*args, **keywords)]


def module_command(*args, **keywords):
    """`python -m pipelines.build` with build_flags(*args, **keywords): the build command
    without the installed script."""
    return [sys.executable, '-m', 'pipelines.build', *build_flags(*args, **keywords)]
