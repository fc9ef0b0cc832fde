"""`tf.train.Example` bytes without protobuf: a deterministic encoder and a small decoder.

Examples are encoded here rather than through protobuf: protobuf's map serialization order
varies between runs (the original BERT generator's bytes differ run to run because of it),
and building message objects is the slow part of writing. Features are written in sorted
name order, which is exactly what protobuf's `SerializeToString(deterministic=True)` gives,
so TensorFlow, the `tfrecord` package and DALI read these records unchanged.

The decoder reads any Example (ours or another tool's) into {name: values} without
TensorFlow, for `inspect`, tests and benchmarks. `decode_batch` reads a batch of them into
the arrays TensorFlow's `parse_example` gives: its per-record work has a compiled twin in
`_examples.c` (an optional C extension, the same arrays and the same refusals;
SHARDKIT_PURE_PYTHON=1 makes it take the Python path anyway).
"""

from __future__ import annotations

import struct
from typing import Iterable, Sequence

from .extensions import SHARDKIT_PURE_PYTHON, python_requested

try:
    from . import _examples as _compiled
except ImportError:  # not built: no C compiler at install time, or a source tree used without `make setup`
    _compiled = None

PURE_PYTHON_ENV = SHARDKIT_PURE_PYTHON

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


# ---------------------------------------------------------------------------------------------
# Decoding a batch into arrays, without TensorFlow

class NotPlainExample(ValueError):
    """A record `decode_batch` does not take (see there): a full parser (TensorFlow) must read it."""


def _length(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    return _varint(data, pos)


def _plain_features(data: bytes, wanted: dict[bytes, int], found: list) -> None:
    """Put into found[wanted[name]] (Feature's oneof field tag, packed values) for each wanted feature of one
    record. NotPlainExample for anything but the plain form: Example.features entries of key then value, each
    wanted feature present once, its values in at most one packed field."""
    pos, end = 0, len(data)
    try:
        while pos < end:
            if data[pos] != 0x0A:  # Example.features
                raise NotPlainExample
            n, pos = _length(data, pos + 1)
            features_end = pos + n
            while pos < features_end:
                if data[pos] != 0x0A:  # Features.feature, a map entry
                    raise NotPlainExample
                n, pos = _length(data, pos + 1)
                entry_end = pos + n
                if entry_end > end:  # cut short: in a feature not asked for, nothing below would see it
                    raise NotPlainExample
                if data[pos] != 0x0A:  # its key
                    raise NotPlainExample
                n, pos = _length(data, pos + 1)
                key = data[pos:pos + n]
                pos += n
                if data[pos] != 0x12:  # its value, a Feature
                    raise NotPlainExample
                n, pos = _length(data, pos + 1)
                if pos + n != entry_end:
                    raise NotPlainExample
                i = wanted.get(key)
                if i is not None:
                    if found[i] is not None or pos == entry_end:
                        raise NotPlainExample  # a repeated key (the last would win) or a Feature of no kind
                    tag = data[pos]
                    n, pos = _length(data, pos + 1)
                    if pos + n != entry_end:
                        raise NotPlainExample
                    if n:
                        if data[pos] != 0x0A:  # the list's values, packed
                            raise NotPlainExample
                        n, pos = _length(data, pos + 1)
                        if pos + n != entry_end:
                            raise NotPlainExample
                    found[i] = (tag, data[pos:entry_end])
                pos = entry_end
            if pos != features_end:
                raise NotPlainExample
    except IndexError:
        raise NotPlainExample from None


_LIST_TAG = {INT64: 0x1A, FLOAT: 0x12}  # Feature.int64_list = 3, float_list = 2


def _unpack_varints(buf: bytes):
    """The int64 values of packed varints (protobuf's two's complement for negatives), and each byte's 'last of its
    varint' flag; NotPlainExample when the bytes end inside a varint or one is longer than protobuf's ten bytes."""
    import numpy as np

    a = np.frombuffer(buf, np.uint8)
    if len(a) == 0:
        return np.zeros(0, np.int64), np.zeros(0, bool)
    last = a < 0x80
    if not last[-1]:
        raise NotPlainExample
    ends = np.flatnonzero(last)
    starts = np.concatenate(([0], ends[:-1] + 1))
    sizes = ends - starts + 1
    if sizes.max() > 10:
        raise NotPlainExample
    shift = (7 * (np.arange(len(a)) - np.repeat(starts, sizes))).astype(np.uint64)
    values = np.add.reduceat((a & 0x7F).astype(np.uint64) << shift, starts)  # no bits overlap: + is |
    return values.view(np.int64), last


def compiled_decoder():
    """The extension `_examples` that `decode_batch` uses, or None: not built, or SHARDKIT_PURE_PYTHON (any value
    but empty or 0) asks for the Python path, for the tests and for a user who wants to rule it out."""
    return None if python_requested(PURE_PYTHON_ENV) else _compiled


def _decode_compiled(decoder, records, features, tags) -> dict | None:
    """`decode_batch` by the extension; None when it leaves the batch to the Python path (a record that is not
    bytes, two features of one name, a length that is not a count), which then gives the arrays or the refusal."""
    import numpy as np

    names = tuple(name.encode() for name, _, _ in features)
    if len(set(names)) < len(names) or not all(length is None or (type(length) is int and length >= 0)
                                               for _, _, length in features):
        return None
    lengths = tuple(-1 if length is None else length for _, _, length in features)  # -1: VarLenFeature
    decoded = decoder.decode_plain(records, names, tuple(tags), lengths)
    if decoded is NotImplemented:
        return None
    if decoded is None:
        raise NotPlainExample
    count, buffers = decoded
    return {name: np.frombuffer(buffer, np.float32 if kind == FLOAT else np.int64).reshape(count, width)
            for (name, kind, _), (buffer, width) in zip(features, buffers)}


def decode_batch(records, features) -> dict:
    """Records of `tf.train.Example` as numpy arrays, the ones `tf.io.parse_example` gives, without TensorFlow.

    `features` are (name, kind, length) triples, kind int64 or float, length an int (FixedLenFeature([length]):
    an array [records, length]) or None (VarLenFeature made dense with -1, as `tf.sparse.to_dense(...,
    default_value=-1)`: [records, the longest]). Other features of the records are ignored, as TensorFlow does.
    int64 values come as int64, float values as float32.

    Only the plain form is taken, the one `encode_example` writes and protobuf serializers write (each
    feature once, values packed, in any order); anything else, including every record TensorFlow would
    refuse (a missing feature, a wrong kind, a wrong length), raises NotPlainExample, and its reader
    parses the batch with TensorFlow instead, which gives the arrays or the error.

    The compiled twin (`compiled_decoder`) does the same in one call; this Python code is the reference.
    """
    import numpy as np

    tags = [_LIST_TAG.get(kind) for _, kind, _ in features]
    if None in tags:
        raise NotPlainExample
    decoder = compiled_decoder()
    if decoder is not None:
        records = records if isinstance(records, (list, tuple)) else list(records)  # read twice, maybe
        decoded = _decode_compiled(decoder, records, features, tags)
        if decoded is not None:
            return decoded
    wanted = {name.encode(): i for i, (name, _, _) in enumerate(features)}
    columns: list[list[bytes]] = [[] for _ in features]
    for data in records:
        found = [None] * len(features)
        _plain_features(data, wanted, found)
        for column, tag, feature in zip(columns, tags, found):
            if feature is None or feature[0] != tag:
                raise NotPlainExample
            column.append(feature[1])
    out = {}
    for (name, kind, length), column in zip(features, columns):
        sizes = np.fromiter(map(len, column), np.int64, len(column))
        buf = b"".join(column)
        if kind == FLOAT:
            if (sizes % 4).any():
                raise NotPlainExample
            values, counts = np.frombuffer(buf, "<f4").astype(np.float32), sizes // 4
        else:
            values, last = _unpack_varints(buf)
            bounds = np.concatenate(([0], np.cumsum(sizes)))
            if not last[bounds[1:][sizes > 0] - 1].all():  # a record's values end inside a varint
                raise NotPlainExample
            done = np.concatenate(([0], np.cumsum(last)))
            counts = done[bounds[1:]] - done[bounds[:-1]]
        if length is not None:
            if (counts != length).any():
                raise NotPlainExample
            out[name] = values.reshape(len(column), length)
        else:
            dense = np.full((len(column), int(counts.max(initial=0))), -1, values.dtype)
            rows = np.repeat(np.arange(len(column)), counts)
            cols = np.arange(len(values)) - np.repeat(np.cumsum(counts) - counts, counts)
            dense[rows, cols] = values
            out[name] = dense
    return out
