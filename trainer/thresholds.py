"""Per-class decision thresholds of a multi-label head, and F1 at them (NumPy).

A sigmoid's 0.5 is the right cut only where a class's scores are calibrated and its errors
cost alike; rare classes in particular score low. So after training, each class's threshold is
the one that maximises its F1 on the validation split: with the class's validation scores
sorted from the highest, predicting the top k as positive gives F1 = 2 TP(k) / (positives +
k); the best k (the fewest predictions among equals) sets the threshold halfway between its
lowest score kept and the next one. A class without a positive in the validation split keeps
`default` (0.5), as does every class without a validation split.
"""

import numpy as np

DEFAULT = 0.5


def choose(scores, labels, default=DEFAULT):
    """float32 [C]: per class, the threshold maximising F1 of `scores >= threshold`.

    Args:
        scores: [N, C] of the validation split.
        labels: [N, C] multi-hot (0/1) of the same images.
    """
    scores, labels = np.asarray(scores, np.float32), np.asarray(labels) > 0.5
    return np.array(
        [_best(scores[:, c], labels[:, c], default) for c in range(scores.shape[1])], np.float32
    )


def _best(scores, positive, default):
    if not positive.any():
        return np.float32(default)
    order = np.argsort(-scores, kind='stable')
    ranked, hits = scores[order], positive[order]
    kept = np.arange(1, len(ranked) + 1)
    f1 = 2 * np.cumsum(hits) / (positive.sum() + kept)
    # Cut only between different scores: images of equal scores get the same answer.
    cuttable = np.append(ranked[1:] < ranked[:-1], True)
    k = int(np.argmax(np.where(cuttable, f1, -1.0)))
    lowest_kept = ranked[k]
    if k + 1 == len(ranked):
        return np.float32(lowest_kept)
    halfway = np.float32((np.float64(lowest_kept) + np.float64(ranked[k + 1])) / 2)
    # Rounded to float32, halfway may land on a score: then cut at the lowest score kept.
    return halfway if ranked[k + 1] < halfway <= lowest_kept else np.float32(lowest_kept)


def f1(scores, labels, thresholds):
    """{'micro_f1', 'macro_f1'} of `scores >= thresholds` against `labels` (a class without
    positives or predictions counts as F1 0 in the macro mean, as Keras' F1Score has it)."""
    predicted = np.asarray(scores) >= np.asarray(thresholds)[None, :]
    truth = np.asarray(labels) > 0.5
    tp = (predicted & truth).sum(axis=0).astype(np.float64)
    fp = (predicted & ~truth).sum(axis=0)
    fn = (~predicted & truth).sum(axis=0)
    per_class = np.divide(
        2 * tp, 2 * tp + fp + fn, out=np.zeros_like(tp), where=2 * tp + fp + fn > 0
    )
    total = 2 * tp.sum() + fp.sum() + fn.sum()
    return {
        'micro_f1': float(2 * tp.sum() / total) if total else 0.0,
        'macro_f1': float(per_class.mean()) if len(per_class) else 0.0,
    }
