"""Digests that tell build_deps/dev.sh (and setup.py) what is already built.

    python build_deps/setup_state.py requirements   # pinned dependency files
    python build_deps/setup_state.py package        # what `pip install .` installs
    python build_deps/setup_state.py kernels        # what the op library compiles

Each prints one hex digest. dev.sh stores the digest of a stage in .venv/
after the stage succeeded and skips the stage while the digest is unchanged;
setup.py reuses its compiled objects while the kernels digest (plus compiler
flags) is unchanged (build_deps/kernel_objects.py). Plain Python, no third-party imports: it runs before
anything is installed.
"""
import hashlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIREMENTS = ("build_deps/requirements.txt", "build_deps/requirements-nodeps.txt")
KERNEL_SUFFIXES = (".cc", ".h", ".cu", ".cuh")
# Environment that changes what the build produces.
BUILD_ENV = ("DEEPREDUCE_TF_CUDA", "DEEPREDUCE_TF_CUDA_ARCHS", "CUDA_HOME", "CXX")


def _files(top, suffixes):
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        out += [os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(suffixes)]
    return out


def _digest(paths, extra=()):
    h = hashlib.sha256()
    for path in paths:
        h.update(os.path.relpath(path, ROOT).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    for item in extra:
        h.update(str(item).encode() + b"\0")
    return h.hexdigest()


def kernel_files():
    """Every source and header the op library is compiled from."""
    return _files("kernels", KERNEL_SUFFIXES)


def kernels_digest(extra=()):
    return _digest(kernel_files(), extra)


def requirements_digest():
    return _digest([os.path.join(ROOT, p) for p in REQUIREMENTS],
                   [sys.version.split()[0]])


def package_digest():
    """Everything `pip install .` turns into the installed package, plus the
    build environment and the dependency set it is compiled against."""
    paths = ([os.path.join(ROOT, p) for p in ("setup.py", "build_deps/kernel_objects.py")] +
             kernel_files() +
             _files("deepreduce_tf", (".py",)) + _files("deepreduce_bench", (".py",)) +
             _files(os.path.join("deepreduce_tf", "cost", "profiles"), (".json",)))  # package data
    env = [f"{k}={os.environ.get(k, '')}" for k in BUILD_ENV]
    return _digest(paths, env + [requirements_digest()])


def main(argv):
    table = {"requirements": requirements_digest, "package": package_digest,
             "kernels": kernels_digest}
    if len(argv) != 2 or argv[1] not in table:
        print(f"usage: {argv[0]} {{{'|'.join(table)}}}", file=sys.stderr)
        return 2
    print(table[argv[1]]())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
