"""How a build on the local runner with the analysis writes its tf.Transform output, after its
pipeline: from a cached graph of the same kind (pipelines/transform_cache.py), else from the
graph TFT writes in the helper process (pipelines/helper.py) beside the build, which the cache
then keeps; either way with the build's own assets, its labels and pixel statistics.

No Beam, no TensorFlow here.
"""

import logging
import os

from imageshards import storage
from pipelines import helper as helper_lib
from pipelines import transform_cache

_LOG = logging.getLogger(__name__)


class LocalTransform:
    """The helper process, started before listing unless a cached graph is likely, or the
    cached graph, once `prepare` knows the build's labels.

    Args:
        config: the BuildConfig.
    """

    def __init__(self, config):
        self._helper = helper_lib.take()
        if self._helper is None and not transform_cache.has_kind(
            config.format, config.label_levels, config.transform_image_size
        ):
            self._helper = helper_lib.Helper()
        self._settings = None
        self.cached = None  # the cached output this build's comes from

    @property
    def helper(self):
        """The helper process, where TFT writes the output; else None."""
        return self._helper

    def prepare(self, settings):
        """Chooses, from `settings` (transform_output.settings()), between the cache and the
        helper, and hands the helper its settings."""
        self._settings = settings
        if not storage.is_uri(settings['staging_dir']):
            self.cached = transform_cache.find(settings)
        if self.cached:
            _LOG.info('the tf.Transform graph: as built before, from %s', self.cached)
            self.close()
            return
        if self._helper is None:  # the cached graph went, or is not whole
            self._helper = helper_lib.Helper()
        self._helper.prepare({**settings, 'staging_dir': self._helper_output})

    @property
    def _helper_output(self):
        return os.path.join(self._helper.work_dir, 'output')

    def finish(self, labels, analysis):
        """Writes the output into the settings' staging folder; raises RuntimeError if the
        helper failed."""
        graph = self.cached
        if not graph:
            self._helper.finish()
            graph = self._helper_output
            transform_cache.keep(graph, self._settings)
        transform_cache.write(graph, self._settings['staging_dir'], labels, analysis)

    def close(self):
        """Stops the helper, if it still runs, and removes its folder."""
        if self._helper:
            self._helper.close()
            self._helper = None
