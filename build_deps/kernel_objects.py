"""The op library's kernels compiled once per CI run, whoever asks for them.

setup.py (the CPU library and the CUDA variant), the standalone CUDA tests
(build_deps/build_cuda_test.sh) and the GPU benchmarks (benchmarks/cuda/*.sh)
link the same kernel objects. Each object lives under
build/objects/<kernel tree digest>/ with the digest of its command in its
name, so an object is compiled again only when a kernel source or header, or
its command, changed; the CPU sources shared by both library variants are
compiled once for both (a -D define reaches only the sources that name its
macro, e.g. DEEPREDUCE_WITH_CUDA only kernels/common/build_info_kernel.cc).
Plain Python, no third-party imports (it runs before anything is installed).

    python3 build_deps/kernel_objects.py cuda [--archs 75,80] [--no-common] [FAMILY ...]

compiles (or reuses) the CUDA objects of kernels/common (unless --no-common)
and of the named families (kernels/FAMILY/*.cu; all families if none is named) for the given
architectures (default: DEEPREDUCE_TF_CUDA_ARCHS, else those of the op
library) and prints their paths, one per line.
"""
import argparse
import concurrent.futures
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import setup_state  # noqa: E402  (build_deps/, beside this file)

DEFAULT_CUDA_ARCHS = "75,80,86,89,90"
# DEEPREDUCE_KERNEL_OBJECTS: another folder (e.g. a test's own, under Bazel).
CACHE = os.environ.get("DEEPREDUCE_KERNEL_OBJECTS") or os.path.join(ROOT, "build", "objects")


def cuda_archs(spec=None):
    """The architectures as a list of strings, checked: nvcc 13 targets
    compute capability 75 and newer."""
    spec = spec or os.environ.get("DEEPREDUCE_TF_CUDA_ARCHS") or DEFAULT_CUDA_ARCHS
    archs = [a.strip() for a in spec.split(",") if a.strip()]
    if not archs or not all(re.fullmatch(r"\d{2,3}", a) and int(a) >= 75 for a in archs):
        raise SystemExit(f"DEEPREDUCE_TF_CUDA_ARCHS={spec!r}: expected a comma-separated list "
                         "of compute capabilities >= 75 (nvcc 13 targets sm_75 and newer), "
                         "e.g. 80,90")
    return archs


def find_nvcc():
    """(nvcc, CUDA home): CUDA_HOME/bin/nvcc, else nvcc on PATH."""
    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    nvcc = os.path.join(cuda_home, "bin", "nvcc")
    if not os.path.exists(nvcc):
        nvcc = shutil.which("nvcc")
        if not nvcc:
            raise SystemExit(f"nvcc was not found in {cuda_home}/bin or on PATH; set CUDA_HOME")
        cuda_home = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    return nvcc, cuda_home


def gencode(archs):
    """SASS for every architecture, PTX for the last (forward compatible)."""
    return ([f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs] +
            [f"-gencode=arch=compute_{archs[-1]},code=compute_{archs[-1]}"])


def nvcc_command(nvcc, archs):
    """The one nvcc command of a kernel object (source and output appended).
    Hidden visibility: the CUDA/CUB code of the op library is not exported,
    so it cannot interpose on TensorFlow's own."""
    return [nvcc, "-std=c++17", "-O3", "-I" + ROOT, "-Xcompiler", "-fPIC",
            "-Xcompiler", "-fvisibility=hidden", "--expt-relaxed-constexpr"] + gencode(archs)


def defines_for(src, defines):
    """The -DNAME[=value] flags among `defines` whose macro NAME the source
    names. A header naming one would hide it from this test: refused."""
    with open(src, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return [d for d in defines if re.search(r"\b%s\b" % re.escape(_macro(d)), text)]


def _macro(define):
    return define[2:].split("=", 1)[0]


def check_headers(defines):
    names = [_macro(d) for d in defines]
    for path in setup_state.kernel_files():
        if path.endswith((".h", ".cuh")):
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            for name in names:
                if re.search(r"\b%s\b" % re.escape(name), text):
                    raise SystemExit(
                        f"{os.path.relpath(path, ROOT)} names {name}: the build passes that "
                        "macro only to the .cc/.cu files that name it (build_deps/"
                        "kernel_objects.py); use it in a source file, not a header")


def compile_objects(jobs, log=print):
    """jobs: [(source, command without the source and -o[, inputs])]. Returns
    the object paths in the same order, compiling in parallel only those whose
    (kernel tree, command, inputs) has no object yet. inputs: what else an
    object is made of that its command does not name (the version of the
    TensorFlow whose headers an -I path points to); none for the .cu objects,
    which include no TensorFlow header, so that every caller shares them."""
    tree = setup_state.kernels_digest()[:16]
    cache = os.path.join(CACHE, tree)
    os.makedirs(cache, exist_ok=True)
    for other in os.listdir(CACHE):  # objects of an older kernel tree
        if other != tree:
            shutil.rmtree(os.path.join(CACHE, other), ignore_errors=True)
    plan, todo = [], []
    for src, cmd, *inputs in jobs:
        inputs = list(inputs[0]) if inputs else []
        key = hashlib.sha256("\0".join(list(cmd) + inputs).encode()).hexdigest()[:16]
        name = os.path.relpath(src, ROOT).replace(os.sep, "_")
        obj = os.path.join(cache, f"{name}.{key}.o")
        plan.append(obj)
        if not os.path.exists(obj):
            todo.append((obj, cmd + ["-c", src, "-o", obj + ".tmp"]))
    todo.sort(key=lambda job: not job[1][-3].endswith(".cu"))  # the longest (nvcc) first

    def run(job):
        obj, cmd = job
        log(" ".join(cmd))
        subprocess.run(cmd, check=True)
        os.replace(obj + ".tmp", obj)

    if todo:
        workers = max(1, min(len(todo), os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            list(pool.map(run, todo))
    log(f"kernel objects: {len(plan) - len(todo)} reused, {len(todo)} compiled ({cache})")
    return plan


def cuda_objects(archs, families=None, log=print, common=True):
    nvcc, _ = find_nvcc()
    cmd = nvcc_command(nvcc, archs)
    dirs = (["common"] if common else []) + list(families or [])
    if families:
        srcs = [s for d in dirs for s in sorted(glob.glob(os.path.join(ROOT, "kernels", d, "*.cu")))]
    else:
        srcs = sorted(glob.glob(os.path.join(ROOT, "kernels", "**", "*.cu"), recursive=True))
    for fam in families or []:
        if not glob.glob(os.path.join(ROOT, "kernels", fam, "*.cu")):
            raise SystemExit(f"kernels/{fam}/*.cu: no CUDA kernels in that family")
    return compile_objects([(s, cmd) for s in srcs], log=log)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["cuda"])
    parser.add_argument("--archs", default=None)
    parser.add_argument("--no-common", dest="common", action="store_false",
                        help="without kernels/common (a compile check of the families alone)")
    parser.add_argument("families", nargs="*")
    args = parser.parse_intermixed_args(argv[1:])
    objs = cuda_objects(cuda_archs(args.archs), args.families,
                        log=lambda m: print(m, file=sys.stderr, flush=True), common=args.common)
    print("\n".join(objs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
