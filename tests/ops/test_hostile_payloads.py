"""Forged payloads with a valid CRC (the CRC is not authentication) that claim
far more values than the receiver's tensor holds are refused by the bound the
receiver already knows (its n), before anything of their claimed size is
allocated: the regression cases of issue 13 (a 56-byte dexp payload
declaring K = 2^28 used to decode to 1 GiB)."""
import struct

import numpy as np
import pytest
import tensorflow as tf

import deepreduce_tf as dr
import payload_reference as pref
from deepreduce_tf.ops import value as value_ops

IAE = tf.errors.InvalidArgumentError
HUGE = 2 ** 28 - 1
N = 4096


def _varint(data, pos):
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def unpack(payload):
    """(kind, meta, sections) of a container (written from the format
    description: magic, version, kind, varint counts, sections, CRC32C)."""
    data = bytes(payload)
    assert data[:4] == pref.MAGIC and data[4] == pref.VERSION
    kind, pos = data[5], 6
    count, pos = _varint(data, pos)
    meta = []
    for _ in range(count):
        v, pos = _varint(data, pos)
        meta.append(v)
    count, pos = _varint(data, pos)
    lengths = []
    for _ in range(count):
        v, pos = _varint(data, pos)
        lengths.append(v)
    sections = []
    for length in lengths:
        sections.append(data[pos:pos + length])
        pos += length
    assert pos == len(data) - 4
    return kind, meta, sections


def forge(payload, meta_changes=None, value_k=None):
    """The payload with header fields replaced (and, if value_k is given, the
    K of the value section's own 16-byte header), with a correct CRC."""
    kind, meta, sections = unpack(payload)
    for field, v in (meta_changes or {}).items():
        meta[dr.compressor.META_FIELDS.index(field)] = v
    if value_k is not None:
        v = bytearray(sections[1])
        v[8:16] = struct.pack("<Q", value_k)
        sections[1] = bytes(v)
    return np.frombuffer(pref.pack(sections, meta, kind=kind), np.uint8)


def _compressed(index, value, rng):
    c = dr.from_params({"compressor": "topk", "compress_ratio": 0.05, "memory": "none",
                        "deepreduce": "both", "index": index, "value": value})
    g = tf.constant(rng.normal(size=N).astype(np.float32))
    payload, ctx = c.compress(g, name="w")
    return c, g, payload.numpy(), ctx


@pytest.mark.parametrize("index", ["golomb", "rle"])
@pytest.mark.parametrize("value", ["polyfit", "dexp"])
def test_forged_counts_are_refused_by_the_receivers_bound(rng, index, value):
    c, _, payload, ctx = _compressed(index, value, rng)
    c.decompress(tf.constant(payload), ctx)  # the genuine one decodes
    k = unpack(payload)[1][dr.compressor.META_FIELDS.index("count")]
    cases = [
        # header count and the value section both claim 2^28 - 1 values
        forge(payload, {"count": HUGE, "k": HUGE}, value_k=HUGE),
        # only the value section lies (the header still says K)
        forge(payload, value_k=HUGE),
        # only the header lies
        forge(payload, {"count": HUGE}),
        # a count between K and n: within the bound, still inconsistent
        forge(payload, {"count": k + 1}, value_k=k + 1),
    ]
    for forged in cases:
        with pytest.raises(IAE):
            c.decompress(tf.constant(forged), ctx)


@pytest.mark.parametrize("codec", value_ops.SORTING_CODECS)
def test_raw_decoder_needs_and_applies_a_bound(codec):
    v = np.linspace(-1, 1, 50).astype(np.float32)
    payload = value_ops.encode(codec, v).payload.numpy()
    big = payload.copy()
    big[8:16] = np.frombuffer(struct.pack("<Q", 2 ** 28), np.uint8)
    with pytest.raises(IAE, match="more than max_values = 50|K = 268435456"):
        value_ops.decode(codec, big, max_values=50)
    with pytest.raises(ValueError, match="decode needs max_values"):
        value_ops.decode(codec, payload)
    np.testing.assert_array_equal(
        np.sort(value_ops.decode(codec, payload, max_values=50).numpy()).shape, (50,))


def test_dense_payload_fields_must_be_consistent(rng):
    """A small tensor travels dense: k = count = n, aux = 0, no index and no
    permutation bytes; anything else is refused even with a valid CRC."""
    c = dr.from_params({"compressor": "topk", "compress_ratio": 0.05, "memory": "none",
                        "deepreduce": "both", "index": "golomb", "value": "qsgd"})
    g = tf.constant(rng.normal(size=100).astype(np.float32))
    payload, ctx = c.compress(g, name="b")
    payload = payload.numpy()
    np.testing.assert_array_equal(c.decompress(tf.constant(payload), ctx).numpy(), g.numpy())
    _, meta, sections = unpack(payload)
    assert meta[0] == dr.compressor.MODE_DENSE and meta[6] == meta[7] == 100
    for changes in ({"k": HUGE}, {"count": HUGE}, {"k": 3}, {"aux0": 5}, {"aux1": 7}):
        with pytest.raises(IAE, match="dense payload"):
            c.decompress(tf.constant(forge(payload, changes)), ctx)
    kind, meta, sections = unpack(payload)
    for i in (0, 2):  # junk in the unused index / permutation section
        junk = list(sections)
        junk[i] = b"\x01\x02"
        forged = np.frombuffer(pref.pack(junk, meta, kind=kind), np.uint8)
        with pytest.raises(IAE, match="sections must be empty"):
            c.decompress(tf.constant(forged), ctx)


@pytest.mark.parametrize("index, value, perm_used", [
    ("golomb", "qsgd", False), ("rle", "fp16", False), ("golomb", "polyfit", True)])
def test_sparse_payload_unused_fields_are_checked(rng, index, value, perm_used):
    c, _, payload, ctx = _compressed(index, value, rng)
    with pytest.raises(IAE, match="aux0/aux1 must be 0"):
        c.decompress(tf.constant(forge(payload, {"aux0": 1 << 20, "aux1": 9})), ctx)
    if not perm_used:
        kind, meta, sections = unpack(payload)
        sections[2] = b"\x00" * 8
        forged = np.frombuffer(pref.pack(sections, meta, kind=kind), np.uint8)
        with pytest.raises(IAE, match="permutation section must be empty"):
            c.decompress(tf.constant(forged), ctx)
