"""YAML configuration files as defaults for a command's flags (the command line wins).

A file's top-level keys are flag names with underscores (`batch_size: 64`); one key may hold a
mapping of options handed on to another layer (Beam's pipeline options under `beam:`), which
comes back as `--key=value` arguments to put before the command line's own.
"""

import argparse

import yaml

from imageshards import flags


def load(path):
    """The file's flags as {name_with_underscores: value}; `path` is local or gs://."""
    loaded = yaml.safe_load(_read_text(path)) or {}
    if not isinstance(loaded, dict):
        raise ValueError(f'{path}: expected a mapping of flag names to values at the top level')
    return {str(key).replace('-', '_'): value for key, value in loaded.items()}


def apply_defaults(parser, argv, passthrough_key=None, convert=None, ignore=()):
    """Sets the defaults of `parser` from the file named by `--config` in `argv`, if any.

    Every value is checked as the flag's own value would be (its type and choices), so that a
    wrong one is refused naming the file and the key, as on the command line.

    Args:
        parser: an argparse parser with a `--config` flag.
        argv: the command line.
        passthrough_key: a top-level key whose mapping is returned as `--key=value` arguments.
        convert: {flag: function} applied to the file's values of those flags (instead of the
            flag's type).
        ignore: keys the file may hold that `parser` has no flag for (another command's).
    Returns:
        The pass-through arguments (empty without a file or the key).
    Raises:
        ValueError: the file names a key that is not a flag of `parser`, or a wrong value.
    """
    known, _ = parser.parse_known_args(argv)
    if not getattr(known, 'config', None):
        return []
    values = load(known.config)
    passthrough = values.pop(passthrough_key, None) or {} if passthrough_key else {}
    actions = {action.dest: action for action in parser._actions}  # pylint: disable=protected-access
    unknown = sorted(set(values) - set(actions) - set(ignore))
    if unknown:
        suggestion = flags.closest(unknown[0], [dest for dest in actions if dest != 'help'])
        hint = f' (did you mean {suggestion}?)' if suggestion else ''
        raise ValueError(f'{known.config}: unknown keys {unknown}{hint}')
    checked = {}
    for key, value in values.items():
        if key in actions and value is not None:
            checked[key] = _checked(known.config, actions[key], value, (convert or {}).get(key))
    parser.set_defaults(**checked)
    return [f'--{key}={value}' for key, value in passthrough.items()]


def _checked(path, action, value, convert):
    """A file's value of a flag, converted and checked like the flag's own; ValueError if bad."""
    try:
        if convert:
            value = convert(value)
        elif action.type and not isinstance(value, (list, tuple, dict)):
            value = action.type(value if isinstance(value, str) else str(value))
    except (ValueError, TypeError, argparse.ArgumentTypeError) as e:
        raise ValueError(f'{path}: {action.dest}: {flags.without_flag(e)}') from None
    if action.choices is not None and value not in action.choices:
        choices = ', '.join(str(choice) for choice in action.choices)
        raise ValueError(f'{path}: {action.dest}: {value!r} is not one of {choices}')
    return value


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
