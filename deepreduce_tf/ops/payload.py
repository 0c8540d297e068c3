"""The self-checking payload container and the bit-packed permutation.

A compressor's output for one tensor (or a batch of them) is packed into ONE
flat uint8 tensor that says what it is and whether it arrived intact:

    'DRPK'  version (u8)  kind (u8)
    varint M, M meta varints        small integers: shapes, codec choices ...
    varint S, S length varints      the byte length of every section
    the S sections                  the codecs' own payloads, concatenated
    CRC32C of all the above (u32 little-endian)

Varints are canonical unsigned LEB128 (values < 2^63); the exact format is
specified in kernels/payload/payload_format.h. unpack() checks, in this order:
the magic, the version, the header's structure, the total length
("truncated" / "trailing bytes"), the CRC32C (corruption in transit), then
that the payload is of the expected kind and layout (else it is a "foreign"
payload) and finally the caller's expected meta values (else it was written
by a differently configured compressor). The checksum comes before the kind
and layout checks so that a bit flip in those header bytes is reported as
corruption rather than as a foreign payload.

The permutation codec stores a permutation of 0..K-1 in ceil(log2 K) bits per
entry, LSB-first, ceil(K * ceil(log2 K) / 8) bytes; K itself is not stored
(put it in the container's meta).

These are host-side ops on small byte buffers: they have CPU kernels only
(TensorFlow places them on the CPU and copies their inputs there).
"""
import numpy as np
import tensorflow as tf

from deepreduce_tf.ops import _loader

MAGIC = b"DRPK"
FORMAT_VERSION = 1
KIND_TENSOR = 1
KIND_BATCH = 2

_MAX_META = (1 << 63) - 1
_FIXED_BYTES = 6
_CRC_BYTES = 4


def _invalid(message):
    return tf.errors.InvalidArgumentError(None, None, message)


def _is_int(x):
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def _check_kind(kind):
    if not _is_int(kind) or not 1 <= int(kind) <= 255:
        raise ValueError(f"kind must be an integer in [1, 255] (KIND_TENSOR={KIND_TENSOR}, "
                         f"KIND_BATCH={KIND_BATCH}), got {kind!r}")
    return int(kind)


def _check_count(value, what):
    if not _is_int(value) or int(value) < 0:
        raise ValueError(f"{what} must be a non-negative integer, got {value!r}")
    return int(value)


def _uint8_vector(x, what):
    if isinstance(x, (bytes, bytearray, memoryview)):
        x = np.frombuffer(bytes(x), dtype=np.uint8)
    t = tf.convert_to_tensor(x)
    if t.dtype != tf.uint8:
        raise TypeError(f"{what} must be a uint8 tensor, got {t.dtype.name}; convert "
                        "other data with tf.io.decode_raw / tf.bitcast first")
    if t.shape.rank is not None and t.shape.rank != 1:
        raise ValueError(f"{what} must be a vector, got shape {t.shape}")
    return t


def pack(sections, meta, kind=KIND_TENSOR, name=None):
    """Packs byte sections and integer meta fields into one checked payload.

    Args:
      sections: a list (or tuple) of uint8 vectors (tensors, numpy arrays or
        Python bytes), possibly empty, each possibly of length 0.
      meta: a list of Python ints in [0, 2^63), or an int64 vector (possibly
        empty).
      kind: what the payload holds, an int in [1, 255]: KIND_TENSOR (1, one
        tensor) or KIND_BATCH (2, a batch of payloads) or a caller's own code.
      name: optional op name.

    Returns:
      uint8 vector, the payload. Its length is static in graph mode when every
      section's length is static and meta is a constant.

    Raises:
      TypeError: sections is not a list/tuple, or a section is not uint8, or
        meta is neither a list of ints nor an integer tensor.
      ValueError: a section is not a vector, a meta int is >= 2^63, or kind
        is not in [1, 255].
      InvalidArgumentError: a negative meta value (also at run time).
    """
    kind = _check_kind(kind)
    if not isinstance(sections, (list, tuple)):
        raise TypeError(f"sections must be a list of uint8 vectors, got "
                        f"{type(sections).__name__}")
    sections = [_uint8_vector(s, f"sections[{i}]") for i, s in enumerate(sections)]
    if isinstance(meta, (list, tuple)):
        for i, v in enumerate(meta):
            if not _is_int(v):
                raise TypeError(f"meta[{i}] must be a Python int, got {type(v).__name__}")
            if int(v) > _MAX_META:
                raise ValueError(f"meta[{i}] = {int(v)} does not fit the format: meta "
                                 "values must lie in [0, 2^63)")
            if int(v) < 0:
                raise _invalid(f"meta[{i}] = {int(v)} is negative; meta values must lie "
                               "in [0, 2^63)")
        meta = tf.constant([int(v) for v in meta], dtype=tf.int64, shape=[len(meta)])
    else:
        meta = tf.convert_to_tensor(meta)
        if not meta.dtype.is_integer:
            raise TypeError(f"meta must be a list of ints or an integer vector, got "
                            f"{meta.dtype.name}")
        if meta.shape.rank is not None and meta.shape.rank != 1:
            raise ValueError(f"meta must be a vector, got shape {meta.shape}")
        meta = tf.cast(meta, tf.int64)
    return _loader.load().deep_reduce_payload_pack(sections, meta, kind=kind, name=name)


def _expected_attrs(expected, field_names, num_meta):
    if field_names is not None:
        if isinstance(field_names, str) or not all(isinstance(f, str) for f in field_names):
            raise TypeError(f"field_names must be a list of str, got {field_names!r}")
        field_names = list(field_names)
        if len(field_names) != num_meta:
            raise ValueError(f"field_names names {len(field_names)} fields but "
                             f"num_meta={num_meta}; name every meta field or pass None")
        if len(set(field_names)) != len(field_names):
            raise ValueError(f"field_names has duplicates: {field_names}")
    if expected is None:
        return [], [], field_names or []
    if not isinstance(expected, dict):
        raise TypeError(f"expected must be a dict {{field index or name: int}}, got "
                        f"{type(expected).__name__}")
    fields, values = [], []
    for key, value in expected.items():
        if isinstance(key, str):
            if field_names is None:
                raise ValueError(f"expected names field {key!r} but no field_names were "
                                 "given; pass field_names or use field indices")
            if key not in field_names:
                raise ValueError(f"expected names unknown field {key!r}; valid choices: "
                                 f"{', '.join(field_names)}")
            index = field_names.index(key)
        elif _is_int(key):
            index = int(key)
            if not 0 <= index < num_meta:
                raise ValueError(f"expected field index {index} is outside [0, "
                                 f"num_meta={num_meta})")
        else:
            raise TypeError(f"expected keys must be field indices or names, got {key!r}")
        if not _is_int(value) or not 0 <= int(value) <= _MAX_META:
            raise ValueError(f"expected value of field {key!r} must be an int in [0, "
                             f"2^63), got {value!r}")
        fields.append(index)
        values.append(int(value))
    return fields, values, field_names or []


def unpack(payload, num_sections, num_meta, kind=KIND_TENSOR, expected=None,
           field_names=None, name=None):
    """Checks a payload written by pack() and splits it again.

    Args:
      payload: uint8 vector (or Python bytes).
      num_sections: the number of sections the payload must hold.
      num_meta: the number of meta fields the payload must hold.
      kind: the kind the payload must be of (see pack()).
      expected: optional dict {field index or name: int} of meta fields whose
        values must match, e.g. a codec id or a block size the receiver was
        configured with. Names are resolved through field_names.
      field_names: optional list of num_meta names, one per meta field; used
        to resolve `expected` and in error messages.
      name: optional op name.

    Returns:
      (meta, sections): meta an int64 tensor of shape [num_meta]; sections a
      Python list of num_sections uint8 vectors (shape [None] in graph mode).

    Raises:
      TypeError / ValueError: bad arguments (counts, kind, expected,
        field_names), or payload not uint8 / not a vector.
      InvalidArgumentError: the payload is truncated, extended, corrupted
        (CRC32C mismatch), of a newer format version, foreign (another kind or
        layout), or an expected field differs; the message says which.
    """
    num_sections = _check_count(num_sections, "num_sections")
    num_meta = _check_count(num_meta, "num_meta")
    kind = _check_kind(kind)
    fields, values, names = _expected_attrs(expected, field_names, num_meta)
    payload = _uint8_vector(payload, "payload")
    meta, sections = _loader.load().deep_reduce_payload_unpack(
        payload, kind=kind, num_meta=num_meta, num_sections=num_sections,
        expected_fields=fields, expected_values=values, field_names=names, name=name)
    return meta, list(sections)


def perm_encode(perm, name=None):
    """Packs a permutation of 0..K-1 into ceil(K * ceil(log2 K) / 8) bytes.

    Args:
      perm: int32/int64 vector of length K holding every value of 0..K-1
        exactly once.
      name: optional op name.

    Returns:
      uint8 vector (static length in graph mode when K is static).

    Raises:
      TypeError: perm is not int32/int64.
      InvalidArgumentError: perm is not a permutation (the message names the
        first position whose value is out of range or repeated) or not a
        vector.
    """
    perm = tf.convert_to_tensor(perm)
    if perm.dtype not in (tf.int32, tf.int64):
        raise TypeError(f"perm must be int32 or int64, got {perm.dtype.name}")
    return _loader.load().deep_reduce_perm_encode(perm, name=name)


def perm_decode(data, k, out_idx=tf.int64, name=None):
    """Unpacks a permutation written by perm_encode().

    Args:
      data: uint8 vector from perm_encode().
      k: the number of entries K (integer scalar, not stored in data).
      out_idx: tf.int32 or tf.int64, the dtype of the result.
      name: optional op name.

    Returns:
      out_idx vector of shape [k] (static in graph mode when k is a constant).

    Raises:
      ValueError: out_idx is not tf.int32 / tf.int64.
      InvalidArgumentError: k < 0 or too large for out_idx, data of the wrong
        length, non-zero padding, or entries that are not a permutation.
    """
    out_idx = tf.as_dtype(out_idx)
    if out_idx not in (tf.int32, tf.int64):
        raise ValueError(f"out_idx must be tf.int32 or tf.int64, got {out_idx.name}")
    data = _uint8_vector(data, "data")
    k = tf.convert_to_tensor(k)
    if not k.dtype.is_integer:
        raise TypeError(f"k must be an integer scalar, got {k.dtype.name}")
    k = tf.cast(k, tf.int64)
    return _loader.load().deep_reduce_perm_decode(data, k, out_idx=out_idx, name=name)


# ---------------------------------------------------------------------------
# Host-side helpers (pure Python, eager): no op library needed.

def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return tuple(table)


_CRC_TABLE = _crc32c_table()


def _as_bytes(data, what):
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "numpy"):
        data = data.numpy()
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise TypeError(f"{what} must hold uint8, got {data.dtype}")
        return data.tobytes()
    raise TypeError(f"{what} must be bytes, a uint8 numpy array or an eager uint8 tensor, "
                    f"got {type(data).__name__}")


def crc32c(data):
    """CRC32C (Castagnoli) of bytes, a uint8 numpy array or an eager tensor.

    Pure Python (a byte-wise table), independent of the op library: meant for
    debugging and tests, at a few MB/s. The kernels use absl's
    hardware-accelerated CRC32C; both give the same value.
    """
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for b in _as_bytes(data, "data"):
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _read_varint(buf, pos, end, what, problems):
    value = 0
    for i in range(10):
        if pos >= end:
            problems.append(f"truncated inside the {what}")
            return None, pos
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << (7 * i)
        if not b & 0x80:
            if b == 0 and i > 0:
                problems.append(f"the {what} is not minimally encoded")
                return None, pos
            if value > _MAX_META:
                problems.append(f"the {what} is >= 2^63")
                return None, pos
            return value, pos
    problems.append(f"the {what} is longer than 10 bytes")
    return None, pos


def inspect(payload):
    """Parses a payload on the host, for debugging; never raises on bad bytes.

    Args:
      payload: bytes, a uint8 numpy array or an eager uint8 tensor.

    Returns:
      dict with
        size: total bytes;
        magic_ok: whether it starts with MAGIC;
        version, kind: the header bytes (None if absent);
        meta: list of the meta values; section_lengths: list of ints;
        header_bytes: bytes before the first section;
        crc_stored, crc_computed: ints (None if not reachable);
        crc_ok: bool;
        problems: list of strings, empty for a well-formed payload.
      Parsing stops at the first structural problem; fields it did not reach
      are None.

    Raises:
      TypeError: payload is none of the accepted types.
    """
    buf = _as_bytes(payload, "payload")
    info = {"size": len(buf), "magic_ok": buf[:4] == MAGIC, "version": None, "kind": None,
            "meta": None, "section_lengths": None, "header_bytes": None,
            "crc_stored": None, "crc_computed": None, "crc_ok": False, "problems": []}
    problems = info["problems"]
    if not info["magic_ok"]:
        problems.append("not a deepreduce_tf payload (no 'DRPK' magic)")
        return info
    if len(buf) < _FIXED_BYTES:
        problems.append("truncated: too short to hold a header")
        return info
    info["version"], info["kind"] = buf[4], buf[5]
    if info["version"] != FORMAT_VERSION:
        problems.append(f"format version {info['version']} (this build reads "
                        f"{FORMAT_VERSION})")
        return info
    if len(buf) < _FIXED_BYTES + 2 + _CRC_BYTES:
        problems.append("truncated: too short to hold a header")
        return info
    pos = _FIXED_BYTES
    end = len(buf) - _CRC_BYTES  # the header never overlaps the CRC trailer
    fields = {}
    for what, key in (("meta count M", "meta"), ("section count S", "section_lengths")):
        count, pos = _read_varint(buf, pos, end, what, problems)
        if count is None:
            return info
        if count > end - pos:
            problems.append(f"the {what} ({count}) exceeds the bytes left")
            return info
        values = []
        for i in range(count):
            v, pos = _read_varint(buf, pos, end, f"{key} entry {i}", problems)
            if v is None:
                return info
            values.append(v)
        fields[key] = values
        info[key] = values
    info["header_bytes"] = pos
    want = pos + sum(fields["section_lengths"]) + _CRC_BYTES
    if len(buf) != want:
        if len(buf) < want:
            problems.append(f"truncated: the header implies {want} bytes")
        else:
            problems.append(f"{len(buf) - want} unexpected trailing bytes")
        return info
    info["crc_stored"] = int.from_bytes(buf[-_CRC_BYTES:], "little")
    info["crc_computed"] = crc32c(buf[:-_CRC_BYTES])
    info["crc_ok"] = info["crc_stored"] == info["crc_computed"]
    if not info["crc_ok"]:
        problems.append("CRC32C mismatch")
    return info
