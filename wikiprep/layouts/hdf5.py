"""NVIDIA's HDF5 layout of BERT instances: writing it byte-deterministically in bounded memory, and reading it back.

NVIDIA's PyTorch BERT (DeepLearningExamples, PyTorch/LanguageModeling/BERT: `run_pretraining.py`'s
`pretraining_dataset`) and MLPerf's PyTorch BERT read one HDF5 file per shard with h5py: the
datasets and dtypes of `HDF5_DTYPES`, gzip-compressed, as NVIDIA's `create_pretraining_data.py`
writes them (an `--output_file` ending in `.hdf5` or `.h5`).

Writing. NVIDIA's writer fills one array per feature for the whole shard and writes each at once;
here a shard is written in blocks of whole chunks (`chunk_rows`), so memory holds one block.
The generator's instances reach the writer as compact rows (`InstanceRows`), spilled to disk and
read back in the final shuffled order like the TFRecord writer's records.

Determinism. An HDF5 file records more than its data: object modification times (HDF5's
default, which h5py turns off: `track_times=False`, passed here explicitly), the file format
versions the library picks (`libver`, fixed here to the earliest formats, which every HDF5 since
1.8 reads, NVIDIA's h5py default), and the addresses at which objects and chunks were allocated,
which follow the order of operations. So every file is made by the same sequence of calls: the
datasets created in schema order with fixed chunk shapes, then each block written to each
dataset in turn; equal instances give equal bytes, whatever the timing (tested).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from shardkit.atomic import atomic_write_together, write_error
from shardkit.errors import PrepError
from shardkit.progress import Progress

from ..schema import BERT_INSTANCE, PRED, SEQ
from .base import BATCH, Layout

# NVIDIA's HDF5 layout, as DeepLearningExamples' PyTorch/LanguageModeling/BERT create_pretraining_data.py
# writes it (`write_instance_to_example_file`) and its run_pretraining.py `pretraining_dataset` reads it:
# one gzip-compressed dataset per feature of BERT_INSTANCE, with these dtypes, [N, length] ([N] for
# next_sentence_labels). No masked_lm_weights: the reader takes the first 0 in masked_lm_positions as the
# end of the masks ([CLS], at 0, is never masked).
HDF5_DTYPES = {
    "input_ids": "i4",
    "input_mask": "i1",
    "segment_ids": "i1",
    "masked_lm_positions": "i4",
    "masked_lm_ids": "i4",
    "next_sentence_labels": "i1",
}
# The file format: the earliest versions that hold these objects (what h5py writes by default, and what
# NVIDIA's files use), and never a format newer than HDF5 1.10's, whatever the library's version.
LIBVER = ("earliest", "v110")
COMPRESSION, COMPRESSION_LEVEL = "gzip", 4  # NVIDIA's compression="gzip"; h5py's level for it is 4
CHUNK_BYTES = 1 << 20  # input_ids rows per chunk: about 1 MiB uncompressed (h5py's chunk cache per dataset)
MAX_CHUNK_ROWS = 1024
READ_ROWS = 512  # rows per block when reading back


@dataclass(frozen=True, kw_only=True)
class HDF5Layout(Layout):
    """NVIDIA's HDF5 files: written in columns from spilled rows (`InstanceRows`), no index."""

    def check_outputs(self, output_files, index_files) -> None:
        listed = [p for p in index_files if p is not None]
        if listed:
            raise PrepError(f"index file {os.fspath(listed[0])}: an index lists the records of a TFRecord file; "
                            f"{os.fspath(output_files[0])} is HDF5 (NVIDIA's layout has no index)")

    def encoder(self, max_seq_length: int, max_predictions_per_seq: int) -> "InstanceRows":
        return InstanceRows(max_seq_length, max_predictions_per_seq)

    def writers(self, paths, index_paths, dims, *, overwrite=False, vocab=None) -> "HDF5Files":
        return HDF5Files(paths, dims, overwrite=overwrite)

    def file_dims(self, path: Path) -> dict[str, int]:
        return file_dims(path)

    def count(self, path: Path) -> int:
        """The row count its datasets declare."""
        return count_instances(path)

    def batches(self, path: Path, dims: dict[str, int], *, tensorflow: bool = True, vocab=None) -> Iterator[dict]:
        held = file_dims(path)
        if held != dims:
            raise PrepError(f"{path}: seq {held[SEQ]}, {held[PRED]} predictions; "
                            f"expected seq {dims[SEQ]}, {dims[PRED]} predictions")
        yield from read_batches(path, BATCH)

    def instances(self, path: Path, dims: dict[str, int], n: int, vocab=None) -> Iterator[tuple[str, dict]]:
        shown = 0
        for b in read_batches(path, min(n, READ_ROWS)):
            for i in range(len(b["input_ids"])):
                if shown >= n:
                    return
                yield f"instance {shown}", {name: b[name][i].tolist() for name in BERT_INSTANCE.names}
                shown += 1


# NVIDIA's create_pretraining_data.py writes HDF5 to an --output_file named `.hdf5` or `.h5` (any case).
LAYOUT = HDF5Layout(name="hdf5", title="HDF5, NVIDIA's layout", file_kind="HDF5", flags=("hdf5", "standard"),
                    folder_suffix="_hdf5", suffixes=(".hdf5", ".h5"), indexed=False, framed=False,
                    named_outputs=True, flags_note="HDF5 holds NVIDIA's standard layout",
                    compiled_code=2)  # _speedups.c: LAYOUT_ROWS


def row_shapes(dims: dict[str, int]) -> dict[str, tuple[int, ...]]:
    """The shape of one instance in each dataset: BERT_INSTANCE's lengths, () for a one-value feature."""
    shapes = {}
    for name in HDF5_DTYPES:
        length = BERT_INSTANCE.by_name[name].length(dims)
        shapes[name] = () if BERT_INSTANCE.by_name[name].shape == (1,) else (length,)
    return shapes


def chunk_rows(dims: dict[str, int]) -> int:
    """Instances per chunk (and per written block): about CHUNK_BYTES of input_ids, at most MAX_CHUNK_ROWS."""
    return max(1, min(MAX_CHUNK_ROWS, CHUNK_BYTES // (4 * max(dims[SEQ], dims[PRED], 1))))


# ---------------------------------------------------------------------------------------------
# From the generator to the writer: fixed-size rows

class InstanceRows:
    """An instance as one spilled row, and a block of rows as the HDF5 datasets' arrays.

    A row is the instance as the generator emits it: a head (token count, length of A, mask count,
    random next, bytes of token ids, bytes of masked ids), the masked positions as int32s, then
    the token ids and the masked ids as the generator holds them, protobuf varints (one join each,
    as the TFRecord encoder does). A block's varints are decoded at once with numpy: per-token
    work in Python would double the cost of an instance.
    """

    HEAD = struct.Struct("<6i")

    def __init__(self, max_seq_length: int, max_predictions_per_seq: int):
        self.seq, self.pred = max_seq_length, max_predictions_per_seq

    def encode(self, tokens: list[bytes], len_a: int, len_b: int, positions: list[int], labels: list[bytes],
               is_random: bool) -> bytes:
        ids, label_ids = b"".join(tokens), b"".join(labels)
        return b"".join((self.HEAD.pack(len(tokens), len_a, len(positions), is_random, len(ids), len(label_ids)),
                         array("i", positions).tobytes(), ids, label_ids))

    def block(self, rows: Sequence[bytes]) -> dict:
        """The HDF5 datasets' arrays (NVIDIA's dtypes) of `rows`."""
        import numpy as np

        unpack, head = self.HEAD.unpack_from, self.HEAD.size
        heads, positions, ids, label_ids = [], [], [], []
        for row in rows:
            h = unpack(row)
            heads.append(h)
            start = head + 4 * h[2]
            positions.append(row[head:start])
            ids.append(row[start:start + h[4]])
            label_ids.append(row[start + h[4]:])
        heads = np.array(heads, dtype=np.int64).reshape(-1, 6)
        n, len_a, m = heads[:, 0:1], heads[:, 1:2], heads[:, 2:3]
        slot, mask_slot = np.arange(self.seq), np.arange(self.pred)
        real, masked = slot < n, mask_slot < m
        out = {
            "input_ids": np.zeros((len(rows), self.seq), np.int32),
            "input_mask": real.astype(np.int8),
            "segment_ids": ((slot >= len_a + 2) & real).astype(np.int8),
            "masked_lm_positions": np.zeros((len(rows), self.pred), np.int32),
            "masked_lm_ids": np.zeros((len(rows), self.pred), np.int32),
            "next_sentence_labels": heads[:, 3].astype(np.int8),
        }
        out["input_ids"][real] = decode_varints(b"".join(ids))
        out["masked_lm_positions"][masked] = np.frombuffer(b"".join(positions), dtype=np.int32)
        out["masked_lm_ids"][masked] = decode_varints(b"".join(label_ids))
        return out


def decode_varints(data: bytes):
    """The non-negative protobuf varints of `data`, one after another, as an int64 numpy array."""
    import numpy as np

    a = np.frombuffer(data, dtype=np.uint8)
    if not len(a):
        return np.zeros(0, np.int64)
    ends = np.flatnonzero(a < 0x80)
    starts = np.concatenate(([0], ends[:-1] + 1))
    shift = 7 * (np.arange(len(a)) - np.repeat(starts, ends - starts + 1))
    return np.add.reduceat((a & 0x7F).astype(np.int64) << shift, starts)


# ---------------------------------------------------------------------------------------------
# Writing

def _h5py():
    import h5py

    return h5py


_ERRNO = re.compile(r"errno = (\d+)")


def _as_write_error(path: Path, e: BaseException) -> PrepError:
    """The one line for a failed HDF5 write: h5py's OSError carries the errno only in its message."""
    if isinstance(e, OSError) and e.errno is None:
        found = _ERRNO.search(str(e))
        e = OSError(int(found[1]) if found else errno.EIO, os.strerror(int(found[1])) if found else str(e))
    return write_error(path, e)


class HDF5Writer:
    """One NVIDIA-layout HDF5 file of `rows` instances, written block by block in schema order."""

    def __init__(self, path: Path, h5file, dims: dict[str, int], rows: int):
        self.path, self.file, self.rows = path, h5file, rows
        self.chunk = min(chunk_rows(dims), rows) if rows else 1
        self.count = 0
        self.datasets = []
        for name, shape in row_shapes(dims).items():  # HDF5_DTYPES' order: the same allocations every time
            full = (rows, *shape)
            # A chunk has no empty side: a dataset with one (no instances, or no predictions) is declared
            # extensible there, the one way HDF5 takes a chunk larger than the data.
            maxshape = tuple(None if d == 0 else d for d in full) if 0 in full else None
            self.datasets.append((name, h5file.create_dataset(
                name, shape=full, maxshape=maxshape, dtype=HDF5_DTYPES[name],
                chunks=(self.chunk, *(max(1, d) for d in shape)), compression=COMPRESSION,
                compression_opts=COMPRESSION_LEVEL, track_times=False)))

    def write(self, block: dict) -> None:
        """Append the instances of `block` (the datasets' arrays, equal row counts)."""
        n = len(block["input_ids"])
        if self.count + n > self.rows:
            raise ValueError(f"{self.path}: {self.count + n} rows written, {self.rows} declared")
        try:
            for name, ds in self.datasets:
                ds[self.count:self.count + n] = block[name]
        except OSError as e:
            raise _as_write_error(self.path, e) from e
        self.count += n


class HDF5Files:
    """Several HDF5 files committed together (`atomic_write_together`): none appears unless all are complete.

    The temporaries are opened on entry, before the work, so an output that cannot be written
    fails first; `create(i, rows)` starts file i once its instance count is known (`copy` does). HDF5
    writes through its own driver to the temporary's name; the handle the atomic commit holds
    only fsyncs and renames it.
    """

    def __init__(self, paths: Sequence[str | os.PathLike], dims: dict[str, int], *, overwrite: bool = False):
        self.paths = [Path(p) for p in paths]
        self.dims = dims
        self.overwrite = overwrite  # replace existing files (the command line), or never (`shardkit.atomic`)
        self.writers: list[HDF5Writer | None] = [None] * len(self.paths)

    def __enter__(self) -> "HDF5Files":
        self._ctx = atomic_write_together(self.paths, overwrite=self.overwrite)
        self._temps = self._ctx.__enter__()
        return self

    def create(self, i: int, rows: int) -> HDF5Writer:
        path = self.paths[i]
        try:
            h5file = _h5py().File(self._temps[i].name, "w", libver=LIBVER)
        except OSError as e:
            raise _as_write_error(path, e) from e
        self.writers[i] = HDF5Writer(path, h5file, self.dims, rows)
        return self.writers[i]

    def copy(self, order: array, offsets: array, fd: int, progress: Progress | None = None) -> None:
        """Spilled row `order[k]` (bytes offsets[i]:offsets[i + 1] of `fd`) to output k mod n, a block of whole
        chunks per output at a time (`progress(done, total)` in instances, per block)."""
        n_out, total = len(self.paths), len(order)
        writers = [self.create(j, len(range(j, total, n_out))) for j in range(n_out)]
        rows = InstanceRows(self.dims[SEQ], self.dims[PRED])
        step = chunk_rows(self.dims) * n_out  # a multiple of n_out: row i of a block goes to output i mod n_out
        pread = os.pread
        for start in range(0, total, step):
            if progress is not None:
                progress(start, total)
            block = rows.block([pread(fd, offsets[inst + 1] - offsets[inst], offsets[inst])
                                for inst in order[start:start + step]])
            for j, w in enumerate(writers):
                w.write({name: values[j::n_out] for name, values in block.items()})

    def _close(self) -> None:
        """Close every HDF5 file (the last metadata is written here); the first failure is raised."""
        failure = None
        for w in self.writers:
            if w is None:
                continue
            try:
                w.file.close()
            except OSError as e:
                failure = failure or _as_write_error(w.path, e)
        self.writers = [None] * len(self.paths)
        if failure is not None:
            raise failure

    def __exit__(self, exc_type, exc, tb):
        if exc is None:
            unfinished = [w for w in self.writers if w is not None and w.count != w.rows]
            try:
                if unfinished:
                    raise ValueError(f"{unfinished[0].path}: {unfinished[0].count} of {unfinished[0].rows} rows")
                self._close()
            except BaseException as e:
                self._ctx.__exit__(type(e), e, e.__traceback__)
                raise
            return self._ctx.__exit__(None, None, None)
        with contextlib.suppress(Exception):
            self._close()
        return self._ctx.__exit__(exc_type, exc, tb)


# ---------------------------------------------------------------------------------------------
# Reading

def open_file(path: str | os.PathLike):
    """`path` opened read-only with h5py; PrepError when it is missing or not an HDF5 file."""
    path = Path(path)
    if not path.is_file():
        raise PrepError(f"{path}: no such HDF5 file")
    try:
        return _h5py().File(path, "r")
    except OSError:
        raise PrepError(f"{path}: not an HDF5 file") from None


def file_layout(path: Path, h5file) -> tuple[int, dict[str, int]]:
    """(instances, dims) of an open file in NVIDIA's layout; PrepError naming the first dataset that breaks it."""
    import numpy as np

    rows = None
    dims: dict[str, int] = {}
    for name in HDF5_DTYPES:
        ds = h5file.get(name)
        if ds is None or not hasattr(ds, "dtype"):
            raise PrepError(f"{path}: no {name} dataset (not a BERT pre-training file in NVIDIA's HDF5 layout)")
        if not np.issubdtype(ds.dtype, np.integer):
            raise PrepError(f"{path}: dataset {name} is {ds.dtype}, not integers")
        shape = BERT_INSTANCE.by_name[name].shape
        want_ndim = 1 if shape == (1,) else 2
        if ds.ndim != want_ndim:
            raise PrepError(f"{path}: dataset {name} has {ds.ndim} dimensions, expected {want_ndim}")
        if rows is not None and ds.shape[0] != rows:
            raise PrepError(f"{path}: dataset {name} holds {ds.shape[0]} instances, input_ids {rows}")
        rows = ds.shape[0]
        if want_ndim == 2:
            dim = shape[0]
            if dim in dims and dims[dim] != ds.shape[1]:
                raise PrepError(f"{path}: dataset {name} has {ds.shape[1]} columns, expected {dims[dim]}")
            dims[dim] = ds.shape[1]
    return rows, dims


def read_batches(path: str | os.PathLike, rows: int = READ_ROWS) -> Iterator[dict]:
    """The instances of an NVIDIA-layout HDF5 file as standard-layout batches (BERT_INSTANCE names and shapes,
    int64 and float32, what TensorFlow's parse gives), `rows` at a time; memory holds one batch.

    masked_lm_weights, which the layout does not store, are 1.0 up to the first 0 in
    masked_lm_positions, the end of the masks for NVIDIA's reader.
    """
    import numpy as np

    path = Path(path)
    with open_file(path) as f:
        total, _ = file_layout(path, f)
        for start in range(0, total, rows):
            end = min(total, start + rows)
            try:
                b = {name: f[name][start:end].astype(np.int64) for name in HDF5_DTYPES}
            except OSError as e:
                raise PrepError(f"{path}: cannot read instances {start} to {end - 1} ({' '.join(str(e).split())})") \
                    from None
            b["next_sentence_labels"] = b["next_sentence_labels"].reshape(-1, 1)
            b["masked_lm_weights"] = np.cumprod(b["masked_lm_positions"] != 0, axis=1).astype(np.float32)
            yield b


def count_instances(path: str | os.PathLike) -> int:
    path = Path(path)
    with open_file(path) as f:
        return file_layout(path, f)[0]


def file_dims(path: str | os.PathLike) -> dict[str, int]:
    path = Path(path)
    with open_file(path) as f:
        return file_layout(path, f)[1]
