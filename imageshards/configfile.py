"""YAML configuration files as defaults for a command's flags (the command line wins).

A file's top-level keys are flag names with underscores (`batch_size: 64`); one key may hold a
mapping of options handed on to another layer (Beam's pipeline options under `beam:`), which
comes back as `--key=value` arguments to put before the command line's own.
"""

import yaml


def load(path):
    """The file's flags as {name_with_underscores: value}; `path` is local or gs://."""
    loaded = yaml.safe_load(_read_text(path)) or {}
    if not isinstance(loaded, dict):
        raise ValueError(f'{path}: expected a mapping of flag names to values at the top level')
    return {str(key).replace('-', '_'): value for key, value in loaded.items()}


def apply_defaults(parser, argv, passthrough_key=None, convert=None):
    """Sets the defaults of `parser` from the file named by `--config` in `argv`, if any.

    Args:
        parser: an argparse parser with a `--config` flag.
        argv: the command line.
        passthrough_key: a top-level key whose mapping is returned as `--key=value` arguments.
        convert: {flag: function} applied to the file's values of those flags.
    Returns:
        The pass-through arguments (empty without a file or the key).
    Raises:
        ValueError: the file names a key that is not a flag of `parser`.
    """
    known, _ = parser.parse_known_args(argv)
    if not getattr(known, 'config', None):
        return []
    values = load(known.config)
    passthrough = values.pop(passthrough_key, None) or {} if passthrough_key else {}
    flags = {action.dest for action in parser._actions}  # pylint: disable=protected-access
    unknown = sorted(set(values) - flags)
    if unknown:
        raise ValueError(f'{known.config}: unknown keys {unknown}')
    for flag, function in (convert or {}).items():
        if flag in values and values[flag] is not None:
            values[flag] = function(values[flag])
    parser.set_defaults(**values)
    return [f'--{key}={value}' for key, value in passthrough.items()]


def _read_text(path):
    """A local file's text, or a gs:// object's (Vertex's /gcs/ FUSE paths are local files)."""
    if path.startswith('gs://'):
        # pylint: disable=import-outside-toplevel
        from google.api_core import exceptions
        from google.cloud import storage

        bucket, _, name = path[len('gs://') :].partition('/')
        if not name:
            raise ValueError(f'--config {path} names a bucket, not a file')
        try:
            return storage.Client().bucket(bucket).blob(name).download_as_text()
        except exceptions.NotFound as e:
            raise ValueError(f'--config {path} does not exist') from e
    with open(path, encoding='utf-8') as f:
        return f.read()
