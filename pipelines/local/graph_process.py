"""How a local build writes its tf.Transform output, after its pipeline: from a graph of its
kind written before (pipelines/analysis/graph_cache.py), else from the graph that a process of
its own writes with TFT beside the build (`GraphProcess`); either way with the build's own
assets, its labels and pixel statistics (graph_cache.write).

The graph process's first seconds go to importing TensorFlow and tensorflow_transform, which on a
small build is the longest thing a build does (bench/RESULTS.md, "Against the peers: TFDS, Hugging
Face `datasets`, Keras"). So the `imageshards build` command starts it (`start_early`,
pipelines/local/early.py) before it imports Beam itself, where its arguments leave the analysis on
and the runner local and no graph of the build's kind is cached; the build takes it (`take`) once
its options are parsed, and stops it unless it needs it. What the process works on, it learns later
from its work folder: SETTINGS once the inputs are listed. It then writes the graph with neutral
statistics (pipelines/analysis/tft_pipeline.py `write`), waiting for nothing of the build.

    python -m pipelines.local.graph_process WORK_DIR   the graph process

No Beam and no TensorFlow at module level: the build command imports this before Beam.
"""

import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time

from imageshards import storage  # Beam only on first use, by then loaded
from pipelines.analysis import graph_cache

_LOG = logging.getLogger(__name__)
SETTINGS = 'settings.json'  # what the graph process's pipeline is made of, from the launcher
_early = None  # the GraphProcess `start_early` started, until the build takes it


class GraphProcess:
    """The process that writes a build's graph with TFT (`main`), and its work folder."""

    def __init__(self):
        self.work_dir = tempfile.mkdtemp(prefix='imageshards-analysis-')
        self._log = os.path.join(self.work_dir, 'transform.log')
        with open(self._log, 'wb') as log:
            self._process = subprocess.Popen(  # pylint: disable=consider-using-with
                [sys.executable, '-m', __name__, self.work_dir], stdout=log, stderr=log
            )

    def prepare(self, settings) -> None:
        """Hands the process what it builds its pipeline from (a TransformSettings): labels,
        format, levels, image size, and where it stages its output."""
        storage.write_atomically(
            os.path.join(self.work_dir, SETTINGS), json.dumps(settings.to_json()).encode('utf-8')
        )

    def lower_priority(self) -> None:
        """Lets the build's own processes go first: the graph process takes the time they
        leave."""
        try:
            os.setpriority(os.PRIO_PROCESS, self._process.pid, 10)
        except OSError:  # gone already, or not allowed: it only runs a little slower
            pass

    def finish(self) -> None:
        """Waits for the graph; raises RuntimeError with the process's last lines if it
        failed."""
        if self._process.poll() is None:
            _LOG.info('writing the tf.Transform graph')
        if self._process.wait() != 0:
            with open(self._log, encoding='utf-8', errors='replace') as f:
                tail = ''.join(f.readlines()[-20:])
            raise RuntimeError(f'writing the tf.Transform graph failed:\n{tail}')

    @property
    def exit_status(self) -> int | None:
        """The process's exit status, or None while it runs."""
        return self._process.poll()

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def close(self) -> None:
        """Stops the process, if it still runs, and removes its folder."""
        self.stop()
        shutil.rmtree(self.work_dir, ignore_errors=True)


class LocalTransform:
    """A local build's tf.Transform output: the graph process, started before listing unless a
    graph of the build's kind is cached, or the cached graph, once `prepare` knows the build's
    labels.

    Args:
        config: the BuildConfig.
    """

    def __init__(self, config):
        self._process = take()
        guessed = graph_cache.guessed_kind(config)
        if self._process is None and not graph_cache.has_kind(guessed, config.transform_image_size):
            self._process = GraphProcess()
        self._settings = None
        self.cached = None  # the cached output this build's comes from

    @property
    def process(self) -> GraphProcess | None:
        """The GraphProcess, where TFT writes the graph; else None."""
        return self._process

    def prepare(self, settings) -> None:
        """Chooses, from `settings` (the build's TransformSettings), between the cache and the
        graph process, and hands the process its settings."""
        self._settings = settings
        if not storage.is_uri(settings.staging_dir):
            self.cached = graph_cache.find(settings)
        if self.cached:
            _LOG.info('the tf.Transform graph: %s', graph_cache.describe(self.cached))
            self.close()
            return
        if self._process is None:  # the cached graph went, or is not whole
            self._process = GraphProcess()
        self._process.prepare(dataclasses.replace(settings, staging_dir=self._process_output))

    @property
    def _process_output(self):
        return os.path.join(self._process.work_dir, 'output')

    def finish(self, labels, analysis) -> None:
        """Writes the output into the settings' staging folder; raises RuntimeError if the
        graph process failed."""
        graph = self.cached
        if not graph:
            self._process.finish()
            graph = self._process_output
            graph_cache.keep(graph, self._settings)
        graph_cache.write(graph, self._settings.staging_dir, labels, analysis)

    def close(self) -> None:
        """Stops the graph process, if it still runs, and removes its folder."""
        if self._process:
            self._process.close()
            self._process = None


def start_early(config) -> GraphProcess | None:
    """Starts the graph process now unless `config` (the build's BuildConfig, peeked from its
    arguments) will not want it: no analysis, the analysis in the pipeline, or a graph of the
    build's kind cached. Returns the GraphProcess, or None."""
    global _early  # pylint: disable=global-statement
    if not config.analyze or config.analysis_in_pipeline:
        return None
    if graph_cache.has_kind(graph_cache.guessed_kind(config), config.transform_image_size):
        return None
    _early = GraphProcess()
    return _early


def take() -> GraphProcess | None:
    """The GraphProcess `start_early` started, or None; the caller owns it from now on."""
    global _early  # pylint: disable=global-statement
    early, _early = _early, None
    return early


def stop_untaken() -> None:
    """Stops a GraphProcess `start_early` started for a build that ended before taking it."""
    early = take()
    if early:
        early.close()


def _wait_for(path, interval=0.05):
    while not os.path.exists(path):
        time.sleep(interval)
    with open(path, encoding='utf-8') as f:
        return json.load(f)


def main(argv=None) -> int:
    """The graph process: WORK_DIR."""
    work_dir = (sys.argv[1:] if argv is None else argv)[0]
    # pylint: disable=import-outside-toplevel
    from imageshards import console

    console.configure_logging()
    # TensorFlow's import loads Keras's optimizers (and scikit-learn and matplotlib behind them,
    # a good part of the import's time and memory) only to register them for SavedModels that
    # hold them. A transform graph holds none, and TensorFlow imports without
    # them where they cannot be imported.
    sys.modules.setdefault('keras.src.optimizers', None)
    # pylint: disable=unused-import
    import tensorflow_transform.beam  # noqa: F401  (the seconds this process is for)
    from tfx_bsl.tfxio import tf_example_record  # noqa: F401

    from imageshards import tft_preprocessing  # noqa: F401
    from pipelines.analysis import tft_pipeline
    from pipelines.core.settings import TransformSettings

    settings = _wait_for(os.path.join(work_dir, SETTINGS))
    tft_pipeline.write(TransformSettings.from_json(settings))
    return 0


if __name__ == '__main__':
    sys.exit(main())
