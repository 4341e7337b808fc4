"""Every path of this repository that a comment, a docstring or a document names exists.

A module moved to another folder leaves behind the text that names its old place; this finds
it. Named are: a path below a top folder of the repository
(`pipelines/writing/write.py`, `docs/`), perhaps with an attribute (`bench/datasets.photo_tree`),
and a dotted module (`python -m pipelines.analysis.graph_cache`, `imageshards.storage.read_input`).
In Python files only comments and docstrings are read (code is Python's to check); other text
files (the site's mkdocs.yml among them) are read whole. Globs and placeholders
(`configs/train_*.yaml`, `OUT/<split>/`) and what a build or benchmark writes (`bench/out/`) name
no file of the repository. A section of bench/RESULTS.md cited by its title
(`bench/RESULTS.md, "Build throughput"`) is one of its headings.
"""

import ast
import io
import pathlib
import re
import subprocess
import tokenize

import pytest

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ('pipelines', 'imageshards_cli', 'imageshards', 'trainer', 'bench')
TOP_FOLDERS = (*PACKAGES, 'tests', 'docs', 'configs', 'seeds')
TEXT_SUFFIXES = ('.py', '.md', '.yaml', '.yml', '.toml', '.ini', '.in', '.cfg')
PATH = re.compile(r'(?<![\w./$~-])((?:' + '|'.join(TOP_FOLDERS) + r')/[\w./-]*)')
PATTERN = ('*', '<', '{')  # after a path: a glob or a placeholder, which names no one file
MODULE = re.compile(r'(?<![\w./-])((?:' + '|'.join(PACKAGES) + r')(?:\.[a-z_][a-z0-9_]*)+)')
CITED_SECTION = re.compile(r'bench/RESULTS\.md[,:]? "([^"]+)"')
NOT_OF_THE_REPOSITORY = (
    'bench/out',  # what the benchmarks write (ignored by git)
    'imageshards/configs',  # where configs/ is installed (setup.py's package_dir)
)


def _text_files():
    listed = subprocess.run(
        ['git', 'ls-files'], cwd=REPOSITORY, capture_output=True, text=True, check=True
    ).stdout.split()
    return [name for name in listed if name.endswith(TEXT_SUFFIXES) or name == '.ci/run']


def _prose(path):
    """[(line number, text)] of a file's comments and docstrings (a Python file) or lines."""
    text = path.read_text(encoding='utf-8')
    if path.suffix != '.py':
        return list(enumerate(text.split('\n'), 1))
    found = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(text).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, 'body', None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                lines = value.value.split('\n')
                found += [(value.lineno + i, line) for i, line in enumerate(lines)]
    return found


def _defines(module_file, name):
    """Whether a module defines `name` at its top level."""
    for node in ast.parse(module_file.read_text(encoding='utf-8')).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [(alias.asname or alias.name).split('.')[0] for alias in node.names]
        else:
            names = []
        if name in names:
            return True
    return False


def _module_file(parts):
    """The file of the module named by `parts`, or None."""
    base = REPOSITORY.joinpath(*parts)
    for candidate in (base.with_suffix('.py'), base / '__init__.py'):
        if candidate.is_file():
            return candidate
    return None


def _names_a_module(dotted):
    """Whether `dotted` is a module of the repository, or a module and a name it defines."""
    parts = dotted.split('.')
    for end in range(len(parts), 0, -1):
        found = _module_file(parts[:end])
        if found:
            return end == len(parts) or (end == len(parts) - 1 and _defines(found, parts[end]))
    return False


def _names_a_path(path):
    """Whether `path` is a file or folder of the repository, or a module file and a name it
    defines (`bench/datasets.photo_tree`)."""
    if path.startswith(NOT_OF_THE_REPOSITORY) or (REPOSITORY / path).exists():
        return True
    stem, _, attribute = path.rpartition('.')
    return (
        bool(stem)
        and (REPOSITORY / f'{stem}.py').is_file()
        and (_defines(REPOSITORY / f'{stem}.py', attribute))
    )


def named(path):
    """[(line number, what is named, whether it exists in the repository)] of a text file."""
    found = []
    for number, line in _prose(path):
        for match in PATH.finditer(line):
            if line[match.end() : match.end() + 1] in PATTERN:
                continue
            path = match.group(1).rstrip('.-/')
            found.append((number, path, _names_a_path(path)))
        for match in MODULE.finditer(line):
            found.append((number, match.group(1), _names_a_module(match.group(1))))
    return found


def test_every_named_path_and_module_exists():
    missing = [
        f'{name}:{number}: {what}'
        for name in _text_files()
        for number, what, exists in named(REPOSITORY / name)
        if not exists
    ]
    assert not missing, 'named but not in the repository:\n' + '\n'.join(missing)


def _results_headings():
    text = (REPOSITORY / 'bench' / 'RESULTS.md').read_text(encoding='utf-8')
    return [line.lstrip('#').strip() for line in text.split('\n') if line.startswith('#')]


def cited_sections(path):
    """The titles of bench/RESULTS.md's sections that a file cites (across its lines)."""
    prose = ' '.join(line.strip().lstrip('#').strip() for _, line in sorted(_prose(path)))
    return CITED_SECTION.findall(prose)


def test_every_cited_section_of_the_results_is_there():
    headings = _results_headings()
    missing = [
        f'{name}: "{title}"'
        for name in _text_files()
        for title in cited_sections(REPOSITORY / name)
        if not any(heading.startswith(title) for heading in headings)
    ]
    assert not missing, 'sections of bench/RESULTS.md cited but not there:\n' + '\n'.join(missing)


def test_a_citation_of_a_section_that_is_not_there_is_found(tmp_path):
    sample = tmp_path / 'sample.py'
    sample.write_text(
        '# measured: bench/RESULTS.md, "Build\n# throughput" and bench/RESULTS.md, "No such"\n'
    )
    assert cited_sections(sample) == ['Build throughput', 'No such']
    headings = _results_headings()
    assert [any(h.startswith(t) for h in headings) for t in cited_sections(sample)] == [True, False]


@pytest.mark.parametrize(
    'text, what, exists',
    [
        ('# see pipelines/core/blocks.py', 'pipelines/core/blocks.py', True),
        ('# see pipelines/blocks.py.', 'pipelines/blocks.py', False),
        ('"""Made by bench/datasets.photo_tree."""', 'bench/datasets.photo_tree', True),
        ('"""Made by bench/datasets.no_such_tree."""', 'bench/datasets.no_such_tree', False),
        (
            '# python -m pipelines.analysis.graph_cache package',
            'pipelines.analysis.graph_cache',
            True,
        ),
        ('# python -m pipelines.transform_cache package', 'pipelines.transform_cache', False),
        ('# configs/train_*.yaml and OUT/<split>/', None, None),
        ('# imageshards.storage.read_input reads it', 'imageshards.storage.read_input', True),
        ('# see imageshards_cli/main.py', 'imageshards_cli/main.py', True),
        ('# see imageshards_cli/no_such_tool.py', 'imageshards_cli/no_such_tool.py', False),
        ('# imageshards_cli.main.usage', 'imageshards_cli.main.usage', True),
        ('# imageshards_cli.no_such_tool.main', 'imageshards_cli.no_such_tool.main', False),
    ],
)
def test_the_check_finds_what_is_missing(tmp_path, text, what, exists):
    sample = tmp_path / 'sample.py'
    sample.write_text(f'{text}\nx = "pipelines/nowhere.py"  # code: not checked\n')
    assert named(sample) == ([(1, what, exists)] if what else [])


def test_the_sites_configuration_is_read():
    assert 'mkdocs.yml' in _text_files()
