"""deepreduce_bench.data: the IDX parser, the Fashion-MNIST loader, its two sources
(the Debian package's directory; Keras's download-and-cache, tested against a
local HTTP server) and the synthetic fallback."""
import contextlib
import functools
import gzip
import http.server
import io
import os
import struct
import subprocess
import sys
import threading

import numpy as np
import pytest

from deepreduce_bench import data


def idx_bytes(arr, type_code=None):
    """A reference IDX writer: magic, big-endian sizes, big-endian elements."""
    codes = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C,
             np.float32: 0x0D, np.float64: 0x0E}
    arr = np.asarray(arr)
    code = codes[arr.dtype.type] if type_code is None else type_code
    header = bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


@pytest.mark.parametrize("arr", [
    np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4),
    np.array([0, 9, 3, 255], np.uint8),
    np.array([-128, 0, 127], np.int8),
    np.array([[-30000, 2], [7, 30000]], np.int16),
    np.array([-2**31, 0, 2**31 - 1], np.int32),
    np.array([1.5, -0.25, np.pi], np.float32),
    np.array([[1e300, -1e-300]], np.float64),
    np.zeros((0, 28, 28), np.uint8),
], ids=lambda a: f"{a.dtype.name}{list(a.shape)}")
def test_parse_exact(arr):
    out = data.parse_idx(idx_bytes(arr))
    assert out.dtype == arr.dtype.newbyteorder("=") and out.shape == arr.shape
    np.testing.assert_array_equal(out, arr)


@pytest.mark.parametrize("compress", [False, True], ids=["raw", "gzip"])
def test_read_file(tmp_path, compress):
    arr = np.arange(5 * 28 * 28, dtype=np.uint32).astype(np.uint8).reshape(5, 28, 28)
    raw = idx_bytes(arr)
    path = tmp_path / ("x-idx3-ubyte.gz" if compress else "x-idx3-ubyte")
    path.write_bytes(gzip.compress(raw) if compress else raw)
    np.testing.assert_array_equal(data.read_idx(str(path)), arr)


GOOD = idx_bytes(np.arange(12, dtype=np.uint8).reshape(3, 4))


@pytest.mark.parametrize("blob,message", [
    (b"", "too short"),
    (b"\x00\x00\x08", "too short"),
    (b"\x01\x00" + GOOD[2:], "bad magic"),
    (gzip.compress(GOOD, mtime=0), "bad magic"),  # compressed bytes given to parse_idx
    (GOOD[:2] + b"\x07" + GOOD[3:], "unknown IDX element type"),
    (GOOD[:3] + b"\x00" + GOOD[4:], "0 dimensions"),
    (GOOD[:3] + b"\x05" + GOOD[4:12], "truncated header"),
    (GOOD[:-1], "truncated"),
    (GOOD + b"\x00", "trailing bytes"),
    (GOOD[:4] + struct.pack(">I", 2**31) + GOOD[8:], "needs"),
])
def test_malformed(blob, message):
    with pytest.raises(data.IdxFormatError, match=message):
        data.parse_idx(blob, name="bad-file")


def test_malformed_names_the_file(tmp_path):
    path = tmp_path / "broken-idx1-ubyte.gz"
    path.write_bytes(gzip.compress(GOOD[:-3]))
    with pytest.raises(data.IdxFormatError, match="broken-idx1-ubyte.gz.*truncated"):
        data.read_idx(str(path))


def test_corrupt_gzip(tmp_path):
    path = tmp_path / "c.gz"
    path.write_bytes(gzip.compress(GOOD)[:-6])
    with pytest.raises(data.IdxFormatError, match="gzip"):
        data.read_idx(str(path))


def write_fake_dataset(directory, n_train=7, n_test=3, gz=True):
    rng = np.random.default_rng(0)
    arrays = {}
    for split, n in (("train", n_train), ("test", n_test)):
        images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, size=n, dtype=np.uint8)
        img_stem, lbl_stem = data._FILES[split]
        for stem, arr in ((img_stem, images), (lbl_stem, labels)):
            blob = idx_bytes(arr)
            name = stem + (".gz" if gz else "")
            (directory / name).write_bytes(gzip.compress(blob) if gz else blob)
        arrays[split] = (images, labels)
    return arrays


@pytest.mark.parametrize("gz", [True, False], ids=["gz", "plain"])
def test_load_from_directory(tmp_path, gz):
    arrays = write_fake_dataset(tmp_path, gz=gz)
    for split in ("train", "test"):
        ds = data.load_fashion_mnist(split, data_dir=str(tmp_path), allow_synthetic=False)
        np.testing.assert_array_equal(ds.images, arrays[split][0])
        np.testing.assert_array_equal(ds.labels, arrays[split][1])
        assert ds.source == f"fashion-mnist:{tmp_path}"
    ds = data.load_fashion_mnist("train", data_dir=str(tmp_path), limit=2)
    assert ds.images.shape == (2, 28, 28)


def test_env_var_directory(tmp_path, monkeypatch):
    write_fake_dataset(tmp_path)
    monkeypatch.setenv(data.ENV_VAR, str(tmp_path))
    assert data.find_fashion_mnist() == str(tmp_path)


def test_malformed_file_is_not_replaced_by_synthetic(tmp_path):
    write_fake_dataset(tmp_path, gz=False)
    path = tmp_path / "train-labels-idx1-ubyte"
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(data.IdxFormatError, match="train-labels"):
        data.load_fashion_mnist("train", data_dir=str(tmp_path))


def test_search_order(tmp_path, monkeypatch):
    monkeypatch.delenv(data.ENV_VAR, raising=False)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "kh"))
    assert data.candidate_dirs() == [data.DEBIAN_DIR,
                                     str(tmp_path / "kh" / "datasets" / "fashion-mnist")]
    monkeypatch.setenv(data.ENV_VAR, "/x")
    assert data.candidate_dirs()[0] == "/x"
    assert data.candidate_dirs("/d") == ["/d"]


def test_rejects_what_is_not_fashion_mnist(tmp_path):
    write_fake_dataset(tmp_path, gz=False)
    (tmp_path / "t10k-images-idx3-ubyte").write_bytes(idx_bytes(np.zeros((3, 32, 32), np.uint8)))
    with pytest.raises(data.IdxFormatError, match="not Fashion-MNIST's 28x28"):
        data.load_fashion_mnist("test", data_dir=str(tmp_path))


def test_missing_files_fall_back_loudly(tmp_path):
    stream = io.StringIO()
    ds = data.load_fashion_mnist("train", data_dir=str(tmp_path), limit=50, stream=stream)
    assert ds.source == "synthetic"
    assert ds.images.shape == (50, 28, 28) and ds.images.dtype == np.uint8
    assert ds.labels.shape == (50,) and ds.labels.max() < 10
    message = stream.getvalue()
    assert "SYNTHETIC" in message and str(tmp_path) in message
    assert "apt-get install -y dataset-fashion-mnist" in message
    with pytest.raises(FileNotFoundError, match="dataset-fashion-mnist"):
        data.load_fashion_mnist("train", data_dir=str(tmp_path), allow_synthetic=False)


def test_unknown_split():
    with pytest.raises(ValueError, match="unknown split"):
        data.load_fashion_mnist("validation")


def test_to_resnet_input():
    images = np.zeros((2, 28, 28), np.uint8)
    images[:, 0, 0] = 255
    images[1, 27, 27] = 255
    x = data.to_resnet_input(images)
    assert x.shape == (2, 32, 32, 3) and x.dtype == np.float32
    background = (0.0 - data.PIXEL_MEAN) / data.PIXEL_STD
    white = (1.0 - data.PIXEL_MEAN) / data.PIXEL_STD
    np.testing.assert_allclose(x[:, 2, 2], white, rtol=1e-6)  # pixel (0, 0) moves by 2
    np.testing.assert_allclose(x[1, 29, 29], white, rtol=1e-6)
    np.testing.assert_allclose(x[0, 29, 29], background, rtol=1e-6)
    np.testing.assert_allclose(x[:, :2], background, rtol=1e-6)  # padding
    np.testing.assert_array_equal(x[..., 0], x[..., 2])
    with pytest.raises(ValueError, match="larger than"):
        data.to_resnet_input(np.zeros((1, 33, 33), np.uint8))


@pytest.mark.skipif(data.find_fashion_mnist() is None,
                    reason="Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)")
def test_real_fashion_mnist():
    ds = data.load_fashion_mnist("test", allow_synthetic=False)
    assert ds.images.shape == (10000, 28, 28) and ds.labels.shape == (10000,)
    assert np.bincount(ds.labels).tolist() == [1000] * 10


# ---------------------------------------------------------------------------
# Keras's download-and-cache, against a local server (no outside network)

@contextlib.contextmanager
def serve(directory):
    """An HTTP server on 127.0.0.1 serving `directory`; yields (base URL,
    list of the paths requested)."""
    requests = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            requests.append(self.path)
            super().do_GET()

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", requests
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def no_installed_data(tmp_path, monkeypatch):
    """Only Keras's cache (a temporary KERAS_HOME) is searched, and no proxy
    stands between urllib and 127.0.0.1."""
    monkeypatch.delenv(data.ENV_VAR, raising=False)
    monkeypatch.delenv(data.ORIGIN_ENV_VAR, raising=False)
    monkeypatch.setattr(data, "DEBIAN_DIR", str(tmp_path / "not-installed"))
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    return tmp_path / "keras"


def test_keras_download_is_found_and_loaded(tmp_path, no_installed_data):
    served = tmp_path / "served"
    served.mkdir()
    arrays = write_fake_dataset(served, n_train=12, n_test=5)
    assert data.find_fashion_mnist() is None
    with serve(served) as (url, requests):
        directory = data.fetch_fashion_mnist(url, stream=None)
        assert directory == str(no_installed_data / "datasets" / "fashion-mnist")
        assert sorted(requests) == sorted(f"/{s}.gz" for p in data._FILES.values() for s in p)
        assert data.fetch_fashion_mnist(url, stream=None) == directory
        assert len(requests) == 4  # cached: nothing fetched again
    assert data.find_fashion_mnist() == directory
    for split in ("train", "test"):
        ds = data.load_fashion_mnist(split, allow_synthetic=False)
        np.testing.assert_array_equal(ds.images, arrays[split][0])
        np.testing.assert_array_equal(ds.labels, arrays[split][1])
        assert ds.source == f"fashion-mnist:{directory}"


def test_keras_download_replaces_a_corrupt_cached_file(tmp_path, no_installed_data,
                                                       monkeypatch):
    served = tmp_path / "served"
    served.mkdir()
    write_fake_dataset(served)
    cached = no_installed_data / "datasets" / "fashion-mnist"
    cached.mkdir(parents=True)
    (cached / "train-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8b truncated")
    # The origin from the environment, as dev.sh's users can set it (a mirror).
    with serve(served) as (url, requests):
        monkeypatch.setenv(data.ORIGIN_ENV_VAR, url.rstrip("/"))
        data.fetch_fashion_mnist(stream=None)
    assert len(requests) == 4
    assert data.load_fashion_mnist("train", allow_synthetic=False).labels.shape == (7,)


def test_keras_download_failures_are_one_error(tmp_path, no_installed_data):
    empty = tmp_path / "empty"
    empty.mkdir()
    with serve(empty) as (url, _):
        with pytest.raises(data.FetchError, match=r"from http://127\.0\.0\.1:\d+/ failed.*404"):
            data.fetch_fashion_mnist(url, stream=None)
    with pytest.raises(data.FetchError, match="failed"):  # nothing listens there
        data.fetch_fashion_mnist(url, stream=None)
    assert data.find_fashion_mnist() is None


def test_keras_download_that_is_not_fashion_mnist_is_deleted(tmp_path, no_installed_data):
    served = tmp_path / "served"
    served.mkdir()
    write_fake_dataset(served)
    labels = np.full(3, 12, np.uint8)  # 12 classes
    (served / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(labels)))
    with serve(served) as (url, _):
        with pytest.raises(data.FetchError, match="not Fashion-MNIST"):
            data.fetch_fashion_mnist(url, stream=None)
    assert data.find_fashion_mnist() is None  # the test split was deleted


def test_keras_own_loader_reads_the_cache(tmp_path, no_installed_data):
    """keras.datasets.fashion_mnist.load_data() finds what fetch_fashion_mnist()
    cached (the same files, the same place), without downloading anything."""
    served = tmp_path / "served"
    served.mkdir()
    arrays = write_fake_dataset(served, n_train=12, n_test=5)
    with serve(served) as (url, _):
        data.fetch_fashion_mnist(url, stream=None)
    code = ("import keras, numpy as np; (a, b), (c, d) = keras.datasets.fashion_mnist.load_data(); "
            "np.savez('out.npz', a=a, b=b, c=c, d=d)")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", https_proxy="http://127.0.0.1:9")
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, check=True,
                   timeout=300, capture_output=True)
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_array_equal(out["a"], arrays["train"][0])
    np.testing.assert_array_equal(out["d"], arrays["test"][1])
