"""docs/federated.md: every ```python block can be pasted as it is. Each
block imports or defines every name it uses (read with `ast`, nothing run:
the blocks are ServerApps and ClientApps), and what it imports exists:
deepreduce_tf's and Flower's names are imported here, the example app's
(drquickstart, examples/flower_quickstart/) read from its source."""
import ast
import builtins
import importlib
import importlib.util
import os
import re

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(REPO_ROOT, "docs", "federated.md")
EXAMPLE = os.path.join(REPO_ROOT, "examples", "flower_quickstart")
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def python_blocks(text):
    """[(line number, code)] of the ```python blocks of a Markdown text."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in BLOCK.finditer(text)]


class _Names(ast.NodeVisitor):
    """The names a piece of code binds anywhere (imports, assignments,
    definitions, parameters, loop, with, except and comprehension targets)
    and the names it reads. Scopes are not told apart: a name bound
    anywhere in the block counts as defined, which is what a reader pasting
    the block needs (a name read but bound nowhere is a missing import)."""

    def __init__(self):
        self.bound, self.read = set(), {}

    def visit_Import(self, node):
        for alias in node.names:
            self.bound.add(alias.asname or alias.name.split(".")[0])

    def visit_ImportFrom(self, node):
        for alias in node.names:
            self.bound.add(alias.asname or alias.name)

    def _define(self, node):
        self.bound.add(node.name)
        self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _define

    def visit_arg(self, node):
        self.bound.add(node.arg)
        self.generic_visit(node)

    def visit_ExceptHandler(self, node):
        if node.name:
            self.bound.add(node.name)
        self.generic_visit(node)

    def visit_Global(self, node):
        self.bound.update(node.names)

    visit_Nonlocal = visit_Global

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            self.read.setdefault(node.id, node.lineno)
        else:
            self.bound.add(node.id)


def undefined_names(code):
    """{name: first line} of the names `code` reads but neither imports nor
    defines (builtins aside)."""
    names = _Names()
    names.visit(ast.parse(code))
    return {n: line for n, line in names.read.items()
            if n not in names.bound and not hasattr(builtins, n)}


def imports(code):
    """[(module, name or None)] of a block's imports."""
    out = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            out.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out.extend((node.module, alias.name) for alias in node.names)
    return out


with open(DOC, encoding="utf-8") as _f:
    BLOCKS = python_blocks(_f.read())


def test_the_page_has_its_examples():
    # The two lines, the recipe's ServerApp and ClientApp, the restartable ServerApp.
    assert len(BLOCKS) >= 4
    assert any("deepreduce_mod" in code for _, code in BLOCKS)


def test_the_check_finds_a_name_used_without_its_import():
    # The two lines as the page once had them: nothing imported.
    old = ("strategy = DeepReduceStrategy(FedAvg(fraction_train=0.1))\n"
           "app = ClientApp(mods=[deepreduce_mod])\n")
    assert set(undefined_names(old)) == {"DeepReduceStrategy", "FedAvg", "ClientApp",
                                         "deepreduce_mod"}
    assert undefined_names("from x import f\ndef g(a, *b, c=1, **d):\n"
                           "    for i in b:\n        print(a, i, c, d, f, [j for j in d])\n"
                           "    try:\n        pass\n    except ValueError as e:\n"
                           "        return e, k\n") == {"k": 8}


@pytest.mark.parametrize("line,code", BLOCKS, ids=[f"line{n}" for n, _ in BLOCKS])
def test_every_block_imports_what_it_uses(line, code):
    missing = undefined_names(code)
    assert not missing, (f"docs/federated.md, the block at line {line} uses names it neither "
                         "imports nor defines (block line: name): "
                         + ", ".join(f"{n}: {name}" for name, n in sorted(missing.items(),
                                                                         key=lambda x: x[1])))


def _example_defines(module):
    """The names the example app's module defines at top level (its source)."""
    path = os.path.join(EXAMPLE, *module.split(".")) + ".py"
    assert os.path.exists(path), f"{module}: no {os.path.relpath(path, REPO_ROOT)}"
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    names = _Names()
    for node in tree.body:  # top level only: what `from module import name` finds
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.bound.add(node.name)
        else:
            names.visit(node)
    return names.bound


@pytest.mark.parametrize("line,code", BLOCKS, ids=[f"line{n}" for n, _ in BLOCKS])
def test_what_the_blocks_import_exists(line, code):
    pytest.importorskip("flwr")
    for module, name in imports(code):
        top = module.split(".")[0]
        if top == "drquickstart":
            if name is not None:
                assert name in _example_defines(module), f"line {line}: {module}.{name}"
            continue
        imported = importlib.import_module(module)  # the standard library, numpy, ...
        if name is not None:
            assert hasattr(imported, name) or importlib.util.find_spec(
                f"{module}.{name}") is not None, f"line {line}: no {module}.{name}"
