"""YAML configuration files as defaults for a command's flags (the command line wins).

A file's top-level keys are flag names with underscores (`batch_size: 64`); one key may hold a
mapping of options handed on to another layer (Beam's pipeline options under `beam:`), which
comes back as `--key=value` arguments to put before the command line's own.
"""

import argparse

import yaml

from imageshards import flags
from imageshards import storage


def load(path):
    """The file's flags as {name_with_underscores: value}; `path` is local or gs://."""
    loaded = yaml.safe_load(storage.read_text(path, '--config')) or {}
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
    actions = flags.actions(parser)
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


def apply_defaults_of(parser, argv, owner, convert=None):
    """Sets the defaults of `parser` from a YAML file written for another command, `owner`.

    For the tools that show what training sees (`imageshards preview`, `report`), which take
    the trainer's YAML: the file is checked as `owner` checks it, and its settings that
    `parser` has no flag for (the model, the epochs, ...) are left aside.

    Args:
        parser: a parser with a `--config` flag, named in `argv`.
        owner: the parser of the command the file is for.
        convert: as in `apply_defaults`, for `owner`.
    Raises:
        ValueError: the file is wrong for `owner`.
    """
    known, _ = parser.parse_known_args(argv)
    if not known.config:
        return
    apply_defaults(owner, ['--config', known.config], convert=convert)
    own = flags.actions(parser)
    named = load(known.config)
    parser.set_defaults(
        **{key: owner.get_default(key) for key in named if key in own and key != 'config'}
    )


def as_flags(path, parser, what='flags'):
    """The command line of `parser` that says what the YAML file `path` says.

    Raises:
        ValueError: the file names a key that is not a flag of `parser` (`what` names them).
    """
    values = load(path)
    actions = {
        dest: action for dest, action in flags.actions(parser).items() if action.option_strings
    }
    unknown = sorted(set(values) - set(actions))
    if unknown:
        raise ValueError(f'{path}: unknown {what} {unknown}')
    found = []
    for key, value in values.items():
        if value is None:  # an empty YAML value: the flag's default
            continue
        action = actions[key]
        option = action.option_strings[0]
        if isinstance(action, argparse._StoreConstAction):  # pylint: disable=protected-access
            if value == action.const:  # store_true / store_false: the flag, or nothing
                found.append(option)
        elif isinstance(action, argparse.BooleanOptionalAction):  # --masks, or --no-masks
            found.append(option if value else action.option_strings[1])
        elif isinstance(value, (list, tuple)):
            found.append(f'{option}={",".join(str(v) for v in value)}')
        else:
            found.append(f'{option}={value}')
    return found
