"""Keras callbacks of a training run: resumable checkpoints, and the skipped images' count.

A checkpoint holds the model, the optimizer (whose step counter says where training stopped),
dropout's random state and the best epoch so far (trainer/best_epoch.py); SIGTERM (how Vertex
AI preempts a replica) makes the run write one after the current step and stop.
"""

import logging
import signal

import keras

_LOG = logging.getLogger(__name__)


class ResumableCheckpoints(keras.callbacks.Callback):
    """Checkpoints every `every` steps, at each epoch's end, and on SIGTERM (then stops)."""

    def __init__(self, manager, every):
        super().__init__()
        self._manager = manager
        self._every = every
        self.preempted = False
        self._previous_handler = None

    def on_train_begin(self, logs=None):
        self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)

    def on_train_end(self, logs=None):
        signal.signal(signal.SIGTERM, self._previous_handler or signal.SIG_DFL)

    def _on_sigterm(self, signum, frame):
        del signum, frame
        _LOG.warning('SIGTERM: writing a checkpoint after this step, then stopping')
        self.preempted = True

    def _step(self):
        return int(self.model.optimizer.iterations.numpy())

    def _save(self):
        _LOG.info('checkpoint %s', self._manager.save(checkpoint_number=self._step()))

    def on_train_batch_end(self, batch, logs=None):
        if self.preempted or (self._every and self._step() % self._every == 0):
            self._save()
        if self.preempted:
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        self._save()


class SkippedImagesLog(keras.callbacks.Callback):
    """Logs how many undecodable images --skip-bad-images has skipped so far."""

    def __init__(self, skipped):
        super().__init__()
        self._skipped = skipped

    def on_epoch_end(self, epoch, logs=None):
        if self._skipped.skipped:
            _LOG.warning('skipped %d undecodable images so far', self._skipped.skipped)
