"""Small training splits: every image in every epoch; from weights, a fine-tuning rate kept up
and BatchNorm adapted.

An epoch of n training images at batch b is floor(n / b) full batches; the input pipeline drops
the rest, other images each epoch. Over many batches that is a sliver of the split; over few it
is much of it: 15 images at batch 8 are one batch an epoch, and 7 images go unseen in each.
So where a split holds fewer than SMALL_SPLIT_BATCHES batches, an epoch is ceil(n / b) steps
and its last batch is filled up with the epoch's first images once more, in crops of their own
(trainer/input_pipeline.py, `batches_per_epoch`): every image is in every epoch, a few twice.
Filled, not run on into the next epoch's order: an epoch's batches stay a function of (seed,
epoch), so a resume finds them where they were, and every epoch holds every image (a batch
that ran on would leave out of the next epoch the images it took from it).

Such a split trains few steps: 30 epochs of 15 images at batch 8 are 60. Started from trained
weights (`--init-from`), the run then changes in two ways (trainer/recipe.py):
- each phase's warm-up and cosine are laid over SCHEDULE_STEPS steps at least, so that a
  shorter phase ends partway down the cosine, near its peak, instead of at 0: the whole model
  fine-tunes at the lower --fine-tune-learning-rate, its validation loss still falls at the
  last epoch, and a cosine down to 0 only takes away steps it needs;
- its BatchNorm layers train in the whole-model phase where their moving statistics settle
  within it (`recipe.set_trainable`'s `adapt_steps`): the split is all the new data there is,
  and the source's statistics, kept, normalize it less well than its own.
A run from random weights keeps its schedule as it is. bench/RESULTS.md, "Few images, every
image", has the figures (the few-shot digits: each change measured with and without).
A phase of SCHEDULE_STEPS or more keeps its cosine down to 0.

A split of SMALL_SPLIT_BATCHES batches or more trains as before: the same steps, the same
batches, the same schedule.
"""

import dataclasses

from trainer import input_pipeline
from trainer import shard_reading

# Below this many batches of the training split (per input pipeline), the remainder is not
# dropped: from here on it is under a tenth of an epoch.
SMALL_SPLIT_BATCHES = 10
# The least length of the phases' schedules of a small split's run from trained weights, in
# steps. For scale: BiT's HyperRule (Kolesnikov et al. 2020) fine-tunes its smallest datasets
# for 500 steps.
SCHEDULE_STEPS = 500


@dataclasses.dataclass(frozen=True)
class EpochSteps:
    """The steps of an epoch of the training split, and what the small-split rule made of the
    run."""

    steps: int
    small_split: int = 0  # records of the split where the rule applied, else 0
    repeated: int = 0  # images an epoch holds twice to fill the pipelines' last batches
    min_schedule_steps: int = 0  # the least length of each phase's schedule (recipe.schedule)
    adapts_batch_norm: bool = False  # BatchNorm trains in the whole phase (recipe.set_trainable)

    def note(self) -> dict:
        """What metrics.json says of the rule, where it applied ({} where not)."""
        if not self.small_split:
            return {}
        schedule = (
            f"; each phase's warm-up and cosine laid over {self.min_schedule_steps} steps at "
            'least, BatchNorm layers adapting where they settle'
            if self.min_schedule_steps
            else ''
        )
        return {
            'small_split': f'{self.small_split} training images, fewer than '
            f'{SMALL_SPLIT_BATCHES} batches: {self.steps} steps an epoch with every image in '
            f'it ({self.repeated} again to fill the last batch){schedule}'
        }


def epoch_steps(
    info, split, batch_size, pipelines=1, patches_per_image=0, from_weights=False
) -> EpochSteps:
    """The steps of an epoch of `split` at the global `batch_size`, read by `pipelines` input
    pipelines (each the same steps), for a run started from trained weights or not.

    A large split's epoch is the full batches of the smallest share. A small split's is the
    steps that the largest share fills: every pipeline fills its last batches with its own
    records again, so that each reads all of its share, also where shares differ by a record
    (a random-access build on 2 workers: 17 records are 9 and 8).
    """
    shares = shard_reading.records_per_worker(info, split, pipelines)
    per_image = max(1, patches_per_image)
    per_pipeline = batch_size // pipelines
    if min(shares) * per_image >= SMALL_SPLIT_BATCHES * per_pipeline or not min(shares):
        steps = input_pipeline.steps_per_epoch(
            info, split, batch_size, pipelines, patches_per_image
        )
        return EpochSteps(steps)
    steps = -(-max(shares) * per_image // per_pipeline)
    floor = SCHEDULE_STEPS if from_weights else 0
    repeated = steps * per_pipeline * pipelines - sum(shares) * per_image
    return EpochSteps(steps, sum(shares), repeated, floor, from_weights)
