"""Where an input's bytes are: the path or URI of an input from its stable key, and what makes
an input small.

A listed input carries its stable key (its path relative to the listing's base, the input root,
a glob's base or a manifest's folder), which seeds the shuffle; validation, deduplication and
the writer all find its bytes from the key and the base, here.
"""

import posixpath

from imageshards import storage

# Inputs of at most this many bytes are small: the local runner keeps their bytes beside the
# build until the end (pipelines/local/spill.py), which the free-space check counts.
SMALL_INPUT_BYTES = 16 << 10


def source_path(base: str, key: str) -> str:
    """The path or URI of the input with this stable key (see `InputEntry.key`)."""
    if storage.is_uri(key) or posixpath.isabs(key):
        return key
    return storage.join(base, key)
