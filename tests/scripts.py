"""The project's scripts (benchmarks/, build_deps/) loaded as modules, for
the tests of their functions: load_script("benchmarks/frontier.py")."""
import importlib.util
import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(relpath):
    """The module of the script at `relpath` (from the repository root),
    named after its file."""
    path = os.path.join(REPO_ROOT, relpath)
    name = os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
