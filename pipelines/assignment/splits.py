"""Dividing images among splits: each class in proportion (`stratified_split_counts`), or in a
multi-label build each label set by iterative stratification (`iterative_split_counts`).

An image of a multi-label build has a set of labels, and every label should be spread over the
splits in their proportions, rare labels first: Sechidis, Tsoumakas and Vlahavas (2011),
"On the stratification of multi-label data". Their algorithm takes the label with the fewest
examples left, gives each of its examples to the split that most wants that label (ties: the
split that most wants examples), counts what that gives every other label of the example, and
repeats. It needs only the label sets, not the images: images with the same set are
interchangeable. So it runs here over the counts of (label set), as the single-label plan runs
over the counts of each class (pipelines/assignment/plan.py), and the images of a set then
take their splits in the order of their seeded rank, like the images of a class. Its state is a
number per (split, label); its steps a few per label set, not per image.

Within one label's turn, the examples left are divided among splits by levelling the splits'
wants for that label (`_level`), then among the label sets that hold them in proportion
(`stratified_split_counts`): as the original, one example at a time in a random order, would
divide them on average. The result is deterministic: ties go to the lower label id and split.
"""

import collections
import heapq
import math


def stratified_split_counts(class_sizes, fractions):
    """Divides each class among splits: every count within one of `size * fraction`.

    Where a class's share must round up in some split, the split that is furthest behind its
    overall share (over the classes so far) gets it, so split totals stay proportional too.

    Args:
        class_sizes: [n_c] per class, in label order.
        fractions: [f_s] per split, summing to 1.
    Returns:
        [[count per split] per class].
    """
    quotas = [[size * fraction for fraction in fractions] for size in class_sizes]
    return _rounded(class_sizes, quotas, fractions, [0] * len(fractions), remainders_first=False)


def split_counts(classes, sizes, fractions, placed=None, multi_label=False):
    """[[count per split] per class] of `classes` (label ids, or where `multi_label` tuples of
    them: label sets) holding `sizes` images each; with `placed` ([[count per split] per class]
    of images already in a split), divided to bring every class's split counts, placed and
    divided together, to its share (`fill_split_counts`)."""
    if multi_label:
        return iterative_split_counts(classes, sizes, fractions, placed)
    if placed is not None:
        return fill_split_counts(sizes, placed, fractions)
    return stratified_split_counts(sizes, fractions)


def fill_split_counts(class_sizes, placed, fractions):
    """Divides each class's images among splits that already hold `placed` of it: in
    proportion to what each split lacks of its share of the class (placed and divided
    together), each count within one of that; rounding goes to the largest remainders, ties to
    the split furthest behind its share of all images.

    Args:
        class_sizes: [n_c] per class to divide.
        placed: [[images of class c already in split s] per split] per class.
        fractions: [f_s] per split, summing to 1.
    """
    totals = [sum(column) for column in zip(*placed)] if placed else [0] * len(fractions)
    quotas = []
    for size, held in zip(class_sizes, placed):
        share = [max(0.0, (size + sum(held)) * f - h) for f, h in zip(fractions, held)]
        lacking = sum(share)
        quotas.append(
            [size * s / lacking for s in share] if lacking else [size * f for f in fractions]
        )
    return _rounded(class_sizes, quotas, fractions, totals, remainders_first=True)


def _rounded(sizes, quotas, fractions, totals, remainders_first):
    """[[count per split] per class]: each class's `quotas` rounded down, then one more in the
    first splits in line, as many as its size still lacks. In line: the largest remainders
    first where `remainders_first`, else only the splits with a remainder; then the split
    furthest behind its share of all images so far (`totals`: those already in each split);
    then the lower split."""
    whole = sum(totals)
    rows = []
    for size, quota in zip(sizes, quotas):
        row = [math.floor(q) for q in quota]
        whole += size
        behind = [totals[s] + row[s] - whole * fractions[s] for s in range(len(row))]
        if remainders_first:
            line = sorted(range(len(row)), key=lambda s: (row[s] - quota[s], behind[s], s))
        else:
            line = sorted(
                (s for s, q in enumerate(quota) if q > row[s]), key=lambda s: (behind[s], s)
            )
        for s in line[: size - sum(row)]:
            row[s] += 1
        totals = [total + count for total, count in zip(totals, row)]
        rows.append(row)
    return rows


def iterative_split_counts(label_sets, sizes, fractions, placed=None):
    """Divides the images of each label set among splits.

    Args:
        label_sets: distinct tuples of label ids (one may be empty: images with no label).
        sizes: images of each set.
        fractions: [f_s] per split, summing to 1.
        placed: [[images of the set already in split s] per split] per label set, or None:
            the divided images then bring every label's counts, placed and divided together,
            to its share.
    Returns:
        [[count per split] per label set].
    """
    placed = placed or [[0] * len(fractions) for _ in label_sets]
    held = [sum(column) for column in zip(*placed)] if placed else [0] * len(fractions)
    whole = sum(sizes) + sum(held)
    wants = [whole * fraction - h for fraction, h in zip(fractions, held)]
    label_totals, label_held = collections.Counter(), collections.defaultdict(collections.Counter)
    sets_of = collections.defaultdict(list)  # label -> indices of the sets holding it
    for index, (labels, size) in enumerate(zip(label_sets, sizes)):
        for label in labels:
            label_totals[label] += size + sum(placed[index])
            for split, count in enumerate(placed[index]):
                label_held[label][split] += count
            sets_of[label].append(index)
    desired = {
        label: [n * f - label_held[label][s] for s, f in enumerate(fractions)]
        for label, n in label_totals.items()
    }
    left = {label: sum(sizes[i] for i in sets_of[label]) for label in label_totals}
    rows = [None] * len(label_sets)
    turns = [(n, label) for label, n in left.items()]
    heapq.heapify(turns)
    while turns:
        count, label = heapq.heappop(turns)
        if count != left[label] or not count:
            continue  # an outdated turn: its label's count has fallen since
        todo = [i for i in sets_of[label] if rows[i] is None]
        share = _divide([sizes[i] for i in todo], desired[label], wants)
        for index, row in zip(todo, share):
            rows[index] = row
            wants = [want - n for want, n in zip(wants, row)]
            for other in label_sets[index]:
                desired[other] = [d - n for d, n in zip(desired[other], row)]
                left[other] -= sizes[index]
                if other != label and left[other]:
                    heapq.heappush(turns, (left[other], other))
    rest = [i for i, row in enumerate(rows) if row is None]  # the sets of no label
    share = _divide([sizes[i] for i in rest], wants, [0.0] * len(wants))
    for index, row in zip(rest, share):
        rows[index] = row
    return rows


def _divide(sizes, scores, ties):
    """Rows of `sizes` images over the splits: their total levelled by `scores`, then shared
    among them in proportion."""
    total = sum(sizes)
    if not total:
        return [[0] * len(scores) for _ in sizes]
    counts = _level(scores, ties, total)
    return stratified_split_counts(sizes, [count / total for count in counts])


def _level(scores, ties, units):
    """How many of `units` each split takes when each unit goes to the split of the highest
    score (then tie, then the lowest index), and taking one lowers that split's score and tie
    by one: the level the top scores are lowered to at once, then the last few one by one."""
    k = len(scores)
    order = sorted(range(k), key=lambda j: -scores[j])
    level, total = min(scores), 0.0
    for taken in range(1, k + 1):  # the top `taken` splits share the units down to one level
        total += scores[order[taken - 1]]
        candidate = (total - units) / taken
        if taken == k or candidate >= scores[order[taken]]:
            level = candidate
            break
    counts = [max(0, math.floor(s - level)) for s in scores]
    for _ in range(units - sum(counts)):
        j = max(range(k), key=lambda j: (scores[j] - counts[j], ties[j] - counts[j], -j))
        counts[j] += 1
    return counts


def shard_counts(label_sets, sizes, num_shards):
    """Divides the images of each label set of one split among its shards, as
    `iterative_split_counts` divides them among splits, then evens the shards' totals to
    within one record (the first `N % num_shards` shards hold one more, as everywhere): each
    surplus record moves to a shard short of its total, from the label set that the move
    disturbs least (the largest one in the surplus shard).

    Returns:
        [[count per shard] per label set].
    """
    rows = iterative_split_counts(label_sets, sizes, [1 / num_shards] * num_shards)
    q, large = divmod(sum(sizes), num_shards)
    targets = [q + 1 if s < large else q for s in range(num_shards)]
    totals = [sum(row[s] for row in rows) for s in range(num_shards)]
    short = [s for s in range(num_shards) if totals[s] < targets[s]]
    for over in range(num_shards):
        while totals[over] > targets[over]:
            under = short[-1]
            donor = max(range(len(rows)), key=lambda i: (rows[i][over], -i))
            rows[donor][over] -= 1
            rows[donor][under] += 1
            totals[over] -= 1
            totals[under] += 1
            if totals[under] == targets[under]:
                short.pop()
    return rows
