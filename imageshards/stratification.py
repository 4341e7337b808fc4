"""How evenly the labels of a multi-label build spread over its parts (its splits, or the shards
of one split), by the measures of Sechidis, Tsoumakas and Vlahavas (2011), "On the
stratification of multi-label data":

    label_distribution     the mean, over labels i and parts j, of
                           | S_j^i / (|S_j| - S_j^i)  -  D^i / (|D| - D^i) |:
                           how far each part's ratio of positive to negative examples of a
                           label is from the whole's (0: every part has the whole's mix)
    examples_distribution  the mean, over parts, of | |S_j| - c_j |, c_j the records the part
                           was meant to hold (its fraction of the whole)
    labels_missing         the (label, part) pairs where the label has examples in the whole but
                           none in the part

A label on every image of the whole has no negative example and no ratio: it is left out of
label_distribution (and so is a part where a label is on every image: its ratio is infinite,
counted as the whole's). Pure arithmetic on dataset.json's counts: `verify` recomputes them.
"""


def measures(parts, wanted=None):
    """The measures above for `parts`, [(records, {label: images with it})]; `wanted`: the
    records each part was meant to hold, or None (no examples_distribution)."""
    total = sum(records for records, _ in parts)
    positives = {}
    for _, counts in parts:
        for label, n in counts.items():
            positives[label] = positives.get(label, 0) + n
    deviations = []
    for label, whole in positives.items():
        if whole >= total:
            continue
        ratio = whole / (total - whole)
        for records, counts in parts:
            n = counts.get(label, 0)
            if records and n < records:
                deviations.append(abs(n / (records - n) - ratio))
            elif records:
                deviations.append(0.0)
    found = {
        'label_distribution': round(sum(deviations) / len(deviations), 8) if deviations else 0.0,
        'labels_missing': sum(
            1 for label in positives for records, counts in parts if not counts.get(label)
        ),
    }
    if wanted is not None:
        gaps = [abs(records - want) for (records, _), want in zip(parts, wanted)]
        found['examples_distribution'] = round(sum(gaps) / len(gaps), 6) if gaps else 0.0
    return found
