"""build_deps/get_fashion_mnist.py, the data stage of build_deps/dev.sh: found,
the Debian package (a stand-in apt-get), Keras's download (a local HTTP
server), or neither: one line saying which, and exit code 0 in every case."""
import os
import stat
import subprocess
import sys

import pytest

from deepreduce_bench import data
from scripts import load_script
from test_data import no_installed_data, serve, write_fake_dataset  # noqa: F401 (fixture)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "build_deps", "get_fashion_mnist.py")


get_fashion_mnist = load_script("build_deps/get_fashion_mnist.py")


def fake_apt_get(path, source=None, needs_update=False):
    """An apt-get that logs its arguments; `install` copies the files of
    `source` into data.DEBIAN_DIR (fails without a source, or before an
    `update` when needs_update)."""
    calls = path.parent / "apt-calls"
    marker = path.parent / "apt-updated"
    copy = f'cp "{source}"/* "{data.DEBIAN_DIR}"/' if source else "exit 100"
    gate = f'[ -e "{marker}" ] || exit 100' if needs_update else ":"
    path.write_text(f"""#!/bin/sh
echo "$*" >> "{calls}"
case "$1" in
  update) touch "{marker}" ;;
  install) {gate}; mkdir -p "{data.DEBIAN_DIR}"; {copy} ;;
esac
""")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path), calls


@pytest.fixture
def log(tmp_path):
    with open(tmp_path / "setup.log", "w") as f:
        yield f


def test_found(tmp_path, no_installed_data, log, monkeypatch):  # noqa: F811
    write_fake_dataset(tmp_path)
    monkeypatch.setenv(data.ENV_VAR, str(tmp_path))
    assert get_fashion_mnist.get(log) == f"Fashion-MNIST: found in {tmp_path}"


@pytest.mark.parametrize("needs_update", [False, True], ids=["install", "update+install"])
def test_debian_package_as_root(tmp_path, no_installed_data, log, needs_update):  # noqa: F811
    source = tmp_path / "deb"
    source.mkdir()
    write_fake_dataset(source)
    apt, calls = fake_apt_get(tmp_path / "apt-get", source, needs_update)
    line = get_fashion_mnist.get(log, apt_get=apt, root=True, base_url="http://127.0.0.1:9/")
    assert line == ("Fashion-MNIST: installed the Debian package dataset-fashion-mnist "
                    f"({data.DEBIAN_DIR})")
    expected = ["install -y -q dataset-fashion-mnist"]
    if needs_update:
        expected += ["update -q", "install -y -q dataset-fashion-mnist"]
    assert calls.read_text().splitlines() == expected


@pytest.mark.parametrize("root, apt_ok", [(False, True), (True, False)],
                         ids=["not-root", "apt-fails"])
def test_keras_download_otherwise(tmp_path, no_installed_data, log, root,  # noqa: F811
                                  apt_ok):
    served = tmp_path / "served"
    served.mkdir()
    write_fake_dataset(served)
    apt, calls = fake_apt_get(tmp_path / "apt-get", served if apt_ok else None)
    with serve(served) as (url, _):
        line = get_fashion_mnist.get(log, apt_get=apt, root=root, base_url=url)
    directory = no_installed_data / "datasets" / "fashion-mnist"
    reason = "not root for apt-get" if not root else (
        "apt-get install dataset-fashion-mnist failed")
    assert line == f"Fashion-MNIST: downloaded by Keras into {directory} ({reason})"
    assert calls.exists() == root  # apt-get is not even tried without root
    assert data.find_fashion_mnist() == str(directory)


def test_neither_says_why_and_what_follows(tmp_path, no_installed_data, log):  # noqa: F811
    line = get_fashion_mnist.get(log, apt_get=None, root=False,
                                 base_url="http://127.0.0.1:9/")
    assert line.startswith("Fashion-MNIST: NOT installed (")
    assert "Keras's download: downloading Fashion-MNIST from http://127.0.0.1:9/ failed" in line
    assert "deepreduce-bench will stop before training" in line
    assert "--data_name=synthetic" in line and "\n" not in line


def test_script_prints_one_line_and_logs_the_rest(tmp_path):
    write_fake_dataset(tmp_path)
    env = dict(os.environ, **{data.ENV_VAR: str(tmp_path)})
    proc = subprocess.run([sys.executable, SCRIPT, "--log", str(tmp_path / "log")], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"Fashion-MNIST: found in {tmp_path}\n"
