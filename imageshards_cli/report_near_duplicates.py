"""What `imageshards report` says of a build's near-duplicates (--near-duplicates): how many
clusters of how many images, how many capped and how many leak across splits, how far apart
their pairs are, and two pictures: the closest pair of different images, and the largest
cluster (up to MAX_SHOWN of its images), each image captioned with its id, split and label,
read from the build's own records."""

import collections
import io
import json

from matplotlib.figure import Figure
from PIL import Image

from imageshards import dataset_json
from imageshards import features
from imageshards import file_names
from imageshards import layout
from imageshards import records
from imageshards import storage

MAX_SHOWN = 12
FIGURES = ('near_duplicates_closest', 'near_duplicates_largest')


def clusters_of(data_dir) -> list:
    """The lines of a build's near_duplicates.jsonl ([] where it has none)."""
    path = storage.join(data_dir, layout.NEAR_DUPLICATES_JSONL)
    if not storage.exists(path):
        return []
    return [json.loads(line) for line in storage.read(path).splitlines() if line.strip()]


def summary(dataset, clusters) -> dict:
    """The figures report.md and the headline give of the near-duplicates."""
    stated = dataset.get(dataset_json.GROUPING, {}).get('near_duplicates', {})
    pairs = [pair for cluster in clusters for pair in cluster['pairs']]
    apart = collections.Counter(bits for _, _, bits in pairs)
    # Different bytes first: byte copies (0 bits) say least about the hash.
    closest = min(pairs, key=lambda p: (p[2] == 0, p[2], p[0], p[1]), default=None)
    largest = max(clusters, key=lambda c: (c['size'], -c['cluster']), default=None)
    return {
        'clusters': len(clusters),
        'images': sum(cluster['size'] for cluster in clusters),
        'capped': sum(cluster['capped'] for cluster in clusters),
        'leaked': stated.get('leaked'),
        'distance': stated.get('distance'),
        'pairs_by_bits': {str(bits): apart[bits] for bits in sorted(apart)},
        'closest': closest,
        'largest': largest and {'cluster': largest['cluster'], 'size': largest['size']},
    }


def figures(data_dir, dataset, clusters, found):
    """[(name, PNG bytes)] of the closest pair and the largest cluster (none without them)."""
    wanted = []
    if found['closest']:
        wanted.append(
            (FIGURES[0], found['closest'][:2], f'closest pair: {found["closest"][2]} bits')
        )
    if found['largest']:
        cluster = next(c for c in clusters if c['cluster'] == found['largest']['cluster'])
        ids = [image['id'] for image in cluster['images']][:MAX_SHOWN]
        title = f'largest cluster: {cluster["size"]} images' + ' (capped)' * cluster['capped']
        wanted.append((FIGURES[1], ids, title))
    images = _images(data_dir, dataset, {i for _, ids, _ in wanted for i in ids})
    return [(name, _grid(ids, images, title)) for name, ids, title in wanted]


def _images(data_dir, dataset, ids):
    """{id: (PIL image, split, label text)} of the records with these ids."""
    found = {}
    for split, info in dataset['splits'].items():
        for shard in info['shards']:
            path = storage.join(data_dir, shard['path'])
            with storage.open_read(path) as f:
                for _, record in records.framed_records(f, path):
                    values = records.example_values(records.parse_example(record))
                    record_id = values[features.ID][1][0]
                    if record_id in ids:
                        found[record_id] = (_image(values), split, _label(values))
            if len(found) == len(ids):
                return found
    return found


def _image(values):
    if features.ENCODED in values:
        data = values[features.ENCODED][1][0]
    else:  # a paths build: the file it names
        data = storage.read(file_names.from_bytes(values[features.PATH][1][0]))
    image = Image.open(io.BytesIO(data))
    image.draft('RGB', (256, 256))
    return image.convert('RGB')


def _label(values):
    texts = values.get(features.LABEL_TEXT, (None, []))[1]
    return ', '.join(text.decode('utf-8', 'replace') for text in texts)


def _grid(ids, images, title):
    columns = min(len(ids), 4)
    rows = -(-len(ids) // columns)
    figure = Figure(figsize=(2.4 * columns, 2.2 * rows + 0.4), dpi=100, layout='constrained')
    axes = figure.subplots(rows, columns, squeeze=False)
    for ax in axes.ravel():
        ax.axis('off')
    for ax, image_id in zip(axes.ravel(), ids):
        if image_id in images:
            image, split, label = images[image_id]
            ax.imshow(image)
            ax.set_title(f'id {image_id}, {split}\n{label}', fontsize=8)
    figure.suptitle(title)
    buffer = io.BytesIO()
    figure.savefig(buffer, format='png')
    return buffer.getvalue()


def markdown(found) -> list:
    """report.md's lines on the near-duplicates."""
    lines = [
        '## Near-duplicates',
        '',
        f'{found["clusters"]:,} clusters of {found["images"]:,} images '
        f'({found["capped"]:,} capped: too large to keep in one split); '
        f'{found["leaked"]} with images in more than one split.',
        '',
        '| bits apart | pairs |',
        '|---:|---:|',
        *(f'| {bits} | {n:,} |' for bits, n in found['pairs_by_bits'].items()),
        '',
    ]
    lines += [f'![{name}]({name}.png)' for name in FIGURES if _shown(found, name)]
    return lines


def _shown(found, name):
    return bool(found['closest'] if name == FIGURES[0] else found['largest'])


def headline(found) -> str:
    closest = found['closest']
    return (
        f'near-duplicates: {found["clusters"]:,} clusters of {found["images"]:,} images, '
        f'{found["capped"]:,} capped, {found["leaked"]} across splits'
        + (f'; closest pair {closest[0]} and {closest[1]}, {closest[2]} bits' if closest else '')
    )


def add(info, out_dir, metrics, write) -> list:
    """Adds the near-duplicates' figures to `metrics` and writes their pictures into `out_dir`
    (`write(path, bytes)`); returns report.md's lines on them ([] without near-duplicates)."""
    clusters = clusters_of(info.data_dir)
    if dataset_json.GROUPING not in info.raw or not clusters:
        return []
    found = metrics['near_duplicates'] = summary(info.raw, clusters)
    for name, png in figures(info.data_dir, info.raw, clusters, found):
        write(f'{out_dir.rstrip("/")}/{name}.png', png)
    return markdown(found)
