"""Listing a build's inputs, as untrusted input: a folder tree, a glob, a CSV/JSONL manifest,
archives, WebDataset shards, arrays or TFRecord files, into a listing file of InputEntry lines,
read back in work items. Imports the foundation and the base (pipelines/core/) only.

    entries.py          what listing produces (InputEntry, ListingCounts, an archive's members)
                        and the rules of paths
    listing.py          the listing of any form, its file and its work items; trees and globs
    tree_walk.py        a local tree walked in sorted order, one folder at a time
    forms.py            what --input is, detected or named (--input-form), and its inputs
    manifests.py        a CSV or JSONL manifest read in row order, labels and levels checked
    manifest_columns.py  which columns hold the path, labels, levels (Kaggle-style: by name)
    manifest_members.py  archive members as a manifest names them (`data.tar!cats/1.jpg`)
    vertex.py           Vertex AI's image classification import files, read as they are
    confinement.py      where a manifest row's path may lead (its folder, --allow-root)
    tar_and_zip.py      the members of a tar, .tar.gz or zip, indexed without extracting it
    zip_members.py      a zip's members: its central directory, or its local headers where cut
    archive_inputs.py   archives of a tree, per-class archives and WebDataset shards as inputs
    archive_index.py    archives on an object store indexed by the build's workers (IndexArchives)
    arrays.py           MNIST IDX files and .npz/.npy arrays as inputs, a row each
    tfrecord_inputs.py  TFRecord files of tf.train.Examples as inputs, a record each
    label_files.py      a tree's or archive's labels from a file keyed by file name
    class_names.py      names for integer labels (--class-names)
    object_inputs.py    what the readers of detection sets share (entries, confinement)
    json_guard.py       an untrusted JSON stream's strings, tokens and nesting bounded as read
    jsonl_lines.py      an untrusted JSONL file's lines, read a block at a time, each bounded
    coco.py             a COCO annotation file, streamed: its categories and images listed
    coco_join.py        a COCO file's annotations joined to their images by the pipeline's
                        workers (JoinAnnotations), not the launcher
    voc.py              a Pascal VOC folder: XML boxes, segmentation PNGs, ImageSets splits
    yolo.py             a YOLO data.yaml: its image folders and label text files
    object_archives.py  any of these three in archives (tar, .tar.gz, zip), read as extracted
    vertex_objects.py   Vertex AI's object detection import files (JSONL), read as they are
"""
