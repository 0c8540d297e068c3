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


# The layers of deepreduce_tf, bottom to top (docs/architecture.md): each a
# list of module prefixes (the longest prefix decides). A module imports only
# modules of its own layer or of layers below it.
LAYERS = (
    ("ops", ("deepreduce_tf._checks", "deepreduce_tf._variables", "deepreduce_tf._version",
             "deepreduce_tf.ops")),
    ("compression pipeline", ("deepreduce_tf.codecs", "deepreduce_tf.wire",
                              "deepreduce_tf.fusion", "deepreduce_tf.fused",
                              "deepreduce_tf.slices", "deepreduce_tf.sparsifiers",
                              "deepreduce_tf.memory", "deepreduce_tf.compressor",
                              "deepreduce_tf.accounting")),
    ("exchange", ("deepreduce_tf.exchange", "deepreduce_tf.learned", "deepreduce_tf.transport",
                  "deepreduce_tf.state", "deepreduce_tf.communicators")),
    ("configuration", ("deepreduce_tf.params", "deepreduce_tf.flags",
                       "deepreduce_tf.compressors")),
    ("integrations", ("deepreduce_tf.distribute", "deepreduce_tf.integrations",
                      "deepreduce_tf.federated")),
    ("cost model", ("deepreduce_tf.cost",)),
    ("package", ("deepreduce_tf",)),
)


def _layer(name):
    """(index, name) of the layer a module belongs to (None if none)."""
    best = None
    for i, (layer, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and (best is None or len(p) > best[2]):
                best = (i, layer, len(p))
    return best and best[:2]


def test_every_module_imports_only_its_layer_and_those_below():
    modules = _modules("deepreduce_tf")
    upward = []
    for name, path in modules.items():
        mine = _layer(name)
        assert mine is not None, f"{name} belongs to no layer of LAYERS (add its prefix)"
        for target in sorted(_imports(name, path, modules)):
            theirs = _layer(target)
            if theirs[0] > mine[0]:
                upward.append(f"{name} ({mine[1]}) imports {target} ({theirs[1]})")
    assert not upward, "imports that run upward:\n" + "\n".join(upward)


def test_the_layer_check_sees_an_upward_import(tmp_path):
    # The check itself: a pipeline module importing the exchange is named.
    path = tmp_path / "memory.py"
    path.write_text("from deepreduce_tf.transport import LocalTransport\n")
    modules = {"deepreduce_tf.memory": path, "deepreduce_tf.transport": path}
    found = _imports("deepreduce_tf.memory", path, modules)
    assert found == {"deepreduce_tf.transport"}
    assert _layer("deepreduce_tf.transport")[0] > _layer("deepreduce_tf.memory")[0]
