"""`imageshards build` (also `python -m pipelines.build`): the build as a person runs it.

The one place that decides how a build runs as a command. The person's process supervises
(imageshards/supervise.py): it imports nothing of Beam, runs the build in a child process of a
session of its own, and on Ctrl-C ends it with its workers and says in one line what is left
where. The child starts what the build will likely want before it imports Beam
(pipelines/local/early.py: the early listing, the tf.Transform graph process, warm workers),
then imports the build (pipelines/launcher.py) and runs it.

Example:
    imageshards build --input data/ --output out/ --splits train=0.9,val=0.1 \\
        --direct_running_mode=multi_processing --direct_num_workers=2

On Dataflow, the same command with gs:// paths and `--config configs/dataflow.yaml` (and
`--project`, `--region`, `--temp_location`); see docs/dataflow.md.
"""

import gc
import sys

from imageshards import console
from imageshards import layout
from imageshards import storage
from imageshards import supervise
from pipelines.core import options
from pipelines.local import early


def command(argv) -> int:
    """Runs a build of `argv` as a command: in a supervised child process, which is this one
    where it is that child already; returns the exit status."""
    if not supervise.is_supervised():
        return supervise.run_supervised('pipelines.build', argv, lambda: interrupted_message(argv))
    # What this process's stderr shows set up first: the processes started early (the workers
    # among them) write to it through its filter (imageshards/console.py).
    console.configure_logging(verbose='--verbose' in argv, child_tracebacks=False)
    early.start(argv)
    # Beam's imports make objects that live as long as the process: collecting while they are
    # made walks them again and again (a fifth of the imports' CPU). Frozen once made, out of
    # the collector's sight, a collection walks only what the build makes (bench/RESULTS.md,
    # "The build's processes freeze what their imports made").
    gc.disable()
    from pipelines import launcher  # pylint: disable=import-outside-toplevel  (Beam: seconds)

    gc.freeze()
    gc.enable()
    early.imports_done()  # no runner thread nor channel yet: the workers' server forks here
    try:
        return launcher.main(argv)
    except KeyboardInterrupt:
        print(interrupted_message(argv), file=sys.stderr)
        return console.INTERRUPTED_EXIT_CODE


def build_arg_parser():
    """The flags of `imageshards build` (Beam's pipeline options aside)."""
    return options.build_arg_parser()


def interrupted_message(argv) -> str:
    """The line Ctrl-C leaves: what is left where, and how to go on."""
    try:
        output = storage.absolute(options.build_arg_parser().parse_known_args(argv)[0].output or '')
    except SystemExit:
        output = ''
    if not output:
        return 'imageshards build: interrupted'
    if not options.is_local_runner(_flag_value(argv, '--runner')):
        return (
            f'imageshards build: interrupted; a job already submitted to a remote runner goes on '
            f'and finishes {output} itself (cancel it in its console)'
        )
    return (
        f'imageshards build: interrupted; the unfinished build is in '
        f'{storage.join(output, layout.TEMP_DIR)} (no {layout.SUCCESS}): rerun the same '
        f'command with --overwrite to build again'
    )


def _flag_value(argv, flag):
    """The value of `flag` in `argv` (`--flag=value` or `--flag value`), or None."""
    for i, arg in enumerate(argv):
        if arg.startswith(flag + '='):
            return arg.split('=', 1)[1]
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
    return None


if __name__ == '__main__':
    sys.exit(command(sys.argv[1:]))
