"""What a build's records hold, one object per kind of build: the seam a new kind of dataset
plugs into.

    features.py        every feature key, the types of values, a schema's parse spec
    record_kind.py     `RecordKind`: what every record holds and what a kind adds (features,
                       their types and parse spec, values, whether an image's label is a set,
                       its annotation, TFDS features, inspect's headline); `LabelNames`
    classification.py  `Classification`: a label or a set of labels per image, label levels
    detection.py       `Detection`: objects (boxes, classes, masks) and class maps per image
    objects.py         an image's objects checked against it, packed, made into features
    masks.py           instance masks rasterized by pycocotools, written as 1-bit PNGs
    example_bytes.py   a kind's records serialized as TensorFlow does, without it; the
                       `tensorflow.Example` message class
    registry.py        the kinds by name (`named`, `register`), a build's (`of_build`), as JSON

A build's kind is dataset.json's `kind` (builds from before it: classification) and its options
(the format, levels, multi_label, ...). A new kind is a module with a RecordKind subclass,
named in registry.py (or `register`ed), and an input reader that says it (pipelines/inputs/).
Nothing here imports the rest of imageshards.
"""
