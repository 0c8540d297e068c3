"""build_deps/dev.sh skips what is already built: the digests that decide it
(build_deps/setup_state.py), and a second `dev.sh setup` on an installed tree."""
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "build_deps", "setup_state.py")


def _tree(root):
    """A miniature source tree with the layout setup_state.py digests."""
    files = {
        "setup.py": "setup()\n",
        "build_deps/requirements.txt": "numpy==2.4.6\n",
        "build_deps/requirements-nodeps.txt": "tf_keras==2.21.0\n",
        "kernels/a/a_kernels.cc": "int a() { return 1; }\n",
        "kernels/a/a.h": "int a();\n",
        "kernels/a/a_kernels.cu": "// cuda\n",
        "deepreduce_tf/__init__.py": "x = 1\n",
        "deepreduce_tf/ops/__init__.py": "",
        "deepreduce_tf/ops/_deepreduce_ops.json": "{}\n",
        "deepreduce_tf/cost/profiles/accuracy.json": "{}\n",
        "deepreduce_bench/__init__.py": "",
        "deepreduce_bench/cli.py": "y = 2\n",
        "README.md": "readme\n",
        "tests/test_x.py": "def test(): pass\n",
    }
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    shutil.copy(SCRIPT, os.path.join(root, "build_deps", "setup_state.py"))
    shutil.copy(os.path.join(REPO, "build_deps", "kernel_objects.py"),
                os.path.join(root, "build_deps", "kernel_objects.py"))


def _digests(root, env=None):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("DEEPREDUCE_TF_CUDA",
                                                                         "CUDA_HOME", "CXX"))}
    full_env.update(env or {})
    out = {}
    for what in ("requirements", "package", "kernels"):
        out[what] = subprocess.run(
            [sys.executable, os.path.join(root, "build_deps", "setup_state.py"), what],
            check=True, capture_output=True, text=True, env=full_env).stdout.strip()
    return out


def _edit(root, rel, text):
    with open(os.path.join(root, rel), "a") as f:
        f.write(text)


@pytest.mark.parametrize("rel, changes", [
    ("kernels/a/a_kernels.cc", {"package", "kernels"}),
    ("kernels/a/a.h", {"package", "kernels"}),          # a header rebuilds the objects
    ("kernels/a/a_kernels.cu", {"package", "kernels"}),
    ("deepreduce_tf/__init__.py", {"package"}),          # reinstall, objects reused
    ("deepreduce_tf/ops/__init__.py", {"package"}),
    ("deepreduce_bench/cli.py", {"package"}),            # the harness is installed too
    ("deepreduce_tf/cost/profiles/accuracy.json", {"package"}),  # package data: the accuracy table
    ("deepreduce_tf/ops/_deepreduce_ops.json", set()),   # a build output, not an input
    ("setup.py", {"package"}),
    ("build_deps/requirements.txt", {"requirements", "package"}),
    ("build_deps/requirements-nodeps.txt", {"requirements", "package"}),
    ("README.md", set()),                                # not part of the build
    ("tests/test_x.py", set()),
    ("build_deps/kernel_objects.py", {"package"}),     # how the objects are compiled
])
def test_each_stage_digest_follows_exactly_its_inputs(tmp_path, rel, changes):
    _tree(str(tmp_path))
    before = _digests(str(tmp_path))
    assert before == _digests(str(tmp_path))  # deterministic
    _edit(str(tmp_path), rel, "# edited\n")
    after = _digests(str(tmp_path))
    assert {k for k in before if before[k] != after[k]} == changes


def test_cuda_build_is_a_different_package(tmp_path):
    _tree(str(tmp_path))
    cpu = _digests(str(tmp_path))
    cuda = _digests(str(tmp_path), {"DEEPREDUCE_TF_CUDA": "1"})
    assert cpu["package"] != cuda["package"] and cpu["kernels"] == cuda["kernels"]


def test_new_kernel_file_changes_the_digest(tmp_path):
    _tree(str(tmp_path))
    before = _digests(str(tmp_path))
    with open(os.path.join(str(tmp_path), "kernels", "a", "b_kernels.cc"), "w") as f:
        f.write("int b();\n")
    assert _digests(str(tmp_path))["kernels"] != before["kernels"]


def _installed_from_this_tree():
    """True when the running deepreduce_tf is .venv's install of this tree
    and dev.sh recorded that install for the current sources."""
    import deepreduce_tf

    venv = os.path.join(REPO, ".venv")
    pkg = os.path.realpath(os.path.dirname(deepreduce_tf.__file__))
    if not pkg.startswith(os.path.realpath(venv) + os.sep):
        return False
    stamp = os.path.join(venv, ".deepreduce-package")
    if not os.path.exists(stamp):
        return False
    now = subprocess.run([sys.executable, SCRIPT, "package"], capture_output=True,
                         text=True, check=True).stdout.strip()
    with open(stamp) as f:
        return f.read().strip() == now


def test_second_setup_reuses_the_venv_and_the_built_library():
    if not _installed_from_this_tree():
        pytest.skip("deepreduce_tf is not .venv's install of the current sources "
                    "(run through bash build_deps/dev.sh test)")
    lib = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(REPO, ".venv", "lib"))
           for f in fs if f == "_deepreduce_ops.so"]
    assert len(lib) == 1
    mtime = os.stat(lib[0]).st_mtime_ns
    out = subprocess.run(["bash", os.path.join(REPO, "build_deps", "dev.sh"), "setup"],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr
    lines = [l for l in out.stderr.splitlines() if l.startswith("[setup]")]
    assert "reusing .venv" in lines[0]
    assert "pinned dependencies" in lines[1] and lines[1].endswith("up to date")
    assert "op library: up to date" in lines[2]
    assert lines[-1].startswith("[setup] ready in")
    assert "compiling" not in out.stderr and not out.stdout
    assert os.stat(lib[0]).st_mtime_ns == mtime  # nothing reinstalled
