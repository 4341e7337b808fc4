"""The output directory of a build: what each file and folder is called, and which are ours.

Layout of a build (the contract the trainer and the tools read; paths relative to OUT):
    <split>/<split>-SSSSS-of-NNNNN.tfrecord   shards, named by their format
                        (imageshards/shard_formats/: `ShardFormat.shard_path`)
    <split>/<split>-SSSSS-of-NNNNN.tfrecord.idx   each shard's index, where its format keeps
                        one: for TFRecord a line `offset length` per record, as DALI's
                        tfrecord2idx writes it (`ShardFormat.index_path`)
    rejected.jsonl      one object per rejected input: id, path, reason, detail
    duplicates.jsonl    with --dedup: each dropped input and the one kept instead
    near_duplicates.jsonl   with --near-duplicates: each cluster of near-duplicates (its images
                        and the pairs that join them; imageshards/grouping_facts.py)
    dataset.json        labels, counts, splits and their shards (imageshards/dataset_json.py)
    dataset_info.json, features.json, image.*.labels.txt   the same build described for
                        TensorFlow Datasets (imageshards/tfds_metadata.py)
    _SUCCESS            written last: a build without it is not complete
    reencoded/          `paths` builds: lossless copies of images TensorFlow cannot decode as is
    transform_fn/, transformed_metadata/, metadata/   the tf.Transform output (unless
                        --no-analyze), with the analysis also in transform_fn/assets.extra/
    .imageshards-tmp/   the build's temporary folder, gone once it is complete
    .imageshards-lock   while a build runs: its lock, naming it (imageshards/output_lock.py)
and what the imageshards tools write into a build by default: `preview` its grid, `report`
the files of imageshards_cli/report.py (order.csv, metrics.json, report.md and its figures).

Only names live here (no file is read or written), so that every reader, with whichever file
layer it uses, takes them from one place.
"""

import re

DATASET_JSON = 'dataset.json'
REJECTED_JSONL = 'rejected.jsonl'
DUPLICATES_JSONL = 'duplicates.jsonl'
NEAR_DUPLICATES_JSONL = 'near_duplicates.jsonl'
REJECTED_ANNOTATIONS_JSONL = 'rejected_annotations.jsonl'  # a build of objects: those not written
SUCCESS = '_SUCCESS'
TEMP_DIR = '.imageshards-tmp'
# The running build's lock. Not a build's own file (pipelines/writing/overwrite.is_own_file):
# --overwrite, run by the build that
# holds it, must keep it, or a third build could lock a new file of the same name.
LOCK_FILE = '.imageshards-lock'
REENCODED_DIR = 'reencoded'
# TFT's standard layout: the graph, its output schema and the raw schema of the records.
TRANSFORM_FN_DIR = 'transform_fn'
TRANSFORMED_METADATA_DIR = 'transformed_metadata'
RAW_METADATA_DIR = 'metadata'
TRANSFORM_DIRS = (TRANSFORM_FN_DIR, TRANSFORMED_METADATA_DIR, RAW_METADATA_DIR)
TRANSFORM_SAVED_MODEL = f'{TRANSFORM_FN_DIR}/saved_model.pb'
TRANSFORM_ASSETS = f'{TRANSFORM_FN_DIR}/assets'
ANALYSIS_JSON = f'{TRANSFORM_FN_DIR}/assets.extra/analysis.json'
OWN_FILES = (SUCCESS, DATASET_JSON, REJECTED_JSONL, DUPLICATES_JSONL, NEAR_DUPLICATES_JSONL)
OWN_FILES += (REJECTED_ANNOTATIONS_JSONL,)
# TensorFlow Datasets' metadata, beside dataset.json; TFDS names the labels files itself.
DATASET_INFO_JSON = 'dataset_info.json'
FEATURES_JSON = 'features.json'
LABELS_TXT_SUFFIX = '.labels.txt'
PREVIEW_PNG = 'preview.png'
REPORT_DIR = 'report'
# Under TEMP_DIR: finished shards waiting for Finalize, the metadata blocks the local runner
# spills, a COCO file's annotations waiting for their images on a distributed runner, and where
# the tf.Transform output and TFT's own temporary files are staged.
STAGED_SHARDS_DIR = 'shards'
BLOCKS_DIR = 'blocks'
ANNOTATIONS_DIR = 'annotations'
TRANSFORM_STAGING = 'transform'
TFT_TEMP_DIR = 'tft'

# A split names a folder of the build and its shards (--splits, a manifest's split column).
SPLIT_NAME = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]*$')
_REPORT_FILE = re.compile(
    r'^(order\.csv|metrics\.json|report\.md|objects\.png|[a-z]+_[A-Za-z0-9_.-]+\.png)$'
)


def staged_shard(relative):
    """Where a finished shard (or its index file) waits for Finalize, relative to the output
    directory."""
    return f'{TEMP_DIR}/{STAGED_SHARDS_DIR}/{relative}'


def reencoded_file(sha256_hex):
    """A `paths` build's lossless copy of an image, relative to the output directory."""
    return f'{REENCODED_DIR}/{sha256_hex}.png'


def is_lock_file(relative):
    """Whether a file of an output directory is a build's lock: not a file of the build, and
    not someone else's (a build holds it now, or one was killed holding it)."""
    return relative == LOCK_FILE


ANNOTATIONS_DIR = 'annotations'  # `imageshards coco-annotations` writes SPLIT.json there


def is_tool_output(relative):
    """Whether a file of a build is what `imageshards preview`, `report` or `coco-annotations`
    writes by default."""
    top, _, rest = relative.partition('/')
    if top == ANNOTATIONS_DIR:
        return rest.endswith('.json') and '/' not in rest
    return relative == PREVIEW_PNG or (top == REPORT_DIR and bool(_REPORT_FILE.match(rest)))


def is_tfds_metadata_file(name):
    """Whether a top-level file name of a build is one of the TFDS metadata files."""
    return name in (DATASET_INFO_JSON, FEATURES_JSON) or (
        name.startswith('image.') and name.endswith(LABELS_TXT_SUFFIX)
    )
