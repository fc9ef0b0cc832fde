"""TFRecord files of `tf.train.Example`s, their index files, written byte-for-byte deterministically.

Examples are encoded here rather than through protobuf: protobuf's map serialization order
varies between runs (the original BERT generator's bytes differ run to run because of it),
and building message objects is the slow part of writing. Features are written in sorted
name order, which is exactly what protobuf's `SerializeToString(deterministic=True)` gives,
so TensorFlow, the `tfrecord` package and DALI read these records unchanged.

Index files hold one `offset length` line per record, `length` counting the whole framed
record: the format of `tfrecord`'s `tfrecord2idx` and of DALI.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import crc32c as _crc32c

from .atomic import atomic_write
from .errors import PrepError

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


_VARINT = [_varint_slow(i) for i in range(_SMALL)]


def varint(n: int) -> bytes:
    return _VARINT[n] if 0 <= n < _SMALL else _varint_slow(n)


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


def encode_example(features: Iterable[tuple[str, str, Sequence]]) -> bytes:
    """Serialize a `tf.train.Example` from `(name, kind, values)` triples, kind one of int64/float/bytes.

    The result equals `tf.train.Example(...).SerializeToString(deterministic=True)`.
    """
    entries = []
    for name, kind, values in sorted(features, key=lambda t: t[0].encode()):
        entry = _len_delimited(b"\x0a", name.encode()) + _len_delimited(b"\x12", _encode_feature(kind, values))
        entries.append(_len_delimited(b"\x0a", entry))
    return _len_delimited(b"\x0a", b"".join(entries))


def import_tensorflow():
    """TensorFlow, imported only by the readers that parse records with it, and without its start-up banners."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")  # only parsing: silences the oneDNN banner
    import tensorflow as tf

    return tf


def _masked_crc(data: bytes) -> int:
    crc = _crc32c.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    """One TFRecord: length, masked CRC32C of the length, data, masked CRC32C of the data."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", _masked_crc(length)) + data + struct.pack("<I", _masked_crc(data))


def index_path_for(record_path: str | Path) -> Path:
    """`wiki_00000.tfrecord` -> `wiki_00000.index` (the name `tfrecord2idx` users give it)."""
    p = Path(record_path)
    return p.with_suffix(".index") if p.suffix == ".tfrecord" else p.with_name(p.name + ".index")


class RecordWriter:
    """Write framed records to `path` and their index to `index_path`, both committed atomically.

    Use as a context manager: nothing appears at `path` unless the block finishes without error.
    """

    def __init__(self, path: str | Path, index_path: str | Path | None = None):
        self.path = Path(path)
        self.index_path = Path(index_path) if index_path is not None else None
        self.count = 0
        self._offset = 0
        self._index_lines: list[str] = []

    def __enter__(self) -> "RecordWriter":
        self._ctx = atomic_write(self.path, "wb")
        self._f = self._ctx.__enter__()
        return self

    def write(self, data: bytes) -> None:
        framed = frame_record(data)
        self._f.write(framed)
        if self.index_path is not None:
            self._index_lines.append(f"{self._offset} {len(framed)}\n")
        self._offset += len(framed)
        self.count += 1

    def __exit__(self, exc_type, exc, tb):
        self._ctx.__exit__(exc_type, exc, tb)
        if exc_type is None and self.index_path is not None:
            with atomic_write(self.index_path, "w") as f:
                f.writelines(self._index_lines)
        return False


def write_records(path: str | Path, payloads: Iterable[bytes], index_path: str | Path | None = None) -> int:
    """Write every payload as one record; returns the record count."""
    with RecordWriter(path, index_path) as w:
        for data in payloads:
            w.write(data)
    return w.count


def read_records(path: str | Path, check_crc: bool = True) -> Iterator[bytes]:
    """Yield the payload of every record in `path`, checking framing and CRCs."""
    path = Path(path)
    with open(path, "rb") as f:
        offset = 0
        while True:
            head = f.read(12)
            if not head:
                return
            if len(head) < 12:
                raise PrepError(f"{path}: truncated record header at byte {offset}")
            (length,) = struct.unpack("<Q", head[:8])
            if check_crc and struct.unpack("<I", head[8:])[0] != _masked_crc(head[:8]):
                raise PrepError(f"{path}: bad length checksum at byte {offset}")
            data = f.read(length)
            tail = f.read(4)
            if len(data) < length or len(tail) < 4:
                raise PrepError(f"{path}: truncated record at byte {offset}")
            if check_crc and struct.unpack("<I", tail)[0] != _masked_crc(data):
                raise PrepError(f"{path}: bad data checksum in the record at byte {offset}")
            yield data
            offset += 16 + length


def record_offsets(path: str | Path) -> list[tuple[int, int]]:
    """(offset, framed length) of every record, read from the file itself."""
    out, offset = [], 0
    for data in read_records(path):
        out.append((offset, len(data) + 16))
        offset += len(data) + 16
    return out


def check_index(record_path: str | Path, index_path: str | Path) -> int:
    """Raise PrepError unless `index_path` lists exactly the records of `record_path`; returns the count."""
    expected = record_offsets(record_path)
    try:
        lines = Path(index_path).read_text(encoding="ascii").split("\n")
    except FileNotFoundError:
        raise PrepError(f"{index_path}: index file missing") from None
    got = [tuple(int(x) for x in line.split()) for line in lines if line.strip()]
    if got != expected:
        raise PrepError(f"{index_path}: index does not match {Path(record_path).name}")
    return len(expected)
