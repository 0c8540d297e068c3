"""The decoder fuzz job's corpus (tests/fuzz_corpus/, kernels/fuzz/
decoders_fuzzer.cpp) through the public ops: seeds written by the real
encoders and regression inputs (issue 13's huge-K payloads and dexp K bit
flips; the fuzzer's findings). Each input is read as the harness reads it
(byte 0: target; then the receiver's parameters; then the payload) and must
be refused with a clear error, or decode within the bound the receiver
knows and satisfy the format's invariants, checked against the Python
reference codecs. No clang needed: build_deps/fuzz.sh runs the fuzzer."""
import glob
import os
import re
import struct

import numpy as np
import pytest
import tensorflow as tf

import bloom_reference as bref
import index_reference as iref
import payload_reference as pref
from deepreduce_tf.ops import bloom as bloom_ops
from deepreduce_tf.ops import codec_table
from deepreduce_tf.ops import index as index_ops
from deepreduce_tf.ops import payload as payload_ops
from deepreduce_tf.ops import value as value_ops

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(TESTS_DIR, "fuzz_corpus")
INC = os.path.join(os.path.dirname(TESTS_DIR), "kernels", "fuzz", "real_containers.inc")
# The harness's targets in the order of its enum (byte 0 of an input): from
# the codec table, as the harness's are.
TARGETS = codec_table.fuzz_targets()
FILES = sorted(glob.glob(os.path.join(CORPUS, "*", "*.bin")))
REFUSED = (tf.errors.InvalidArgumentError, ValueError)
PER_BYTE = 8  # outputs per payload byte the self-sized formats can reach
# The fuzzer's findings (fixed): each must now be refused, with this message.
FINDINGS = {
    "golomb/regress_empty_set_with_stream.bin": r"holds no indices \(K=0\) but claims a stream",
    "rle/regress_241_0_is_240.bin": r"gap \d+ of K=\d+ is truncated or not in shortest form",
}


def _id(path):
    return os.path.relpath(path, CORPUS)


def real_containers():
    """(kind, num_meta, num_sections, bytes) of the harness's table."""
    text = open(INC).read()
    arrays = {name: bytes(int(b) for b in body.split(","))
              for name, body in re.findall(r"const uint8_t (\w+)\[\] = \{([^}]*)\};", text)}
    return [(int(k), int(m), int(s), arrays[name])
            for k, m, s, name, _ in re.findall(r"\{(\d+), (\d+), (\d+), (\w+), (\d+)\}", text)]


def decode(target, params, payload):
    """The op's result for one input (raises on refusal) and the bound on
    its size that was known before decoding."""
    data = np.frombuffer(payload, np.uint8)
    if target == "container":
        kind, num_meta, num_sections = struct.unpack_from("<BBB", params)
        meta, sections = payload_ops.unpack(data, num_sections, num_meta, kind=kind)
        meta = [int(v) for v in meta.numpy()]
        sections = [s.numpy().tobytes() for s in sections]
        # Canonical: the reference packer writes the same bytes.
        assert pref.pack(sections, meta, kind=kind) == payload
        return sections, len(payload)
    if target == "perm":
        k, flags = struct.unpack_from("<IB", params)
        out = payload_ops.perm_decode(data, k, tf.int32 if flags & 1 else tf.int64).numpy()
        np.testing.assert_array_equal(np.sort(out), np.arange(k))
        assert pref.perm_encode(out) == payload
        return out, PER_BYTE * len(payload) + 1
    if target in index_ops.CODECS:
        out_idx = tf.int32 if params[0] & 1 else tf.int64
        out = index_ops.decode(target, data, out_idx=out_idx).numpy().astype(np.int64)
        _, _, n, k = index_ops.peek_header(data)
        assert len(out) == k and (k == 0 or (out[0] >= 0 and out[-1] < n))
        assert np.all(np.diff(out) > 0)
        if target != "golomb":  # golomb's block size and Rice parameters are free
            assert iref.encode(target, out, n) == payload
        return out, PER_BYTE * len(payload)
    if target == "bloom":
        h, m, n, seed = struct.unpack_from("<BIHI", params)
        out = bloom_ops.query((tf.constant(data), m, h), n, seed=seed).numpy()
        np.testing.assert_array_equal(out, bref.query(data, n, m, h, seed))
        return out, n
    if target in ("polyfit", "dexp"):
        (max_values,) = struct.unpack_from("<H", params)
        out = value_ops.decode(target, data, max_values=max_values).numpy()
        assert np.all(np.isfinite(out))
        return out, max_values
    out = value_ops.decode(target, data).numpy()
    if target == "qsgd":
        assert np.all(np.isfinite(out))
    if target == "deflate":
        return out, (1032 * len(payload) + 64) // 4
    return out, PER_BYTE * len(payload)


PARAM_BYTES = {"container": 3, "perm": 5, **{codec: 1 for codec in index_ops.CODECS},
               "bloom": 11, "polyfit": 2, "dexp": 2}


def test_the_corpus_covers_every_target_and_the_regressions():
    seen = {TARGETS[open(f, "rb").read(1)[0] % len(TARGETS)] for f in FILES}
    assert seen == set(TARGETS)
    # Byte 0 names the input's own directory (a codec added to the table
    # renumbers the later targets: make_corpus.py rewrites byte 0).
    for f in FILES:
        assert TARGETS[open(f, "rb").read(1)[0] % len(TARGETS)] == \
            os.path.basename(os.path.dirname(f)), _id(f)
    names = {_id(f) for f in FILES}
    assert {"dexp/regress_k_2p28.bin", "polyfit/regress_k_2p28.bin"} <= names
    assert sum(n.startswith("dexp/regress_k_bitflip") for n in names) == 64
    assert sum(os.path.getsize(f) for f in FILES) < 300_000


@pytest.mark.parametrize("path", [f for f in FILES if "/container_edit/" not in f], ids=_id)
def test_every_input_is_refused_or_decodes_within_its_bound(path):
    raw = open(path, "rb").read()
    target = TARGETS[raw[0] % len(TARGETS)]
    split = 1 + PARAM_BYTES.get(target, 0)
    if len(raw) < split:
        return  # the harness skips inputs too short for their parameters
    try:
        out, bound = decode(target, raw[1:split], raw[split:])
    except REFUSED as e:
        assert str(e), "a refusal must say what was wrong"
        assert not os.path.basename(path).startswith("seed_"), f"a real payload was refused: {e}"
        return
    assert len(out) <= bound


@pytest.mark.parametrize("name", sorted(FINDINGS))
def test_fuzzer_findings_are_refused(name):
    raw = open(os.path.join(CORPUS, name), "rb").read()
    target = TARGETS[raw[0] % len(TARGETS)]
    split = 1 + PARAM_BYTES.get(target, 0)
    with pytest.raises(tf.errors.InvalidArgumentError, match=FINDINGS[name]):
        decode(target, raw[1:split], raw[split:])


def test_issue_13_inputs_are_refused_before_allocating():
    for name in ("dexp/regress_k_2p28.bin", "polyfit/regress_k_2p28.bin"):
        raw = open(os.path.join(CORPUS, name), "rb").read()
        with pytest.raises(tf.errors.InvalidArgumentError, match="more than max_values = 4096"):
            decode(name.split("/")[0], raw[1:3], raw[3:])


@pytest.mark.parametrize("path", [f for f in FILES if "/container_edit/" in f], ids=_id)
def test_edited_real_containers_with_their_crc_are_refused(path):
    real = real_containers()
    raw = open(path, "rb").read()
    kind, num_meta, num_sections, original = real[raw[1] % len(real)]
    # Unedited, the real container is accepted and canonical.
    decode("container", bytes([kind, num_meta, num_sections]), original)
    edited = bytearray(original)
    edits = raw[2:]
    for i in range(0, len(edits) - 2, 3):
        offset, mask = struct.unpack_from("<HB", edits, i)
        edited[offset % (len(original) - 4)] ^= mask  # the CRC stays the original's
    assert bytes(edited) != original
    with pytest.raises(tf.errors.InvalidArgumentError):
        payload_ops.unpack(np.frombuffer(bytes(edited), np.uint8), num_sections, num_meta,
                           kind=kind)
