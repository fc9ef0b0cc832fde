"""The layouts stored as TFRecords: framed records of one `tf.train.Example` each, an index beside each file.

`FramedLayout` holds what google-research/bert's layout (`tfrecord`) and Graphcore's static mask
(`remask`) share: the spilled records are framed already, so the copy-out moves their bytes in the
final order (`copy_records`, compiled as `_speedups.copy_shuffled`), with their index lines; reading
back parses each file with the layout's schema (TensorFlow's parse, or `example.decode_batch` for
records in the plain form) and hands the batches to `to_standard`, which undoes the layout. A record
file tells its layout by its features (`recognize`). Also here: the pieces the encoders build
records from (a feature's map entry, tables of padding runs).
"""

from __future__ import annotations

import os
from array import array
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Callable, Iterator, Sequence

from shardkit.errors import PrepError
from shardkit.example import (FLOAT, NotPlainExample, decode_batch, decode_example, decode_example_kinds,
                              encode_example, varint)
from shardkit.progress import Progress
from shardkit.records import check_index, read_records, record_writers
from shardkit.schema import Schema
from shardkit.tf import error_text, import_tensorflow, tensorflow_installed

from .. import speedups
from ..schema import BERT_INSTANCE, PRED, SEQ
from .base import BATCH, Layout

_COPY_BYTES = 1 << 22  # the copy-out reads this much of the spill per call


@dataclass(frozen=True, kw_only=True)
class FramedLayout(Layout):
    """A layout of TFRecord files: each instance one Example of `schema`, an index beside each file."""

    schema: Schema
    indexed: bool = True
    framed: bool = True

    def to_standard(self, batch: dict, dims: dict[str, int]) -> dict:
        """The standard-layout batch of a batch parsed with `schema` (sparse features dense, -1 padded);
        ValueError naming the first record that breaks the layout. The standard layout's is itself."""
        return batch

    def writers(self, paths, index_paths, dims, *, overwrite=False, vocab=None):
        return _RecordOutputs(paths, index_paths, overwrite)

    def recognize(self, path: Path, family: list[Layout]) -> tuple[Layout, dict[str, int]]:
        """The layout whose schema shares the most features with the first record (the first of `family` on a
        tie), and the dimensions that record implies."""
        data = next(iter(read_records(path)), None)
        if data is None:
            raise PrepError(f"{path}: no records to infer the feature shapes from")
        try:
            names = set(decode_example(data))
            layout = max(family, key=lambda candidate: len(names & set(candidate.schema.names)))
            dims = layout.schema.dims_of(data)
        except (ValueError, IndexError):
            layout, dims = family[0], {}
        if set(dims) != set(BERT_INSTANCE.dimensions):
            raise PrepError(f"{path}: first record is not a BERT pre-training example")
        return layout, dims

    def file_dims(self, path: Path) -> dict[str, int]:
        return self.recognize(path, [self])[1]

    def count(self, path: Path) -> int:
        """The framing and CRCs of every record, checked against the file's index."""
        if self.indexed:
            return check_index(path, self.index_path(path))
        return sum(1 for _ in read_records(path))

    def batches(self, path: Path, dims: dict[str, int], *, tensorflow: bool = True, vocab=None) -> Iterator[dict]:
        done = 0
        for batch in _record_batches(self.schema, dims, path, tensorflow):
            try:
                standard = self.to_standard(batch, dims)
            except ValueError as e:
                raise PrepError(f"{path}: batch from record {done}: {e}") from None
            yield standard
            done += len(batch["input_ids"])

    def instances(self, path: Path, dims: dict[str, int], n: int, vocab=None) -> Iterator[tuple[str, dict]]:
        """The records as they are, whichever tool wrote them (the original's protobuf orders features its own way)."""
        for index, data in enumerate(read_records(path)):
            if index >= n:
                return
            yield f"record {index} ({len(data)} bytes)", self._standard_example(path, index, data, dims)

    def _standard_example(self, path: Path, index: int, data: bytes, dims: dict[str, int]) -> dict:
        """One record decoded by `example.decode_example_kinds`, checked against the schema and brought to the
        standard layout's {feature: values}."""
        try:
            decoded = decode_example_kinds(data)
        except (ValueError, IndexError) as e:
            raise PrepError(f"{path}: record {index}: not a tf.train.Example ({e})") from None
        problem = self.schema.problem(decoded, dims)
        if problem:
            raise PrepError(f"{path}: record {index}: {problem}")
        ex = {name: values for name, (_, values) in decoded.items() if name in self.schema.by_name}
        try:
            return self.example_to_standard(ex, dims)
        except ValueError as e:
            raise PrepError(f"{path}: record {index}: {str(e).removeprefix('record 0 of the batch: ')}") from None

    def example_to_standard(self, ex: dict[str, list], dims: dict[str, int]) -> dict[str, list]:
        """The standard layout's {feature: values} of one decoded record of `schema` (`to_standard` of it as a
        batch, `one_record_batch`); ValueError as `to_standard`'s. The standard layout's is itself."""
        return ex


def one_record_batch(schema: Schema, ex: dict[str, list]) -> dict:
    """One decoded record as the batch a parse gives: [1, n] arrays, int64 and float32, a feature of any length
    padded with -1 (a parse's sparse values made dense)."""
    import numpy as np

    batch = {}
    for name, values in ex.items():
        feature = schema.by_name[name]
        if feature.shape is None:
            batch[name] = np.full((1, max(len(values), 1)), -1, np.int64)
            batch[name][0, :len(values)] = values
        else:
            batch[name] = np.array([values], np.float32 if feature.kind == FLOAT else np.int64)
    return batch


# ---------------------------------------------------------------------------------------------
# Writing: the spilled framed records copied out in the final order

class _RecordOutputs:
    """The record files of one run (`shardkit.records.record_writers`), filled by `copy_records`."""

    def __init__(self, paths: Sequence[Path], index_paths: Sequence, overwrite: bool):
        self._ctx = record_writers(paths, index_paths, overwrite=overwrite)

    def __enter__(self) -> "_RecordOutputs":
        self.writers = self._ctx.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        return self._ctx.__exit__(exc_type, exc, tb)

    def copy(self, order: array, offsets: array, fd: int, progress: Progress | None = None) -> None:
        copy_records(self.writers, order, offsets, fd, progress)


def _gather(fd: int, offsets: array, order: array, start: int, stop: int, step: int, file_offset: int,
            max_bytes: int) -> tuple[bytes, bytes, int]:
    """The spilled records order[start:stop:step] (record i is bytes offsets[i]:offsets[i + 1] of `fd`), read
    one after another until at least `max_bytes` are, with their index lines counted from `file_offset`;
    and the first k not read."""
    data: list[bytes] = []
    index: list[bytes] = []
    size, k, pread = 0, start, os.pread
    while k < stop and (size < max_bytes or not data):
        inst = order[k]
        begin, length = offsets[inst], offsets[inst + 1] - offsets[inst]
        data.append(pread(fd, length, begin))
        index.append(b"%d %d\n" % (file_offset + size, length))
        size += length
        k += step
    return b"".join(data), b"".join(index), min(k, stop)


def copy_records(writers: list, order: array, offsets: array, fd: int, progress: Progress | None = None) -> None:
    """Spilled framed record `order[k]` to writer k mod n (empty writers), each writer's in blocks of about
    _COPY_BYTES (`progress(done, total)` in records, per block). The compiled `copy_shuffled` reads the spill
    front to back instead of once per record, and overwrites it."""
    n_out, total = len(writers), len(order)
    done = 0

    def write(j: int, data: bytes, index_lines: bytes, count: int) -> None:
        nonlocal done
        if progress is not None:
            progress(done, total)
        writers[j].write_framed(data, index_lines, count)
        done += count

    fast = speedups.compiled()
    if fast is not None:
        fast.copy_shuffled(fd, offsets, order, n_out, _COPY_BYTES, write)
        return
    for j, writer in enumerate(writers):
        k = j
        while k < total:
            data, index_lines, after = _gather(fd, offsets, order, k, total, n_out, writer.offset, _COPY_BYTES)
            write(j, data, index_lines, len(range(k, after, n_out)))
            k = after


# ---------------------------------------------------------------------------------------------
# Reading back: batches parsed with a schema

def _parsed_batches(tf, schema: Schema, dims: dict[str, int], path: Path, *, skip: int = 0) -> Iterator[dict]:
    """Batches of one TFRecord file parsed by TensorFlow with `schema` (sparse features made dense, -1 pad),
    from batch `skip` on."""
    spec = schema.tf_spec(tf, dims)

    def parse(batch):
        parsed = tf.io.parse_example(batch, spec)
        return {k: tf.sparse.to_dense(v, default_value=-1) if isinstance(v, tf.sparse.SparseTensor) else v
                for k, v in parsed.items()}

    ds = tf.data.TFRecordDataset(str(path)).batch(BATCH).skip(skip).map(parse)
    try:
        yield from ds.as_numpy_iterator()
    except tf.errors.OpError as e:
        found = schema.first_problem(read_records(path, check_crc=False), dims)
        what = f"record {found[0]}: {found[1]}" if found else error_text(e)
        raise PrepError(f"{path}: TensorFlow cannot parse it with the {schema.name} schema "
                        f"(seq {dims[SEQ]}, {dims[PRED]} predictions): {what}") from None


def _plain_batches(schema: Schema, dims: dict[str, int], path: Path, state: dict) -> Iterator[dict]:
    """The batches `_parsed_batches` gives, decoded without TensorFlow (`example.decode_batch`) for as long as the
    records are in the plain form it takes and the file reads without a framing or checksum error. Counts the
    batches given in state["batches"]; state["whole"] says whether they are the whole file, state["stop"] why not
    (the framing error, or None for a record not in the plain form)."""
    features = [(f.name, f.kind, f.length(dims)) for f in schema.features]
    scalars = [f.name for f in schema.features if f.shape == ()]  # FixedLenFeature([]): one value a record, [B]
    payloads = read_records(path)
    try:
        while batch := list(islice(payloads, BATCH)):  # the last one shorter
            decoded = decode_batch(batch, features)
            for name in scalars:
                decoded[name] = decoded[name].reshape(-1)
            state["batches"] += 1
            yield decoded
    except NotPlainExample:
        return
    except PrepError as e:
        state["stop"] = e
        return
    state["whole"] = True


def _record_batches(schema: Schema, dims: dict[str, int], path: Path, tensorflow: bool) -> Iterator[dict]:
    """The batches of one TFRecord file in `schema`: TensorFlow's, or decoded without it first. Without
    TensorFlow installed (an optional extra), decoded without it; a file that cannot be is then refused in one
    line: its framing error, or that its records need TensorFlow's parser."""
    state = {"batches": 0, "whole": False, "stop": None}
    installed = tensorflow_installed()
    if not tensorflow or not installed:
        yield from _plain_batches(schema, dims, path, state)
        if state["whole"]:
            return
        if not installed:
            if state["stop"] is not None:
                raise state["stop"]
            raise PrepError(f"{path}: records from batch {state['batches']} on are not in the plain form read "
                            f"without TensorFlow, which is not installed (pip install 'wikiprep[tensorflow]')")
    yield from _parsed_batches(import_tensorflow(), schema, dims, path, skip=state["batches"])


# ---------------------------------------------------------------------------------------------
# Encoding: the pieces of a record

# Tables indexed by a length (an encoder's padding runs, positions and masked_lm_weights entries) are full
# lists up to this length: the fastest lookup, a few MB at most. Beyond it values are made on demand and only
# short ones kept, so memory stays linear in max_seq_length: full tables of runs are quadratic (seq 20000 took
# 422 MB).
FULL_TABLE = 1024
_KEEP_BYTES = 1024  # an `_OnDemand` table keeps values up to this size (at most ~0.5 MB of runs)


class _OnDemand(dict):
    """`table[k]` = `make(k)`, made on first use; kept when at most _KEEP_BYTES long, else made again per use."""

    def __init__(self, make: Callable[[int], bytes]):
        super().__init__()
        self.make = make

    def __missing__(self, k: int) -> bytes:
        value = self.make(k)
        if len(value) <= _KEEP_BYTES:
            self[k] = value
        return value


def table(make: Callable[[int], bytes], size: int) -> list[bytes] | _OnDemand:
    """`make(k)` for k in range(size): a list while size is small, else an `_OnDemand` table."""
    return [make(k) for k in range(size)] if size <= FULL_TABLE + 1 else _OnDemand(make)


def feature_key(name: str) -> bytes:
    """The key field of a feature's map entry."""
    raw = name.encode()
    return b"\x0a" + varint(len(raw)) + raw


def int64_entry(key: bytes, packed: bytes) -> bytes:
    """Map entry {key, Feature{int64_list{packed values}}}, as encode_example writes it; `key` is `feature_key`'s."""
    if packed:
        inner = b"\x0a" + varint(len(packed)) + packed
        feature = b"\x1a" + varint(len(inner)) + inner
    else:
        feature = b"\x1a\x00"
    entry = key + b"\x12" + varint(len(feature)) + feature
    return b"\x0a" + varint(len(entry)) + entry


def feature_entry(name: str, kind: str, values: list) -> bytes:
    """The map entry of one feature, cut out of a one-feature Example made by encode_example."""
    whole = encode_example([(name, kind, values)])
    n = 1
    while whole[n] & 0x80:
        n += 1
    return whole[n + 1:]

