"""Label levels that nest: a coarse level derived from a finer one, so that the two agree.

Where every class of a finer level occurs under one class of a coarser level in the training
split (digits under parity, species under family), the coarse class is a function of the fine
one. Trained as two independent softmax heads, the coarse head must learn that function's
decision boundary from the shared features by itself, and a union of fine classes can be much
harder to separate than the classes are (odd digits against even ones: 0.825 parity accuracy
against 0.930 for the digit on the same images). Worse, the served answers can contradict each
other (digit 3, parity even).

So a nested coarse level is derived, not learned: its probabilities are the sums of the finer
level's over the fine classes each coarse class holds (`model.SumOver`), its loss (the
likelihood of the coarse label under those sums) trains the finer head, images whose finer
value is missing included, and it has no weights of its own. Its served top class is the
finer level's top class's coarse class (`consistent_top`): the coarse answer is right whenever
the fine one is, and never contradicts it. Each coarse level is derived from the finest
trained level nested in it, which is never itself derived.

The nesting is read from the training split's records (their label features only, no image is
decoded): one pass, logged with its time.
"""

import logging
import time

import numpy as np
import tensorflow as tf

from trainer import input_pipeline

_LOG = logging.getLogger(__name__)


def co_occurrence(info, split, levels):
    """{(level a, level b): int64 [classes of a, classes of b]} records of `split` holding
    class i of a and class j of b, for every ordered pair of `levels` (single-valued levels:
    ids, -1 missing)."""
    data = input_pipeline.make_dataset(
        info.data_dir,
        split,
        4096,
        training=False,
        info=info,
        label_levels=levels,
        decode_images=False,
    )
    sizes = {level: len(info.label_levels[level]) for level in levels}
    counts = {(a, b): np.zeros((sizes[a], sizes[b]), np.int64) for a in levels for b in levels}
    for labels, _ in data.as_numpy_iterator():
        for (a, b), table in counts.items():
            known = (labels[a] >= 0) & (labels[b] >= 0)
            np.add.at(table, (labels[a][known], labels[b][known]), 1)
    return counts


def parents_of(counts):
    """The coarse class of each fine class, from a [fine, coarse] co-occurrence table, or None
    unless each fine class occurs under exactly one coarse class and each coarse class holds
    at least one fine class (a coarse class the sums could never give would be unlearnable)."""
    under = counts > 0
    if not (under.sum(axis=1) == 1).all() or not under.any(axis=0).all():
        return None
    return tuple(int(parent) for parent in under.argmax(axis=1))


def nestings(counts, levels):
    """{coarse level: (finer level, parents)}: each level that nests classes of a level with
    more classes, derived from the one of those with the most classes."""
    derived = {}
    for coarse in levels:
        candidates = []
        for fine in levels:
            table = counts[(fine, coarse)]
            if fine != coarse and table.shape[0] > table.shape[1]:
                parents = parents_of(table)
                if parents is not None:
                    candidates.append((table.shape[0], fine, parents))
        if candidates:
            _, fine, parents = max(candidates, key=lambda c: c[0])
            derived[coarse] = (fine, parents)
    # The finest level nested in a coarse one nests in nothing finer (transitivity); should the
    # data break that, a level derived from a derived one is trained on its own instead.
    return {c: (f, p) for c, (f, p) in derived.items() if f not in derived}


def derive(info, split, levels):
    """{coarse level: (finer level, parents)} of the trained `levels` of the build (only its
    single-valued ones), read from the records of `split`; {} with fewer than two."""
    multi = set(info.multi_label_levels) if info.multi_label else set()
    single = [level for level in levels if level not in multi]
    if len(single) < 2:
        return {}
    started = time.monotonic()
    found = nestings(co_occurrence(info, split, single), single)
    _LOG.info(
        'label levels nested in the %s split (read in %.1f s): %s',
        split,
        time.monotonic() - started,
        ', '.join(f'{coarse} from {fine}' for coarse, (fine, _) in found.items()) or 'none',
    )
    return found


def consistent_top(fine_probabilities, parents):
    """The coarse class ids to serve: the coarse class of the finer level's top class."""
    return tf.gather(tf.constant(parents, tf.int64), tf.argmax(fine_probabilities, axis=-1))
