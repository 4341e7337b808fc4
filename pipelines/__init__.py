"""The Beam build of imageshards (DirectRunner locally, Dataflow at scale).

    build.py    the `imageshards build` command: list, prepare the output, run, report
    steps.py    the pipeline: its steps in order, each handed what it needs of the context
    runner.py   the runner: the local one (local/) or a remote one, Dataflow's needs met

The build's stages, in the order data flows, each a subpackage that runs on every runner:
inputs/ (listing), validation/ (every image checked, duplicates dropped), assignment/ (splits
and shards, metadata in packed blocks), writing/ (records, shards, the finished output) and
analysis/ (statistics and the tf.Transform output). What only the local runner needs is in
local/ (among it worker_watch.py: a worker process lost mid-run stops the build in one line);
stages never import it.
"""
