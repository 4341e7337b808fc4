"""The flags of `imageshards build` that say what --input is and where its labels are: its form
(--input-form), a manifest's or label file's columns chosen by name, a label file for a tree or
archive, and the names of integer labels (pipelines/inputs/forms.py, manifest_columns.py,
label_files.py, class_names.py read them)."""

import argparse

from imageshards import flags
from pipelines.core import settings
from pipelines.core.settings import InputSettings


def _template(text):
    """--path-template: a path with one `{}`, where the path column's value goes."""
    text = str(text)
    if text.count('{}') != 1:
        raise ValueError(f"--path-template {text!r}: give a path with one {{}}: 'train/{{}}.png'")
    return text


def add_input_flags(parser) -> None:
    """Adds the input's flags to `parser` (options.build_arg_parser's)."""
    parser.add_argument(
        '--input-form',
        choices=settings.INPUT_FORMS,
        default=InputSettings.form,
        help='what --input is, where its detection from names and content should be '
        'overridden (the log says what was detected)',
    )
    parser.add_argument(
        '--path-column',
        default=InputSettings.path_column,
        metavar='NAME',
        help='the column (JSONL key) of a manifest or --labels-file that holds the image path '
        '(default: path); with it, --label-column or --labels-column, or --path-template, '
        'every other column is ignored',
    )
    labels = parser.add_mutually_exclusive_group()
    labels.add_argument(
        '--label-column',
        default=InputSettings.label_column,
        metavar='NAME',
        help='the column that holds the label (default: label), e.g. diagnosis',
    )
    labels.add_argument(
        '--labels-column',
        default=InputSettings.labels_column,
        metavar='NAME',
        help='the column that holds several labels per image (default: labels), e.g. tags',
    )
    parser.add_argument(
        '--path-template',
        type=flags.words(_template),
        default=InputSettings.path_template,
        metavar='TEMPLATE',
        help="forms each path from the path column's value: train_images/{}.png",
    )
    parser.add_argument(
        '--labels-file',
        default=InputSettings.labels_file,
        metavar='FILE',
        help='a CSV or JSONL file that gives the labels of a tree or archive by file name (its '
        'path below the root, or its name alone), instead of its folders',
    )
    parser.add_argument(
        '--class-names',
        default=InputSettings.class_names,
        metavar='FILE',
        help='names of integer labels (of arrays, TFRecords, WebDataset .cls files, a label '
        'column), one per line, line i naming label i; default: the integer is the name',
    )
    parser.add_argument(
        '--image-root',
        default=InputSettings.image_root,
        metavar='FOLDER',
        help="where a COCO annotation file's images are (their file_name below it; default: "
        "the file's folder, and its ../images/ or ../train2017/-like sibling named after it)",
    )
    parser.add_argument(
        '--masks',
        default=InputSettings.masks,
        action=argparse.BooleanOptionalAction,
        help="a COCO file's objects keep their masks (polygons, RLE) in the records, or not "
        "(--no-masks: boxes only); default: masks where the file's first 1,000 annotations "
        'have one (a polygon of an object that is not a crowd, or an RLE)',
    )
