"""`tf.train.Example` bytes without protobuf: a deterministic encoder and a small decoder.

Examples are encoded here rather than through protobuf: protobuf's map serialization order
varies between runs (the original BERT generator's bytes differ run to run because of it),
and building message objects is the slow part of writing. Features are written in sorted
name order, which is exactly what protobuf's `SerializeToString(deterministic=True)` gives,
so TensorFlow, the `tfrecord` package and DALI read these records unchanged.

The decoder reads any Example (ours or another tool's) into {name: values} without
TensorFlow, for `inspect`, tests and benchmarks.
"""

from __future__ import annotations

import struct
from typing import Iterable, Sequence

INT64, FLOAT, BYTES = "int64", "float", "bytes"

# Varints of small non-negative ints, looked up instead of computed: token ids, labels, masks.
_SMALL = 1 << 16


def _varint_slow(n: int) -> bytes:
    if n < 0:
        n += 1 << 64  # int64 two's complement, ten bytes as protobuf writes it
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


# One, two and three bytes, built by rule: _varint_slow over the 65,536 values took a tenth of the start-up
# of every command that imports this module.
_VARINT = ([bytes((i,)) for i in range(0x80)]
           + [bytes((i & 0x7F | 0x80, i >> 7)) for i in range(0x80, 0x4000)]
           + [bytes((i & 0x7F | 0x80, i >> 7 & 0x7F | 0x80, i >> 14)) for i in range(0x4000, _SMALL)])


def varint(n: int) -> bytes:
    if 0 <= n < _SMALL:
        return _VARINT[n]
    if _SMALL <= n < 1 << 21:  # the length of a 64 KB - 2 MB value (an image): three bytes
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14))
    return _varint_slow(n)


def _len_delimited(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def _encode_feature(kind: str, values: Sequence) -> bytes:
    if kind == INT64:
        table = _VARINT
        try:
            packed = b"".join([table[v] for v in values])
        except (IndexError, TypeError):
            packed = b"".join(varint(int(v)) for v in values)
        inner = _len_delimited(b"\x0a", packed) if packed else b""
        return _len_delimited(b"\x1a", inner)  # Feature.int64_list = 3
    if kind == FLOAT:
        packed = struct.pack(f"<{len(values)}f", *values)
        inner = _len_delimited(b"\x0a", packed) if packed else b""
        return _len_delimited(b"\x12", inner)  # Feature.float_list = 2
    if kind == BYTES:
        inner = b"".join(_len_delimited(b"\x0a", v if isinstance(v, bytes) else str(v).encode()) for v in values)
        return _len_delimited(b"\x0a", inner)  # Feature.bytes_list = 1
    raise ValueError(f"unknown feature kind {kind!r}")


def feature_entry(name: str, kind: str, values: Sequence) -> bytes:
    """One feature as a map entry of the Example's Features: what `encode_example` joins, in name order."""
    entry = _len_delimited(b"\x0a", name.encode()) + _len_delimited(b"\x12", _encode_feature(kind, values))
    return _len_delimited(b"\x0a", entry)


def bytes_entry_head(name: str, size: int) -> bytes:
    """`feature_entry(name, BYTES, [value])` without `value`, the one value of `size` bytes that ends it.

    So that a large value (an image) is written as it is, never copied into a record: the lengths
    that precede it are all it takes.
    """
    key = _len_delimited(b"\x0a", name.encode())
    value_head = b"\x0a" + varint(size)  # BytesList.value
    bytes_list = len(value_head) + size
    list_head = b"\x0a" + varint(bytes_list)  # Feature.bytes_list
    feature = len(list_head) + bytes_list
    feature_head = b"\x12" + varint(feature)  # the entry's value
    return b"\x0a" + varint(len(key) + len(feature_head) + feature) + key + feature_head + list_head + value_head


def example_head(entries_size: int) -> bytes:
    """What precedes an Example's map entries, `entries_size` bytes of them: the Features field's tag and length."""
    return b"\x0a" + varint(entries_size)


def encode_example(features: Iterable[tuple[str, str, Sequence]]) -> bytes:
    """Serialize a `tf.train.Example` from `(name, kind, values)` triples, kind one of int64/float/bytes.

    The result equals `tf.train.Example(...).SerializeToString(deterministic=True)`.
    """
    body = b"".join([feature_entry(name, kind, values)
                     for name, kind, values in sorted(features, key=lambda t: t[0].encode())])
    return example_head(len(body)) + body


# ---------------------------------------------------------------------------------------------
# Decoding

def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes):
    """(field number, wire type, value) of a protobuf message; LEN values as bytes."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            n, pos = _varint(data, pos)
            value, pos = data[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > end:
            raise ValueError("truncated message")
        yield number, wire, value


def decode_example_kinds(data: bytes) -> dict[str, tuple[str, list]]:
    """A `tf.train.Example` as {feature name: (kind, values)}, kind one of int64/float/bytes; no TensorFlow.

    ValueError or IndexError when `data` is not a well-formed Example.
    """
    out: dict[str, tuple[str, list]] = {}
    for number, _, features in _fields(data):
        if number != 1:
            continue
        for entry_number, _, entry in _fields(features):
            if entry_number != 1:
                continue
            name, feature = "", b""
            for n, _, v in _fields(entry):
                if n == 1:
                    name = v.decode("utf-8", "replace")
                elif n == 2:
                    feature = v
            kind, values = None, []
            for kind_number, _, lst in _fields(feature):
                kind = _KIND_OF_FIELD.get(kind_number)
                for n, wire, v in _fields(lst):
                    if n != 1:
                        continue
                    if kind == INT64:
                        if wire == 2:
                            pos = 0
                            while pos < len(v):
                                x, pos = _varint(v, pos)
                                values.append(x - (1 << 64) if x >= 1 << 63 else x)
                        else:
                            values.append(v - (1 << 64) if v >= 1 << 63 else v)
                    elif kind == FLOAT:
                        values.extend(struct.unpack(f"<{len(v) // 4}f", v))
                    else:
                        values.append(v)
            out[name] = (kind, values)
    return out


_KIND_OF_FIELD = {1: BYTES, 2: FLOAT, 3: INT64}  # Feature's oneof: bytes_list = 1, float_list = 2, int64_list = 3


def decode_example(data: bytes) -> dict[str, list]:
    """A `tf.train.Example` as {feature name: values} (ints, floats or bytes), without TensorFlow."""
    return {name: values for name, (_, values) in decode_example_kinds(data).items()}
