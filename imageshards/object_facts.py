"""dataset.json's accounting of a build of objects (a detection or segmentation build): every
annotation its inputs' reader found is written or rejected with a reason, and each total is the
sum of its parts.

    counts.annotations   read, written, rejected, clipped (of those written), and
                         rejected_by_reason: what rejected_annotations.jsonl lists, one line per
                         annotation (`box_outside_image`, `unknown_category`, ...), and those
                         lost with their image: `image_rejected` (its line in rejected.jsonl
                         says how many) and `duplicate_image` (--dedup: duplicates.jsonl);
                         masks_not_kept, where a build without masks read annotations that
                         have one (their boxes are kept: pipelines/inputs/coco_join.py)
    splits.S             objects, and object_counts {class: objects}, summed over its shards

`read == written + rejected`, or the build is not marked complete.
"""

import collections

SHARD_KEYS = ('objects', 'clipped', 'object_counts')
ANNOTATION_KEY = 'annotation'  # marks a dropped annotation's line among a build's rejections
IMAGE_REJECTED = 'image_rejected'
DUPLICATE_IMAGE = 'duplicate_image'


def is_annotation_row(row) -> bool:
    """Whether a line among a build's rejections is a dropped annotation's."""
    return ANNOTATION_KEY in row


def split_entry(shards, labels) -> dict:
    """A split's `objects` and `object_counts` (labels in id order), summed over its shards."""
    summed = collections.Counter()
    for shard in shards:
        summed.update(shard['object_counts'])
    return {
        'objects': sum(shard['objects'] for shard in shards),
        'object_counts': {label: summed[label] for label in labels if summed[label]},
    }


def joined(listed, read) -> dict:
    """The build's annotations read (`{read, rejected}`, as listed) with those the pipeline
    read and joined to the inputs (`read`: JoinAnnotations' facts, a COCO file's): those of no
    input (`rejected`'s lines) after the listing's, in the file's order."""
    listed = dict(listed or {'read': 0, 'rejected': []})
    for facts in read:
        listed['read'] += facts['read']
        listed['rejected'] = listed['rejected'] + facts['rejected']
        if facts.get('masks_not_kept'):
            listed['masks_not_kept'] = listed.get('masks_not_kept', 0) + facts['masks_not_kept']
    return listed


def counts(found, splits, shards, dropped, rejections, duplicates) -> dict:
    """counts.annotations of a build.

    Args:
        found: what the inputs' reader found (BuildFacts.annotations): `read`, the annotations,
            and `masks_not_kept`, those of them with a mask that the build does not keep.
        splits: dataset.json's splits (with `objects`).
        shards: WriteShards' shard entries (with `clipped`).
        dropped: rejected_annotations.jsonl's lines.
        rejections, duplicates: rejected.jsonl's and duplicates.jsonl's lines.
    """
    by_reason = collections.Counter(row['reason'] for row in dropped)
    lost = sum(row.get('annotations', 0) for row in rejections)
    if lost:
        by_reason[IMAGE_REJECTED] += lost
    lost = sum(row.get('annotations', 0) for row in duplicates)
    if lost:
        by_reason[DUPLICATE_IMAGE] += lost
    annotations = {
        'read': found['read'],
        'written': sum(split['objects'] for split in splits.values()),
        'rejected': sum(by_reason.values()),
        'clipped': sum(shard['clipped'] for shard in shards),
        'rejected_by_reason': dict(sorted(by_reason.items())),
    }
    if found.get('masks_not_kept'):
        annotations['masks_not_kept'] = found['masks_not_kept']
    return annotations


def listed(annotations) -> int:
    """The lines rejected_annotations.jsonl holds: the annotations rejected, but those lost
    with their image (listed in rejected.jsonl and duplicates.jsonl)."""
    by_reason = annotations['rejected_by_reason']
    lost = by_reason.get(IMAGE_REJECTED, 0) + by_reason.get(DUPLICATE_IMAGE, 0)
    return annotations['rejected'] - lost


def gap(annotations) -> str:
    """Why counts.annotations break `read == written + rejected`, or '' if they hold."""
    if not annotations:
        return ''
    if annotations['read'] == annotations['written'] + annotations['rejected']:
        return ''
    return (
        'annotation counts do not add up: read {read} != written {written} + rejected '
        '{rejected}'.format(**annotations)
    )


def count_problems(dataset) -> list:
    """Where a build's object counts disagree with each other, as messages."""
    annotations = dataset['counts'].get('annotations')
    if annotations is None:
        return []
    found = [gap(annotations)] if gap(annotations) else []
    rejected = sum(annotations['rejected_by_reason'].values())
    if rejected != annotations['rejected']:
        found.append(f'counts.annotations.rejected is {annotations["rejected"]}, not {rejected}')
    written = 0
    for split, info in dataset['splits'].items():
        summed = split_entry(info['shards'], dataset['labels'])
        written += summed['objects']
        for key, value in summed.items():
            if info.get(key) != value:
                found.append(
                    f'splits.{split}.{key} is {info.get(key)}, but its shards give {value}'
                )
    if written != annotations['written']:
        found.append(f'counts.annotations.written is {annotations["written"]}, shards {written}')
    return found
