"""What the `imageshards build` command starts before it imports Beam, so that the seconds of
importing it are not spent waiting: the early listing of a local tree
(pipelines/local/early_listing.py), the tf.Transform graph process
(pipelines/local/graph_process.py) where the build analyses, and the local runner's warm
workers (pipelines/local/warm_workers.py), whose serving process the launcher forks once it has
imported (`imports_done`).

Each is a guess from the command line alone; a build that turns out not to want one stops it,
and `stop_untaken` stops whatever no build took. No Beam here: imported before Beam is.
"""

from pipelines.core import options
from pipelines.local import early_listing
from pipelines.local import graph_process
from pipelines.local import warm_workers

# Flags after which the build runs no local analysis beside its pipeline.
_NO_LOCAL_ANALYSIS = ('--no-analyze', '--analysis-in-pipeline', '--dry_run', '--help', '-h')


def start(argv) -> None:
    """Starts what a build of `argv` (the build's arguments) will likely want."""
    config = options.peek_build_config(argv)
    if config is None:
        return  # the build itself says what is wrong with its arguments
    early_listing.start_early(config)
    flags = {arg.split('=')[0] for arg in argv}
    # A Dataflow runner or config (guessed from the words alone) writes its transform itself.
    local_analysis = not (
        flags & set(_NO_LOCAL_ANALYSIS) or any('dataflow' in arg.lower() for arg in argv)
    )
    if local_analysis:
        graph_process.start_early(config)
    # Its serving process is forked from the launcher once it has imported Beam
    # (`imports_done`): it imports nothing of its own, so it is wanted beside the tf.Transform
    # process too.
    warm_workers.start_early(argv, fork=True)


def imports_done() -> None:
    """In the launcher, its imports done and frozen, no runner thread nor channel made yet."""
    warm_workers.serve_from_here()


def stop_untaken() -> None:
    """Stops what `start` started and no build took (or a build is done with)."""
    graph_process.stop_untaken()
    early_listing.stop_untaken()
    warm_workers.stop_untaken()
