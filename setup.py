"""Builds deepreduce_tf: the Python package and its TensorFlow op library.

The op library is compiled from kernels/ with the compiler flags that the
installed TensorFlow reports (tf.sysconfig), so TensorFlow must be installed
before this runs and the build must not be isolated from it:

    pip install tensorflow-cpu==2.21.0
    pip install --no-build-isolation .

Set DEEPREDUCE_TF_CUDA=1 to also compile the CUDA kernels (kernels/**/*.cu)
with nvcc (CUDA_HOME or /usr/local/cuda) for sm_75..sm_90 plus PTX, linked
against the static CUDA runtime so that the same library still loads in
tensorflow-cpu. DEEPREDUCE_TF_CUDA_ARCHS overrides the list of architectures.
"""
import glob
import json
import os
import re
import subprocess
import sys

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
LIB_NAME = "_deepreduce_ops"


def read_version():
    with open(os.path.join(ROOT, "deepreduce_tf", "_version.py")) as f:
        return re.search(r'__version__ = "([^"]+)"', f.read()).group(1)


def cuda_requested():
    value = os.environ.get("DEEPREDUCE_TF_CUDA", "0").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise SystemExit(f"DEEPREDUCE_TF_CUDA={value!r}: use 1 to build the CUDA "
                     "kernels or 0 (default) for a CPU-only build")


def check_codec_table():
    """Refuses to compile kernels whose codec table (the committed, generated
    kernels/common/codec_table.h) differs from deepreduce_tf/ops/codec_table.py."""
    import importlib.util

    path = os.path.join(ROOT, "deepreduce_tf", "ops", "codec_table.py")
    spec = importlib.util.spec_from_file_location("_deepreduce_codec_table", path)
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)  # pure data: no TensorFlow, no package import
    problem = table.header_mismatch(ROOT)
    if problem:
        raise SystemExit(problem)


def kernel_sources():
    """CPU sources, GPU-only host sources (*_gpu.cc) and CUDA sources."""
    cc = sorted(glob.glob(os.path.join(ROOT, "kernels", "**", "*.cc"), recursive=True))
    gpu_cc = [p for p in cc if p.endswith("_gpu.cc")]
    cpu_cc = [p for p in cc if not p.endswith("_gpu.cc")]
    cu = sorted(glob.glob(os.path.join(ROOT, "kernels", "**", "*.cu"), recursive=True))
    return cpu_cc, gpu_cc, cu


def kernel_objects():
    """build_deps/kernel_objects.py: compiles the kernels once for every build
    that links them (this library, its CUDA variant, the standalone CUDA tests)."""
    sys.path.insert(0, os.path.join(ROOT, "build_deps"))
    try:
        import kernel_objects as ko
    except ImportError as e:
        raise SystemExit(f"setup.py builds the op library from a source tree with kernels/ "
                         f"and build_deps/ ({e}); build from a clone of the repository") from e
    finally:
        sys.path.pop(0)
    return ko


class BuildOps(build_ext):
    """Compiles kernels/ into one shared library next to the package code."""

    def get_ext_filename(self, fullname):
        # TF loads the library by path; it does not depend on the Python ABI.
        return os.path.join(*fullname.split(".")) + ".so"

    def build_extension(self, ext):
        try:
            import tensorflow as tf
        except ImportError as e:
            raise SystemExit(
                "deepreduce_tf compiles its ops against the installed TensorFlow, "
                f"which could not be imported ({e}). Install it first and build "
                "without isolation:\n  pip install tensorflow-cpu==2.21.0\n"
                "  pip install --no-build-isolation .") from e
        check_codec_table()
        ko = kernel_objects()
        with_cuda = cuda_requested()
        archs = ko.cuda_archs() if with_cuda else []
        version = read_version()
        out_path = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(out_path), exist_ok=True)

        # Each define reaches the sources that name its macro (build_info_kernel.cc):
        # the other objects are the same in the CPU and the CUDA build, compiled once.
        defines = [
            f'-DDEEPREDUCE_TF_VERSION="{version}"',
            f'-DDEEPREDUCE_BUILT_TF_VERSION="{tf.__version__}"',
        ]
        cpu_cc, gpu_cc, cu = kernel_sources()
        sources = list(cpu_cc)
        if with_cuda:
            defines += ["-DDEEPREDUCE_WITH_CUDA=1",
                        f'-DDEEPREDUCE_CUDA_ARCHS="{",".join(archs)}"']
            sources += gpu_cc
        ko.check_headers(defines)
        cxx = os.environ.get("CXX", "g++")
        cflags = (tf.sysconfig.get_compile_flags() +
                  ["-I" + ROOT, "-fPIC", "-O3", "-Wall",
                   "-Wno-deprecated-declarations", "-Wno-interference-size",
                   "-Wno-sign-compare", "-Wno-unknown-pragmas"])
        # The TensorFlow headers change with its version, not with the -I path.
        tf_headers = [f"tensorflow {tf.__version__}"]
        jobs = [(src, [cxx] + cflags + ko.defines_for(src, defines), tf_headers)
                for src in sources]
        link_extra = []
        if with_cuda:
            nvcc, cuda_home = ko.find_nvcc()
            cudart = os.path.join(cuda_home, "lib64", "libcudart_static.a")
            if not os.path.exists(cudart):
                raise SystemExit(f"DEEPREDUCE_TF_CUDA=1 but {cudart} does not exist; "
                                 "set CUDA_HOME to a full CUDA toolkit")
            jobs += [(src, ko.nvcc_command(nvcc, archs)) for src in cu]
            # The static runtime makes the library independent of the CUDA
            # runtime TensorFlow was built with (none in tensorflow-cpu); its
            # symbols are kept local so a process-wide libcudart is untouched.
            link_extra = [cudart, "-ldl", "-lrt", "-lpthread",
                          "-Wl,--exclude-libs,libcudart_static.a"]
        objs = ko.compile_objects(jobs, log=lambda m: print(m, flush=True))
        link = ([cxx, "-shared", "-o", out_path] + objs + link_extra +
                tf.sysconfig.get_link_flags() + ["-Wl,--no-undefined"])
        print(" ".join(link), flush=True)
        subprocess.run(link, check=True)
        info = {"version": version, "tf_version": tf.__version__,
                "cuda": with_cuda, "cuda_archs": ",".join(archs)}
        with open(os.path.splitext(out_path)[0] + ".json", "w") as f:
            json.dump(info, f)


setup(
    name="deepreduce_tf",
    version=read_version(),
    description="Sparse-tensor compression for distributed TensorFlow training "
                "(DeepReduce: Bloom-filter, run-length and curve-fitting codecs)",
    # deepreduce_tf: the library; deepreduce_bench: the deepreduce-bench harness
    # (command line, models, data sets, reports) built on it.
    packages=find_packages(include=["deepreduce_tf", "deepreduce_tf.*",
                                    "deepreduce_bench", "deepreduce_bench.*"]),
    package_data={"deepreduce_tf.ops": [LIB_NAME + ".so", LIB_NAME + ".json"],
                  "deepreduce_tf.cost": ["profiles/*.json"]},
    ext_modules=[Extension("deepreduce_tf.ops." + LIB_NAME, sources=[])],
    cmdclass={"build_ext": BuildOps},
    python_requires=">=3.10",
    # TensorFlow is not a hard requirement so that the same wheel serves
    # tensorflow-cpu and tensorflow (GPU) users; pick one through an extra.
    install_requires=["numpy>=1.26", "absl-py>=2.0"],
    extras_require={
        "cpu": ["tensorflow-cpu==2.21.*"],
        "gpu": ["tensorflow[and-cuda]==2.21.*"],
        # deepreduce-plot / deepreduce-bench --plot
        "plot": ["matplotlib==3.11.2"],
        # deepreduce_tf.federated's Flower strategy and client mod (simulation: Ray)
        "federated": ["flwr[simulation]==1.41.0"],
    },
    entry_points={
        "console_scripts": [
            "deepreduce-bench = deepreduce_bench.cli:main",
            "deepreduce-plot = deepreduce_bench.cli:plot_main",
            "deepreduce-scaling = deepreduce_bench.scaling:main",
            "deepreduce-tf-cnn-benchmarks = deepreduce_tf.integrations.tf_cnn_benchmarks:main",
        ],
    },
    zip_safe=False,
)
