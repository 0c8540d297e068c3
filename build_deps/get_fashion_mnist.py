"""The data stage of build_deps/dev.sh: Fashion-MNIST for the main job and the tests.

    .venv/bin/python build_deps/get_fashion_mnist.py [--log FILE]

Prints ONE line (dev.sh prefixes it with [setup]) saying which of these it did:
  - found the files already (deepreduce_bench.data.find_fashion_mnist());
  - installed the Debian package dataset-fashion-mnist, where apt-get exists and
    this runs as root (-> /usr/share/datasets/fashion-mnist);
  - let Keras download them into its cache, ~/.keras/datasets/fashion-mnist
    (deepreduce_bench.data.fetch_fashion_mnist(); $DEEPREDUCE_TF_FASHION_MNIST_ORIGIN
    replaces Keras's origin, e.g. with a mirror);
  - neither, and why: deepreduce-bench then stops before training and says how
    to get them, and the tests that need them skip.
Exits 0 in every case: missing data does not fail the setup. apt-get's and
Keras's output go to --log (default: stderr).
"""
import argparse
import os
import shutil
import subprocess
import sys

PACKAGE = "dataset-fashion-mnist"


def _apt(apt_get, args, log):
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run([apt_get, *args], stdout=log, stderr=log, env=env,
                          stdin=subprocess.DEVNULL).returncode == 0


def install_debian(apt_get, log):
    """apt-get install of the package (after `apt-get update` if the first try
    fails: a fresh machine may have no package lists). Returns success."""
    install = ["install", "-y", "-q", PACKAGE]
    return _apt(apt_get, install, log) or (
        _apt(apt_get, ["update", "-q"], log) and _apt(apt_get, install, log))


def get(log=sys.stderr, apt_get=None, root=None, base_url=None, cache_dir=None):
    """Finds or installs Fashion-MNIST; returns the line to print.

    apt_get: the apt-get command (default: found on PATH); root: whether this
    process may install packages (default: its effective uid is 0);
    base_url, cache_dir: as deepreduce_bench.data.fetch_fashion_mnist().
    """
    from deepreduce_bench import data

    found = data.find_fashion_mnist()
    if found:
        return f"Fashion-MNIST: found in {found}"
    apt_get = apt_get or shutil.which("apt-get")
    root = os.geteuid() == 0 if root is None else root
    if not apt_get:
        apt = "no apt-get"
    elif not root:
        apt = "not root for apt-get"
    elif not install_debian(apt_get, log):
        apt = f"apt-get install {PACKAGE} failed"
    elif data.find_fashion_mnist():
        return (f"Fashion-MNIST: installed the Debian package {PACKAGE} "
                f"({data.find_fashion_mnist()})")
    else:
        apt = f"{PACKAGE} is installed but its files are not in {data.DEBIAN_DIR}"
    try:
        directory = data.fetch_fashion_mnist(base_url, cache_dir=cache_dir, stream=log)
    except data.FetchError as e:
        return (f"Fashion-MNIST: NOT installed ({apt}; Keras's download: {e}). "
                "deepreduce-bench will stop before training and say how to get it; "
                "--data_name=synthetic trains on synthetic images")
    return f"Fashion-MNIST: downloaded by Keras into {directory} ({apt})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", help="file for apt-get's and Keras's output (appended)")
    args = parser.parse_args(argv)
    if args.log:
        with open(args.log, "a") as log:
            line = get(log)
    else:
        line = get()
    print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
