"""Numpy reference of the compressor's decoded tensor (tests only).

Independent of deepreduce_tf's Python layer: positions from the sparsifier and
Bloom references, values from the value-codec references, and the alignment
rule of REFERENCE 1.1/1.3 written out directly: the receiver's decoded tensor
holds decode(encode(x[P]))[i] at position P[perm[i]], where P are the
positions the receiver decodes and perm the value codec's order.
"""
import ml_dtypes
import numpy as np

import bloom_reference
import sparsify_reference
import value_reference


def positions(x, k, index, fpr=0.001, policy="conflict_sets", seed=0, policy_seed=0):
    """The positions the receiver decodes (sorted int64)."""
    idx, _ = sparsify_reference.top_k(x, k)
    if index != "bloom":
        return idx
    n = x.size
    m, h = bloom_reference.filter_size(k, fpr)
    fb = bloom_reference.insert(idx, m, h, seed)
    pos = bloom_reference.query(fb, n, m, h, seed)
    return np.asarray(bloom_reference.select(fb, pos, k, policy, m, h, seed, policy_seed),
                      np.int64)


def value_roundtrip(vals, codec, seed=0, levels=127, bucket=512, degree=5,
                    segmentation="greedy"):
    """(perm, decoded): decoded[i] is the value for input position perm[i].

    Returns None for codecs without a numpy reference here (dexp)."""
    v = np.asarray(vals, np.float32)
    ident = np.arange(v.size)
    if codec in ("raw", "deflate"):
        return ident, v.copy()
    if codec == "fp16":
        return ident, v.astype(np.float16).astype(np.float32)
    if codec == "bf16":
        return ident, v.astype(ml_dtypes.bfloat16).astype(np.float32)
    if codec == "qsgd":
        payload = value_reference.qsgd_encode_reference(v, levels, bucket, seed)
        return ident, value_reference.qsgd_decode_reference(payload)
    if codec == "ternary":
        payload = value_reference.ternary_encode_reference(v, bucket)
        return ident, value_reference.ternary_decode_reference(payload, v.size, bucket)
    if codec == "polyfit":
        perm, _, _, dec = value_reference.polyfit_reference(v, degree, segmentation)
        return perm, dec
    return None


def decoded_tensor(x, pos, perm, dec):
    out = np.zeros(x.size, np.float32)
    out[pos[perm]] = dec
    return out
