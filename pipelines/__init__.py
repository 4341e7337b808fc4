"""The Beam build of imageshards (DirectRunner locally, Dataflow at scale).

    build.py     the `imageshards build` command: supervised, what it wants started before
                 Beam is imported, then the launcher (the one place that decides how it runs)
    launcher.py  the build in the launcher's process, read top to bottom: how it runs, the
                 inputs listed, the output prepared, the pipeline run, the output finished
    runner.py    how a build runs, decided once (`Launch`): the runner (the local one in local/,
                 or a remote one with Dataflow's needs met), a dry run, the local runner's
                 in-memory shuffle and progress, who writes the tf.Transform output
    steps.py     the pipeline: its steps in order, each handed what it needs of the context

Below them, each a subpackage: core/, what every stage shares (image metadata and its blocks,
the build's settings and context, counters, where an input's bytes are); the build's stages, in
the order data flows, each running on every runner and importing only core/ and the stages
before it: inputs/ (listing), validation/ (every image checked, duplicates dropped),
assignment/ (splits and shards), writing/ (records, shards, the output owned, prepared and
finished) and analysis/ (statistics and the tf.Transform output); and local/, what only the
local runner needs, which no stage imports. tests/test_structure.py holds this order.
"""
