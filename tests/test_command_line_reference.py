"""The site's command-line reference (docs/hooks/command_line.py) shows every flag of a parser,
as the parser groups them, with its value, default and help text; and every command has its
page in the site's nav (mkdocs.yml)."""

import argparse
import importlib.util
import pathlib
import re

import yaml

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent


def _hook():
    path = REPOSITORY / 'docs' / 'hooks' / 'command_line.py'
    spec = importlib.util.spec_from_file_location('command_line_hook', path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _parser():
    parser = argparse.ArgumentParser(
        prog='imageshards sample',
        description='Does a thing.\n\nExample:\n    imageshards sample out/ --seed 3\n',
    )
    parser.add_argument('build', help='output directory of `imageshards build`')
    parser.add_argument('--seed', type=int, default=7, help='shuffle seed')
    parser.add_argument('--splits', default=(('train', 0.8), ('val', 0.2)), help='fractions')
    parser.add_argument('--format', choices=('examples', 'paths'), default='examples')
    parser.add_argument('--limit', type=int, default=5, help='at most %(default)s a <root>|x')
    parser.add_argument('--dedup', action='store_true', help='drop byte-identical images')
    parser.add_argument('--hidden', help=argparse.SUPPRESS)
    shards = parser.add_mutually_exclusive_group()
    shards.add_argument('--num-shards', metavar='N', type=int, help='shards per split')
    shards.add_argument('--shard-size-mb', type=float, default=128.0, help='MB a shard')
    cloud = parser.add_argument_group('Cloud', 'Where the job runs.')
    cloud.add_argument('-p', '--project', required=True, help='Google Cloud project')
    return parser


def _rows(page):
    """{flag cell: (default cell, help cell)} of the page's tables."""
    rows = re.findall(r'^\| (`.+?) \| (.*?) \| (.*) \|$', page, re.MULTILINE)
    return {names: (default, text) for names, default, text in rows}


def test_every_flag_of_a_parser_is_on_its_page():
    parser = _parser()
    page = _hook().reference_markdown(parser, 'imageshards sample', 'do a thing')
    flags = [name for action in parser._actions for name in action.option_strings]
    shown = [f for f in flags if f not in ('-h', '--help', '--hidden')]
    for flag in shown:
        assert re.search(rf'`{re.escape(flag)}[ `]', page), f'{flag} is not on the page'
    assert '--hidden' not in page
    assert len(_rows(page)) == 9  # the argument, and 8 flags: -p and --project are one


def test_the_page_shows_values_defaults_groups_and_help_as_the_parser_has_them():
    page = _hook().reference_markdown(_parser(), 'imageshards sample', 'do a thing')
    rows = _rows(page)
    assert rows['`--seed SEED`'] == ('`7`', 'shuffle seed')
    assert rows['`--splits SPLITS`'][0] == '`train=0.8,val=0.2`'
    assert rows['`--format {examples,paths}`'][0] == '`examples`'
    assert rows['`--num-shards N`'] == (
        '',
        'shards per split (not together with `--shard-size-mb`)',
    )
    assert rows['`--dedup`'] == ('', 'drop byte-identical images')
    # %(default)s filled in, said in words so not repeated; Markdown's and HTML's marks escaped
    assert rows['`--limit LIMIT`'] == ('', r'at most 5 a &lt;root&gt;\|x')
    assert rows['`-p PROJECT`<br>`--project PROJECT`'] == ('', '**Required.** Google Cloud project')
    assert rows['`build`'] == ('', 'output directory of `imageshards build`')
    assert '## Arguments\n\n| Argument | Default |' in page
    headings = re.findall(r'^## (.+)$', page, re.MULTILINE)
    assert headings == ['Arguments', 'Flags', 'Cloud']
    assert 'Where the job runs.' in page
    assert '```text\nimageshards sample out/ --seed 3\n```' in page  # an indented example
    assert page.startswith('# `imageshards sample`\n\nDo a thing.\n')


def test_every_command_has_a_page_in_the_nav():
    from imageshards_cli import main

    config = yaml.safe_load((REPOSITORY / 'mkdocs.yml').read_text(encoding='utf-8'))
    assert 'docs/hooks/command_line.py' in config['hooks']

    def pages(nav):
        for entry in nav:
            value = next(iter(entry.values())) if isinstance(entry, dict) else entry
            yield from pages(value) if isinstance(value, list) else [value]

    listed = set(pages(config['nav']))
    hook = _hook()
    for name in [*main.COMMANDS, hook.TRAINER[0], 'index']:
        assert f'{hook.FOLDER}/{name}.md' in listed, f'mkdocs.yml nav lists no page for {name}'
