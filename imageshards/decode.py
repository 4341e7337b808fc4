"""Decoding an encoded image to the pixels Pillow shows: shared by the trainer's input pipeline,
its serving signature and the build's tf.Transform graph.

JPEGs are decoded with the accurate integer IDCT, which gives exactly the pixels Pillow shows
(the build checks that against what it stores); other formats with `tf.io.decode_image`.
"""

import tensorflow as tf

DCT_METHOD = 'INTEGER_ACCURATE'


def decode(encoded):
    """All pixels of one encoded image, uint8 RGB."""
    return tf.cond(
        tf.io.is_jpeg(encoded),
        lambda: tf.io.decode_jpeg(encoded, channels=3, dct_method=DCT_METHOD),
        lambda: tf.io.decode_image(encoded, channels=3, expand_animations=False),
    )
