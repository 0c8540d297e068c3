"""deepreduce_bench.movielens: fetch (fake wheels, one real download), the NCF
leave-one-out split, HR/NDCG against a brute-force reference, synthetic data."""
import io
import os
import stat
import zipfile

import numpy as np
import pytest

from deepreduce_bench import data as fmnist_data
from deepreduce_bench import movielens as ml
from test_data import no_installed_data, serve, write_fake_dataset  # noqa: F401 (fixture)

HEADER_LINE = "\t".join(ml.HEADER)


def inter_bytes(rows):
    """rows: (user, item, rating, timestamp) raw ids -> the RecBole .inter bytes."""
    body = "".join(f"{u}\t{i}\t{r}\t{t}\n" for u, i, r, t in rows)
    return (HEADER_LINE + "\n" + body).encode()


def fake_movielens_rows():
    """100,000 distinct pairs over exactly 943 users and 1,682 items (1-based)."""
    r = np.arange(ml.NUM_INTERACTIONS)
    u, k = r % ml.NUM_USERS, r // ml.NUM_USERS  # k < 107: distinct items per user
    items = (7 * u + k) % ml.NUM_ITEMS
    return [(int(a) + 1, int(b) + 1, 1 + int(a + b) % 5, 880_000_000 + int(x))
            for a, b, x in zip(u, items, r)]


@pytest.fixture(scope="module")
def fake_inter():
    return inter_bytes(fake_movielens_rows())


def make_wheel(path, member_bytes, member=ml.WHEEL_MEMBER):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("recbole/__init__.py", "")
        z.writestr("recbole/dataset_example/ml-100k/ml-100k.user", "user_id:token\n1\n")
        z.writestr(member, member_bytes)
        z.writestr("recbole-1.2.1.dist-info/METADATA", "Name: recbole\nVersion: 1.2.1\n")
    return str(path)


def fake_python(tmp_path, body):
    """An executable standing in for `python`: `$@` is `-m pip download ...`."""
    script = tmp_path / "fake-python"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


# ---------------------------------------------------------------------------
# Parsing and verification

def test_parse_dense_ids():
    inter = ml.parse_interactions(inter_bytes([(196, 242, 3, 881250949), (22, 377, 1, 878887116),
                                               (196, 377, 5, 1)]))
    np.testing.assert_array_equal(inter.users, [1, 0, 1])
    np.testing.assert_array_equal(inter.items, [0, 1, 1])
    np.testing.assert_array_equal(inter.ratings, [3, 1, 5])
    np.testing.assert_array_equal(inter.timestamps, [881250949, 878887116, 1])
    assert (inter.num_users, inter.num_items) == (2, 2)
    assert inter.users.dtype == np.int32 and inter.timestamps.dtype == np.int64


@pytest.mark.parametrize("blob,message", [
    (b"", "empty file"),
    (b"user_id\titem_id\trating\ttimestamp\n1\t2\t3\t4\n", "header"),
    ((HEADER_LINE + "\n1\t2\t3\n").encode(), "row 1 has 3 fields"),
    ((HEADER_LINE + "\n1\t2\t3\tx\n").encode(), "not a number"),
    ((HEADER_LINE + "\n1.5\t2\t3\t4\n").encode(), "user column holds non-integer"),
    ((HEADER_LINE + "\n1\t2\t3\t4\n1\t2\t5\t6\n").encode(), "1 repeated user-item pairs"),
    (b"\xff\xfe", "UTF-8"),
])
def test_parse_rejects(blob, message):
    with pytest.raises(ml.MovieLensError, match=message):
        ml.parse_interactions(blob, name="f.inter")


def test_verify_counts_and_digest(fake_inter):
    inter = ml.verify_movielens(fake_inter, sha256=None)
    assert (len(inter.users), inter.num_users, inter.num_items) == (100_000, 943, 1682)
    with pytest.raises(ml.MovieLensError, match="sha256"):
        ml.verify_movielens(fake_inter)
    with pytest.raises(ml.MovieLensError, match="99999 interactions.*MovieLens-100K has 100000"):
        ml.verify_movielens(fake_inter[:fake_inter.rindex(b"\n", 0, -1) + 1], sha256=None)


# ---------------------------------------------------------------------------
# Fetching without network: fake wheels and a fake pip

def test_fetch_from_wheel_and_cache(tmp_path, fake_inter):
    wheel = make_wheel(tmp_path / "recbole-1.2.1-py3-none-any.whl", fake_inter)
    cache = tmp_path / "cache"
    path = ml.fetch_movielens(str(cache), wheel=wheel, sha256=None, stream=None)
    assert path == str(cache / "ml-100k" / "ml-100k.inter")
    assert open(path, "rb").read() == fake_inter
    assert sorted(os.listdir(cache / "ml-100k")) == ["ml-100k.inter"]  # only that member
    os.unlink(wheel)  # a valid cache is used as is
    assert ml.fetch_movielens(str(cache), sha256=None, python="/nonexistent", stream=None) == path
    inter = ml.load_interactions(str(cache), allow_synthetic=False)
    assert inter.source == f"movielens-100k:{path}" and len(inter.users) == 100_000


def test_cache_location(tmp_path, monkeypatch):
    monkeypatch.setenv(ml.ENV_VAR, str(tmp_path / "env"))
    assert ml.cached_path() == str(tmp_path / "env" / "ml-100k" / "ml-100k.inter")
    assert ml.cached_path(str(tmp_path / "arg")).startswith(str(tmp_path / "arg"))
    monkeypatch.delenv(ml.ENV_VAR)
    assert ml.data_dir() == os.path.expanduser("~/.cache/deepreduce_tf")


def test_fetch_with_fake_pip(tmp_path, fake_inter):
    wheel = make_wheel(tmp_path / "built.whl", fake_inter)
    log = tmp_path / "argv"
    # Copies the wheel into the directory after -d, like `pip download`.
    python = fake_python(tmp_path, f"""echo "$@" > {log}
while [ $# -gt 0 ]; do
  if [ "$1" = "-d" ]; then cp {wheel} "$2/recbole-1.2.1-py3-none-any.whl"; fi
  shift
done""")
    path = ml.fetch_movielens(str(tmp_path / "c"), python=python, sha256=None, stream=None)
    assert open(path, "rb").read() == fake_inter
    argv = log.read_text().split()
    assert argv[:3] == ["-m", "pip", "download"] and "--no-deps" in argv
    assert argv[-1] == "recbole==1.2.1"
    tmp_dir = argv[argv.index("-d") + 1]
    assert not os.path.exists(tmp_dir)  # the wheel is not kept


@pytest.mark.parametrize("body,timeout,message", [
    ("echo 'ERROR: No matching distribution found for recbole==1.2.1' >&2; exit 1", 30,
     "(?s)exit code 1.*no network.*No matching distribution"),
    ("echo '/usr/bin/python3: No module named pip' >&2; exit 1", 30, "pip is not installed"),
    ("sleep 5", 0.5, "did not finish within 0.5 s"),
    ("exit 0", 30, "left no recbole wheel"),
], ids=["no-network", "no-pip", "timeout", "no-wheel"])
def test_fetch_failures_say_what_to_run(tmp_path, body, timeout, message):
    python = fake_python(tmp_path, body)
    with pytest.raises(ml.MovieLensError, match=message) as err:
        ml.fetch_movielens(str(tmp_path / "c"), python=python, timeout=timeout, stream=None)
    assert "pip download --no-deps recbole==1.2.1" in str(err.value)
    assert "fetch_movielens(wheel=" in str(err.value)
    assert not os.path.exists(ml.cached_path(str(tmp_path / "c")))


def test_fetch_without_python(tmp_path):
    with pytest.raises(ml.MovieLensError, match="cannot run '/nonexistent/python'"):
        ml.fetch_movielens(str(tmp_path), python="/nonexistent/python", stream=None)


def test_bad_wheels(tmp_path, fake_inter):
    dest = str(tmp_path / "out" / "x.inter")
    not_zip = tmp_path / "a.whl"
    not_zip.write_bytes(b"not a zip")
    with pytest.raises(ml.MovieLensError, match="cannot read the wheel"):
        ml.extract_from_wheel(str(not_zip), dest)
    other = make_wheel(tmp_path / "b.whl", fake_inter, member="recbole/ml-1m.inter")
    with pytest.raises(ml.MovieLensError, match="no member recbole/dataset_example"):
        ml.extract_from_wheel(other, dest)
    small = make_wheel(tmp_path / "c.whl", inter_bytes([(1, 1, 5, 0)]))
    with pytest.raises(ml.MovieLensError, match="1 interactions, 1 users, 1 items"):
        ml.extract_from_wheel(small, dest)
    with pytest.raises(ml.MovieLensError, match="sha256"):
        ml.extract_from_wheel(make_wheel(tmp_path / "d.whl", fake_inter), dest)
    assert not os.path.exists(os.path.dirname(dest)) or not os.listdir(os.path.dirname(dest))


def test_corrupt_cache(tmp_path, fake_inter):
    cache = str(tmp_path)
    path = ml.cached_path(cache)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(fake_inter[:-30])
    with pytest.raises(ml.MovieLensError, match=r"ml-100k.inter"):  # never silently synthetic
        ml.load_interactions(cache)
    stream = io.StringIO()
    wheel = make_wheel(tmp_path / "w.whl", fake_inter)
    ml.fetch_movielens(cache, wheel=wheel, sha256=None, stream=stream)
    assert "invalid" in stream.getvalue()
    assert open(path, "rb").read() == fake_inter


def test_missing_data_falls_back_loudly(tmp_path):
    stream = io.StringIO()
    inter = ml.load_interactions(str(tmp_path), stream=stream)
    assert inter.source == "synthetic" and inter.num_users == 943 and inter.num_items == 1682
    assert "SYNTHETIC" in stream.getvalue() and "fetch_all" in stream.getvalue()
    with pytest.raises(FileNotFoundError, match="MovieLens-100K not found"):
        ml.load_interactions(str(tmp_path), allow_synthetic=False)


@pytest.mark.parametrize("served", [True, False], ids=["fashion-served", "fashion-offline"])
def test_fetch_all(tmp_path, fake_inter, no_installed_data, served):  # noqa: F811
    """Fashion-MNIST from Keras's download (a local server, or none: reported,
    not raised), MovieLens from a local wheel."""
    wheel = make_wheel(tmp_path / "w.whl", fake_inter)
    files = tmp_path / "served"
    files.mkdir()
    if served:
        write_fake_dataset(files)
    stream = io.StringIO()
    with serve(files) as (url, _):
        found = fmnist_data.fetch_all(str(tmp_path / "c"), stream=stream, wheel=wheel,
                                      sha256=None, fashion_mnist_url=url)
    assert found["movielens-100k"] == ml.cached_path(str(tmp_path / "c"))
    keras_dir = str(no_installed_data / "datasets" / "fashion-mnist")
    assert found["fashion-mnist"] == (keras_dir if served else None)
    report = stream.getvalue()
    assert "MovieLens-100K:" in report
    assert (f"Fashion-MNIST: {keras_dir}" if served else
            "Fashion-MNIST: not available: downloading Fashion-MNIST from") in report


def test_real_fetch(tmp_path):
    """The one test that downloads: skips when pip cannot reach an index."""
    try:
        wheel = ml.download_wheel(str(tmp_path), timeout=60)
    except ml.MovieLensError as e:
        pytest.skip(f"cannot download {ml.WHEEL_REQUIREMENT}: {str(e).splitlines()[0]}")
    path = ml.fetch_movielens(str(tmp_path / "cache"), wheel=wheel, stream=None)  # real sha256
    inter = ml.load_interactions(str(tmp_path / "cache"), allow_synthetic=False)
    assert (len(inter.users), inter.num_users, inter.num_items) == (100_000, 943, 1682)
    assert sorted(np.unique(inter.ratings).tolist()) == [1, 2, 3, 4, 5]
    assert np.bincount(inter.users).min() == 20  # every MovieLens user rated >= 20 movies
    with open(path, "rb") as f:
        assert f.readline().decode().rstrip("\n") == HEADER_LINE
    data = ml.leave_one_out(inter)
    assert data.train_users.size == 100_000 - 943 and data.eval_items.shape == (943, 100)
    assert data.train[0].size == 5 * data.train_users.size


# ---------------------------------------------------------------------------
# The leave-one-out split

def hand_made():
    # raw users 10, 20, 30; raw items 5, 6, 7, 8 -> dense 0..3. Rows shuffled.
    rows = [
        (20, 6, 4, 10), (10, 7, 5, 200), (30, 5, 3, 9), (10, 5, 1, 100),
        (20, 8, 2, 50), (30, 8, 1, 1), (10, 6, 2, 300), (20, 5, 5, 50), (30, 7, 4, 5),
    ]
    return ml.parse_interactions(inter_bytes(rows))


def test_split_exact():
    # Each user has exactly one unseen item, so every negative is determined.
    data = ml.leave_one_out(hand_made(), num_neg=2, num_eval_neg=1, seed=7)
    # user 10: latest item 6 (t=300); user 20: items 5 and 8 tie at t=50, the
    # larger id (8) is held out; user 30: latest item 5 (t=9).
    np.testing.assert_array_equal(data.test_items, [1, 3, 0])
    np.testing.assert_array_equal(data.train_users, [0, 0, 1, 1, 2, 2])
    np.testing.assert_array_equal(data.train_items, [0, 2, 1, 0, 3, 2])  # by time, then item
    np.testing.assert_array_equal(data.eval_items, [[1, 3], [3, 2], [0, 1]])
    users, items, labels = data.train
    np.testing.assert_array_equal(users, [0, 0, 1, 1, 2, 2] + [0] * 4 + [1] * 4 + [2] * 4)
    np.testing.assert_array_equal(items, [0, 2, 1, 0, 3, 2] + [3] * 4 + [2] * 4 + [1] * 4)
    np.testing.assert_array_equal(labels, [1] * 6 + [0] * 12)
    assert users.dtype == items.dtype == np.int32 and labels.dtype == np.float32
    assert (data.num_users, data.num_items) == (3, 4)


def test_split_errors():
    with pytest.raises(ValueError, match="user index 0 .* num_eval_neg=2"):
        ml.leave_one_out(hand_made(), num_eval_neg=2)
    inter = hand_made()._replace(num_users=4)
    with pytest.raises(ValueError, match="user index 3 has none"):
        ml.leave_one_out(inter, num_eval_neg=1)


@pytest.fixture(scope="module")
def small_synthetic():
    return ml.synthetic_interactions(num_users=60, num_items=250, mean_per_user=30, seed=3)


def test_split_invariants(small_synthetic):
    inter = small_synthetic
    data = ml.leave_one_out(inter, num_neg=3, seed=11)
    nu, ni = inter.num_users, inter.num_items
    all_pairs = set(zip(inter.users.tolist(), inter.items.tolist()))
    train_pairs = set(zip(data.train_users.tolist(), data.train_items.tolist()))
    test_pairs = set(enumerate(data.test_items.tolist()))
    assert train_pairs | test_pairs == all_pairs and not train_pairs & test_pairs
    assert len(data.train_users) == len(inter.users) - nu
    for u in range(nu):  # the test item is the user's latest interaction
        mask = inter.users == u
        latest = inter.timestamps[mask].max()
        assert data.test_items[u] == inter.items[mask][inter.timestamps[mask] == latest].max()
    assert data.eval_items.shape == (nu, 100)
    np.testing.assert_array_equal(data.eval_items[:, 0], data.test_items)
    negs = data.eval_items[:, 1:]
    assert np.all(np.diff(negs, axis=1) > 0)  # distinct, ascending
    assert not any((u, i) in all_pairs for u in range(nu) for i in negs[u])
    users, items, labels = data.train
    p = len(data.train_users)
    assert users.size == 4 * p and labels.sum() == p
    np.testing.assert_array_equal(users[p:], np.repeat(data.train_users, 3))
    assert not any((u, i) in all_pairs for u, i in zip(users[p:], items[p:]))
    assert items[p:].min() >= 0 and items[p:].max() < ni


def test_split_determinism(small_synthetic):
    a = ml.leave_one_out(small_synthetic, seed=1)
    b = ml.leave_one_out(small_synthetic, seed=1)
    c = ml.leave_one_out(small_synthetic, seed=2)
    np.testing.assert_array_equal(a.eval_items, b.eval_items)
    for x, y in zip(a.train, b.train):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.eval_items, c.eval_items)
    assert not np.array_equal(a.train[1], c.train[1])
    e1 = ml.sample_training_examples(a, 4, np.random.default_rng(5))
    e2 = ml.sample_training_examples(a, 4, np.random.default_rng(6))
    np.testing.assert_array_equal(e1[1][:a.train_users.size], e2[1][:a.train_users.size])
    assert not np.array_equal(e1[1], e2[1])  # fresh negatives per epoch


def test_sample_negatives_uniform():
    # user 0 interacted with items 0..3 of 10: the other 6 are equally likely.
    interacted = np.arange(4, dtype=np.int64)
    draws = ml.sample_negatives(np.zeros(60_000, np.int32), interacted, 10,
                                np.random.default_rng(0))
    counts = np.bincount(draws, minlength=10)
    assert counts[:4].sum() == 0
    np.testing.assert_allclose(counts[4:] / 60_000, 1 / 6, atol=0.01)


# ---------------------------------------------------------------------------
# Synthetic data

def test_synthetic_structure():
    a = ml.synthetic_interactions(num_users=50, num_items=200, min_per_user=5,
                                  mean_per_user=20, seed=4)
    b = ml.synthetic_interactions(num_users=50, num_items=200, min_per_user=5,
                                  mean_per_user=20, seed=4)
    c = ml.synthetic_interactions(num_users=50, num_items=200, min_per_user=5,
                                  mean_per_user=20, seed=5)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a.items, c.items)
    ml.check_interactions(a)  # no repeated pair, ids in range
    per_user = np.bincount(a.users, minlength=50)
    assert per_user.min() >= 5 and per_user.max() <= 200 - 101
    assert 10 < per_user.mean() < 30
    assert a.source == "synthetic" and a.users.dtype == np.int32
    assert a.timestamps.dtype == np.int64
    order = np.lexsort((a.timestamps, a.users))
    np.testing.assert_array_equal(order, np.arange(a.users.size))


def test_synthetic_default_resembles_movielens():
    s = ml.synthetic_interactions()
    assert (s.num_users, s.num_items) == (943, 1682)
    assert 80_000 < s.users.size < 120_000


# ---------------------------------------------------------------------------
# Evaluation

class Candidates:
    def __init__(self, eval_items):
        self.eval_items = eval_items


def brute_force(score_table, eval_items, k):
    """Per user: sort candidates best first, ties put the test item last."""
    hits, gains = [], []
    for u, row in enumerate(eval_items):
        s = score_table[u, row]
        order = sorted(range(len(row)), key=lambda j: (-s[j], j == 0))
        pos = order.index(0)
        hits.append(pos < k)
        gains.append(1.0 / np.log2(pos + 2) if pos < k else 0.0)
    return np.mean(hits), np.mean(gains)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_hit_rate_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    num_users, num_items = 40, 300
    eval_items = np.stack([rng.choice(num_items, 100, replace=False) for _ in range(num_users)])
    score_table = rng.integers(0, 40, size=(num_users, num_items)).astype(np.float32)  # ties
    calls = []

    def score(u, i):
        calls.append(len(u))
        return score_table[u, i]

    for k in (1, 10, 50):
        hr, ndcg = ml.evaluate(score, Candidates(eval_items), k=k)
        ref_hr, ref_ndcg = brute_force(score_table, eval_items, k)
        assert hr == pytest.approx(ref_hr, abs=1e-12)
        assert ndcg == pytest.approx(ref_ndcg, abs=1e-12)
    assert calls == [4000] * 3  # one call per evaluation
    calls.clear()
    assert ml.evaluate(score, Candidates(eval_items), batch_size=999) == ml.evaluate(
        score, Candidates(eval_items))
    assert calls[:5] == [999, 999, 999, 999, 4]


def test_hit_rate_edge_cases():
    eval_items = np.tile(np.arange(100), (3, 1))
    assert ml.evaluate(lambda u, i: np.zeros(len(u)), Candidates(eval_items)) == (0.0, 0.0)
    assert ml.evaluate(lambda u, i: -i.astype(float), Candidates(eval_items)) == (1.0, 1.0)
    # the test item ranked exactly 10th (rank 9) is a hit, 11th is not
    assert ml.evaluate(lambda u, i: np.where(i == 0, 90.5, i), Candidates(eval_items)) == (
        1.0, pytest.approx(1 / np.log2(11)))
    assert ml.evaluate(lambda u, i: np.where(i == 0, 89.5, i), Candidates(eval_items))[0] == 0.0
    with pytest.raises(ValueError, match="non-finite"):
        ml.evaluate(lambda u, i: np.full(len(u), np.nan), Candidates(eval_items))
    with pytest.raises(ValueError, match="returned 1 scores for 300 pairs"):
        ml.evaluate(lambda u, i: np.zeros(1), Candidates(eval_items))


def test_evaluate_keras_model(small_synthetic):
    from deepreduce_bench import models

    data = ml.leave_one_out(small_synthetic, seed=0)
    model = models.neumf(data.num_users, data.num_items)
    direct = ml.evaluate(model, data)
    wrapped = ml.evaluate(lambda u, i: model([u, i], training=False).numpy(), data)
    assert direct == wrapped
    assert 0.0 <= direct[0] <= 1.0


def test_neumf_learns_synthetic():
    """A few hundred Adam steps beat random ranking (HR@10 = 0.1) clearly."""
    import keras
    import tensorflow as tf

    from deepreduce_bench import models

    keras.utils.set_random_seed(0)
    inter = ml.synthetic_interactions(num_users=300, num_items=400, mean_per_user=40, seed=1)
    data = ml.leave_one_out(inter, seed=1)
    model = models.neumf(data.num_users, data.num_items)
    optimizer = keras.optimizers.Adam(3e-3)

    @tf.function
    def step(u, i, y):
        with tf.GradientTape() as tape:
            logits = tf.reshape(model([u, i], training=True), [-1])
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(y, logits))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                      model.trainable_variables))
        return loss

    hr_before, _ = ml.evaluate(model, data)
    rng = np.random.default_rng(0)
    users, items, labels = data.train
    steps = 0
    while steps < 400:
        if steps:
            users, items, labels = ml.sample_training_examples(data, 4, rng)
        perm = rng.permutation(users.size)
        for s in range(0, users.size - 255, 256):
            b = perm[s:s + 256]
            step(users[b], items[b], labels[b])
            steps += 1
            if steps == 400:
                break
    hr, ndcg = ml.evaluate(model, data)
    assert hr_before < 0.2
    assert hr > 0.3 and ndcg > 0.12, (hr, ndcg)
