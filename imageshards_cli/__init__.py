"""The `imageshards` command and its tools: the face of the package, above everything else.

Nothing in `imageshards/`, `pipelines/` or `trainer/` imports from here.

    main.py               the `imageshards` command: one subcommand per tool
    __main__.py           `python -m imageshards_cli`
    inspect.py            `imageshards inspect`: what shards hold
    verify.py             `imageshards verify`: a build read completely and checked
    verify_records.py     the checks verify runs on every record
    verify_grouping.py    verify's check of groups, near-duplicate clusters and their leaks
    verify_objects.py     verify's check of a detection build's boxes, classes and masks
    report.py             `imageshards report`: how well training sees a build shuffled
    shuffle_metrics.py    measures of how well an order is shuffled
    report_text.py        report.md and its headline figures
    report_figures.py     its figures
    report_multilabel.py  its multi-label part: label sets and their spread
    report_near_duplicates.py  its near-duplicates: counts, the closest pair, the largest cluster
    report_objects.py     a detection build's objects: counts, box sizes, a grid of them drawn
    coco_annotations.py   `imageshards coco-annotations`: a split's ground truth as a COCO file
    preview.py            `imageshards preview`: a grid of augmented training images
    sample_data.py        `imageshards sample-data`: a small labeled tree of digits
"""
