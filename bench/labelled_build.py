"""A multi-label build of given images and label sets, made by `imageshards build`: the images
written to a folder beside the build, a `labels` manifest listing them with their splits (and
`label/<level>` cells), and the build run on it in this process (the local runner in memory).
Used by bench/multilabel_crops.py and the trainer's tests.
"""

import os

from pipelines import launcher


def write(out_dir, images, labels, splits, *, levels=None, num_shards=2, analyze=True):
    """Builds `images` into `out_dir`; returns `out_dir`.

    Args:
        images: encoded JPEG or PNG bytes, one per image, in listing order.
        labels: per image, the names of its labels (any number, none included).
        splits: per image, its split's name (the manifest's split column).
        levels: {level: per image, the names of its values in that level} (or None).
        num_shards: shards per split.
        analyze: with the tf.Transform analysis (the build's default).
    """
    folder = f'{out_dir.rstrip("/")}-images'
    os.makedirs(os.path.join(folder, 'img'), exist_ok=True)
    levels = levels or {}
    rows = [','.join(['path', 'labels', 'split', *(f'label/{level}' for level in levels)])]
    for index, (encoded, names, split) in enumerate(zip(images, labels, splits)):
        suffix = 'png' if encoded.startswith(b'\x89PNG') else 'jpg'
        path = f'img/{index:06d}.{suffix}'
        with open(os.path.join(folder, path), 'wb') as f:
            f.write(encoded)
        cells = [' '.join(values[index]) for values in levels.values()]
        rows.append(','.join([path, ' '.join(names), split, *cells]))
    manifest = os.path.join(folder, 'manifest.csv')
    with open(manifest, 'w', encoding='utf-8') as f:
        f.write('\n'.join(rows) + '\n')
    launcher.run(
        ['--input', manifest, '--output', out_dir, '--num-shards', str(num_shards), '--overwrite']
        + ['--direct_running_mode=in_memory', *([] if analyze else ['--no-analyze'])]
    )
    return out_dir
