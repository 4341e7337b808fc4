"""Peak memory of reading a huge COCO annotation file: `json.load` (what Model Garden's converter
and pycocotools do), a plain ijson streaming pass, and our streaming reader: `ours`, what the
launcher lists (since the pipeline joins the annotations, its images alone), and `ours-join`,
the pipeline's worker that reads the annotations into blocks of work items (ReadAnnotations).

The file is Objects365-sized: 2,000,000 images and 25,000,000 annotations (small boxes, each
with a four-corner polygon, image ids in no order), in COCO's order of sections (info, licenses,
images, annotations, categories: the categories come last). It is written as a stream, never held
in memory, and reused while its stamp says it has the wanted size. json.load of it would need far
more than this machine's memory, so it is measured on files of a twentieth and a tenth (the same
generator, fewer images and annotations) and extrapolated linearly from the two; `--full-json-load`
loads the full file too where the extrapolation is under `--memory-limit-gb`.

Each reader runs in a child process of its own, which reports its own peak resident memory
(the kernel's high-water mark, VmHWM) and CPU seconds.

    python -m bench.coco_memory [--dir bench/out/coco-huge] [--images 2000000]
        [--annotations 25000000] [--only json,ijson,ours,ours-join] [--ours-part 10]
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CHUNK = 200_000
CATEGORIES = 365


def write_huge(path, images, annotations, seed=0):
    """Writes (or reuses) the file; returns its size in bytes."""
    stamp = path + '.json-stamp'
    wanted = {'images': images, 'annotations': annotations, 'seed': seed}
    if os.path.exists(stamp) and os.path.exists(path):
        with open(stamp, encoding='utf-8') as f:
            if json.load(f) == wanted:
                return os.path.getsize(path)
    rng = np.random.default_rng(seed)
    with open(path + '.partial', 'w', encoding='utf-8') as f:
        f.write('{"info":{"description":"bench.coco_memory","version":"1.0"},')
        f.write('"licenses":[{"id":1,"name":"bench","url":""}],"images":[')
        for start in range(0, images, CHUNK):
            f.write(_images(start, min(start + CHUNK, images)))
        f.write('],"annotations":[')
        for start in range(0, annotations, CHUNK):
            f.write(_annotations(rng, start, min(start + CHUNK, annotations), images))
        f.write('],"categories":[')
        f.write(','.join(f'{{"id":{i + 1},"name":"class {i + 1}"}}' for i in range(CATEGORIES)))
        f.write(']}')
    os.replace(path + '.partial', path)
    with open(stamp, 'w', encoding='utf-8') as f:
        json.dump(wanted, f)
    return os.path.getsize(path)


def _images(start, stop):
    lead = ',' if start else ''
    return lead + ','.join(
        f'{{"id":{i + 1},"file_name":"patch{i // 50000}/obj_{i:08d}.jpg","width":640,"height":480}}'
        for i in range(start, stop)
    )


def _annotations(rng, start, stop, images):
    count = stop - start
    image = rng.integers(1, images + 1, count).tolist()
    category = rng.integers(1, CATEGORIES + 1, count).tolist()
    x, y = rng.uniform(0, 600, count).round(2), rng.uniform(0, 440, count).round(2)
    w, h = rng.uniform(2, 40, count).round(2), rng.uniform(2, 40, count).round(2)
    columns = [
        v.tolist() for v in (x, y, w, h, (x + w).round(2), (y + h).round(2), (w * h).round(2))
    ]
    lead = ',' if start else ''
    return lead + ','.join(
        f'{{"id":{i},"image_id":{m},"category_id":{c},"bbox":[{x},{y},{w},{h}],"area":{a},'
        f'"iscrowd":0,"segmentation":[[{x},{y},{r},{y},{r},{b},{x},{b}]]}}'
        for i, m, c, x, y, w, h, r, b, a in zip(
            range(start + 1, stop + 1), image, category, *columns
        )
    )


# --- the readers, each run in a child process: `python -m bench.coco_memory --read KIND PATH`


def read_json(path):
    with open(path, 'rb') as f:
        document = json.load(f)
    return {'images': len(document['images']), 'annotations': len(document['annotations'])}


def read_ijson(path):
    """One streaming pass: every annotation made into a dict (as a reader must) and dropped."""
    import ijson  # pylint: disable=import-outside-toplevel

    count, area = 0, 0.0
    with open(path, 'rb') as f:
        for annotation in ijson.items(f, 'annotations.item', use_float=True):
            count += 1
            area += annotation['area']
    return {'annotations': count, 'area': round(area)}


def read_ours(path):
    """OUR READER'S HOOK: `scan_annotations(path)` of pipelines/inputs/coco.py where it exists
    (what it yields consumed and counted), else that module's `scan` (as `imageshards build
    --input PATH` calls it) with every entry it yields consumed; 'not available' where neither
    is. Adjust here when the reader's entry point settles."""
    # pylint: disable=import-outside-toplevel
    try:
        from pipelines.inputs import coco
    except ImportError as error:
        return {'not available': f'pipelines.inputs.coco: {error}'}
    if hasattr(coco, 'scan_annotations'):
        return {'items': sum(1 for _ in coco.scan_annotations(path))}
    if not hasattr(coco, 'scan'):
        return {'not available': 'pipelines.inputs.coco has neither scan_annotations nor scan'}
    from pipelines.core.settings import InputSettings

    imported = _rss_mb('VmRSS')  # what importing the build costs, before any reading
    found = coco.scan(path, InputSettings(image_root=os.path.dirname(path)))
    entries = objects = refused = 0
    for entry in found.entries:
        entries += 1
        refused += bool(entry.reject)
        objects += len((entry.annotation or {}).get('objects', ()))
    return {
        'entries': entries,
        'objects': objects,
        'refused_entries': refused,
        'rss_after_imports_mb': imported,
    }


def read_join(path):
    """The pipeline's side of our reader (pipelines/inputs/coco_join.py): the annotations read
    into blocks of work items of 1,000 images (inline blocks, as on Dataflow)."""
    # pylint: disable=import-outside-toplevel,protected-access
    from pipelines.core import blocks
    from pipelines.core.settings import InputSettings
    from pipelines.inputs import coco
    from pipelines.inputs import coco_join

    found = coco.scan(path, InputSettings(image_root=os.path.dirname(path)))
    images = sum(1 for _ in found.entries)
    read = coco_join._ReadAnnotations(found.annotation_join, blocks.BlockStore())
    found = {'blocks': 0, 'bytes': 0}
    for output in read.process(path, list(range(0, images, 1000))):  # blocks dropped as made
        if isinstance(output, tuple):
            found['blocks'] += 1
            found['bytes'] += len(output[1])
        else:
            found.update(output.value)
    return found


def _rss_mb(field):
    """This process's VmRSS (now) or VmHWM (its peak: unlike getrusage's ru_maxrss, not the
    forking parent's size carried across exec), in MiB."""
    with open('/proc/self/status', encoding='ascii') as f:
        return round(
            next(int(line.split()[1]) for line in f if line.startswith(field + ':')) / 1024
        )


READERS = {'json': read_json, 'ijson': read_ijson, 'ours': read_ours, 'ours-join': read_join}


def _read_in_child(kind, path):
    start = time.perf_counter()
    found = READERS[kind](path)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(
        json.dumps(
            {
                'reader': kind,
                'found': found,
                'seconds': round(time.perf_counter() - start, 1),
                'cpu_s': round(usage.ru_utime + usage.ru_stime, 1),
                'peak_rss_mb': _rss_mb('VmHWM'),
            }
        )
    )


def measure_reader(kind, path):
    """Runs one reader in a child process; its report (dict)."""
    done = subprocess.run(
        [sys.executable, '-m', 'bench.coco_memory', '--read', kind, path],
        cwd=os.path.dirname(HERE),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        return {'reader': kind, 'failed': done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def json_load_figures(folder, images, annotations, args):
    """json.load's peaks on a twentieth and a tenth of the file, and the full file's peak
    extrapolated linearly from them (measured too with --full-json-load, if it fits)."""
    points = []
    for part in (20, 10):
        path = os.path.join(folder, f'instances-1-{part}.json')
        size = write_huge(path, images // part, annotations // part)
        measured = measure_reader('json', path)
        measured.update(file_mb=round(size / 2**20), annotations=annotations // part)
        print(json.dumps(measured), flush=True)
        points.append((annotations // part, measured['peak_rss_mb']))
    (a1, p1), (a2, p2) = points
    estimate = p2 + (p2 - p1) / (a2 - a1) * (annotations - a2)
    print(json.dumps({'reader': 'json', 'extrapolated_full_peak_mb': round(estimate)}), flush=True)
    if args.full_json_load and estimate < args.memory_limit_gb * 1024:
        print(json.dumps(measure_reader('json', os.path.join(folder, 'instances.json'))))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--dir', default=os.path.join(HERE, 'out', 'coco-huge'))
    parser.add_argument('--images', type=int, default=2_000_000)
    parser.add_argument('--annotations', type=int, default=25_000_000)
    parser.add_argument('--only', default='json,ijson,ours')
    parser.add_argument('--full-json-load', action='store_true')
    parser.add_argument('--memory-limit-gb', type=float, default=18.0)
    parser.add_argument(
        '--ours-part', type=int, default=1, help='our reader on a 1/N file (default: the full one)'
    )
    parser.add_argument('--read', nargs=2, metavar=('KIND', 'PATH'), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.read:
        _read_in_child(*args.read)
        return
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, 'instances.json')
    start = time.perf_counter()
    size = write_huge(path, args.images, args.annotations)
    print(
        json.dumps(
            {
                'file': path,
                'file_mb': round(size / 2**20),
                'images': args.images,
                'annotations': args.annotations,
                'seconds_to_write_or_find': round(time.perf_counter() - start, 1),
            }
        ),
        flush=True,
    )
    kinds = args.only.split(',')
    if 'json' in kinds:
        json_load_figures(args.dir, args.images, args.annotations, args)
    if 'ijson' in kinds:
        print(json.dumps(measure_reader('ijson', path)), flush=True)
    if 'ours' in kinds:
        part = path
        if args.ours_part > 1:
            part = os.path.join(args.dir, f'instances-1-{args.ours_part}.json')
            write_huge(part, args.images // args.ours_part, args.annotations // args.ours_part)
        measured = measure_reader('ours', part)
        print(json.dumps(dict(measured, file=os.path.basename(part))), flush=True)
    if 'ours-join' in kinds:
        print(json.dumps(measure_reader('ours-join', path)), flush=True)


if __name__ == '__main__':
    main()
