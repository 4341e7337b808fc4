"""What only the local runner needs, kept apart from what runs everywhere. Imports the
foundation, the base (pipelines/core/) and the stages; no stage imports it, only
pipelines/runner.py.

    direct.py            the FnApiRunner on every core, and its workers' log lines condensed
    early.py             what the command starts before Beam is imported
    early_listing.py     a local tree listed in a process of its own meanwhile
    warm_workers.py      worker processes whose imports are done meanwhile
    graph_process.py     the tf.Transform output written by the launcher (a graph process)
    spill.py             blocks spilled to files, and the bytes of small images kept
    progress.py          the live display of the workers' counts
    worker_watch.py      a worker process lost mid-run stops the build in one line
"""
