"""The process that writes a local build's tf.Transform output (pipelines/transform_output.py),
started as early as the build command allows.

Its first seconds go to importing TensorFlow and tensorflow_transform (5.3 s of CPU on the
2-core machine of bench/RESULTS.md), which on a small build is the longest thing a build does.
So the `imageshards build` command starts it (`start_early`) before it imports Beam itself,
where its arguments leave the analysis on and the runner local and no graph of the build's kind
is cached (pipelines/transform_cache.py: then the build needs no helper); the build takes it
(`take`) once its options are parsed, and stops it unless it needs it. What it works on, it
learns later from its work folder: SETTINGS once the inputs are listed.

No Beam here: this module is imported before Beam is.
"""

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile

from imageshards import storage  # Beam only on first use, by then loaded
from pipelines import options
from pipelines import transform_cache

_LOG = logging.getLogger(__name__)
SETTINGS = 'settings.json'  # what the helper's pipeline is made of, from the launcher
_NOT_LOCAL_OR_NO_ANALYSIS = ('--no-analyze', '--analysis-in-pipeline', '--dry_run', '--help', '-h')
_early = None  # the helper `start_early` started, until the build takes it


class Helper:
    """The helper process (`python -m pipelines.transform_output WORK_DIR`) and its folder."""

    def __init__(self):
        self.work_dir = tempfile.mkdtemp(prefix='imageshards-analysis-')
        self._log = os.path.join(self.work_dir, 'transform.log')
        with open(self._log, 'wb') as log:
            self._process = subprocess.Popen(  # pylint: disable=consider-using-with
                [sys.executable, '-m', 'pipelines.transform_output', self.work_dir],
                stdout=log,
                stderr=log,
            )

    def prepare(self, settings):
        """Hands the helper what it builds its pipeline from: labels, format, levels, image
        size, and where it stages its output."""
        storage.write_atomically(
            os.path.join(self.work_dir, SETTINGS), json.dumps(settings).encode('utf-8')
        )

    def lower_priority(self):
        """Lets the build's own processes go first: the helper takes the time they leave."""
        try:
            os.setpriority(os.PRIO_PROCESS, self._process.pid, 10)
        except OSError:  # gone already, or not allowed: it only runs a little slower
            pass

    def finish(self):
        """Waits for the TFT output; raises RuntimeError with the helper's last lines if it
        failed."""
        if self._process.poll() is None:
            _LOG.info('writing the tf.Transform output')
        if self._process.wait() != 0:
            with open(self._log, encoding='utf-8', errors='replace') as f:
                tail = ''.join(f.readlines()[-20:])
            raise RuntimeError(f'writing the tf.Transform output failed:\n{tail}')

    @property
    def exit_status(self):
        """The process's exit status, or None while it runs."""
        return self._process.poll()

    def stop(self):
        if self._process.poll() is None:
            self._process.kill()
            self._process.wait()

    def close(self):
        """Stops the process, if it still runs, and removes its folder."""
        self.stop()
        shutil.rmtree(self.work_dir, ignore_errors=True)


def start_early(argv):
    """Starts the helper now unless `argv` (the build's arguments) says the build will not
    want it: no analysis, the analysis in the pipeline, a dry run, help, or a Dataflow runner
    or config (a guess from the words alone: a build that turns out not to want it stops it),
    or a graph of the build's kind cached (pipelines/transform_cache.py). Returns the helper,
    or None.
    """
    global _early  # pylint: disable=global-statement
    flags = {arg.split('=')[0] for arg in argv}
    if flags & set(_NOT_LOCAL_OR_NO_ANALYSIS) or any('dataflow' in arg.lower() for arg in argv):
        return None
    config = options.peek_build_config(argv)
    if config is None or not config.analyze or config.analysis_in_pipeline:
        return None
    if transform_cache.has_kind(config.format, config.label_levels, config.transform_image_size):
        return None
    _early = Helper()
    return _early


def take():
    """The helper `start_early` started, or None; the caller owns it from now on."""
    global _early  # pylint: disable=global-statement
    early, _early = _early, None
    return early


def stop_untaken():
    """Stops a helper `start_early` started for a build that ended before taking it."""
    early = take()
    if early:
        early.close()
