"""benchmarks/sparse_allreduce_compare.py: the region-partitioned family's
result (Ok-Topk's global top-k of the summed local selections), emulated
through the all-gather, against a numpy reference of its sum and residuals."""
import os
import sys

import numpy as np
import tensorflow as tf

import deepreduce_tf as dr
from deepreduce_tf import communicators

import sparsify_reference as sref

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import sparse_allreduce_compare as compare  # noqa: E402  pylint: disable=wrong-import-position


def test_global_topk_matches_the_numpy_reference(rng, monkeypatch):
    # Registered for this test only (the registry is restored afterwards).
    monkeypatch.setitem(communicators.COMMUNICATORS, compare.OkTopkEmulated.name,
                        compare.OkTopkEmulated)
    n, k = 1000, 50
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    params = {"compressor": "topk", "compress_ratio": k / n, "communicator": "oktopk_emulated",
              "min_size": 1, "deepreduce": "index", "index": "golomb"}
    exchanges = [dr.from_params(params) for _ in range(2)]
    out, _ = communicators.exchange_locally(exchanges, [tf.constant(x) for x in xs], name="v")
    total = np.zeros(n, np.float32)
    local = []
    for x in xs:  # every worker's top-k, its values in fp16, summed
        idx, _ = sref.top_k(x, k)
        local.append(idx)
        total[idx] += x[idx].astype(np.float16).astype(np.float32)
    kept, _ = sref.top_k(total, k)
    want = np.zeros(n, np.float32)
    want[kept] = total[kept]
    np.testing.assert_array_equal(out[0].numpy(), want)
    for w, (ex, x) in enumerate(zip(exchanges, xs)):
        mine = np.intersect1d(local[w], kept)  # selected AND kept: the rest waits
        residual = x.copy()
        residual[mine] = x[mine] - x[mine].astype(np.float16).astype(np.float32)
        np.testing.assert_array_equal(ex.memory.residuals["v"].numpy(), residual)
        assert 0 < mine.size < k
