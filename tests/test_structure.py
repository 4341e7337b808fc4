"""The shape of the code: folders that import downward only, no module that imports itself
through others, the build's stages apart from the local runner's machinery, and modules and
functions of a size a reader can hold.

Every import counts, also one inside a function and a module named by a string (`importlib`,
`python -m`): the foundation (`imageshards/`) imports no other folder of this project, the
Beam build (`pipelines/`) and the trainer (`trainer/`) import the foundation only, and the
command-line tools (`imageshards/cli/`) may import all three. Inside `pipelines/`, the stages'
subpackages import each other without a cycle and never import `pipelines/local/` nor the
build's drivers at its top (build, steps, runner).
"""

import ast
import os
import pathlib

import pytest

REPOSITORY = pathlib.Path(__file__).resolve().parent.parent
# Each folder's layer: a folder imports folders of lower layers only.
LAYERS = {
    'imageshards': 0,
    'pipelines': 1,
    'trainer': 1,
    'imageshards/cli': 2,
    'bench': 3,
    'tests': 3,
}
CHECKED = ('imageshards', 'pipelines', 'trainer', 'bench', 'tests')
PACKAGES = ('imageshards', 'pipelines', 'trainer')  # where no module may import itself
# The build's stages (pipelines/<stage>/), and what they may not import.
STAGES = ('inputs', 'validation', 'assignment', 'writing', 'analysis')
NOT_FOR_STAGES = ('pipelines.local', 'pipelines.build', 'pipelines.steps', 'pipelines.runner')
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
            # The longest project module that `name` is or is inside of.
            while name and name not in modules:
                name = name.rpartition('.')[0]
            if name:
                found.add(name)
    return found


def folder_imports():
    """{(importing folder, imported folder): [(module file, imported module)]}."""
    modules = _module_files()
    edges = {}
    for name, path in modules.items():
        package = name if path.name == '__init__.py' else name.rpartition('.')[0]
        tree = ast.parse(path.read_text(encoding='utf-8'))
        for target in _imported(tree, package, modules):
            edge = (_folder(path), _folder(modules[target]))
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


def _stage(module):
    parts = module.split('.')
    return parts[1] if len(parts) > 2 and parts[0] == 'pipelines' and parts[1] in STAGES else None


def test_the_stages_never_import_the_local_runner_or_the_drivers_and_have_no_cycle():
    graph = module_imports()
    forbidden = {
        (module, target)
        for module, targets in graph.items()
        if _stage(module)
        for target in targets
        if target.startswith(NOT_FOR_STAGES)
    }
    assert not forbidden, f'stages importing local/ or the drivers (module, imported): {forbidden}'
    between = {
        (_stage(module), _stage(target)): []
        for module, targets in graph.items()
        for target in targets
        if _stage(module) and _stage(target) and _stage(module) != _stage(target)
    }
    assert _cycle(between) is None, f'stages that import each other: {_cycle(between)}'


def test_the_cycle_check_finds_a_cycle():
    # The check itself can fail: a lazy import from the foundation up would be one.
    edges = {('imageshards', 'pipelines'): [], ('pipelines', 'imageshards'): []}
    assert _cycle(edges) == ['imageshards', 'pipelines', 'imageshards']
    tree = ast.parse('def f():\n    from pipelines import build\n')
    assert _imported(tree, 'imageshards', _module_files()) == {'pipelines', 'pipelines.build'}


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
