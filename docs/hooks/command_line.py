"""The command-line reference of the site, written from the parsers so that it cannot drift.

An MkDocs hook (mkdocs.yml, `hooks:`). Before the pages are read, it adds one page per command
of `imageshards` (each module that `imageshards_cli.main.COMMANDS` names gives its parser with
`build_arg_parser()`), one for the trainer's `python -m trainer.task`
(`trainer.config.build_arg_parser()`) and an index of them, under reference/command-line/.
A page shows the command's usage and description as `--help` does, then every flag as its
parser groups them: its names and value, its default and its help text. A flag added to a
parser is on its page at the next build of the site; a command added to COMMANDS is a page
that mkdocs.yml's nav must list (`validation: nav: omitted_files: warn` and `--strict` fail the
build until it does).

Importing the commands' modules imports Beam and TensorFlow: seconds, once per build.
`reference_markdown` needs neither, nor MkDocs (tests/test_command_line_reference.py).
"""

import argparse
import contextlib
import html
import importlib
import os
import re
import textwrap

FOLDER = 'reference/command-line'
TRAINER = ('trainer-task', 'trainer.config', 'train a model on a build (a Vertex AI job runs it)')
USAGE_WIDTH = 96  # the usage block's width, fixed so the page does not depend on a terminal
_GROUP_TITLES = {'positional arguments': 'Arguments', 'options': 'Flags'}
_CODE = re.compile(r'(`[^`\n]+`)')
_MARKDOWN_SPECIAL = re.compile(r'([\\`*_\[\]|])')

# What a command's parser cannot say itself, after its flags.
NOTES = {
    'build': """\
## Beam's pipeline options

A flag that this parser does not take is handed to Beam as a pipeline option (`--runner`,
`--direct_running_mode`, `--direct_num_workers`, `--project`, `--region`, `--temp_location`,
`--setup_file`, `--extra_package`, ...), on the command line or in the `beam:` mapping of a
`--config` file; a flag that neither knows is an error that names the closest one. Those
options are Beam's and documented there: [configuring pipeline
options](https://beam.apache.org/documentation/programming-guide/#configuring-pipeline-options),
[every option of the Python SDK](https://beam.apache.org/releases/pydoc/current/apache_beam.options.pipeline_options.html),
and [Dataflow's pipeline options](https://cloud.google.com/dataflow/docs/reference/pipeline-options).
How a build runs locally and on Dataflow: [The build command](../../building/index.md) and
[Building on Google Cloud Dataflow](../../dataflow.md).
""",
    'submit-training': """\
## The trainer's flags

Flags after `--` go to the trainer on every replica, after those of the trainer's YAML, so
they win: [`python -m trainer.task`](trainer-task.md). More on the job: [Training on Vertex
AI](../../vertex.md).
""",
}


def _escaped(text):
    """Prose as Markdown shows it literally, but for `code` spans, which stay code."""
    parts = _CODE.split(text)
    return ''.join(
        part if index % 2 else _MARKDOWN_SPECIAL.sub(r'\\\1', html.escape(part, quote=False))
        for index, part in enumerate(parts)
    )


def _fenced(lines):
    return ['```text', *textwrap.dedent('\n'.join(lines)).split('\n'), '```']


def _paragraphs(text):
    """A description written for `--help` (argparse keeps its lines) as Markdown: paragraphs
    and list items as prose, indented runs of lines (examples, file lists) as text blocks."""
    out = []
    if not (text or '').strip():
        return out
    for block in re.split(r'\n\s*\n', textwrap.dedent(text).strip('\n')):
        lines = block.split('\n')
        while lines:
            indented = lines[0].startswith((' ', '\t'))
            run = []
            while lines and lines[0].startswith((' ', '\t')) == indented:
                run.append(lines.pop(0))
            if indented:
                out += _fenced(run)
            else:
                items = re.split(r'\n(?=[-*] )', '\n'.join(run))
                out += [_escaped(' '.join(item.split())) for item in items]
            out.append('')
    return out


def _default(action):
    """A flag's default as a person types it (`train=0.8,val=0.2`), or '' where it has none
    worth showing: a switch, nothing, or a default the help text states itself."""
    value = action.default
    if action.nargs == 0 or value in (None, '', (), [], argparse.SUPPRESS) or value is False:
        return ''
    if '%(default)' in (action.help or '') or '(default' in (action.help or ''):
        return ''  # as `--help` shows it (imageshards/flags.py): the help says it in words
    if isinstance(value, (tuple, list)):
        value = ','.join(
            f'{v[0]}={v[1]:g}' if isinstance(v, (tuple, list)) and len(v) == 2 else str(v)
            for v in value
        )
    return f'`{value}`'


def _invocations(action):
    """[`-n N`, `--num N`]: each name of a flag with its value, as `--help` writes them."""
    if not action.option_strings:
        return [f'`{action.metavar or action.dest}`']
    if action.nargs == 0:
        return [f'`{name}`' for name in action.option_strings]
    # argparse's own formatter writes the value (metavar, choices, nargs); its methods are not
    # public, so this is the one place that asks them.
    formatter = argparse.HelpFormatter(prog='')
    value = formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
    return [f'`{name} {value}`' for name in action.option_strings]


def _help(action, parser, together):
    """The help text with argparse's %(default)s and the like filled in, and what the parser
    says about the flag besides: required, or not together with others."""
    params = {key: value for key, value in vars(action).items() if value is not argparse.SUPPRESS}
    params['prog'] = parser.prog
    if params.get('choices') is not None:
        params['choices'] = ', '.join(str(choice) for choice in params['choices'])
    text = _escaped((action.help or '') % params)
    if action.required and action.option_strings:  # an argument is always required
        text = f'**Required.** {text}'
    if together:
        names = ', '.join(f'`{other.option_strings[0]}`' for other in together)
        text += f' (not together with {names})'
    return text


def reference_markdown(parser, title, summary='', notes=''):
    """A page of Markdown for `parser`: its usage, description and every flag, by group."""
    with _columns(USAGE_WIDTH):
        usage = parser.format_usage().strip()
    lines = [f'# `{title}`', '']
    if summary:
        lines += [_escaped(summary[:1].upper() + summary[1:]) + '.', '']
    lines += _fenced(usage.split('\n')) + ['']
    lines += _paragraphs(parser.description)
    exclusive = {}
    for group in parser._mutually_exclusive_groups:
        for action in group._group_actions:
            exclusive[action] = [other for other in group._group_actions if other is not action]
    for group in parser._action_groups:
        shown = [
            action
            for action in group._group_actions
            if action.help is not argparse.SUPPRESS and not isinstance(action, argparse._HelpAction)
        ]
        if not shown:
            continue
        lines += [f'## {_GROUP_TITLES.get(group.title, group.title)}', '']
        lines += _paragraphs(group.description)
        kind = 'Flag' if any(action.option_strings for action in shown) else 'Argument'
        lines += [f'| {kind} | Default | What it does |', '|---|---|---|']
        for action in shown:
            names = '<br>'.join(_invocations(action))
            help_text = _help(action, parser, exclusive.get(action, []))
            lines.append(f'| {names} | {_default(action)} | {help_text} |')
        lines.append('')
    lines += _paragraphs(parser.epilog)
    if notes:
        lines += [notes.rstrip('\n'), '']
    return '\n'.join(lines).rstrip('\n') + '\n'


@contextlib.contextmanager
def _columns(width):
    """argparse wraps usage to the terminal's width, read from $COLUMNS: fix it meanwhile."""
    before = os.environ.get('COLUMNS')
    os.environ['COLUMNS'] = str(width + 2)  # argparse takes two off for its margin
    try:
        yield
    finally:
        if before is None:
            del os.environ['COLUMNS']
        else:
            os.environ['COLUMNS'] = before


def commands():
    """[(page name, title, one-line summary, parser)]: every command, then the trainer."""
    from imageshards_cli import main  # pylint: disable=import-outside-toplevel

    found = []
    for name, (module_name, summary) in main.COMMANDS.items():
        module = importlib.import_module(module_name)
        if not hasattr(module, 'build_arg_parser'):
            raise RuntimeError(
                f'{module_name} (the `imageshards {name}` command) has no build_arg_parser(): '
                'the command-line reference is written from it'
            )
        found.append((name, f'imageshards {name}', summary, module.build_arg_parser()))
    page, module_name, summary = TRAINER
    parser = importlib.import_module(module_name).build_arg_parser()
    found.append((page, parser.prog, summary, parser))
    return found


def index_markdown(pages):
    """The index page: each command, what it does, and its page."""
    lines = [
        '# Command line',
        '',
        'Every command and every flag, written from the parsers themselves when this site is',
        'built, so this reference says what the code does. `imageshards <command> --help` shows',
        'the same; `imageshards --version` prints the version.',
        '',
        '| Command | What it does |',
        '|---|---|',
    ]
    lines += [f'| [`{title}`]({page}.md) | {_escaped(summary)} |' for page, title, summary in pages]
    return '\n'.join(lines) + '\n'


def on_files(files, config):
    """MkDocs' event before pages are read: add the reference's pages."""
    from mkdocs.structure.files import File  # pylint: disable=import-outside-toplevel

    pages = []
    for page, title, summary, parser in commands():
        text = reference_markdown(parser, title, summary, NOTES.get(page, ''))
        files.append(File.generated(config, f'{FOLDER}/{page}.md', content=text))
        pages.append((page, title, summary))
    files.append(File.generated(config, f'{FOLDER}/index.md', content=index_markdown(pages)))
    return files
