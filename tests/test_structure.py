"""The shape of the code: folders that import downward only, no folder that imports a folder
importing it back, no module that imports itself through others, the build's stages in their
order above a shared base, and modules and functions of a size a reader can hold.

Every import counts, also one inside a function and a module named by a string (`importlib`,
`python -m`): the foundation (`imageshards/`) imports no other folder of this project, the
Beam build (`pipelines/`) and the trainer (`trainer/`) import the foundation only, and the
command-line tools (`imageshards_cli/`) may import all three. Every folder is a node of its own
(`pipelines/validation/` apart from `pipelines/`), and none imports one that imports it back.
Inside `pipelines/`, each folder imports only those before it in PIPELINES_ORDER: the base
(`core/`), the stages in the order data flows, what only the local runner needs (`local/`), and
at the top the entry and its runner choice (build, launcher, steps, runner), nothing else.
"""

import ast
import os
import pathlib
import re

import pytest

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
# Each folder's layer: a folder imports folders of lower layers only.
LAYERS = {
    'imageshards': 0,
    'pipelines': 1,
    'trainer': 1,
    'imageshards_cli': 2,
    'bench': 3,
    'tests': 3,
}
CHECKED = ('imageshards', 'imageshards_cli', 'pipelines', 'trainer', 'bench', 'tests')
# Where no module may import itself.
PACKAGES = ('imageshards', 'imageshards_cli', 'pipelines', 'trainer')
# The folders of pipelines/, each importing only those before it: the base, the stages in the
# order data flows, the local runner's machinery, and the top (the entry and its runner choice).
PIPELINES_ORDER = (
    'pipelines/core',
    'pipelines/inputs',
    'pipelines/validation',
    'pipelines/assignment',
    'pipelines/writing',
    'pipelines/analysis',
    'pipelines/local',
    'pipelines',
)
TOP_OF_PIPELINES = (
    'pipelines',
    'pipelines.build',
    'pipelines.launcher',
    'pipelines.runner',
    'pipelines.steps',
)
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
_ARGPARSE_CALLS = ('add_argument', 'add')  # flag declarations, however many a command has


def _python_files():
    return sorted(
        path
        for folder in CHECKED
        for path in (REPOSITORY / folder).rglob('*.py')
        if '__pycache__' not in path.parts
    )


def _module_files():
    """{dotted module name: file} of the project's packages."""
    modules = {}
    for path in _python_files():
        parts = list(path.relative_to(REPOSITORY).with_suffix('').parts)
        if parts[-1] == '__init__':
            parts = parts[:-1]
        modules['.'.join(parts)] = path
    return modules


def _folder(path):
    """The folder whose layer a file has: its own, or the nearest one above it with a layer
    (pipelines/validation/ is pipelines/)."""
    folder = path.parent.relative_to(REPOSITORY)
    while folder.as_posix() not in LAYERS and folder.parent != pathlib.Path('.'):
        folder = folder.parent
    return folder.as_posix()


def _imported(tree, package, modules):
    """The project modules a module's AST imports: statements anywhere in it, and strings that
    name a module (for importlib and `python -m`)."""
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                anchor = package.split('.')[: len(package.split('.')) - node.level + 1]
                base = '.'.join(anchor + ([base] if base else []))
            names = [f'{base}.{alias.name}' for alias in node.names] + [base]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and '.' in node.value:
            names = [node.value]
        for name in names:
            if name.split('.')[0] not in modules and f'tests.{name}' in modules:
                name = f'tests.{name}'  # a helper of tests/, which the suite puts on sys.path
            # The longest project module that `name` is or is inside of.
            while name and name not in modules:
                name = name.rpartition('.')[0]
            if name:
                found.add(name)
    return found


def folder_imports(layered=True):
    """{(importing folder, imported folder): [(module file, imported module)]}: of the folders
    with a layer (`layered`), or of every folder, each its own node."""
    modules = _module_files()
    folder = _folder if layered else _folder_of
    edges = {}
    for name, path in modules.items():
        package = name if path.name == '__init__.py' else name.rpartition('.')[0]
        tree = ast.parse(path.read_text(encoding='utf-8'))
        for target in _imported(tree, package, modules):
            edge = (folder(path), folder(modules[target]))
            if edge[0] != edge[1]:
                edges.setdefault(edge, []).append((path.relative_to(REPOSITORY), target))
    return edges


def module_imports():
    """{module: {the project modules it imports}} of the packages in PACKAGES."""
    modules = _module_files()
    graph = {}
    for name, path in modules.items():
        if name.split('.')[0] not in PACKAGES:
            continue
        package = name if path.name == '__init__.py' else name.rpartition('.')[0]
        tree = ast.parse(path.read_text(encoding='utf-8'))
        graph[name] = {
            target
            for target in _imported(tree, package, modules)
            if target != name and target.split('.')[0] in PACKAGES
        }
    return graph


def _cycle(edges):
    """A cycle of folders in the import graph, as a list, or None."""
    graph = {}
    for source, target in edges:
        graph.setdefault(source, set()).add(target)
    state = {}

    def visit(folder, trail):
        state[folder] = 'open'
        for target in sorted(graph.get(folder, ())):
            if state.get(target) == 'open':
                return trail[trail.index(target) :] + [target]
            if target not in state:
                found = visit(target, trail + [target])
                if found:
                    return found
        state[folder] = 'done'
        return None

    for folder in sorted(graph):
        if folder not in state:
            found = visit(folder, [folder])
            if found:
                return found
    return None


def test_folders_import_downward_only_without_cycles():
    edges = folder_imports()
    folders = {folder for edge in edges for folder in edge}
    unplaced = sorted(folders - set(LAYERS))
    assert not unplaced, f'folders without a layer in tests/test_structure.py: {unplaced}'
    upward = {
        edge: where
        for edge, where in edges.items()
        if LAYERS[edge[1]] >= LAYERS[edge[0]] and edge[0] not in ('bench', 'tests')
    }
    assert not upward, f'imports that do not go downward (folder -> folder: where): {upward}'
    assert _cycle(edges) is None, f'folder-level import cycle: {_cycle(edges)}'


def test_the_foundation_imports_nothing_above_it():
    edges = folder_imports()
    above = {edge: where for edge, where in edges.items() if edge[0] == 'imageshards'}
    assert not above, above


def test_no_module_imports_itself_through_others():
    graph = module_imports()
    edges = {(source, target): [] for source, targets in graph.items() for target in targets}
    assert _cycle(edges) is None, f'modules that import each other in a circle: {_cycle(edges)}'


def test_no_folder_imports_a_folder_that_imports_it_back():
    edges = folder_imports(layered=False)
    cycle = _cycle(edges)
    where = {pair: edges[pair] for pair in zip(cycle, cycle[1:])} if cycle else {}
    assert cycle is None, f'folders that import each other in a circle: {cycle} (where: {where})'


def test_each_folder_of_the_build_imports_only_those_before_it():
    folders = {edge[0] for edge in folder_imports(layered=False)}
    unplaced = sorted(f for f in folders if f.startswith('pipelines') and f not in PIPELINES_ORDER)
    assert not unplaced, f'folders of pipelines/ without a place in PIPELINES_ORDER: {unplaced}'
    rank = {folder: i for i, folder in enumerate(PIPELINES_ORDER)}
    later = {
        edge: where
        for edge, where in folder_imports(layered=False).items()
        if edge[0] in rank and edge[1] in rank and rank[edge[1]] > rank[edge[0]]
    }
    assert not later, f'imports of a later folder of pipelines/ (folder -> folder: where): {later}'


def test_the_top_of_the_build_holds_only_its_entry_and_runner_choice():
    top = {name for name, path in _module_files().items() if _folder_of(path) == 'pipelines'}
    assert top == set(TOP_OF_PIPELINES), (
        f'modules at the top of pipelines/ besides the entry and its runner: '
        f'{sorted(top - set(TOP_OF_PIPELINES))}; the base is pipelines/core/, each stage a folder'
    )


def _folder_of(path):
    return path.parent.relative_to(REPOSITORY).as_posix()


def test_the_cycle_check_finds_a_cycle():
    # The check itself can fail: a lazy import from the foundation up would be one.
    edges = {('imageshards', 'pipelines'): [], ('pipelines', 'imageshards'): []}
    assert _cycle(edges) == ['imageshards', 'pipelines', 'imageshards']
    tree = ast.parse('def f():\n    from pipelines import launcher\n')
    assert _imported(tree, 'imageshards', _module_files()) == {'pipelines', 'pipelines.launcher'}
    # A helper of tests/ imported by its bare name is the module in tests/.
    tree = ast.parse('import images_for_tests\n')
    assert _imported(tree, 'bench', _module_files()) == {'tests.images_for_tests'}


MAPPED_PACKAGES = ('imageshards', 'imageshards_cli', 'pipelines', *PIPELINES_ORDER[:-1])
_MAPPED = re.compile(r'^    (\w+\.py)  ', re.M)


@pytest.mark.parametrize('package', MAPPED_PACKAGES)
def test_each_package_maps_its_modules_in_its_init(package):
    """A package's file map (its `__init__` docstring: `    name.py  what it is`) names each
    of its modules once, and no module that is not there."""
    folder = REPOSITORY / package
    docstring = ast.get_docstring(ast.parse((folder / '__init__.py').read_text(encoding='utf-8')))
    mapped = _MAPPED.findall(docstring or '')
    modules = sorted(path.name for path in folder.glob('*.py') if path.name != '__init__.py')
    assert sorted(mapped) == modules, f'{package}/__init__.py maps {mapped}, not {modules}'


def _argparse_lines(function):
    return sum(
        node.end_lineno - node.lineno + 1
        for node in ast.walk(function)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and getattr(node.value.func, 'attr', getattr(node.value.func, 'id', '')) in _ARGPARSE_CALLS
    )


@pytest.mark.parametrize('path', _python_files(), ids=lambda p: str(p.relative_to(REPOSITORY)))
def test_modules_and_functions_stay_small(path):
    text = path.read_text(encoding='utf-8')
    lines = len(text.splitlines())
    assert lines <= MAX_MODULE_LINES, f'{path} has {lines} lines, over {MAX_MODULE_LINES}'
    long = [
        f'{node.name} ({node.end_lineno - node.lineno + 1 - _argparse_lines(node)} lines)'
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 - _argparse_lines(node) > MAX_FUNCTION_LINES
    ]
    assert not long, f'{os.path.relpath(path, REPOSITORY)}: functions over {MAX_FUNCTION_LINES}'
