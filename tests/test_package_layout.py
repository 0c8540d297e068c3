"""The package's shape: small modules with one idea each, and module-level
imports without cycles (read from the sources; nothing is imported)."""
import ast
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("deepreduce_tf", "deepreduce_bench")
MAX_LINES = 700


def _modules(package):
    """{dotted module name: path} of a package's Python files."""
    out = {}
    for path in sorted((REPO / package).rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_over_700_lines(package):
    sizes = {name: len(path.read_text().splitlines())
             for name, path in _modules(package).items()}
    long = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by idea): {long}"


def _imports(name, path, modules):
    """The package's modules that `name` imports at module level (not inside
    functions: a deferred import breaks no cycle at import time, and none is
    needed). Importing a.b.c also runs a and a.b, which is not counted: a
    package's __init__ importing its own modules is not a cycle."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in tree.body:
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                       else node.module for a in node.names]
        for target in targets:
            if target in modules and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


def test_module_imports_have_no_cycles():
    modules = _modules("deepreduce_tf")
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    # Packages' __init__ files re-export their modules: an __init__ is a leaf
    # of what it re-exports, never a step inside a cycle through them.
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name)
