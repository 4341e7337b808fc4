"""Command-line parsing shared by every command: strict flags, errors in words, defaults shown.

`ArgumentParser` is argparse's, with three differences a person notices:
- a flag it does not know is an error that names the closest one it knows (`--num_shards`:
  did you mean --num-shards?), never silently ignored or handed on;
- `--help` shows every flag's default;
- values are converted by the functions below, whose errors say what is wrong
  (`--splits: fractions sum to 0.9, not 1`), not `invalid parse_splits value`.
"""

import argparse
import difflib
import re

_OWN_FLAG = re.compile(r'^--[\w-]+: ')


def _shown(value):
    """A default as a person types it: `train=0.8,val=0.2`, `family,species`, `0.5`."""
    if isinstance(value, (tuple, list)):
        return ','.join(
            f'{v[0]}={v[1]:g}' if isinstance(v, (tuple, list)) and len(v) == 2 else str(v)
            for v in value
        )
    return str(value)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description as written, and every flag's default after its help."""

    def _get_help_string(self, action):
        text = action.help or ''
        default = action.default
        if (
            '%(default)' in text
            or '(default' in text  # said in words: `(default: from --shard-size-mb)`
            or not action.option_strings
            or default is False
            or default in (None, '', (), [], argparse.SUPPRESS)
            or isinstance(action, argparse._StoreConstAction)  # pylint: disable=protected-access
        ):
            return text
        shown = _shown(default).replace('%', '%%')
        return f'{text} (default: {shown})' if text else f'default: {shown}'


def actions(parser):
    """{dest: argparse action} of every flag of `parser` (any argparse parser).

    argparse keeps them in a private list; this is the one place that reads it.
    """
    return {action.dest: action for action in parser._actions}  # pylint: disable=protected-access


def flag_names(parser):
    """Every option string of `parser` (`--num-shards`, `-n`, ...)."""
    return [name for action in actions(parser).values() for name in action.option_strings]


def closest(flag, candidates):
    """The candidate flag most like `flag` (`--num_shards` -> `--num-shards`), or None."""
    norm = lambda name: name.lstrip('-').replace('_', '-').lower()
    by_norm = {norm(candidate): candidate for candidate in candidates}
    found = difflib.get_close_matches(norm(flag.split('=', 1)[0]), list(by_norm), n=1, cutoff=0.6)
    return by_norm[found[0]] if found else None


def unknown_argument_message(unknown, *candidates, elsewhere=''):
    """`unknown flag --num_shards: did you mean --num-shards?` for the first unknown argument.

    Args:
        unknown: the arguments no parser took.
        *candidates: lists of known flags, in order of preference: the suggestion is the
            closest flag of the first list that has a close one.
        elsewhere: words added at the end.
    """
    first = unknown[0]
    if not first.startswith('-'):
        return f'unexpected argument {first!r} (every value follows its flag)'
    flag = first.split('=', 1)[0]
    suggestion = next(filter(None, (closest(flag, group) for group in candidates)), None)
    hint = f': did you mean {suggestion}?' if suggestion else ' (see --help)'
    return f'unknown flag {flag}{hint}{elsewhere}'


class ArgumentParser(argparse.ArgumentParser):
    """argparse.ArgumentParser that refuses unknown flags by name, with a suggestion."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault('formatter_class', HelpFormatter)
        kwargs.setdefault('allow_abbrev', False)
        super().__init__(*args, **kwargs)

    def flag_names(self):
        return flag_names(self)

    def parse_args(self, args=None, namespace=None):
        parsed, unknown = self.parse_known_args(args, namespace)
        if unknown:
            self.error(unknown_argument_message(unknown, self.flag_names()))
        return parsed


def without_flag(error):
    """An error's message without a leading `--flag: ` (the caller names the flag itself)."""
    return _OWN_FLAG.sub('', str(error), count=1)


def words(parse):
    """`parse` as an argparse type: its ValueError's message is the error shown (without a
    leading `--flag: `, which argparse adds itself)."""

    def convert(text):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(without_flag(e)) from None

    convert.__name__ = getattr(parse, '__name__', 'value')
    return convert


def integer(minimum=None, maximum=None):
    """An argparse type for a whole number of at least `minimum` (at most `maximum`)."""

    def convert(text):
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f'expected a whole number, got {text!r}') from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f'must be {minimum} or more, got {value}')
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f'must be {maximum} or less, got {value}')
        return value

    return convert


def number(above=None):
    """An argparse type for a number greater than `above`."""

    def convert(text):
        try:
            value = float(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f'expected a number, got {text!r}') from None
        if above is not None and not value > above:
            raise argparse.ArgumentTypeError(f'must be more than {above:g}, got {value:g}')
        return value

    return convert
