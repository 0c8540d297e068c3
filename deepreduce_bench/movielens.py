"""MovieLens-100K for NCF: fetch, leave-one-out split, HR@10 / NDCG@10.

Where the data comes from. There is no internet access to grouplens.org on
the machines this project is built on (REFERENCE 4); the one obtainable copy
of MovieLens-100K is inside the `recbole==1.2.1` wheel on PyPI, at

    recbole/dataset_example/ml-100k/ml-100k.inter

a tab-separated text file with the header
`user_id:token  item_id:token  rating:float  timestamp:float` and 100,000
rows (943 users with ids 1..943, 1,682 items with ids 1..1682, ratings 1..5,
Unix timestamps; no repeated user-item pair). GroupLens' terms forbid
redistributing the data, so it is never committed: fetch_movielens() runs
`python -m pip download --no-deps recbole==1.2.1` into a temporary
directory, extracts only that file, verifies it and keeps it in the cache
directory (argument, else $DEEPREDUCE_TF_DATA, else ~/.cache/deepreduce_tf),
as <cache>/ml-100k/ml-100k.inter. The wheel is deleted afterwards.

The NCF protocol (He et al. 2017, section 4.1), as leave_one_out() builds it:
every interaction is an implicit positive; each user's latest interaction is
held out for testing, the rest is training; each training positive gets
`num_neg` negatives (items the user never interacted with, drawn uniformly
with a seeded numpy Generator; resample every epoch with
sample_training_examples()); each user is evaluated on a list of the test
item plus 99 items the user never interacted with, and evaluate() reports the
hit rate and NDCG of the test item within the top 10 of that list.

Without the data, load_interactions() falls back (loudly) to
synthetic_interactions(): the same structure with preferences drawn from a
low-rank model plus item popularity, so that a model can learn something.
"""
import collections
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

ENV_VAR = "DEEPREDUCE_TF_DATA"
DEFAULT_DATA_DIR = os.path.join("~", ".cache", "deepreduce_tf")
WHEEL_REQUIREMENT = "recbole==1.2.1"
WHEEL_MEMBER = "recbole/dataset_example/ml-100k/ml-100k.inter"
CACHE_SUBDIR = "ml-100k"
CACHE_NAME = "ml-100k.inter"
HEADER = ("user_id:token", "item_id:token", "rating:float", "timestamp:float")
NUM_INTERACTIONS = 100_000
NUM_USERS = 943
NUM_ITEMS = 1682
# sha256 of ml-100k.inter as shipped in recbole 1.2.1 (1,979,230 bytes).
SHA256 = "4edb74e2a81178c2ba9ff381495f754f996c4aea351b1272ca36b43da0935eff"
_MAX_MEMBER_BYTES = 64 << 20  # the real file is 2 MB; refuse to inflate anything huge
FETCH_HINT = (f"python -m pip download --no-deps {WHEEL_REQUIREMENT} -d DIR  (on a machine with "
              "access to PyPI), then deepreduce_bench.movielens.fetch_movielens("
              "wheel='DIR/recbole-1.2.1-py3-none-any.whl')")

Interactions = collections.namedtuple(
    "Interactions",
    ["users", "items", "ratings", "timestamps", "num_users", "num_items", "source"])
Interactions.__doc__ = """A table of user-item interactions.

users, items: int32 [N], dense ids in [0, num_users) and [0, num_items)
  (MovieLens' ids minus one). ratings: float32 [N]. timestamps: int64 [N].
source: "movielens-100k:<path>" or "synthetic"."""

NCFData = collections.namedtuple(
    "NCFData",
    ["train_users", "train_items", "test_items", "eval_items", "train", "num_users",
     "num_items", "interacted", "source"])
NCFData.__doc__ = """The leave-one-out split of an interaction table.

train_users, train_items: int32 [P], the training positives, sorted by user,
  then timestamp, then item.
test_items: int32 [num_users], each user's held-out item.
eval_items: int32 [num_users, 1 + num_eval_neg]; row u lists the candidates
  for user u: column 0 is test_items[u], the rest are distinct items u never
  interacted with, ascending.
train: (users int32, items int32, labels float32), the training examples of
  the first epoch: the P positives (label 1) followed by num_neg negatives
  per positive (label 0; the negatives of positive j are at
  P + j * num_neg ... P + (j + 1) * num_neg - 1). Not shuffled.
interacted: int64 [N] sorted keys user * num_items + item of all N
  interactions (training and test), for negative sampling.
source: as in Interactions."""


class MovieLensError(RuntimeError):
    """The data could not be fetched, or a fetched file is not the expected one."""


# ---------------------------------------------------------------------------
# Fetching

def data_dir(path=None):
    """The cache root: `path`, else $DEEPREDUCE_TF_DATA, else ~/.cache/deepreduce_tf."""
    if path is None:
        path = os.environ.get(ENV_VAR) or DEFAULT_DATA_DIR
    return os.path.abspath(os.path.expanduser(path))


def cached_path(path=None):
    """Where the verified interaction file lives (whether or not it exists yet)."""
    return os.path.join(data_dir(path), CACHE_SUBDIR, CACHE_NAME)


def parse_interactions(data, name="<bytes>"):
    """Parses a RecBole atomic .inter file of user, item, rating, timestamp.

    Args:
      data: the file's bytes.
      name: used in error messages.

    Returns:
      Interactions with ids made dense (sorted raw id -> 0, 1, ...; for
      MovieLens-100K that is raw id - 1), source "".

    Raises:
      MovieLensError: wrong header, a row without 4 fields, a field that is not
        a number, non-integer ids, or a repeated user-item pair.
    """
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise MovieLensError(f"{name}: not UTF-8 text: {e}") from e
    lines = text.splitlines()
    if not lines or tuple(lines[0].split("\t")) != HEADER:
        got = lines[0][:200] if lines else "(empty file)"
        raise MovieLensError(f"{name}: header is {got!r}, expected {chr(9).join(HEADER)!r}")
    rows = [line.split("\t") for line in lines[1:] if line]
    bad = next((i for i, r in enumerate(rows) if len(r) != 4), None)
    if bad is not None:
        raise MovieLensError(f"{name}: data row {bad + 1} has {len(rows[bad])} fields, expected 4")
    try:
        table = np.array(rows, dtype=np.float64).reshape(-1, 4)
    except ValueError as e:
        raise MovieLensError(f"{name}: a field is not a number: {e}") from e
    for col, what in ((0, "user"), (1, "item"), (3, "timestamp")):
        if not np.all(table[:, col] == np.round(table[:, col])):
            raise MovieLensError(f"{name}: {what} column holds non-integer values")
    raw_users = table[:, 0].astype(np.int64)
    raw_items = table[:, 1].astype(np.int64)
    user_ids, users = np.unique(raw_users, return_inverse=True)
    item_ids, items = np.unique(raw_items, return_inverse=True)
    out = Interactions(users.astype(np.int32), items.astype(np.int32),
                       table[:, 2].astype(np.float32), table[:, 3].astype(np.int64),
                       len(user_ids), len(item_ids), "")
    check_interactions(out, name)
    return out


def check_interactions(inter, name="interactions"):
    """Checks shapes, id ranges and that no user-item pair repeats.

    Raises:
      MovieLensError: naming the problem.
    """
    n = len(inter.users)
    if not all(len(a) == n for a in (inter.items, inter.ratings, inter.timestamps)):
        raise MovieLensError(f"{name}: columns of different lengths")
    if n and (inter.users.min() < 0 or inter.users.max() >= inter.num_users
              or inter.items.min() < 0 or inter.items.max() >= inter.num_items):
        raise MovieLensError(f"{name}: ids outside [0, num_users) x [0, num_items)")
    keys = np.sort(inter.users.astype(np.int64) * inter.num_items + inter.items)
    dup = np.flatnonzero(keys[1:] == keys[:-1])
    if dup.size:
        k = keys[dup[0]]
        raise MovieLensError(f"{name}: {dup.size} repeated user-item pairs, e.g. user index "
                             f"{k // inter.num_items}, item index {k % inter.num_items}")


def verify_movielens(data, name="<bytes>", sha256=SHA256):
    """Parses the bytes of ml-100k.inter and checks it is MovieLens-100K.

    Args:
      data: bytes of the file.
      name: used in error messages.
      sha256: expected hex digest, or None to check only the counts.

    Returns:
      Interactions (source "").

    Raises:
      MovieLensError: unparsable, or not 100,000 rows / 943 users / 1,682
        items, or (if sha256 is given) a different digest.
    """
    inter = parse_interactions(data, name)
    counts = (len(inter.users), inter.num_users, inter.num_items)
    if counts != (NUM_INTERACTIONS, NUM_USERS, NUM_ITEMS):
        raise MovieLensError(f"{name}: {counts[0]} interactions, {counts[1]} users, "
                             f"{counts[2]} items; MovieLens-100K has {NUM_INTERACTIONS}, "
                             f"{NUM_USERS}, {NUM_ITEMS}")
    if sha256 is not None:
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha256:
            raise MovieLensError(f"{name}: sha256 {digest}, expected {sha256} (the file of "
                                 f"{WHEEL_REQUIREMENT})")
    return inter


def extract_from_wheel(wheel, dest, sha256=SHA256):
    """Extracts, verifies and atomically writes the interaction file.

    Args:
      wheel: path of a recbole wheel (a zip file).
      dest: path to write the file to (its directory is created).
      sha256: as in verify_movielens().

    Returns:
      dest.

    Raises:
      MovieLensError: not a zip, no such member, member too large, or the
        member fails verification. Nothing is written then.
    """
    try:
        with zipfile.ZipFile(wheel) as z:
            try:
                info = z.getinfo(WHEEL_MEMBER)
            except KeyError:
                raise MovieLensError(f"{wheel}: no member {WHEEL_MEMBER}") from None
            if info.file_size > _MAX_MEMBER_BYTES:
                raise MovieLensError(f"{wheel}: {WHEEL_MEMBER} is {info.file_size} bytes, "
                                     "far larger than MovieLens-100K")
            data = z.read(info)
    except (zipfile.BadZipFile, OSError) as e:
        raise MovieLensError(f"{wheel}: cannot read the wheel: {e}") from e
    verify_movielens(data, f"{wheel}:{WHEEL_MEMBER}", sha256=sha256)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".tmp-", suffix=".inter")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return dest


def download_wheel(directory, python=None, timeout=300):
    """Runs `python -m pip download --no-deps recbole==1.2.1 -d directory`.

    Returns:
      the path of the downloaded wheel.

    Raises:
      MovieLensError: pip missing, failed (e.g. no network) or timed out, with
        pip's last output lines and the commands to do it by hand.
    """
    python = python or sys.executable
    cmd = [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--no-input", "-d", directory, WHEEL_REQUIREMENT]
    how = f"Fetch it by hand: {FETCH_HINT}"
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise MovieLensError(f"cannot run {python!r} to download {WHEEL_REQUIREMENT} "
                             f"(MovieLens-100K). {how}") from None
    except subprocess.TimeoutExpired:
        raise MovieLensError(f"`{' '.join(cmd)}` did not finish within {timeout} s (no "
                             f"network access to PyPI?). {how}") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout or "").strip().splitlines()[-5:])
        if "No module named pip" in tail:
            reason = f"pip is not installed for {python}; install it (python -m ensurepip)"
        else:
            reason = "no network access to PyPI, or a proxy/index problem?"
        raise MovieLensError(f"`{' '.join(cmd)}` failed with exit code {proc.returncode} "
                             f"({reason}):\n{tail}\n{how}")
    wheels = sorted(f for f in os.listdir(directory) if f.startswith("recbole-")
                    and f.endswith(".whl"))
    if not wheels:
        raise MovieLensError(f"pip reported success but left no recbole wheel in {directory}. "
                             f"{how}")
    return os.path.join(directory, wheels[0])


def fetch_movielens(data_dir=None, wheel=None, force=False, python=None, timeout=300,
                    sha256=SHA256, stream=sys.stderr):
    """Makes sure the verified MovieLens-100K interaction file is in the cache.

    If the cached file exists and verifies, nothing is downloaded. Otherwise
    the recbole wheel is downloaded with pip into a temporary directory (or
    `wheel` is used), the file is extracted, verified and cached, and the
    temporary directory is removed.

    Args:
      data_dir: cache root (default $DEEPREDUCE_TF_DATA, else ~/.cache/deepreduce_tf).
      wheel: path of an already downloaded recbole-1.2.1 wheel (offline use).
      force: fetch again even if a valid cached file exists.
      python: interpreter whose pip downloads (default: this one).
      timeout: seconds allowed for the download.
      sha256: expected digest of the file (None: check the counts only).
      stream: where progress messages go (None: silent).

    Returns:
      path of the cached file.

    Raises:
      MovieLensError: the download or the verification failed; the message
        says what to run instead.
    """
    dest = cached_path(data_dir)
    if os.path.exists(dest) and not force:
        try:
            with open(dest, "rb") as f:
                verify_movielens(f.read(), dest, sha256=sha256)
            return dest
        except MovieLensError as e:
            if stream is not None:
                print(f"cached MovieLens-100K is invalid ({e}); fetching it again", file=stream)
    if wheel is not None:
        return extract_from_wheel(wheel, dest, sha256=sha256)
    if stream is not None:
        print(f"fetching MovieLens-100K from the {WHEEL_REQUIREMENT} wheel on PyPI into {dest}",
              file=stream)
    tmp = tempfile.mkdtemp(prefix="deepreduce_tf-recbole-")
    try:
        return extract_from_wheel(download_wheel(tmp, python, timeout), dest, sha256=sha256)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------
# Loading

def synthetic_interactions(num_users=943, num_items=1682, min_per_user=20, mean_per_user=106,
                           rank=8, seed=0):
    """A MovieLens-like table with learnable structure.

    Each user u and item i get latent vectors p_u, q_i ~ N(0, I/rank^0.5) and
    items a Zipf-like popularity b_i. User u interacts with n_u distinct items
    (n_u = min_per_user + a geometric number, capped so that at least 100
    items stay unseen), drawn without replacement with probabilities
    proportional to exp(2 p_u . q_i + b_i) (Gumbel top-k). Timestamps are
    independent uniform draws, so the held-out latest item is just another
    sample from the user's preferences, predictable from the others.

    Returns:
      Interactions (source "synthetic"), rows sorted by user then timestamp;
      ratings are all 1.
    """
    if num_items < min_per_user + 101:
        raise ValueError(f"num_items={num_items} must be at least min_per_user + 101 "
                         f"(= {min_per_user + 101}) to leave 100 candidates per user")
    rng = np.random.default_rng(seed)
    p = rng.normal(0.0, rank ** -0.25, size=(num_users, rank))
    q = rng.normal(0.0, rank ** -0.25, size=(num_items, rank))
    popularity = -0.8 * np.log1p(rng.permutation(num_items))
    extra = max(mean_per_user - min_per_user, 0)
    counts = min_per_user + (rng.geometric(1.0 / (extra + 1), size=num_users) - 1 if extra
                             else np.zeros(num_users, np.int64))
    counts = np.minimum(counts, num_items - 101)
    users, items = [], []
    for start in range(0, num_users, 512):  # bounded [512, num_items] work arrays
        stop = min(start + 512, num_users)
        logits = 2.0 * p[start:stop] @ q.T + popularity
        keys = logits + rng.gumbel(size=logits.shape)
        order = np.argsort(-keys, axis=1)
        take = np.arange(num_items) < counts[start:stop, None]
        rows, cols = np.nonzero(take)
        users.append(rows + start)
        items.append(order[rows, cols])
    users = np.concatenate(users).astype(np.int32)
    items = np.concatenate(items).astype(np.int32)
    timestamps = rng.integers(874_724_710, 893_286_638, size=users.size, dtype=np.int64)
    perm = np.lexsort((items, timestamps, users))
    return Interactions(users[perm], items[perm], np.ones(users.size, np.float32),
                        timestamps[perm], num_users, num_items, "synthetic")


def load_interactions(data_dir=None, allow_synthetic=True, synthetic_seed=0, stream=sys.stderr):
    """MovieLens-100K from the cache, or a synthetic stand-in.

    Args:
      data_dir: cache root (see fetch_movielens()).
      allow_synthetic: if the file was never fetched, return
        synthetic_interactions(seed=synthetic_seed) (and say so on `stream`)
        instead of raising.
      stream: where the fallback warning goes (None: silent).

    Returns:
      Interactions.

    Raises:
      FileNotFoundError: not fetched and allow_synthetic is False.
      MovieLensError: the cached file exists but fails verification (never
        silently replaced by synthetic data).
    """
    path = cached_path(data_dir)
    if not os.path.exists(path):
        message = (f"MovieLens-100K not found at {path}; fetch it with "
                   "`python -c 'import deepreduce_bench.data as d; d.fetch_all()'` "
                   f"(downloads the {WHEEL_REQUIREMENT} wheel with pip), or set ${ENV_VAR}")
        if not allow_synthetic:
            raise FileNotFoundError(message)
        if stream is not None:
            print(f"WARNING: {message}. Using SYNTHETIC interactions instead; hit rates are "
                  "NOT those of MovieLens.", file=stream)
        return synthetic_interactions(seed=synthetic_seed)
    with open(path, "rb") as f:
        inter = verify_movielens(f.read(), path, sha256=None)
    return inter._replace(source=f"movielens-100k:{path}")


# ---------------------------------------------------------------------------
# The NCF split

def _keys(users, items, num_items):
    return users.astype(np.int64) * num_items + items.astype(np.int64)


def sample_negatives(users, interacted, num_items, rng):
    """One uniformly drawn item per entry of `users` that the user never interacted with.

    Rejection sampling, vectorised: draw all, redraw only the rejected ones.
    Draws are independent (an item may repeat for the same user).

    Args:
      users: int array [M].
      interacted: sorted int64 keys user * num_items + item.
      num_items: number of items.
      rng: numpy Generator.

    Returns:
      int32 [M].
    """
    users = np.asarray(users, np.int64)
    items = rng.integers(0, num_items, size=users.size)
    pending = np.arange(users.size)
    while pending.size:
        keys = users[pending] * num_items + items[pending]
        pos = np.minimum(np.searchsorted(interacted, keys), max(interacted.size - 1, 0))
        hit = interacted[pos] == keys if interacted.size else np.zeros(pending.size, bool)
        pending = pending[hit]
        items[pending] = rng.integers(0, num_items, size=pending.size)
    return items.astype(np.int32)


def sample_training_examples(data, num_neg=4, rng=None):
    """Training examples for one epoch: every positive plus `num_neg` fresh negatives each.

    Args:
      data: NCFData.
      num_neg: negatives per positive (He et al. use 4).
      rng: numpy Generator (default: a new one seeded with 0).

    Returns:
      (users int32 [P * (1 + num_neg)], items int32, labels float32), laid out
      as NCFData.train describes; not shuffled.
    """
    if num_neg < 0:
        raise ValueError(f"num_neg must be >= 0, got {num_neg}")
    rng = np.random.default_rng(0) if rng is None else rng
    neg_users = np.repeat(data.train_users, num_neg)
    neg_items = sample_negatives(neg_users, data.interacted, data.num_items, rng)
    users = np.concatenate([data.train_users, neg_users]).astype(np.int32)
    items = np.concatenate([data.train_items, neg_items]).astype(np.int32)
    labels = np.concatenate([np.ones(data.train_users.size, np.float32),
                             np.zeros(neg_users.size, np.float32)])
    return users, items, labels


def _eval_negatives(interacted, num_users, num_items, count, rng, chunk=1024):
    """[num_users, count] distinct never-interacted items per user, ascending."""
    out = np.empty((num_users, count), np.int32)
    ku, ki = interacted // num_items, interacted % num_items
    for start in range(0, num_users, chunk):
        stop = min(start + chunk, num_users)
        keys = rng.random((stop - start, num_items))
        sel = (ku >= start) & (ku < stop)
        keys[ku[sel] - start, ki[sel]] = 2.0  # larger than every uniform draw
        if count:
            part = np.argpartition(keys, count - 1, axis=1)[:, :count]
            out[start:stop] = np.sort(part, axis=1)
    return out


def leave_one_out(inter, num_neg=4, num_eval_neg=99, seed=0):
    """The NCF leave-one-out split with sampled negatives.

    For every user the latest interaction is the test item; among
    interactions with the same latest timestamp, the one with the largest item
    id is taken. Everything else is training data. Users need at least
    `num_eval_neg` items they never interacted with; users with no training
    interaction are kept (they only appear in evaluation).

    Args:
      inter: Interactions.
      num_neg: negatives per training positive in `train`.
      num_eval_neg: never-interacted items added to each user's test item.
      seed: seeds the numpy Generator that draws all negatives (evaluation
        lists first, then the training negatives).

    Returns:
      NCFData.

    Raises:
      ValueError: a user has no interaction, or too few unseen items.
      MovieLensError: inconsistent table (see check_interactions()).
    """
    check_interactions(inter)
    nu, ni = inter.num_users, inter.num_items
    per_user = np.bincount(inter.users, minlength=nu)
    if per_user.min(initial=1) == 0 or nu == 0:
        raise ValueError(f"every user needs an interaction to hold out; user index "
                         f"{int(np.argmin(per_user))} has none")
    unseen = ni - per_user
    if unseen.min() < num_eval_neg:
        u = int(np.argmin(unseen))
        raise ValueError(f"user index {u} interacted with {per_user[u]} of {ni} items, leaving "
                         f"{unseen[u]} < num_eval_neg={num_eval_neg} for its evaluation list")
    order = np.lexsort((inter.items, inter.timestamps, inter.users))
    users, items = inter.users[order], inter.items[order]
    last = np.r_[users[1:] != users[:-1], True]  # the last row of each user's block
    test_items = np.empty(nu, np.int32)
    test_items[users[last]] = items[last]
    interacted = np.sort(_keys(inter.users, inter.items, ni))
    rng = np.random.default_rng(seed)
    eval_items = np.concatenate(
        [test_items[:, None], _eval_negatives(interacted, nu, ni, num_eval_neg, rng)], axis=1)
    data = NCFData(users[~last].astype(np.int32), items[~last].astype(np.int32), test_items,
                   eval_items, None, nu, ni, interacted, inter.source)
    return data._replace(train=sample_training_examples(data, num_neg, rng))


def load_ncf(data_dir=None, num_neg=4, num_eval_neg=99, seed=0, allow_synthetic=True,
             stream=sys.stderr):
    """load_interactions() then leave_one_out(): the NCF benchmark's data."""
    inter = load_interactions(data_dir, allow_synthetic=allow_synthetic, synthetic_seed=seed,
                              stream=stream)
    return leave_one_out(inter, num_neg=num_neg, num_eval_neg=num_eval_neg, seed=seed)


# ---------------------------------------------------------------------------
# Evaluation

def ranks(scores):
    """0-based rank of column 0 among each row of `scores` [U, C], pessimistic on ties.

    A candidate scoring the same as the test item counts as ranked above it,
    so a constant scorer gets no hits.
    """
    scores = np.asarray(scores)
    return np.sum(scores[:, 1:] >= scores[:, :1], axis=1)


def evaluate(score_fn, data, k=10, batch_size=1 << 17):
    """Hit rate and NDCG at k of the held-out items (He et al. 2017, section 4.1).

    HR@k is the fraction of users whose test item is among the k best-scored
    of their candidates (data.eval_items); NDCG@k averages 1 / log2(rank + 2)
    over the users with rank < k (0-based rank; ties count against the test
    item). All users' candidates are scored together in batches of
    `batch_size` pairs: one model call for MovieLens-100K's 94,300 pairs.

    Args:
      score_fn: a callable (users int32 [M], items int32 [M]) -> scores [M] or
        [M, 1] (logits or probabilities: only the order matters), or a Keras
        model with two inputs [user, item] such as models.neumf() (called with
        training=False).
      data: NCFData (or anything with .eval_items [U, C], C > k).
      k: cut-off.
      batch_size: pairs per call.

    Returns:
      (hr, ndcg) as Python floats.

    Raises:
      ValueError: the scores have the wrong size or are not finite.
    """
    eval_items = np.asarray(data.eval_items, np.int32)
    num_users, num_candidates = eval_items.shape
    if hasattr(score_fn, "inputs") and hasattr(score_fn, "predict"):  # a Keras model
        model = score_fn

        def score_fn(u, i):
            return model([u, i], training=False)

    users = np.repeat(np.arange(num_users, dtype=np.int32), num_candidates)
    items = eval_items.reshape(-1)
    parts = []
    for start in range(0, users.size, batch_size):
        s = score_fn(users[start:start + batch_size], items[start:start + batch_size])
        s = np.asarray(s.numpy() if hasattr(s, "numpy") else s, np.float64).reshape(-1)
        if s.size != min(batch_size, users.size - start):
            raise ValueError(f"score_fn returned {s.size} scores for "
                             f"{min(batch_size, users.size - start)} pairs")
        parts.append(s)
    scores = np.concatenate(parts).reshape(num_users, num_candidates)
    if not np.all(np.isfinite(scores)):
        raise ValueError("score_fn returned non-finite scores")
    r = ranks(scores)
    hit = r < k
    return float(hit.mean()), float(np.where(hit, 1.0 / np.log2(r + 2.0), 0.0).mean())
