"""`imageshards coco-annotations`: a split of a detection or segmentation build as a COCO
annotation file, for pycocotools' COCOeval (and any tool that reads COCO).

Made from the build's records, so that it is what training and evaluation read: each record an
image (`id` its image/id, `file_name` its key, its stored size, `source_id` the source's id), each
object an annotation with its box in pixels of the stored image (`[x, y, width, height]`), its
area, `iscrowd`, and its mask as COCO's compressed RLE where the build has masks. Categories
are the build's classes; their ids are the source's (dataset.json `category_ids`) where it had
its own, else 1..K, in class order.

Example:
    imageshards coco-annotations out/ --split val      # writes out/annotations/val.json
"""

import json
import posixpath
import sys

from imageshards import console
from imageshards import dataset_json
from imageshards import flags
from imageshards import layout
from imageshards import storage
from imageshards.kinds import detection
from imageshards.kinds import features
from imageshards_cli import report_objects


def ground_truth(build, split) -> dict:
    """The COCO annotation file (a dict) of a split of a build of objects."""
    import io  # pylint: disable=import-outside-toplevel

    import numpy as np  # pylint: disable=import-outside-toplevel
    from PIL import Image  # pylint: disable=import-outside-toplevel
    from pycocotools import mask as coco_mask  # pylint: disable=import-outside-toplevel

    if not build.kind.has_objects:
        raise ValueError(f'{build.data_dir} is a {build.kind.name} build: it has no objects')
    ids = list(build.kind.category_ids) or list(range(1, len(build.labels) + 1))
    found = {
        'info': {'description': f'{build.data_dir} split {split}', 'version': '1.0'},
        'images': [],
        'annotations': [],
        'categories': [{'id': i, 'name': name} for i, name in zip(ids, build.labels)],
    }
    for values in report_objects.split_records(build, split):
        image_id = values[features.ID][0]
        height, width = values[features.HEIGHT][0], values[features.WIDTH][0]
        found['images'].append(
            {
                'id': image_id,
                'file_name': values[features.FILENAME][0].decode('utf-8', 'surrogateescape'),
                'height': height,
                'width': width,
                'source_id': values[detection.SOURCE_ID][0].decode('utf-8'),
            }
        )
        boxes = list(zip(*(values[key] for key in detection.BOX_KEYS)))
        masks = values.get(detection.MASK, ())
        for i, (xmin, ymin, xmax, ymax) in enumerate(boxes):
            box = [xmin * width, ymin * height, (xmax - xmin) * width, (ymax - ymin) * height]
            annotation = {
                'id': len(found['annotations']) + 1,
                'image_id': image_id,
                'category_id': ids[values[detection.OBJECT_LABEL][i]],
                'bbox': [round(v, 3) for v in box],
                'area': float(values[detection.AREA][i]),
                'iscrowd': int(values[detection.IS_CROWD][i]),
            }
            if i < len(masks):
                pixels = np.asarray(Image.open(io.BytesIO(masks[i])), np.uint8)
                rle = coco_mask.encode(np.asfortranarray(pixels))
                annotation['segmentation'] = {'size': rle['size'], 'counts': rle['counts'].decode()}
            found['annotations'].append(annotation)
    return found


def build_arg_parser():
    parser = flags.ArgumentParser(prog='imageshards coco-annotations', description=__doc__)
    parser.add_argument('build', help='output directory of a detection `imageshards build`')
    parser.add_argument('--split', required=True, help='the split to write, e.g. val')
    parser.add_argument('--out', help='the file to write (default BUILD/annotations/SPLIT.json)')
    return parser


def main(argv=None):
    args = build_arg_parser().parse_args(sys.argv[1:] if argv is None else argv)
    console.configure_logging(False)
    try:
        build = dataset_json.Build.load(args.build)
        if args.split not in build.splits:
            raise ValueError(f'{args.build} has no split {args.split!r}: {", ".join(build.splits)}')
        data = ground_truth(build, args.split)
    except (ValueError, FileNotFoundError) as e:
        return console.refuse('imageshards coco-annotations', e)
    default = posixpath.join(args.build.rstrip('/'), layout.ANNOTATIONS_DIR, f'{args.split}.json')
    out = args.out or default
    storage.write_atomically(out, json.dumps(data).encode('utf-8'))
    print(f'{out}: {len(data["images"]):,} images, {len(data["annotations"]):,} annotations')
    return 0
