"""imageshards: globally shuffled, balanced TFRecord shards from labeled images."""

__version__ = '0.1.0'
