"""A peer build: TF Model Garden's `official/vision/data/create_coco_tf_record.py`, the
converter its detection and instance-segmentation recipes name, run as its docstring says.

tf-models-official 2.20 pins TensorFlow 2.20 (ours is newer), so it runs in a virtual
environment of its own, made once in ~/.cache/imageshards-bench/ (VENV): TensorFlow 2.20,
tf-keras 2.20, tf-models-official 2.20 without its dependencies (they include TensorFlow Text,
Kaggle, sacrebleu and more that the converter never touches), then what the converter's imports
need, found by importing it: VENV_PACKAGES. The stamp in the environment records how long
making it took.

What the converter does, read in its source (2.20): it json.loads the annotation file twice (once
for `images`, once for the annotations), keeps every record it makes in memory until the last
(`Pool.starmap` returns a list) and writes them round-robin into the shards in the file's order;
it never decodes an image (its size is the annotation's). An annotation whose box has a side
<= 0 or ends past the right or bottom edge is skipped and counted (one total in the log, no
names); a box left of or above the image passes; an annotation whose image_id no image has is
dropped without being counted; an unknown category_id stops the run (KeyError); category ids
are written as they are.

    python -m bench.peer_model_garden --data DIR --out OUT [--probe]

runs it once on bench/coco_like.py's set in DIR (measured: wall, CPU seconds, peak RSS) and
counts what reached the shards; `--probe` instead runs it on small sets, each with one thing it
may not take (PROBES), and says where it stops and what became of each planted annotation.
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time

from bench import coco_like
from bench.measure import measure

HERE = os.path.dirname(os.path.abspath(__file__))
# Outside the checkout: tests/test_structure.py sizes every .py below bench/, and one
# environment serves every checkout (2.8 GB). MODEL_GARDEN_VENV moves it.
VENV = os.environ.get(
    'MODEL_GARDEN_VENV',
    os.path.join(os.path.expanduser('~'), '.cache', 'imageshards-bench', 'venv-model-garden'),
)
SHARDS = 16
PINNED = ('tensorflow==2.20.*', 'tf-keras==2.20.*')
PEER = 'tf-models-official==2.20.*'
# What `import official.vision.data.create_coco_tf_record` needs beyond TensorFlow: the module
# imports official.vision, whose package imports its configs and tasks.
VENV_PACKAGES = (
    'pyyaml',
    'gin-config',
    'pycocotools',
    'tensorflow-datasets',
    'scipy',
    'opencv-python-headless',
    'matplotlib',
)
_SKIPPED = re.compile(r'skipped (\d+) annotations')


def ensure_venv(venv=VENV):
    """Makes the peer's environment unless it is there; {'seconds': its making, ...}."""
    stamp = os.path.join(venv, 'model-garden.json')
    if os.path.exists(stamp):
        with open(stamp, encoding='utf-8') as f:
            return json.load(f)
    start = time.perf_counter()
    subprocess.run([sys.executable, '-m', 'venv', venv], check=True)
    python = os.path.join(venv, 'bin', 'python')
    for packages, flags in ((PINNED, ()), ((PEER,), ('--no-deps',)), (VENV_PACKAGES, ())):
        subprocess.run(
            [python, '-m', 'pip', 'install', '-q', *flags, *PINNED, *packages],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    subprocess.run([python, '-c', 'import official.vision.data.create_coco_tf_record'], check=True)
    versions = subprocess.run(
        [python, '-m', 'pip', 'list', '--format=json'], check=True, capture_output=True, text=True
    ).stdout
    pinned = ('tensorflow', 'tf-models-official', 'tf_keras', 'pycocotools', 'numpy')
    made = {
        'seconds': round(time.perf_counter() - start, 1),
        'versions': {p['name']: p['version'] for p in json.loads(versions) if p['name'] in pinned},
    }
    with open(stamp, 'w', encoding='utf-8') as f:
        json.dump(made, f)
    return made


def command(data, out, venv=VENV):
    """The converter's command line on bench/coco_like.py's set in `data`, writing OUT/train-*."""
    return [
        os.path.join(venv, 'bin', 'python'),
        '-m',
        'official.vision.data.create_coco_tf_record',
        '--image_dir',
        os.path.join(data, 'images'),
        '--object_annotations_file',
        os.path.join(data, 'annotations', 'instances.json'),
        '--output_file_prefix',
        os.path.join(out, 'train'),
        '--num_shards',
        str(SHARDS),
        '--include_masks',
        '--alsologtostderr',
    ]


def environment():
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='')


def skipped(output):
    """The one total of skipped annotations the converter logs; None if it logged none."""
    found = _SKIPPED.findall(output)
    return int(found[-1]) if found else None


def census(out):
    """What reached the peer's shards: {images, objects, crowds, masks, boxes outside [0, 1],
    label ids} and {source_id: [(xmin, ymin, xmax, ymax)]} of every object."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    counts = {'images': 0, 'objects': 0, 'crowds': 0, 'masks': 0, 'boxes_outside_0_1': 0}
    labels, boxes = set(), {}
    for path in sorted(glob.glob(os.path.join(out, 'train-*.tfrecord'))):
        for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
            feature = tf.train.Example.FromString(record).features.feature
            values = {key: _values(feature[key]) for key in feature}
            counts['images'] += 1
            sides = [
                values.get(f'image/object/bbox/{s}', []) for s in ('xmin', 'ymin', 'xmax', 'ymax')
            ]
            found = list(zip(*sides))
            boxes[values['image/source_id'][0].decode()] = found
            counts['objects'] += len(found)
            counts['crowds'] += sum(values.get('image/object/is_crowd', []))
            counts['masks'] += len(values.get('image/object/mask', []))
            counts['boxes_outside_0_1'] += sum(min(b) < 0 or max(b) > 1 for b in found)
            labels.update(values.get('image/object/class/label', []))
    counts['labels'] = sorted(labels)
    return counts, boxes


def _values(feature):
    kind = feature.WhichOneof('kind')
    return list(getattr(feature, kind).value)


def fates(data, boxes):
    """{planted kind: {'written': n, 'not written': n}}: each planted annotation looked up by
    its image's source_id and its box."""
    with open(os.path.join(data, 'annotations', 'instances.json'), encoding='utf-8') as f:
        document = json.load(f)
    with open(os.path.join(data, 'annotations', 'planted.json'), encoding='utf-8') as f:
        planted = {int(k): v for k, v in json.load(f).items()}
    sizes = {image['id']: (image['width'], image['height']) for image in document['images']}
    result = {}
    for annotation in document['annotations']:
        kind = planted.get(annotation['id'])
        if kind is None:
            continue
        x, y, w, h = annotation['bbox']
        width, height = sizes.get(annotation['image_id'], (1, 1))
        wanted = (x / width, y / height, (x + w) / width, (y + h) / height)
        found = boxes.get(str(annotation['image_id']), [])
        hit = any(max(abs(a - b) for a, b in zip(box, wanted)) < 1e-5 for box in found)
        entry = result.setdefault(kind, {'written': 0, 'not written': 0})
        entry['written' if hit else 'not written'] += 1
    return result


def run_once(data, out, venv=VENV):
    """Runs the converter once, measured; its Measurement."""
    os.makedirs(out, exist_ok=True)
    for old in glob.glob(os.path.join(out, 'train-*')):
        os.remove(old)
    return measure(command(data, out, venv), env=environment())


# The probe's sets: (name, planted kinds, compressed RLE or not).
PROBES = (
    ('compressed RLE', (), True),
    ('unknown category', ('unknown_category',), False),
    ('two-point polygon', ('short_polygon',), False),
    ('the kinds it survives', coco_like.PEER_SAFE, False),
)


def probe(work, venv=VENV):
    """The converter on 64-image sets, each with one thing it may not take (PROBES): where it
    stops, its last line; where it finishes, its logged total and what became of each planted
    annotation."""
    report = {}
    for name, kinds, compressed in PROBES:
        data = os.path.join(work, 'probe-' + name.replace(' ', '-'))
        coco_like.make(data, 64, seed=1, bad_every=1, kinds=kinds, compressed_rle=compressed)
        out = os.path.join(data, 'peer')
        try:
            measured = run_once(data, out, venv)
        except RuntimeError as error:
            last = [line for line in str(error).splitlines() if line.strip()][-1]
            report[name] = {'stopped': last[:300]}
            continue
        counts, boxes = census(out)
        report[name] = {
            'logged_skipped': skipped(measured.output),
            'census': counts,
            'fates': fates(data, boxes),
        }
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--data', default=os.path.join(HERE, 'out', 'coco20k'))
    parser.add_argument('--out', default=os.path.join(HERE, 'out', 'model-garden-build'))
    parser.add_argument('--venv', default=VENV)
    parser.add_argument('--probe', action='store_true', help='what it does with each wrong kind')
    args = parser.parse_args(argv)
    made = ensure_venv(args.venv)
    print(json.dumps({'venv': args.venv, **made}))
    if args.probe:
        for name, found in probe(args.out, args.venv).items():
            print(json.dumps({name: found}))
        return
    measured = run_once(args.data, args.out, args.venv)
    counts, boxes = census(args.out)
    print(
        json.dumps(
            {
                'wall_s': round(measured.seconds, 1),
                'cpu_s': round(measured.cpu, 1),
                'peak_rss_tree_mb': round(measured.peak / 2**20),
                'peak_rss_largest_mb': round(measured.process_peaks[0][1] / 2**20),
                'logged_skipped': skipped(measured.output),
                'census': counts,
                'fates': fates(args.data, boxes),
            }
        )
    )


if __name__ == '__main__':
    main()
