"""A multi-label build written directly: a stand-in for `imageshards build` until it writes one.

Issue 23's records are on main (`features.encode_example(..., multi_label=True)`), the build of
a `labels` manifest is not yet: the trainer's tests and bench/multilabel_crops.py make their
multi-label builds here. What it writes is what the trainer reads of a build: shards of
`<split>/<split>-SSSSS-of-NNNNN.tfrecord` framed by `imageshards.tfrecord`, a dataset.json with
`format`, `labels`, `multi_label`, `label_levels`, `multi_label_levels`, `counts`, `splits`
(with `class_counts` counting label occurrences) and `features`, then `_SUCCESS`. No
stratification, validation or tf.Transform output: records go to shards round-robin in the
order given. Once the build writes multi-label shards, replace `write` by a build of a
`labels` manifest.
"""

import collections
import hashlib
import io
import json
import os

from PIL import Image

from imageshards import features
from imageshards import layout
from imageshards import tfrecord


def write(out_dir, images, labels, splits, *, levels=None, num_shards=2):
    """Writes a complete multi-label build of `images` into `out_dir`; returns `out_dir`.

    Args:
        images: encoded JPEG or PNG bytes, one per image, in the order records are written.
        labels: per image, the names of its labels (any number, none included).
        splits: per image, its split's name.
        levels: {level: per image, the names of its values in that level} (or None).
        num_shards: shards per split.
    """
    levels = levels or {}
    vocabulary = sorted({name for names in labels for name in names})
    level_names = {
        level: sorted({name for names in values for name in names})
        for level, values in levels.items()
    }
    by_split = collections.defaultdict(list)
    for index, split in enumerate(splits):
        by_split[split].append(index)
    entries = {}
    for split, indices in by_split.items():
        shards = [indices[i::num_shards] for i in range(num_shards)]
        entries[split] = _write_split(
            out_dir, split, shards, (images, labels, levels), (vocabulary, level_names)
        )
    dataset = {
        'format': features.EXAMPLES,
        'seed': 0,
        'input': 'bench/stand_in_build.py',
        'labels': vocabulary,
        'multi_label': True,
        **({'label_levels': level_names} if levels else {}),
        'multi_label_levels': [
            level for level, values in levels.items() if max(map(len, values), default=0) > 1
        ],
        'counts': {'inputs': len(images), 'written': len(images), 'rejected': 0, 'duplicates': 0},
        'splits': entries,
        'features': features.record_schema(features.EXAMPLES, tuple(levels), multi_label=True),
    }
    with open(os.path.join(out_dir, layout.DATASET_JSON), 'w', encoding='utf-8') as f:
        json.dump(dataset, f, indent=2)
    open(os.path.join(out_dir, layout.SUCCESS), 'w').close()
    return out_dir


def _write_split(out_dir, split, shards, data, vocabularies):
    """Writes one split's shards; returns its dataset.json entry."""
    images, labels, levels = data
    split_counts = collections.Counter()
    entries = []
    for shard_index, indices in enumerate(shards):
        relative = layout.shard_path(split, shard_index, len(shards))
        os.makedirs(os.path.join(out_dir, split), exist_ok=True)
        framed = b''.join(
            tfrecord.frame(_record(i, images[i], labels[i], levels, vocabularies)) for i in indices
        )
        with open(os.path.join(out_dir, relative), 'wb') as f:
            f.write(framed)
        counts = collections.Counter(name for i in indices for name in labels[i])
        split_counts.update(counts)
        entries.append(
            {
                'path': relative,
                'num_records': len(indices),
                'num_bytes': len(framed),
                'sha256': hashlib.sha256(framed).hexdigest(),
                'class_counts': dict(sorted(counts.items())),
            }
        )
    return {
        'num_records': sum(entry['num_records'] for entry in entries),
        'num_shards': len(entries),
        'class_counts': dict(sorted(split_counts.items())),
        'shards': entries,
    }


def _record(index, encoded, names, levels, vocabularies):
    vocabulary, level_names = vocabularies
    ids = tuple(sorted(vocabulary.index(name) for name in set(names)))
    width, height = Image.open(io.BytesIO(encoded)).size
    values = {
        features.ENCODED: encoded,
        features.FORMAT: 'png' if encoded.startswith(b'\x89PNG') else 'jpeg',
        features.HEIGHT: height,
        features.WIDTH: width,
        features.CHANNELS: 3,
        features.LABEL: ids,
        features.LABEL_TEXT: tuple(vocabulary[i] for i in ids),
        features.FILENAME: f'{index:06d}',
        features.SHA256: hashlib.sha256(encoded).hexdigest(),
        features.ID: index,
    }
    for level, per_image in levels.items():
        level_ids = tuple(sorted(level_names[level].index(n) for n in set(per_image[index])))
        values[features.level_label(level)] = level_ids
        values[features.level_text(level)] = tuple(level_names[level][i] for i in level_ids)
    return features.encode_example(features.EXAMPLES, values, tuple(levels), multi_label=True)
