"""LDDL's Parquet layout of BERT instances: writing it deterministically, balancing it across files, reading it back.

NVIDIA's PyTorch BERT since DeepLearningExamples moved to LDDL (`run_pretraining.py` calls
`lddl.torch.get_bert_pretrain_data_loader`) and Hugging Face's `datasets.load_dataset("parquet", ...)`
read these files. The schema is LDDL's (`lddl/dask/bert/pretrain.py`, `_save_parquet`): `A` and `B`
the two segments as space-joined WordPiece tokens (with static masking, the tokens after masking: the
loader takes them as input_ids), `is_random_next`, `num_tokens` (uint16, `len(A) + len(B) + 3`); with
static masking also `masked_lm_positions` (an `np.save` of the positions as uint16, LDDL's
`serialize_np_array`, byte for byte) and `masked_lm_labels` (the original tokens, space-joined); binned,
also `bin_id` (int64), as LDDL's binned writer adds it.

Masking (`masking`): `static` (the default: the instances and masks of our TFRecords, and the default
of DeepLearningExamples' `run.sub`) or `dynamic` (LDDL's own preprocessor's default: the same pairs,
unmasked, no mask columns; the loader masks each epoch). Either way the generator draws the masks, so
both hold the same pairs in the same order as every other layout.

Files. create-pretraining-data writes the instances round-robin over the files it is given, as every
layout does. A dataset (the Luigi tasks) is written twice: each shard's instances to a staged file,
grouped by bin (`--bin-size`: bin b holds `num_tokens` in (b * size, (b + 1) * size], LDDL's
`(num_tokens - 1) // bin_size`), then the finishing step (`plan_parts`, `write_part`) deals every bin
over `num_shards` files, `wiki_00000.parquet` (unbinned) or `wiki_00000.parquet_3` (bin 3: the
`.parquet_<bin>` extension LDDL's loader groups files by). Within a bin the files' instance counts are
what LDDL's loader asserts (`lddl/torch/datasets.py`, `ParquetDataset.__init__`): the largest holds
exactly one more than the smallest. A bin whose total divides by the file count cannot be dealt so;
its last instance is left out (`dropped`), which is what the loader would do with it anyway: it yields
only the smallest file's count from every file of a bin. A bin with no instance at all is refused
(LDDL's balancer and loader both fail on one).

Determinism: pyarrow's writer settings are pinned (`WRITER`), row groups are cut at fixed counts
(`ROW_GROUP`) and at bin boundaries, and the key-value metadata holds only the dataset's dimensions
and layout parameters: equal instances give equal bytes, whatever the worker count.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Iterator, Sequence

from shardkit.atomic import atomic_write_together
from shardkit.errors import PrepError
from shardkit.progress import Progress

from ..schema import BERT_INSTANCE, PRED, SEQ
from .base import BATCH, Layout
from .hdf5 import InstanceRows

MASKINGS = ("static", "dynamic")  # --masking; the first is the default
ROW_GROUP = 4096  # rows per row group: bounded memory when writing, and a staged bin read in pieces
# pyarrow's writer, pinned: what LDDL's balancer writes (pq.write_table: snappy), without statistics or
# dictionaries (near-unique strings: wasted work), with page checksums (a damaged page is an error, not data).
WRITER = dict(version="2.6", compression="snappy", use_dictionary=False, write_statistics=False,
              data_page_size=1 << 20, data_page_version="1.0", write_page_checksum=True, write_page_index=False)
META_KEY = b"wikiprep"  # the key-value metadata: the dimensions and the layout's parameters
_BIN_EXTENSION = re.compile(r"\.parquet_(\d+)$", re.IGNORECASE)


def _pa():
    import pyarrow as pa

    return pa


def _pq():
    import pyarrow.parquet as pq

    return pq


def _pc():
    import pyarrow.compute as pc

    return pc


@dataclass(frozen=True, kw_only=True)
class ParquetLayout(Layout):
    """LDDL's Parquet files: written from the rows HDF5 spills (`InstanceRows`), no index, balanced by a finishing step."""

    masking: str = MASKINGS[0]
    bin_size: int = 0  # 0: not binned

    parameters: ClassVar[tuple[str, ...]] = ("masking", "bin_size")
    maskings: ClassVar[tuple[str, ...]] = MASKINGS

    def with_parameters(self, **values) -> "ParquetLayout":
        """With its parameters set, and its folder named by them: `_parquet`, `_parquet_dynamic_bin64`, ..."""
        layout = super().with_parameters(**{k: v for k, v in values.items() if v is not None})
        if layout.masking not in MASKINGS:
            raise PrepError(f"--masking {layout.masking!r}: expected {' or '.join(MASKINGS)}")
        suffix = "_parquet" + ("_dynamic" if layout.masking == "dynamic" else "") + \
                 (f"_bin{layout.bin_size}" if layout.bin_size else "")
        return dataclasses.replace(layout, folder_suffix=suffix)

    @property
    def static(self) -> bool:
        return self.masking == "static"

    def bins(self, max_seq_length: int) -> int:
        """How many bins: LDDL's `target_seq_length // bin_size`; 1 when not binned."""
        return max_seq_length // self.bin_size if self.bin_size else 1

    def bin_of(self, num_tokens, max_seq_length: int):
        """The bin of `num_tokens` (an int or a numpy array): LDDL's `_to_dataframe_binned`."""
        import numpy as np

        if not self.bin_size:
            return num_tokens * 0
        return np.minimum((num_tokens - 1) // self.bin_size, self.bins(max_seq_length) - 1)

    def bin_range(self, b: int, max_seq_length: int) -> str:
        """'33-64': the token counts bin b holds."""
        if not self.bin_size:
            return f"1-{max_seq_length}"
        last = max_seq_length if b == self.bins(max_seq_length) - 1 else (b + 1) * self.bin_size
        return f"{b * self.bin_size + 1}-{last}"

    # -- writing ----------------------------------------------------------------------------------

    def check(self, options) -> None:
        seq = options.max_seq_length
        if self.bin_size < 0:
            raise PrepError(f"--bin-size {self.bin_size}: must be 0 (not binned) or a positive divisor of "
                            f"--max-seq-length {seq}")
        if self.bin_size and (self.bin_size > seq or seq % self.bin_size):
            raise PrepError(f"--bin-size {self.bin_size}: must divide --max-seq-length {seq} (LDDL's bins split "
                            f"the sequence length evenly)")
        if seq > 0xFFFF:
            raise PrepError(f"--max-seq-length {seq}: LDDL's num_tokens and masked_lm_positions are uint16")

    def check_shards(self, num_shards: int) -> None:
        if num_shards < 2:
            raise PrepError(f"--num-shards {num_shards}: a Parquet dataset needs at least 2 files per bin (LDDL's "
                            f"loader asserts that a bin's largest file holds one instance more than its smallest)")

    def check_outputs(self, output_files, index_files) -> None:
        listed = [p for p in index_files if p is not None]
        if listed:
            raise PrepError(f"index file {os.fspath(listed[0])}: an index lists the records of a TFRecord file; "
                            f"{os.fspath(output_files[0])} is Parquet (LDDL's layout has no index)")

    def encoder(self, max_seq_length: int, max_predictions_per_seq: int) -> InstanceRows:
        return InstanceRows(max_seq_length, max_predictions_per_seq)

    def writers(self, paths, index_paths, dims, *, overwrite=False, vocab=None) -> "ParquetFiles":
        if vocab is None:
            raise ValueError("the Parquet layout writes tokens as text: its writers need the vocabulary")
        return ParquetFiles(self, paths, dims, vocab, overwrite=overwrite)

    # -- the finishing step: balanced files per bin -----------------------------------------------

    @property
    def finishing(self) -> bool:
        return True

    def part_names(self, prefix: str, part: int, dims: dict[str, int]) -> list[str]:
        """The files finishing part `part` writes: file `part` of every bin."""
        if not self.bin_size:
            return [f"{prefix}_{part:05d}{self.shard_suffix}"]
        return [f"{prefix}_{part:05d}{self.shard_suffix}_{b}" for b in range(self.bins(dims[SEQ]))]

    def shard_bins(self, stats: dict, dims: dict[str, int]) -> list[int]:
        """A staged shard's instances per bin, from its writer's sequence_length_histogram."""
        counts = [0] * self.bins(dims[SEQ])
        for n, count in stats["sequence_length_histogram"].items():
            counts[int(self.bin_of(int(n), dims[SEQ]))] += count
        return counts

    def plan_parts(self, shard_stats: list[dict], dims: dict[str, int], num_parts: int) -> dict:
        """Which rows of which staged shards each finishing part writes, as JSON: the deal of every bin.

        Bin b's instances, taken shard after shard in shard order (each staged shard holds its bins one
        after another), are cut into `num_parts` runs, part j's of `base + (j < extra)` instances. PrepError
        for an empty bin."""
        per_shard = [self.shard_bins(st, dims) for st in shard_stats]
        starts = [[sum(c[:b]) for b in range(len(c))] for c in per_shard]  # each bin's first row in a staged file
        bins, parts = [], [[] for _ in range(num_parts)]
        for b in range(self.bins(dims[SEQ])):
            total = sum(c[b] for c in per_shard)
            if total == 0:
                raise PrepError(f"bin {b} ({self.bin_range(b, dims[SEQ])} tokens) holds no instance: LDDL's "
                                f"loader cannot read an empty bin; choose a larger --bin-size (or 0: not binned)")
            kept = total - 1 if total % num_parts == 0 else total  # a multiple cannot differ by one: drop one
            base, extra = divmod(kept, num_parts)
            bins.append({"bin": b, "tokens": self.bin_range(b, dims[SEQ]), "instances": total, "kept": kept,
                         "dropped": total - kept, "files": num_parts, "per_file": [base, base + 1],
                         "loader_yields": base * num_parts})
            shard, offset = 0, 0  # where the next run starts: a shard, and a row within its bin b
            for j in range(num_parts):
                want, runs = base + (j < extra), []
                while want:
                    while per_shard[shard][b] == offset:
                        shard, offset = shard + 1, 0
                    take = min(want, per_shard[shard][b] - offset)
                    runs.append([shard, starts[shard][b] + offset, take])
                    offset += take
                    want -= take
                parts[j].append(runs)
        return {"bins": bins, "dropped": sum(b["dropped"] for b in bins), "parts": parts}

    def write_part(self, plan: dict, part: int, staged: Sequence[Path], paths: Sequence[Path],
                   dims: dict[str, int], *, progress: Progress | None = None) -> list[int]:
        """Part `part` of `plan` (`plan_parts`): its file of every bin, from the staged shards, committed
        together; returns each file's instance count."""
        runs = plan["parts"][part]
        counts = []
        with atomic_write_together(list(paths)) as temps:
            for b, (temp, path) in enumerate(zip(temps, paths)):
                with _open_writer(temp, path, self, dims) as writer:
                    pending = _Pending(writer)
                    for shard, first, take in runs[b]:
                        for table in read_rows(staged[shard], first, take):
                            pending.add(table)
                    pending.flush()
                    counts.append(pending.written)
                if progress is not None:
                    progress(b + 1, len(paths))
        return counts

    def check_counts(self, counts: dict[Path, int]) -> None:
        """The files of every bin as LDDL's loader asserts them (`ParquetDataset.__init__`): bins numbered from
        0 without a gap, as many files in each, the largest of a bin one instance more than the smallest."""
        by_bin: dict[int, list[int]] = {}
        for path, n in counts.items():
            found = _BIN_EXTENSION.search(path.name)
            by_bin.setdefault(int(found[1]) if found else -1, []).append(n)
        if -1 in by_bin and len(by_bin) > 1:
            raise PrepError(f"{next(iter(counts)).parent}: binned and unbinned Parquet files together")
        if -1 not in by_bin and sorted(by_bin) != list(range(len(by_bin))):
            raise PrepError(f"{next(iter(counts)).parent}: bins {sorted(by_bin)}: LDDL's loader needs bins 0 to "
                            f"{len(by_bin) - 1}")
        sizes = {len(v) for v in by_bin.values()}
        if len(sizes) > 1:
            raise PrepError(f"{next(iter(counts)).parent}: bins of {sorted(sizes)} files: every bin has as many")
        for b, ns in sorted(by_bin.items()):
            if max(ns) != min(ns) + 1:
                what = "the files" if b < 0 else f"bin {b}'s files"
                raise PrepError(f"{next(iter(counts)).parent}: {what} hold {min(ns)} to {max(ns)} instances; LDDL's "
                                f"loader asserts that the largest holds exactly one more than the smallest")

    # -- reading back -----------------------------------------------------------------------------

    def suffix_of(self, path: Path) -> str | None:
        """`.parquet` for `x.parquet` and for a bin's `x.parquet_3` (LDDL's binned files)."""
        return self.shard_suffix if _BIN_EXTENSION.search(path.name) else super().suffix_of(path)

    def file_dims(self, path: Path) -> dict[str, int]:
        return file_meta(path)["dims"]

    def recognize(self, path: Path, family: list[Layout]) -> tuple[Layout, dict[str, int]]:
        meta = file_meta(path)
        return self.with_parameters(masking=meta["masking"], bin_size=meta["bin_size"]), meta["dims"]

    def count(self, path: Path) -> int:
        return _open(path).metadata.num_rows

    def batches(self, path: Path, dims: dict[str, int], *, tensorflow: bool = True,
                vocab: Path | None = None) -> Iterator[dict]:
        yield from read_batches(path, dims, self, vocab, BATCH)

    def instances(self, path: Path, dims: dict[str, int], n: int, vocab: Path | None = None
                  ) -> Iterator[tuple[str, dict]]:
        shown = 0
        for b in read_batches(path, dims, self, vocab, min(n, BATCH)):
            for i in range(len(b["input_ids"])):
                if shown >= n:
                    return
                yield f"instance {shown}", {name: b[name][i].tolist() for name in BERT_INSTANCE.names}
                shown += 1


# create-pretraining-data writes Parquet to an --output_file named `.parquet`.
LAYOUT = ParquetLayout(name="parquet", title="Parquet, LDDL's layout", file_kind="Parquet",
                       flags=("parquet", "standard"), folder_suffix="_parquet", suffixes=(".parquet",),
                       indexed=False, framed=False, named_outputs=True,
                       flags_note="Parquet holds LDDL's layout (--masking static or dynamic)",
                       compiled_code=2)  # _speedups.c: LAYOUT_ROWS, the rows HDF5 spills too


# ---------------------------------------------------------------------------------------------
# The schema and the encoding of rows

def arrow_schema(layout: ParquetLayout, dims: dict[str, int]):
    """LDDL's schema (`_save_parquet`'s `base_schema`, + the mask columns, + bin_id), with our key-value metadata."""
    pa = _pa()
    fields = [("A", pa.string()), ("B", pa.string()), ("is_random_next", pa.bool_()), ("num_tokens", pa.uint16())]
    if layout.static:
        fields += [("masked_lm_positions", pa.binary()), ("masked_lm_labels", pa.string())]
    if layout.bin_size:
        fields.append(("bin_id", pa.int64()))
    meta = {"max_seq_length": dims[SEQ], "max_predictions_per_seq": dims[PRED], "masking": layout.masking,
            "bin_size": layout.bin_size}
    return pa.schema(fields, metadata={META_KEY: json.dumps(meta, sort_keys=True).encode()})


_NPY_HEADERS: dict[int, bytes] = {}


def npy_header(m: int) -> bytes:
    """What `np.save` writes before the data of a uint16 array of m values (LDDL's `serialize_np_array`)."""
    header = _NPY_HEADERS.get(m)
    if header is None:
        import numpy as np

        f = io.BytesIO()
        np.save(f, np.zeros(m, np.uint16))
        header = _NPY_HEADERS[m] = f.getvalue()[:-2 * m or None]
    return header


class TableEncoder:
    """Blocks of spilled rows (`InstanceRows`) as Arrow tables of LDDL's schema: the tokens looked up and joined by
    pyarrow (no per-token Python), the positions serialized as LDDL's `np.save` gives them."""

    def __init__(self, layout: ParquetLayout, dims: dict[str, int], vocab):
        pa = _pa()
        self.layout, self.dims = layout, dims
        self.rows = InstanceRows(dims[SEQ], dims[PRED])
        self.tokens = pa.array(vocab.id_to_token, pa.string())
        self.schema = arrow_schema(layout, dims)

    def _joined(self, ids, lengths):
        """Each row's tokens (ids: every row's, one after another; lengths: per row) joined by spaces."""
        import numpy as np

        pa, pc = _pa(), _pc()
        offsets = np.zeros(len(lengths) + 1, np.int32)
        np.cumsum(lengths, out=offsets[1:])
        words = self.tokens.take(pa.array(ids.astype(np.int32, copy=False)))
        return pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), words), " ")

    def table(self, rows: Sequence[bytes]):
        import numpy as np

        pa = _pa()
        block = self.rows.block(rows)
        ids, seq = block["input_ids"], self.dims[SEQ]
        n = block["input_mask"].sum(axis=1, dtype=np.int64)
        len_b = block["segment_ids"].sum(axis=1, dtype=np.int64) - 1
        len_a = n - len_b - 3
        positions = block["masked_lm_positions"]
        masked = positions > 0  # [CLS], at 0, is never masked
        m = masked.sum(axis=1)
        r, c = np.nonzero(masked)
        if not self.layout.static:  # the pairs as they were before masking: the loader masks them
            ids[r, positions[r, c]] = block["masked_lm_ids"][r, c]
        slot = np.arange(seq)
        a = (slot >= 1) & (slot <= len_a[:, None])
        b = (slot >= len_a[:, None] + 2) & (slot < n[:, None] - 1)
        columns = {"A": self._joined(ids[a], len_a), "B": self._joined(ids[b], len_b),
                   "is_random_next": pa.array(block["next_sentence_labels"].astype(bool)),
                   "num_tokens": pa.array(n.astype(np.uint16))}
        if self.layout.static:
            packed = positions[masked].astype("<u2").tobytes()
            ends = np.cumsum(2 * m).tolist()
            columns["masked_lm_positions"] = pa.array(
                [npy_header(k) + packed[e - 2 * k:e] for k, e in zip(m.tolist(), ends)], pa.binary())
            columns["masked_lm_labels"] = self._joined(block["masked_lm_ids"][masked], m)
        if self.layout.bin_size:
            columns["bin_id"] = pa.array(self.layout.bin_of(n, seq).astype(np.int64))
        return pa.Table.from_arrays(list(columns.values()), schema=self.schema)


# ---------------------------------------------------------------------------------------------
# Writing

@contextlib.contextmanager
def _open_writer(temp, path: Path, layout: ParquetLayout, dims: dict[str, int]):
    """A pyarrow ParquetWriter on the open temporary `temp` of `path`, with the pinned settings."""
    pq = _pq()
    try:
        writer = pq.ParquetWriter(temp, arrow_schema(layout, dims), **WRITER)
    except OSError as e:
        raise PrepError(f"{path}: cannot write ({e})") from None
    try:
        yield writer
    finally:
        writer.close()


class _Pending:
    """Tables to a ParquetWriter in row groups of exactly ROW_GROUP rows (the last may be shorter), whatever the
    sizes of the tables added: where row groups end depends on the rows alone."""

    def __init__(self, writer):
        self.writer, self.tables, self.rows, self.written = writer, [], 0, 0

    def add(self, table) -> None:
        self.tables.append(table)
        self.rows += table.num_rows
        while self.rows >= ROW_GROUP:
            self._write(ROW_GROUP)

    def _write(self, n: int) -> None:
        pa = _pa()
        whole = pa.concat_tables(self.tables)
        self.writer.write_table(whole.slice(0, n), row_group_size=n)
        rest = whole.slice(n)
        self.tables, self.rows, self.written = [rest] if rest.num_rows else [], rest.num_rows, self.written + n

    def flush(self) -> None:
        if self.rows:
            self._write(self.rows)


def _spilled_lengths(fd: int, offsets: array) -> "object":
    """The token count of every spilled row (`InstanceRows`: the head's first int32), in spill order, read in
    blocks of whole rows."""
    import numpy as np

    n = len(offsets) - 1
    ends = np.frombuffer(offsets, dtype=np.int64)
    out = np.empty(n, np.int64)
    i = 0
    while i < n:
        j = max(i + 1, int(np.searchsorted(ends, ends[i] + (8 << 20), side="right")) - 1)
        j = min(j, n)
        data = np.frombuffer(os.pread(fd, int(ends[j] - ends[i]), int(ends[i])), np.uint8)
        at = (ends[i:j] - ends[i])[:, None] + np.arange(4)
        out[i:j] = data[at].astype(np.int64) @ (1 << (8 * np.arange(4)))
        i = j
    return out


class ParquetFiles:
    """Several Parquet files committed together (`atomic_write_together`): none appears unless all are complete.

    Output k gets spilled rows order[k], order[k + n], ... (the round-robin of every layout); with a bin size, its
    rows grouped by bin (a stable sort, each bin's rows in that order), row groups never crossing a bin."""

    def __init__(self, layout: ParquetLayout, paths: Sequence[str | os.PathLike], dims: dict[str, int], vocab, *,
                 overwrite: bool = False):
        self.layout, self.paths, self.dims = layout, [Path(p) for p in paths], dims
        self.encoder = TableEncoder(layout, dims, vocab)
        self.overwrite = overwrite

    def __enter__(self) -> "ParquetFiles":
        self._ctx = atomic_write_together(self.paths, overwrite=self.overwrite)
        self._temps = self._ctx.__enter__()
        return self

    def copy(self, order: array, offsets: array, fd: int, progress: Progress | None = None) -> None:
        import numpy as np

        total, n_out = len(order), len(self.paths)
        ordered = np.frombuffer(order, dtype=np.int64)
        bins = None
        if self.layout.bin_size:
            bins = self.layout.bin_of(_spilled_lengths(fd, offsets), self.dims[SEQ])
        done, pread = 0, os.pread
        for k, (temp, path) in enumerate(zip(self._temps, self.paths)):
            mine = ordered[k::n_out]
            runs = [mine]
            if bins is not None:
                mine = mine[np.argsort(bins[mine], kind="stable")]
                cuts = np.flatnonzero(np.diff(bins[mine])) + 1
                runs = np.split(mine, cuts)
            with _open_writer(temp, path, self.layout, self.dims) as writer:
                for run in runs:
                    for start in range(0, len(run), ROW_GROUP):
                        if progress is not None:
                            progress(done, total)
                        part = run[start:start + ROW_GROUP].tolist()
                        rows = [pread(fd, offsets[i + 1] - offsets[i], offsets[i]) for i in part]
                        writer.write_table(self.encoder.table(rows), row_group_size=ROW_GROUP)
                        done += len(part)

    def __exit__(self, exc_type, exc, tb):
        return self._ctx.__exit__(exc_type, exc, tb)


# ---------------------------------------------------------------------------------------------
# Reading

def _open(path: Path):
    """`path` as a pyarrow ParquetFile (its footer read), its pages' checksums verified as they are read."""
    path = Path(path)
    if not path.is_file():
        raise PrepError(f"{path}: no such Parquet file")
    try:
        return _pq().ParquetFile(path, page_checksum_verification=True)
    except Exception as e:  # pyarrow's ArrowInvalid, OSError
        raise PrepError(f"{path}: not a Parquet file ({' '.join(str(e).split())})") from None


def file_meta(path: Path) -> dict:
    """{"dims", "masking", "bin_size"} of a file we wrote, from its key-value metadata; PrepError else."""
    meta = (_open(path).schema_arrow.metadata or {}).get(META_KEY)
    try:
        held = json.loads(meta)
        return {"dims": {SEQ: int(held["max_seq_length"]), PRED: int(held["max_predictions_per_seq"])},
                "masking": str(held["masking"]), "bin_size": int(held["bin_size"])}
    except (TypeError, ValueError, KeyError):
        raise PrepError(f"{path}: no wikiprep metadata (its sequence length and mask count); give the dataset "
                        f"folder, whose dataset.json says them") from None


def read_rows(path: Path, first: int, count: int):
    """Tables of rows first .. first + count - 1 of a Parquet file, a row group at a time."""
    f = _open(path)
    meta = f.metadata
    at = 0
    for g in range(meta.num_row_groups):
        rows = meta.row_group(g).num_rows
        lo, hi = max(first, at), min(first + count, at + rows)
        if lo < hi:
            try:
                table = f.read_row_group(g)
            except Exception as e:
                raise PrepError(f"{path}: cannot read row group {g} ({' '.join(str(e).split())})") from None
            yield table.slice(lo - at, hi - lo)
        at += rows
    if at < first + count:
        raise PrepError(f"{path}: {at} rows, but its receipt's counts need {first + count}")


def _expected_schema(layout: ParquetLayout) -> dict[str, str]:
    return {f.name: str(f.type) for f in arrow_schema(layout, {SEQ: 0, PRED: 0})}


def read_batches(path: Path, dims: dict[str, int], layout: ParquetLayout, vocab: Path | None,
                 rows: int = BATCH) -> Iterator[dict]:
    """The instances of a Parquet file as standard-layout batches (BERT_INSTANCE's features, int64 and float32),
    the tokens looked up in `vocab`. PrepError naming the file and instance that break the layout: a column
    missing or of another type, a token not in the vocabulary, a length, position or bin that does not fit."""
    import numpy as np

    from ..tokenization import Vocab

    pa, pc = _pa(), _pc()
    path = Path(path)
    f = _open(path)
    held = {field.name: str(field.type) for field in f.schema_arrow}
    want = _expected_schema(layout)
    if held != want:
        raise PrepError(f"{path}: columns {held}; LDDL's layout ({layout.masking} masking"
                        f"{', binned' if layout.bin_size else ''}) has {want}")
    if vocab is None:
        raise PrepError(f"{path}: Parquet holds the tokens as text: reading it needs the vocab.txt it was made with "
                        f"(beside the file, or --vocab-file)")
    v = Vocab.load(vocab)
    keys = pa.array(list(v.ids), pa.string())
    key_ids = np.fromiter(v.ids.values(), np.int64, len(v.ids))
    seq, pred = dims[SEQ], dims[PRED]
    found = _BIN_EXTENSION.search(path.name)
    file_bin = int(found[1]) if found else None
    done = 0

    def lookup(strings, what: str):
        """(ids of every row's tokens, one after another; tokens per row) of a string column."""
        lists = pc.split_pattern(strings, " ")
        lengths = pc.list_value_length(lists).to_numpy(zero_copy_only=False)
        flat = pc.list_flatten(lists)
        index = pc.index_in(flat, value_set=keys)
        if index.null_count:
            k = int(np.argmax(index.is_null().to_numpy(zero_copy_only=False)))
            row = int(np.searchsorted(np.cumsum(lengths), k, side="right"))
            raise PrepError(f"{path}: instance {done + row}: {what} token {flat[k].as_py()!r} is not in {vocab}")
        return key_ids[index.to_numpy(zero_copy_only=False)], lengths.astype(np.int64)

    for batch in f.iter_batches(batch_size=rows):
        n_rows = batch.num_rows
        if batch.column("A").null_count or batch.column("B").null_count:
            raise PrepError(f"{path}: from instance {done}: an A or B that is null")
        a_ids, la = lookup(batch.column("A"), "A")
        b_ids, lb = lookup(batch.column("B"), "B")
        n = la + lb + 3
        num_tokens = batch.column("num_tokens").to_numpy(zero_copy_only=False).astype(np.int64)
        bad = np.flatnonzero((n != num_tokens) | (la < 1) | (lb < 1) | (n > seq))
        if len(bad):
            i = int(bad[0])
            raise PrepError(f"{path}: instance {done + i}: A {la[i]} and B {lb[i]} tokens, num_tokens {num_tokens[i]}"
                            f" (expected len(A) + len(B) + 3, each at least 1, at most {seq} in all)")
        if layout.bin_size:
            bin_ids = batch.column("bin_id").to_numpy(zero_copy_only=False)
            wrong = np.flatnonzero((bin_ids != layout.bin_of(n, seq)) |
                                   (bin_ids != (bin_ids if file_bin is None else file_bin)))
            if len(wrong):
                i = int(wrong[0])
                raise PrepError(f"{path}: instance {done + i}: bin_id {bin_ids[i]}, but {n[i]} tokens are bin "
                                f"{int(layout.bin_of(n[i], seq))}" + ("" if file_bin is None else
                                                                      f" (the file's bin: {file_bin})"))
        slot = np.arange(seq)
        ids = np.zeros((n_rows, seq), np.int64)
        ids[:, 0] = v.cls_id
        ids[(slot >= 1) & (slot <= la[:, None])] = a_ids
        ids[np.arange(n_rows), la + 1] = v.sep_id
        ids[(slot >= la[:, None] + 2) & (slot < n[:, None] - 1)] = b_ids
        ids[np.arange(n_rows), n - 1] = v.sep_id
        real = slot < n[:, None]
        out = {"input_ids": ids, "input_mask": real.astype(np.int64),
               "segment_ids": ((slot >= la[:, None] + 2) & real).astype(np.int64),
               "masked_lm_positions": np.zeros((n_rows, pred), np.int64),
               "masked_lm_ids": np.zeros((n_rows, pred), np.int64),
               "masked_lm_weights": np.zeros((n_rows, pred), np.float32),
               "next_sentence_labels": batch.column("is_random_next").to_numpy(zero_copy_only=False)
               .astype(np.int64).reshape(-1, 1)}
        if layout.static:
            label_ids, m = lookup(batch.column("masked_lm_labels"), "masked_lm_labels")
            positions = []
            for i, value in enumerate(batch.column("masked_lm_positions").to_pylist()):
                if value is None or value[:len(npy_header(m[i]))] != npy_header(m[i]) or \
                        len(value) != len(npy_header(m[i])) + 2 * m[i]:
                    raise PrepError(f"{path}: instance {done + i}: masked_lm_positions is not the np.save of "
                                    f"{m[i]} uint16 positions (one per masked_lm_labels token)")
                positions.append(value[len(npy_header(m[i])):])
            if (m > pred).any():
                i = int(np.argmax(m > pred))
                raise PrepError(f"{path}: instance {done + i}: {m[i]} masked tokens, more than {pred}")
            slots = np.arange(pred) < m[:, None]
            out["masked_lm_positions"][slots] = np.frombuffer(b"".join(positions), "<u2")
            out["masked_lm_ids"][slots] = label_ids
            out["masked_lm_weights"][slots] = 1.0
        done += n_rows
        yield out
