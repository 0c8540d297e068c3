"""The payload container and the permutation codec (deepreduce_tf.ops.payload)
against the reference in tests/payload_reference.py: exact bytes, CRC32C
against a bitwise implementation, round trips, every error path with its
message, adversarial payloads (every truncation, extension and single bit
flip of a small payload must raise InvalidArgumentError), static shapes in
graph mode."""
import numpy as np
import pytest
import tensorflow as tf

import payload_reference as ref
from deepreduce_tf.ops import _loader
from deepreduce_tf.ops import payload as P

MAX_META = (1 << 63) - 1
INVALID = tf.errors.InvalidArgumentError


def u8(data):
    return tf.constant(np.frombuffer(bytes(data), dtype=np.uint8))


def random_bytes(rng, n):
    return rng.integers(0, 256, n, dtype=np.uint8).tobytes()


def unpack_np(payload, num_sections, num_meta, **kw):
    meta, sections = P.unpack(payload, num_sections, num_meta, **kw)
    return meta.numpy(), [s.numpy().tobytes() for s in sections]


@pytest.fixture
def small():
    """A small payload with two meta fields and two sections (one empty)."""
    return ref.pack([b"\x01\x02\x03", b""], [5, 300])


# --------------------------------------------------------------------------
# CRC32C.


def test_reference_crc_check_value():
    assert ref.crc32c(b"123456789") == 0xE3069283
    assert ref.crc32c(b"") == 0


@pytest.mark.parametrize("size", [0, 1, 7, 8, 9, 63, 64, 65, 1000])
def test_python_crc32c_matches_bitwise_reference(rng, size):
    data = random_bytes(rng, size)
    assert P.crc32c(data) == ref.crc32c(data)
    assert P.crc32c(np.frombuffer(data, np.uint8)) == ref.crc32c(data)
    assert P.crc32c(u8(data)) == ref.crc32c(data)


@pytest.mark.parametrize("size", [0, 1, 15, 16, 17, 200, 4096 + 3])
def test_kernel_crc_matches_bitwise_reference(rng, size):
    """The kernel's trailer (absl's CRC32C) equals the bitwise CRC of the body,
    across the sizes where hardware implementations switch strategy."""
    data = random_bytes(rng, size)
    out = P.pack([u8(data)], []).numpy().tobytes()
    assert int.from_bytes(out[-4:], "little") == ref.crc32c(out[:-4])


def test_crc32c_rejects_other_types():
    with pytest.raises(TypeError):
        P.crc32c("123456789")
    with pytest.raises(TypeError):
        P.crc32c(np.zeros(3, np.int32))


# --------------------------------------------------------------------------
# Round trips and exact bytes.

SECTION_CASES = {
    "none": [],
    "one_empty": [0],
    "one": [17],
    "two_with_empty": [3, 0],
    "three": [1, 128, 5],
    "four_empties": [0, 0, 0, 0],
    "five": [0, 1, 127, 128, 16384],
}
META_CASES = {
    "none": [],
    "zero": [0],
    "varint_edges": [0, 127, 128, 16383, 16384, MAX_META],
    "max": [MAX_META],
}


@pytest.mark.parametrize("sections", SECTION_CASES.values(), ids=SECTION_CASES.keys())
@pytest.mark.parametrize("meta", META_CASES.values(), ids=META_CASES.keys())
def test_roundtrip_and_reference_bytes(rng, run, sections, meta):
    data = [random_bytes(rng, n) for n in sections]
    tensors = [u8(d) for d in data]
    payload = run(lambda *s: P.pack(list(s), meta), *tensors)
    assert payload.dtype == np.uint8
    assert payload.tobytes() == ref.pack(data, meta)
    got_meta, got = run(lambda p: P.unpack(p, len(sections), len(meta)), tf.constant(payload))
    assert got_meta.dtype == np.int64
    assert got_meta.tolist() == meta
    assert [g.tobytes() for g in got] == data


@pytest.mark.parametrize("kind", [1, 2, 255])
def test_kind_is_stored(kind):
    out = P.pack([u8(b"ab")], [1], kind=kind).numpy().tobytes()
    assert out == ref.pack([b"ab"], [1], kind=kind)
    meta, sections = unpack_np(out, 1, 1, kind=kind)
    assert meta.tolist() == [1] and sections == [b"ab"]


def test_meta_as_int64_tensor(run):
    meta = tf.constant([0, 127, 128, MAX_META], tf.int64)
    out = run(lambda m: P.pack([u8(b"x")], m), meta)
    assert out.tobytes() == ref.pack([b"x"], [0, 127, 128, MAX_META])


def test_one_megabyte_sections(rng):
    data = [random_bytes(rng, 1 << 20), b"", random_bytes(rng, (1 << 20) + 1)]
    out = P.pack([u8(d) for d in data], [1 << 20, 7]).numpy().tobytes()
    assert out == ref.pack(data, [1 << 20, 7], crc=P.crc32c)
    meta, got = unpack_np(out, 3, 2)
    assert meta.tolist() == [1 << 20, 7] and got == data
    # One flipped bit deep inside a section is caught by the CRC.
    bad = bytearray(out)
    bad[len(out) // 2] ^= 0x10
    with pytest.raises(INVALID, match="CRC32C mismatch"):
        P.unpack(u8(bad), 3, 2)


def test_expected_fields_that_match(small):
    meta, _ = unpack_np(small, 2, 2, expected={0: 5, "b": 300}, field_names=["a", "b"])
    assert meta.tolist() == [5, 300]


# --------------------------------------------------------------------------
# Graph mode: shapes.


def test_graph_static_shapes():
    @tf.function
    def f(a, b):
        payload = P.pack([a, b], [3, 200])
        meta, sections = P.unpack(payload, 2, 2)
        return payload, meta, sections

    cf = f.get_concrete_function(tf.TensorSpec([5], tf.uint8), tf.TensorSpec([0], tf.uint8))
    payload, meta, sections = cf.structured_outputs
    expected_len = len(ref.pack([b"12345", b""], [3, 200]))
    assert payload.shape.as_list() == [expected_len]
    assert meta.shape.as_list() == [2]
    assert [s.shape.as_list() for s in sections] == [[None], [None]]
    out = f(u8(b"12345"), u8(b""))
    assert out[0].numpy().tobytes() == ref.pack([b"12345", b""], [3, 200])


def test_graph_unknown_lengths():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.uint8),
                                  tf.TensorSpec([None], tf.int64)])
    def f(a, m):
        return P.pack([a], m)

    assert f.get_concrete_function().structured_outputs.shape.as_list() == [None]
    assert f(u8(b"xy"), tf.constant([9], tf.int64)).numpy().tobytes() == ref.pack([b"xy"], [9])


def test_graph_unpack_no_sections():
    @tf.function(input_signature=[tf.TensorSpec([None], tf.uint8)])
    def f(p):
        meta, sections = P.unpack(p, 0, 1)
        assert sections == []
        return meta

    assert f(u8(ref.pack([], [4]))).numpy().tolist() == [4]


def test_graph_perm_static_shapes():
    @tf.function
    def f(perm):
        data = P.perm_encode(perm)
        return data, P.perm_decode(data, 300, out_idx=tf.int32)

    data, out = f.get_concrete_function(tf.TensorSpec([300], tf.int64)).structured_outputs
    assert data.shape.as_list() == [(300 * 9 + 7) // 8]
    assert out.shape.as_list() == [300]


# --------------------------------------------------------------------------
# pack: argument checks.


def test_pack_negative_meta():
    with pytest.raises(INVALID, match=r"meta\[1\] = -3 is negative"):
        P.pack([], [1, -3])
    with pytest.raises(INVALID, match=r"meta\[0\] = -1 is negative"):
        P.pack([], tf.constant([-1], tf.int64))


def test_pack_negative_meta_graph():
    f = tf.function(lambda m: P.pack([], m))
    with pytest.raises(INVALID, match="negative"):
        f(tf.constant([2, -1], tf.int64))


def test_pack_python_argument_errors():
    with pytest.raises(ValueError, match="2\\^63"):
        P.pack([], [1 << 63])
    with pytest.raises(TypeError, match="uint8"):
        P.pack([tf.constant([1], tf.int32)], [])
    with pytest.raises(TypeError, match="list"):
        P.pack(u8(b"abc"), [])
    with pytest.raises(TypeError, match="meta"):
        P.pack([], [1.5])
    with pytest.raises(TypeError, match="meta"):
        P.pack([], tf.constant([1.0]))
    with pytest.raises(ValueError, match="vector"):
        P.pack([tf.zeros([2, 2], tf.uint8)], [])
    for kind in (0, 256, -1, "1", True):
        with pytest.raises(ValueError, match=r"\[1, 255\]"):
            P.pack([], [], kind=kind)


def test_pack_kernel_rejects_non_vectors():
    ops = _loader.load()
    with pytest.raises(INVALID, match=r"sections\[1\] must be a vector"):
        ops.deep_reduce_payload_pack([u8(b"a"), tf.zeros([1, 2], tf.uint8)],
                                     tf.constant([], tf.int64), kind=1)
    with pytest.raises(INVALID, match="meta must be a vector"):
        ops.deep_reduce_payload_pack([], tf.constant(3, tf.int64), kind=1)


# --------------------------------------------------------------------------
# unpack: every error path and its message.


def test_truncated_at_every_length(small):
    for n in range(len(small)):
        with pytest.raises(INVALID, match="truncated|not a deepreduce_tf payload"):
            P.unpack(u8(small[:n]), 2, 2)
    with pytest.raises(INVALID, match=r"truncated.*imply 20 bytes, but only 19 arrived"):
        P.unpack(u8(small[:-1]), 2, 2)
    with pytest.raises(INVALID, match="truncated: too short"):
        P.unpack(u8(small[:5]), 2, 2)
    with pytest.raises(INVALID, match="truncated"):
        P.unpack(u8(b""), 2, 2)


def test_extended(small):
    for extra in (b"\x00", b"\x00" * 3, b"junk" * 10):
        with pytest.raises(INVALID, match=f"has {len(extra)} unexpected trailing bytes"):
            P.unpack(u8(small + extra), 2, 2)
    # Two payloads back to back are not one.
    with pytest.raises(INVALID, match="trailing bytes"):
        P.unpack(u8(small + small), 2, 2)


def test_every_single_bit_flip_is_rejected(small):
    for i in range(8 * len(small)):
        bad = bytearray(small)
        bad[i // 8] ^= 1 << (i % 8)
        with pytest.raises(INVALID):
            P.unpack(u8(bad), 2, 2)


def test_random_garbage_is_rejected(rng):
    for n in (0, 3, 12, 40, 500):
        for _ in range(20):
            junk = random_bytes(rng, n)
            with pytest.raises(INVALID):
                P.unpack(u8(junk), 1, 1)
            junk = b"DRPK\x01\x01" + junk
            with pytest.raises(INVALID):
                P.unpack(u8(junk), 1, 1)


def test_crc_mismatch_message(small):
    bad = bytearray(small)
    bad[-6] ^= 0x01  # inside the first section
    stored = int.from_bytes(small[-4:], "little")
    computed = ref.crc32c(bytes(bad[:-4]))
    with pytest.raises(INVALID, match=(
            rf"CRC32C mismatch \(stored 0x{stored:08x}, computed 0x{computed:08x}\): "
            "the payload was corrupted in transit")):
        P.unpack(u8(bad), 2, 2)
    # A corrupted trailer is a mismatch too.
    bad = bytearray(small)
    bad[-1] ^= 0x80
    with pytest.raises(INVALID, match="CRC32C mismatch"):
        P.unpack(u8(bad), 2, 2)


def test_bit_flip_in_kind_reads_as_corruption_not_foreign(small):
    bad = bytearray(small)
    bad[5] ^= 0x02
    with pytest.raises(INVALID, match="CRC32C mismatch"):
        P.unpack(u8(bad), 2, 2)


def test_not_a_payload():
    with pytest.raises(INVALID, match="not a deepreduce_tf payload"):
        P.unpack(u8(b"PK\x03\x04" + b"\x00" * 20), 0, 0)
    with pytest.raises(INVALID, match="not a deepreduce_tf payload"):
        P.unpack(u8(b"DX"), 0, 0)


def test_version_zero_is_corruption():
    body = bytearray(ref.pack([], []))[:-4]
    body[4] = 0
    with pytest.raises(INVALID, match="version 0 .*corrupted"):
        P.unpack(u8(ref.with_crc(body)), 0, 0)


@pytest.mark.parametrize("version", [2, 255])
def test_newer_version_message(version):
    body = bytearray(ref.pack([b"abc"], [1]))[:-4]
    body[4] = version
    with pytest.raises(INVALID, match=(
            f"payload format version {version} is newer than this build of deepreduce_tf "
            r"reads \(1\); upgrade deepreduce_tf on the receiving side")):
        P.unpack(u8(ref.with_crc(body)), 1, 1)


def test_foreign_kind():
    out = ref.pack([b"abc"], [1], kind=2)
    with pytest.raises(INVALID, match="is of kind 2, expected kind 1: a foreign payload"):
        P.unpack(u8(out), 1, 1)
    with pytest.raises(INVALID, match="is of kind 1, expected kind 7: a foreign payload"):
        P.unpack(u8(ref.pack([], [])), 0, 0, kind=7)


@pytest.mark.parametrize("num_sections,num_meta", [(1, 2), (3, 2), (2, 1), (2, 3), (0, 0)])
def test_foreign_counts(small, num_sections, num_meta):
    with pytest.raises(INVALID, match=(
            f"holds 2 meta fields and 2 sections, expected {num_meta} and {num_sections}: "
            "a foreign payload")):
        P.unpack(u8(small), num_sections, num_meta)


@pytest.mark.parametrize("header,why", [
    (b"\x80\x80", "truncated"),                                     # M runs off the end
    (b"\x80\x00\x00", "not minimally encoded"),                     # M = 0 in 2 bytes
    (b"\x01" + b"\xff" * 9 + b"\x01" + b"\x00", "2\\^63"),          # meta value 2^64-1
    (b"\x01" + b"\x80" * 9 + b"\x01" + b"\x00", "2\\^63"),          # meta value 2^63
    (b"\x01" + b"\x80" * 10 + b"\x00" + b"\x00", "longer than 10"),  # 11-byte varint
    (b"\x7f\x00", "M=127 meta fields, more than"),                  # count beyond the buffer
    (b"\x00\x7f" + b"\x00" * 3, "S=127 sections, more than"),
    (b"\x00\x01\x50", "section 0 alone claims 80 bytes"),
])
def test_malformed_header_varints(header, why):
    payload = ref.with_crc(b"DRPK\x01\x01" + header)
    with pytest.raises(INVALID, match=why):
        P.unpack(u8(payload), 1, 1)


def test_largest_meta_value_parses():
    meta, _ = unpack_np(ref.pack([], [MAX_META]), 0, 1)
    assert meta.tolist() == [MAX_META]


def test_expected_field_mismatch_names_the_field(small):
    names = ["codec", "block_size"]
    with pytest.raises(INVALID, match=(
            "payload field 'block_size' is 300, expected 256: the payload was written by a "
            "differently configured compressor")):
        P.unpack(u8(small), 2, 2, expected={"block_size": 256}, field_names=names)
    with pytest.raises(INVALID, match="payload field 'codec' is 5, expected 4"):
        P.unpack(u8(small), 2, 2, expected={0: 4}, field_names=names)
    with pytest.raises(INVALID, match="payload field '1' is 300, expected 1"):
        P.unpack(u8(small), 2, 2, expected={1: 1})


def test_expected_field_mismatch_graph(small):
    f = tf.function(lambda p: P.unpack(p, 2, 2, expected={"b": 1}, field_names=["a", "b"]))
    with pytest.raises(INVALID, match="payload field 'b' is 300, expected 1"):
        f(u8(small))


def test_unpack_python_argument_errors(small):
    p = u8(small)
    with pytest.raises(ValueError, match="unknown field 'c'; valid choices: a, b"):
        P.unpack(p, 2, 2, expected={"c": 1}, field_names=["a", "b"])
    with pytest.raises(ValueError, match="no field_names"):
        P.unpack(p, 2, 2, expected={"a": 1})
    with pytest.raises(ValueError, match="outside"):
        P.unpack(p, 2, 2, expected={2: 1})
    with pytest.raises(ValueError, match="num_meta=2"):
        P.unpack(p, 2, 2, field_names=["a"])
    with pytest.raises(ValueError, match="duplicates"):
        P.unpack(p, 2, 2, field_names=["a", "a"])
    with pytest.raises(TypeError, match="field_names"):
        P.unpack(p, 2, 2, field_names="ab")
    with pytest.raises(TypeError, match="dict"):
        P.unpack(p, 2, 2, expected=[(0, 1)])
    with pytest.raises(ValueError, match="expected value"):
        P.unpack(p, 2, 2, expected={0: -1})
    with pytest.raises(ValueError, match="num_sections"):
        P.unpack(p, -1, 2)
    with pytest.raises(ValueError, match="num_meta"):
        P.unpack(p, 2, 1.0)
    with pytest.raises(ValueError, match=r"\[1, 255\]"):
        P.unpack(p, 2, 2, kind=0)
    with pytest.raises(TypeError, match="uint8"):
        P.unpack(tf.constant([1, 2], tf.int32), 2, 2)


def test_unpack_kernel_validates_attrs(small):
    ops = _loader.load()
    p = u8(small)
    with pytest.raises(INVALID, match="expected_fields has 1 entries but expected_values has 0"):
        ops.deep_reduce_payload_unpack(p, kind=1, num_meta=2, num_sections=2,
                                       expected_fields=[0], expected_values=[])
    with pytest.raises(INVALID, match=r"expected_fields\[0\] = 2 is not a meta index"):
        ops.deep_reduce_payload_unpack(p, kind=1, num_meta=2, num_sections=2,
                                       expected_fields=[2], expected_values=[1])
    with pytest.raises(INVALID, match="field_names must be empty or name all"):
        ops.deep_reduce_payload_unpack(p, kind=1, num_meta=2, num_sections=2,
                                       field_names=["a"])
    with pytest.raises(INVALID, match="payload must be a vector"):
        ops.deep_reduce_payload_unpack(tf.zeros([2, 20], tf.uint8), kind=1, num_meta=2,
                                       num_sections=2)


# --------------------------------------------------------------------------
# inspect.


def test_inspect_good(small):
    info = P.inspect(small)
    assert info["problems"] == [] and info["crc_ok"]
    assert info["version"] == 1 and info["kind"] == 1
    assert info["meta"] == [5, 300] and info["section_lengths"] == [3, 0]
    assert info["size"] == len(small)
    assert info["crc_stored"] == info["crc_computed"] == ref.crc32c(small[:-4])
    assert P.inspect(u8(small)) == info
    assert P.inspect(np.frombuffer(small, np.uint8)) == info


def test_inspect_never_raises_on_bad_bytes(small, rng):
    bad = bytearray(small)
    bad[-6] ^= 1
    info = P.inspect(bytes(bad))
    assert not info["crc_ok"] and info["problems"] == ["CRC32C mismatch"]
    for n in range(len(small)):
        assert P.inspect(small[:n])["problems"]
    assert P.inspect(small + b"x")["problems"] == ["1 unexpected trailing bytes"]
    assert P.inspect(b"hello")["magic_ok"] is False
    for _ in range(50):
        assert P.inspect(b"DRPK\x01\x01" + random_bytes(rng, 30))["problems"]
    with pytest.raises(TypeError):
        P.inspect([1, 2, 3])


# --------------------------------------------------------------------------
# Permutation codec.

PERM_SIZES = [0, 1, 2, 3, 255, 256, 257, 10000]


@pytest.mark.parametrize("k", PERM_SIZES)
def test_perm_roundtrip(rng, run, index_dtype, k):
    perm = rng.permutation(k).astype(index_dtype.as_numpy_dtype)
    data = run(P.perm_encode, tf.constant(perm, index_dtype, shape=[k]))
    b = ref.perm_bits(k)
    assert len(data) == (k * b + 7) // 8
    assert data.tobytes() == ref.perm_encode(perm)
    out = run(lambda d: P.perm_decode(d, k, out_idx=index_dtype), tf.constant(data))
    assert out.dtype == index_dtype.as_numpy_dtype
    np.testing.assert_array_equal(out, perm)
    np.testing.assert_array_equal(ref.perm_decode(data, k), perm)


@pytest.mark.parametrize("k", [2, 3, 256, 257])
def test_perm_identity_and_reverse(index_dtype, k):
    for perm in (np.arange(k), np.arange(k)[::-1].copy()):
        data = P.perm_encode(tf.constant(perm, index_dtype)).numpy()
        assert data.tobytes() == ref.perm_encode(perm)
        np.testing.assert_array_equal(P.perm_decode(data, k).numpy(), perm)


def test_perm_encode_rejects_non_permutations(index_dtype):
    with pytest.raises(INVALID, match=r"perm\[2\] = 3 is outside \[0, K=3\)"):
        P.perm_encode(tf.constant([0, 1, 3], index_dtype))
    with pytest.raises(INVALID, match=r"perm\[0\] = -1 is outside"):
        P.perm_encode(tf.constant([-1, 0], index_dtype))
    with pytest.raises(INVALID, match=r"perm\[3\] = 1 repeats perm\[1\]"):
        P.perm_encode(tf.constant([2, 1, 0, 1], index_dtype))
    with pytest.raises(INVALID, match="perm must be a vector"):
        _loader.load().deep_reduce_perm_encode(tf.constant([[0]], index_dtype))
    with pytest.raises(TypeError, match="int32 or int64"):
        P.perm_encode(tf.constant([0.0, 1.0]))


def test_perm_decode_wrong_lengths(rng, index_dtype):
    perm = rng.permutation(257)
    data = ref.perm_encode(perm)
    for bad in (data[:-1], data + b"\x00", b"", data[:10]):
        with pytest.raises(INVALID, match="not a valid permutation: data holds"):
            P.perm_decode(u8(bad), 257, out_idx=index_dtype)
    for k in (256, 258, 0, 1):
        with pytest.raises(INVALID, match="not a valid permutation"):
            P.perm_decode(u8(data), k, out_idx=index_dtype)
    # k <= 1 packs into zero bytes.
    assert P.perm_decode(u8(b""), 1).numpy().tolist() == [0]
    assert P.perm_decode(u8(b""), 0).numpy().tolist() == []


def test_perm_decode_rejects_bad_entries(index_dtype):
    # k = 3: 2 bits per entry, 1 byte; entries 0, 1, 3 -> 3 is out of range.
    with pytest.raises(INVALID, match="entry 2 is 3, outside"):
        P.perm_decode(u8(bytes([0b110100])), 3, out_idx=index_dtype)
    # entries 2, 0, 2: a repeat.
    with pytest.raises(INVALID, match="entry 2 = 2 repeats entry 0"):
        P.perm_decode(u8(bytes([0b100010])), 3, out_idx=index_dtype)
    # a valid permutation with a padding bit set.
    good = ref.perm_encode([2, 0, 1])
    with pytest.raises(INVALID, match="padding bits"):
        P.perm_decode(u8(bytes([good[0] | 0x40])), 3, out_idx=index_dtype)


def test_perm_decode_every_bit_flip_is_rejected(rng):
    """Flipping one bit of a permutation's packing makes two entries equal or
    one out of range: always detected."""
    perm = rng.permutation(37)
    data = ref.perm_encode(perm)
    for i in range(8 * len(data)):
        bad = bytearray(data)
        bad[i // 8] ^= 1 << (i % 8)
        with pytest.raises(INVALID, match="not a valid permutation"):
            P.perm_decode(u8(bad), 37)


def test_perm_decode_k_checks():
    with pytest.raises(INVALID, match="k must be >= 0, got -1"):
        P.perm_decode(u8(b""), -1)
    with pytest.raises(INVALID, match="out_idx=int32"):
        P.perm_decode(u8(b""), (1 << 31) + 1, out_idx=tf.int32)
    # Huge k against a small buffer: rejected before anything is allocated.
    with pytest.raises(INVALID, match="not a valid permutation"):
        P.perm_decode(u8(b"\x00" * 8), (1 << 62))
    with pytest.raises(INVALID, match="k must be a scalar"):
        _loader.load().deep_reduce_perm_decode(u8(b""), tf.constant([1], tf.int64))
    with pytest.raises(ValueError, match="out_idx"):
        P.perm_decode(u8(b""), 0, out_idx=tf.float32)
    with pytest.raises(TypeError, match="k must be an integer"):
        P.perm_decode(u8(b""), 1.0)


def test_perm_decode_negative_k_graph():
    f = tf.function(lambda d: P.perm_decode(d, -2))
    with pytest.raises(INVALID, match="k must be >= 0"):
        f(u8(b""))
