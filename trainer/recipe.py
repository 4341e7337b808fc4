"""How the model learns (`TrainConfig.recipe`): its phases, the learning rate, the optimizer.

Started from trained weights (`--init-from`), a run has two phases, as in Keras'
transfer-learning guide:
    frozen  epochs [0, --frozen-epochs): the heads alone train, at --learning-rate; the layers
            copied from the source keep their weights
    whole   the epochs after: every layer trains, at --fine-tune-learning-rate (lower: the
            copied weights are moved, not replaced)
and its BatchNorm layers stay in inference mode all along (`trainable=False`: Keras then
normalizes with their moving statistics and keeps them): a few small batches of a new dataset
would otherwise replace statistics learnt over many (keras-team/keras#9214, #9965). The
exception is a small training split (trainer/small_splits.py): there its images are all the new
data there is, and a BatchNorm layer trains in the whole phase where its moving statistics
settle within it (`set_trainable`'s `adapt_steps`). From random weights, a run has one phase:
everything trains at --learning-rate.

In each phase the rate rises linearly from 0 over the first --warmup-epochs (at most half the
phase), then falls along a cosine to 0 at the phase's end (Model Garden's warm-up and cosine
decay; `--lr-schedule constant` stays at the peak). The optimizer is AdamW: decoupled weight
decay, not of biases nor BatchNorm's scale and offset (under mixed precision, with a dynamic
loss scale: `CountingLossScaleOptimizer`). The rate is a function of the
optimizer's step alone, and which phase an epoch belongs to a function of the epoch, so a run
resumed from a checkpoint goes on exactly where it stopped, also across the phase switch.
"""

import dataclasses
import math

import keras

from trainer.model import is_head

# AdamW decays weights, not offsets and scales (Model Garden's exclusions, by variable name).
NOT_DECAYED = ('bias', 'gamma', 'beta')
# A BatchNorm layer of a model from weights may adapt (set_trainable) where its moving
# statistics keep under e ** -SETTLED (5%) of the source's by the end of the whole phase.
SETTLED = 3.0


@dataclasses.dataclass(frozen=True)
class Phase:
    """Epochs [first, last) trained alike."""

    first: int
    last: int
    frozen: bool  # the heads alone train
    peak: float  # learning rate after the warm-up


@dataclasses.dataclass(frozen=True)
class Segment:
    """One `Model.fit` call: epochs [first, last) of `phase`, the first after `skip` steps."""

    first: int
    last: int
    skip: int
    phase: Phase


def phases(recipe, epochs) -> list:
    """The Phases of a run of `epochs` epochs with `recipe` (config.Recipe)."""
    if not recipe.from_weights:
        return [Phase(0, epochs, False, recipe.learning_rate)]
    frozen = min(recipe.frozen_epochs, epochs)
    found = [Phase(0, frozen, True, recipe.learning_rate)] if frozen else []
    if frozen < epochs:
        found.append(Phase(frozen, epochs, False, recipe.fine_tune_learning_rate))
    return found


def segments(done, steps_per_epoch, run_phases) -> list:
    """The fit calls left after `done` steps: the rest of an interrupted epoch alone, then
    whole epochs, each call within one phase."""
    start, skip = divmod(done, steps_per_epoch)
    found = []
    for phase in run_phases:
        first = max(phase.first, start)
        if first >= phase.last:
            continue
        if first == start and skip:
            found.append(Segment(first, first + 1, skip, phase))
            first += 1
        if first < phase.last:
            found.append(Segment(first, phase.last, 0, phase))
    return found


def schedule(recipe, run_phases, steps_per_epoch, min_schedule_steps=0) -> 'PhasedSchedule':
    """The learning rate as a function of the optimizer's step (PhasedSchedule).

    With `min_schedule_steps`, each phase's warm-up and cosine are laid over that many steps
    at least: a shorter phase ends partway down the cosine (trainer/small_splits.py).
    """
    parts = []
    for phase in run_phases:
        steps = (phase.last - phase.first) * steps_per_epoch
        warmup = min(round(recipe.warmup_epochs * steps_per_epoch), steps // 2)
        length = max(steps, min_schedule_steps)
        parts.append((phase.first * steps_per_epoch, length, phase.peak, warmup))
    return PhasedSchedule(parts, cosine=recipe.lr_schedule == 'cosine')


@keras.saving.register_keras_serializable(package='imageshards')
class PhasedSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Per phase (first step, steps, peak, warm-up steps): a linear warm-up from 0, then a
    cosine decay to 0 at the phase's end (keras' CosineDecay), or the peak (`cosine=False`)."""

    def __init__(self, parts, cosine=True):
        self.parts = [tuple(part) for part in parts]
        self.cosine = cosine
        self._decays = [self._decay(steps, peak, warmup) for _, steps, peak, warmup in self.parts]

    def _decay(self, steps, peak, warmup):
        alpha = 0.0 if self.cosine else 1.0  # 1: the rate stays at its peak
        if not warmup:
            return keras.optimizers.schedules.CosineDecay(peak, max(steps, 1), alpha)
        return keras.optimizers.schedules.CosineDecay(
            0.0, steps - warmup, alpha, warmup_target=peak, warmup_steps=warmup
        )

    def __call__(self, step):
        step = keras.ops.cast(step, 'float32')
        rate = keras.ops.zeros((), 'float32')
        for (first, _, _, _), decay in zip(self.parts, self._decays):
            rate = keras.ops.where(step >= first, decay(step - first), rate)
        return rate

    def get_config(self):
        return {'parts': self.parts, 'cosine': self.cosine}


def optimizer(recipe, run_phases, steps_per_epoch, min_schedule_steps=0):
    """AdamW on the recipe's schedule (`schedule`); under mixed_float16, in a
    CountingLossScaleOptimizer (compile would wrap it in Keras' own)."""
    adamw = keras.optimizers.AdamW(
        learning_rate=schedule(recipe, run_phases, steps_per_epoch, min_schedule_steps),
        weight_decay=recipe.weight_decay,
    )
    adamw.exclude_from_weight_decay(var_names=list(NOT_DECAYED))
    if keras.mixed_precision.global_policy().name == 'mixed_float16':
        return CountingLossScaleOptimizer(adamw)
    return adamw


class CountingLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """Keras' LossScaleOptimizer, which also counts the steps it skips.

    Under mixed_float16 a step whose scaled gradients overflow is skipped and the loss scale
    halved; the scale starts at 2**15, so a run's first steps often are. Keras 3 then leaves the
    step counter (`iterations`) as it was, where Keras 2 advanced it. The trainer reads the
    steps it has trained from that counter (where a resume starts, the checkpoints' numbers,
    whether a job is done): a run counted fewer steps than it trained, and a rerun of a
    finished job trained again. Counted, a skipped step is a step, as a batch trained on is.
    """

    def _stateful_handle_non_finite_grads(self):
        super()._stateful_handle_non_finite_grads()
        self.iterations.assign_add(1)


def layers_with_weights(model) -> list:
    """The layers of `model` that hold weights themselves, those of nested models included."""
    found = []
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            found.extend(layers_with_weights(layer))
        elif layer.weights:
            found.append(layer)
    return found


def whole_phase_steps(run_phases, steps_per_epoch) -> int:
    """The steps of the phases in which every layer trains."""
    return sum((p.last - p.first) * steps_per_epoch for p in run_phases if not p.frozen)


def set_trainable(model, frozen, from_weights, adapt_steps=0) -> None:
    """Marks which layers train: the heads alone where `frozen`. A BatchNorm layer of a model
    started from weights trains only outside the frozen phase and where `adapt_steps` (the
    whole phase's steps, where trainer/small_splits.py asks for them) let its moving statistics
    settle: the source's share of them, momentum ** steps, falls under e ** -SETTLED (small_cnn's
    momentum of 0.9 in 29 steps; a keras.applications model's 0.99 in 299). `Model.compile` must
    follow for it to take effect."""
    for layer in layers_with_weights(model):
        trains = is_head(layer.name) or not frozen
        if from_weights and isinstance(layer, keras.layers.BatchNormalization):
            trains = trains and layer.momentum**adapt_steps <= math.exp(-SETTLED)
        layer.trainable = trains
