"""The README stays what a newcomer reads first: short, and opening with the two commands for a
fresh machine exactly as CI (.ci/run) runs them, so that the first thing a person types is what
CI has just run. The reference lives in docs/ (mkdocs.yml)."""

import pathlib
import re

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
MAX_LINES = 300
FENCED = re.compile(r'^```[a-z]*\n(.*?)^```$', re.MULTILINE | re.DOTALL)


def ci_commands(text):
    """The commands of .ci/run's steps 1 and 2: what the README's first two blocks must be."""
    steps = re.findall(r'^# ([12])\. .*\n(.+)$', text, re.MULTILINE)
    return [command for _, command in steps]


def code_blocks(text):
    return [block.rstrip('\n') for block in FENCED.findall(text)]


def test_the_readme_is_at_most_300_lines():
    lines = (REPOSITORY / 'README.md').read_text(encoding='utf-8').split('\n')
    assert len(lines) <= MAX_LINES, f'README.md has {len(lines)} lines: move reference to docs/'


def test_the_readme_begins_with_the_two_commands_that_ci_runs():
    commands = ci_commands((REPOSITORY / '.ci' / 'run').read_text(encoding='utf-8'))
    assert len(commands) == 2 and all(c.startswith('python3 -m venv .venv') for c in commands)
    readme = (REPOSITORY / 'README.md').read_text(encoding='utf-8')
    assert code_blocks(readme)[:2] == commands
    headings = [line for line in readme.split('\n') if line.startswith('## ')]
    assert headings[0] == '## Two commands for a fresh machine'


def test_a_changed_command_is_found():
    ci = '# 1. Install.\npython3 -m venv .venv && a\n\n# 2. Test.\npython3 -m venv .venv && b\n'
    blocks = ['python3 -m venv .venv && a', 'python3 -m venv .venv && c']
    readme = '# x\n\n' + ''.join(f'```bash\n{block}\n```\n\n' for block in blocks)
    assert ci_commands(ci) == ['python3 -m venv .venv && a', 'python3 -m venv .venv && b']
    assert code_blocks(readme) == blocks
    assert code_blocks(readme)[:2] != ci_commands(ci)
