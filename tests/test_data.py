"""deepreduce_tf.data: the IDX parser, the Fashion-MNIST loader and its fallback."""
import gzip
import io
import os
import struct

import numpy as np
import pytest

from deepreduce_tf import data


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
    (gzip.compress(GOOD), "bad magic"),  # compressed bytes given to parse_idx
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
