"""Validating every listed input once (ValidateImages): JPEG and PNG by their structure, the
rest by a Pillow decode, failures as reasons; then, with --dedup, one of each set of identical
images. Imports the foundation, the base (pipelines/core/) and inputs/.

    validate.py         ValidateImages: every input read and checked once, metadata kept
    labeling.py         an input's levels, group and annotation checked; rejected.jsonl lines
    images.py           one encoded image validated, and which bytes its record stores
    image_structure.py  JPEG validated by its structure, without decoding its pixels
    png_structure.py    PNG validated by its structure
    image_errors.py     what Pillow's failures on untrusted bytes mean, as reasons
    resize.py           --resize-shorter-side: the smaller image a record stores
    perceptual.py       --near-duplicates: a perceptual hash of every valid image
    dedup.py            DropDuplicates: one of each set of byte-identical images
"""
