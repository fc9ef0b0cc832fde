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
layout does. A dataset (the Luigi tasks) stages each shard's instances (`staged`: `StagedLayout`, the rows
the generator spills, grouped by bin; `--bin-size`: bin b holds `num_tokens` in (b * size, (b + 1) * size],
LDDL's `(num_tokens - 1) // bin_size`), then the finishing step (`plan_parts`, `write_part`) deals every bin
over `num_shards` files, `wiki_00000.parquet` (unbinned) or `wiki_00000.parquet_3` (bin 3: the
`.parquet_<bin>` extension LDDL's loader groups files by): Parquet is encoded once, by the finishing
parts. Within a bin the files' instance counts are what LDDL's loader asserts (`lddl/torch/datasets.py`,
`ParquetDataset.__init__`): the largest holds exactly one more than the smallest. A bin whose total divides
by the file count cannot be dealt so; its last instance is left out (`dropped`), which is what the loader
would do with it anyway: it yields only the smallest file's count from every file of a bin. A bin with no
instance at all is refused (LDDL's balancer and loader both fail on one).

Writing. The generator spills each instance as HDF5's row (`hdf5.InstanceRows`: token ids as varints, and the
compiled generator's code for them), framed as a TFRecord (a CRC32C each). The copy-out is every layout's
(`framed.copy_spilled`), and a block of rows becomes Arrow arrays straight from offsets and bytes (`row_columns`,
compiled too: each id's text copied from a table): no Python runs per row. A finishing part counts its files'
report figures from the same rows (`row_columns` gives their standard layout's arrays too, as `read_batches` reads
them back), not by looking every token up again in the files it wrote. Only `masked_lm_positions` is compressed
(`COMPRESSED`: docs/performance.md has the cost of compressing the rest).

Determinism: pyarrow's writer settings are pinned (`WRITER`), row groups are cut at fixed counts
(`ROW_GROUP`) and at bin boundaries, and the key-value metadata holds only the dataset's dimensions
and layout parameters: equal instances give equal bytes, whatever the worker count.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import os
import re
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Iterator, Sequence

from shardkit.atomic import atomic_write_together
from shardkit.errors import PrepError
from shardkit.progress import Progress
from shardkit.records import frame_record, record_writers
from shardkit.verified import damaged

from .. import speedups
from ..schema import BERT_INSTANCE, PRED, SEQ
from .base import BATCH, Layout
from .framed import copy_spilled
from .hdf5 import InstanceRows

MASKINGS = ("static", "dynamic")  # --masking; the first is the default
ROW_GROUP = 4096  # rows per row group: bounded memory when writing
# pyarrow's writer, pinned: without statistics or dictionaries (near-unique strings: wasted work), without page
# checksums (as LDDL writes them: a CRC over every page cost a tenth more CPU to write and to read back, and no
# trainer's reader checks them by default; the dataset's integrity is MANIFEST.json's sha256, which `verify` checks),
# and compressed where compression pays (COMPRESSED).
WRITER = dict(version="2.6", use_dictionary=False, write_statistics=False, data_page_size=1 << 20,
              data_page_version="1.0", write_page_checksum=False, write_page_index=False)
# LDDL writes snappy throughout (pq.write_table's default). Here only masked_lm_positions is: 128 of its ~150 bytes
# a row are np.save's header, the same in every row (snappy: 30 MB to 6 for 186,366 rows). The text columns are not:
# snappy gives them 1.7x for 0.4 CPU-s per 186,366 rows, more than the TFRecord writer spends copying its records
# out, and they stay as large as the TFRecords of the same instances (benchmarks/bench_parquet.py, performance.md).
COMPRESSED = {"masked_lm_positions": "snappy"}
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
    """LDDL's Parquet files: written from spilled rows (`InstanceRows`, framed), no index, balanced by a finishing step
    from a dataset's staged shards (`staged`)."""

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

    def encoder(self, max_seq_length: int, max_predictions_per_seq: int, vocab=None) -> InstanceRows:
        return InstanceRows(max_seq_length, max_predictions_per_seq)

    def writers(self, paths, index_paths, dims, *, overwrite=False, vocab=None) -> "ParquetFiles":
        if vocab is None:
            raise ValueError("the Parquet layout writes tokens as text: its writers need the vocabulary")
        return ParquetFiles(self, paths, dims, vocab, overwrite=overwrite)

    # -- the finishing step: balanced files per bin -----------------------------------------------

    @property
    def finishing(self) -> bool:
        return True

    @property
    def staged(self) -> "StagedLayout":
        return StagedLayout(name=f"{self.name}-staged", title=f"{self.title}, staged rows", file_kind="staged rows",
                            flags=self.flags, folder_suffix=self.folder_suffix, suffixes=(".rows",), indexed=False,
                            framed=True, compiled_code=self.compiled_code, parquet=self)

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

    def part_shards(self, plan: dict, part: int) -> list[int]:
        """The staged shards part `part` reads."""
        return sorted({shard for runs in plan["parts"][part] for shard, _, _ in runs})

    def write_part(self, plan: dict, part: int, staged: Sequence[Path], paths: Sequence[Path],
                   dims: dict[str, int], vocab, *, progress: Progress | None = None,
                   observe: Callable[[int, dict], None] | None = None) -> list[int]:
        """Part `part` of `plan` (`plan_parts`): its file of every bin, from the staged shards' rows (`StagedLayout`:
        bin b's rows of a shard from its first row of bin b on), committed together; returns each file's instance
        count. `observe(i, batch)`: the standard-layout batches of file i, as `read_batches` reads them back."""
        runs, counts, tables = plan["parts"][part], [], _Tables(self, dims, vocab)
        with atomic_write_together(list(paths)) as temps:
            for b, (temp, path) in enumerate(zip(temps, paths)):
                with _open_writer(temp, path, self, dims) as writer:
                    pending = _Pending(writer)

                    def use(data: bytes, skip: int, n: int) -> None:
                        def make(first: int, count: int):
                            if observe is None:
                                return tables.table(data, first, count)
                            table, batch = tables.table(data, first, count, batch=True)
                            observe(b, batch)
                            return table

                        pending.add_rows(make, skip, n)

                    for shard, first, take in runs[b]:
                        read_staged(staged[shard], first, take, use)
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
                       indexed=False, framed=True, named_outputs=True,
                       flags_note="Parquet holds LDDL's layout (--masking static or dynamic)",
                       compiled_code=2)  # _speedups.c: LAYOUT_ROWS, HDF5's rows (InstanceRows), framed


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


def _packed(items: list[bytes]) -> tuple[bytes, array]:
    """`items` one after another, and where each ends (int64s): a table for the compiled code."""
    ends, at = array("q"), 0
    for item in items:
        at += len(item)
        ends.append(at)
    return b"".join(items), ends


def token_text(vocab) -> tuple[bytes, array]:
    """Every vocab id's token as UTF-8, packed (`_packed`): the compiled encoder's table."""
    return _packed([t.encode("utf-8") for t in vocab.id_to_token])


def npy_headers(max_predictions_per_seq: int) -> tuple[bytes, array]:
    """`npy_header(m)` for m = 0 .. max_predictions_per_seq, packed (`_packed`)."""
    return _packed([npy_header(m) for m in range(max_predictions_per_seq + 1)])


_HEAD = struct.Struct("<6I")  # InstanceRows.HEAD, read as the compiled twins read it: unsigned
_VARINT = re.compile(rb"[\x80-\xff]*[\x00-\x7f]")


@functools.cache
def _varint_value(code: bytes) -> int:
    return sum((byte & 0x7F) << (7 * i) for i, byte in enumerate(code))


def _ids(data: bytes, k: int, limit: int) -> list[int]:
    """Exactly k varints, each of at most 5 bytes and below `limit`, that make up `data`; ValueError else."""
    codes = _VARINT.findall(data)
    if len(codes) != k or sum(map(len, codes)) != len(data) or any(len(c) > 5 for c in codes):
        raise ValueError("rows: token ids that do not match the row's head or the vocabulary")
    ids = list(map(_varint_value, codes))
    if any(i >= limit for i in ids):
        raise ValueError("rows: token ids that do not match the row's head or the vocabulary")
    return ids


def _framed_rows(data: bytes, first: int, count: int, limit: int, unmask: bool) -> Iterator[tuple]:
    """Rows first .. first + count - 1 of `data`, framed rows (`InstanceRows`' rows, each framed as a TFRecord), every
    row up to them checked: (n, len_a, m, is_random, token ids, positions, masked ids) each, ids below `limit`; with
    `unmask`, the masked ids put back at their positions. ValueError for a row cut short, failing its checksum or not
    holding what its head says (`_speedups.c`, next_row and decode_row, are the compiled twin)."""
    at = 0
    for k in range(first + count):
        length = struct.unpack_from("<Q", data, at)[0] if len(data) - at >= 16 else -1
        if not 0 <= length <= len(data) - at - 16:
            raise ValueError("rows: a row cut short")
        payload, at = _unframed(data[at:at + 16 + length]), at + 16 + length
        if payload is None:
            raise ValueError("rows: a row whose checksum does not match")
        if length < _HEAD.size:
            raise ValueError("rows: a row that does not hold what its head says")
        n, len_a, m, is_random, ids_len, labels_len = _HEAD.unpack_from(payload)
        if is_random > 1 or m > n or len_a + 3 > n or _HEAD.size + 4 * m + ids_len + labels_len != length:
            raise ValueError("rows: a row that does not hold what its head says")
        if k < first:
            continue
        at_ids = _HEAD.size + 4 * m
        ids = _ids(payload[at_ids:at_ids + ids_len], n, limit)
        labels = _ids(payload[at_ids + ids_len:], m, limit)
        positions = list(struct.unpack_from(f"<{m}I", payload, _HEAD.size))
        if any(q >= n for q in positions):
            raise ValueError("rows: a masked position past the row's tokens")
        if unmask:
            for q, label in zip(positions, labels):
                ids[q] = label
        yield n, len_a, m, is_random, ids, positions, labels


BATCH_ARRAYS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
                "next_sentence_labels")  # what row_columns gives with a batch, in this order


def row_columns(data: bytes, first: int, count: int, text: bytes, token_ends: array, headers: bytes,
                header_ends: array, masks: bool, batch: tuple[int, int] | None = None) -> tuple:
    """Framed rows first .. first + count - 1 of `data` as the Arrow buffers of LDDL's columns: num_tokens (uint16s),
    is_random_next (a bitmap), then int32 offsets and bytes of A and B (space-joined token text: id i's is
    text[token_ends[i - 1]:token_ends[i]]) and, with `masks`, masked_lm_positions (each after np.save's header for
    its count, `headers[header_ends[m - 1]:header_ends[m]]`) and masked_lm_labels. Without `masks` (dynamic
    masking), A and B before masking. With `batch` (seq, pred): (those buffers, the same rows as the standard
    layout's arrays, BATCH_ARRAYS: int64s, masked_lm_weights float32s, zero-padded; as `read_batches` reads them
    back). `_speedups.row_columns` is the compiled twin; ValueError for a row that does not fit."""
    if any(e < (token_ends[i - 1] if i else 0) or e > len(text) for i, e in enumerate(token_ends)):
        raise ValueError("row_columns: token_ends must rise within token_text")
    if any(e < (header_ends[h - 1] if h else 0) or e > len(headers) for h, e in enumerate(header_ends)):
        raise ValueError("row_columns: header_ends must rise within headers")
    token = [text[token_ends[i - 1] if i else 0:e] for i, e in enumerate(token_ends)]
    seq, pred = batch if batch is not None else (0, 0)
    arrays = [array("f" if name == "masked_lm_weights" else "q", bytes((4 if name == "masked_lm_weights" else 8) *
                    count * (1 if name == "next_sentence_labels" else pred if name.startswith("masked") else seq)))
              for name in BATCH_ARRAYS]
    ids_out, mask_out, segments_out, positions_out, labels_out, weights_out, next_out = arrays
    num_tokens, bits = array("H"), bytearray((count + 7) // 8)
    columns = [([0], []) for _ in range(4 if masks else 2)]

    def put(column, value: bytes) -> None:
        column[0].append(column[0][-1] + len(value))
        column[1].append(value)

    for r, (n, len_a, m, is_random, ids, positions, labels) in enumerate(
            _framed_rows(data, first, count, len(token_ends), unmask=not masks)):
        if batch is not None and (n > seq or m > pred):
            raise ValueError("row_columns: a row longer than the batch's seq tokens or pred masks")
        num_tokens.append(n & 0xFFFF)
        if is_random:
            bits[r // 8] |= 1 << (r % 8)
        put(columns[0], b" ".join(token[i] for i in ids[1:len_a + 1]))
        put(columns[1], b" ".join(token[i] for i in ids[len_a + 2:n - 1]))
        if masks:
            if m >= len(header_ends):
                raise ValueError("row_columns: more masks than header_ends has headers")
            put(columns[2], headers[header_ends[m - 1] if m else 0:header_ends[m]] +
                struct.pack(f"<{m}H", *(q & 0xFFFF for q in positions)))
            put(columns[3], b" ".join(token[i] for i in labels))
        if batch is not None:
            m = m if masks else 0
            ids_out[r * seq:r * seq + n] = array("q", ids)
            mask_out[r * seq:r * seq + n] = array("q", [1] * n)
            segments_out[r * seq:r * seq + n] = array("q", [int(i >= len_a + 2) for i in range(n)])
            positions_out[r * pred:r * pred + m] = array("q", positions[:m])
            labels_out[r * pred:r * pred + m] = array("q", labels[:m])
            weights_out[r * pred:r * pred + m] = array("f", [1.0] * m)
            next_out[r] = is_random
    out = [num_tokens.tobytes(), bytes(bits)]
    for offsets, values in columns:
        out += [struct.pack(f"<{len(offsets)}i", *offsets), b"".join(values)]
    return tuple(out) if batch is None else (tuple(out), tuple(a.tobytes() for a in arrays))


# ---------------------------------------------------------------------------------------------
# Writing

@contextlib.contextmanager
def _open_writer(temp, path: Path, layout: ParquetLayout, dims: dict[str, int]):
    """A pyarrow ParquetWriter on the open temporary `temp` of `path`, with the pinned settings."""
    pq = _pq()
    try:
        schema = arrow_schema(layout, dims)
        compression = {name: COMPRESSED.get(name, "none") for name in schema.names}
        writer = pq.ParquetWriter(temp, schema, compression=compression, **WRITER)
    except OSError as e:
        raise PrepError(f"{path}: cannot write ({e})") from None
    try:
        yield writer
    finally:
        writer.close()


class _Pending:
    """Tables to a ParquetWriter in row groups of exactly ROW_GROUP rows (the last may be shorter), or of the sizes
    `groups` gives, whatever the sizes of the tables added: where row groups end depends on the rows alone, and
    each is written from one chunk (pyarrow cuts pages where a chunk ends)."""

    def __init__(self, writer, groups: Sequence[int] | None = None):
        self.writer, self.tables, self.rows, self.written = writer, [], 0, 0
        self.groups = iter(groups) if groups is not None else None
        self.next = self._next_group()

    def _next_group(self) -> int:
        return ROW_GROUP if self.groups is None else next(self.groups, 0)

    def add(self, table) -> None:
        self.tables.append(table)
        self.rows += table.num_rows
        while self.next and self.rows >= self.next:
            self._write(self.next)
            self.next = self._next_group()

    def add_rows(self, make: Callable[[int, int], object], first: int, count: int) -> None:
        """Rows first .. first + count - 1 of a block, made into tables by `make(first, n)` a window at a time, each
        window ending where a row group does: a group is then written from the one table made for it, not from a
        copy of two joined, and a window's text is at most a row group's."""
        while count:
            n = min(count, self.next - self.rows) if self.next else count
            self.add(make(first, n))
            first, count = first + n, count - n

    def _write(self, n: int) -> None:
        pa = _pa()
        whole = pa.concat_tables(self.tables)
        group = whole.slice(0, n)
        if any(c.num_chunks > 1 for c in group.columns):
            group = group.combine_chunks()
        self.writer.write_table(group, row_group_size=n)
        rest = whole.slice(n)
        self.tables, self.rows, self.written = [rest] if rest.num_rows else [], rest.num_rows, self.written + n

    def flush(self) -> None:
        if self.rows:
            self._write(self.rows)


def _row_groups(counts) -> list[int]:
    """Row group sizes for runs of `counts` rows (a bin's each): ROW_GROUP rows each, a run's last shorter."""
    sizes = []
    for c in counts:
        full, rest = divmod(int(c), ROW_GROUP)
        sizes += [ROW_GROUP] * full + ([rest] if rest else [])
    return sizes


def _spilled_lengths(fd: int, offsets: array) -> "object":
    """The token count of every spilled row (`InstanceRows`, framed: the head's first int32, after the frame's 12
    bytes), in spill order, read in blocks of whole rows."""
    import numpy as np

    n = len(offsets) - 1
    ends = np.frombuffer(offsets, dtype=np.int64)
    out = np.empty(n, np.int64)
    i = 0
    while i < n:
        j = max(i + 1, int(np.searchsorted(ends, ends[i] + (8 << 20), side="right")) - 1)
        j = min(j, n)
        data = np.frombuffer(os.pread(fd, int(ends[j] - ends[i]), int(ends[i])), np.uint8)
        at = (ends[i:j] - ends[i])[:, None] + 12 + np.arange(4)
        out[i:j] = data[at].astype(np.int64) @ (1 << (8 * np.arange(4)))
        i = j
    return out


def _grouped_by_bin(layout: ParquetLayout, dims: dict[str, int], order: array, offsets: array, fd: int,
                    n_out: int) -> tuple[object, list[list[int] | None]]:
    """`order` (output k gets spilled rows order[k], order[k + n_out], ...) with each output's rows grouped by bin
    (a stable sort: each bin's rows in their order), and each output's row counts per bin; as it is (and Nones)
    when not binned."""
    import numpy as np

    if not layout.bin_size:
        return order, [None] * n_out
    seq = dims[SEQ]
    bins = layout.bin_of(_spilled_lengths(fd, offsets), seq)
    order = np.frombuffer(order, dtype=np.int64).copy()
    counts = []
    for j in range(n_out):
        mine = order[j::n_out]
        mine = mine[np.argsort(bins[mine], kind="stable")]
        order[j::n_out] = mine
        counts.append(np.bincount(bins[mine], minlength=layout.bins(seq)).tolist())
    return order, counts


class BadRows(Exception):
    """Framed rows that are cut short, fail their CRC or do not hold what their heads say (`row_columns`' ValueError,
    told apart from pyarrow's)."""


class _Tables:
    """Blocks of framed rows as Arrow tables of LDDL's schema, and as the standard layout's batches (`row_columns`),
    for `layout`'s files of dimensions `dims`; `vocab` gives each token id's text."""

    def __init__(self, layout: ParquetLayout, dims: dict[str, int], vocab):
        if vocab is None:
            raise ValueError("the Parquet layout writes tokens as text: its writers need the vocabulary")
        self.layout, self.dims = layout, dims
        self.schema = arrow_schema(layout, dims)
        self.text = token_text(vocab)
        self.headers = npy_headers(dims[PRED]) if layout.static else (b"", array("q"))

    def table(self, data: bytes, first: int, count: int, *, batch: bool = False):
        """Framed rows first .. first + count - 1 of `data` as an Arrow table of LDDL's schema; with `batch`, (that
        table, the same rows as the standard layout's batch `read_batches` gives reading them back: with dynamic
        masking unmasked, without masks). BadRows for rows that do not hold."""
        import numpy as np

        pa, fast = _pa(), speedups.compiled()
        dims = (self.dims[SEQ], self.dims[PRED]) if batch else None
        try:
            got = (row_columns if fast is None else fast.row_columns)(data, first, count, *self.text, *self.headers,
                                                                      self.layout.static, dims)
        except ValueError as e:
            raise BadRows(str(e).removeprefix("rows: ")) from None
        buffers = [pa.py_buffer(b) for b in (got[0] if batch else got)]

        def strings(kind, at: int):
            return pa.Array.from_buffers(kind, count, [None, buffers[at], buffers[at + 1]])

        columns = [strings(pa.string(), 2), strings(pa.string(), 4),
                   pa.Array.from_buffers(pa.bool_(), count, [None, buffers[1]]),
                   pa.Array.from_buffers(pa.uint16(), count, [None, buffers[0]])]
        if self.layout.static:
            columns += [strings(pa.binary(), 6), strings(pa.string(), 8)]
        if self.layout.bin_size:  # from its buffer: pa.array of a numpy array would import pandas (0.4 CPU-s)
            num_tokens = np.frombuffer(buffers[0], "<u2").astype(np.int64)
            bin_ids = self.layout.bin_of(num_tokens, self.dims[SEQ]).astype("<i8")
            columns.append(pa.Array.from_buffers(pa.int64(), count, [None, pa.py_buffer(bin_ids)]))
        table = pa.Table.from_arrays(columns, schema=self.schema)
        if not batch:
            return table
        kinds = {name: np.float32 if name == "masked_lm_weights" else np.int64 for name in BATCH_ARRAYS}
        return table, {name: np.frombuffer(b, kinds[name]).reshape(count, -1) for name, b in zip(BATCH_ARRAYS, got[1])}


class ParquetFiles:
    """Several Parquet files committed together (`atomic_write_together`): none appears unless all are complete.

    Output k gets spilled rows order[k], order[k + n], ... (the round-robin of every layout); with a bin size, its
    rows grouped by bin (`_grouped_by_bin`), row groups never crossing a bin. The framed rows are copied out as
    every layout's spill is (`framed.copy_spilled`), and a block of them becomes Arrow arrays from their buffers
    (`_Tables`): no per-row or per-token Python."""

    def __init__(self, layout: ParquetLayout, paths: Sequence[str | os.PathLike], dims: dict[str, int], vocab, *,
                 overwrite: bool = False):
        self.layout, self.paths, self.dims = layout, [Path(p) for p in paths], dims
        self.tables = _Tables(layout, dims, vocab)
        self.overwrite = overwrite

    def __enter__(self) -> "ParquetFiles":
        self._ctx = atomic_write_together(self.paths, overwrite=self.overwrite)
        self._temps = self._ctx.__enter__()
        return self

    def copy(self, order: array, offsets: array, fd: int, progress: Progress | None = None) -> None:
        n_out = len(self.paths)
        order, bin_counts = _grouped_by_bin(self.layout, self.dims, order, offsets, fd, n_out)
        current = {"j": -1, "files": contextlib.ExitStack(), "pending": None}

        def start(j: int) -> None:
            """Output j's writer, the previous one's file finished."""
            if current["pending"] is not None:
                current["pending"].flush()
            current["files"].close()
            current["files"] = contextlib.ExitStack()
            writer = current["files"].enter_context(_open_writer(self._temps[j], self.paths[j], self.layout,
                                                                 self.dims))
            groups = None if bin_counts[j] is None else _row_groups(bin_counts[j])
            current.update(j=j, pending=_Pending(writer, groups))

        def emit(j: int, data: bytes, index_lines: bytes, count: int) -> None:
            while current["j"] < j:  # outputs come in turn; one with no rows gets an empty file
                start(current["j"] + 1)
            current["pending"].add_rows(lambda first, n: self.tables.table(data, first, n), 0, count)

        try:
            copy_spilled(n_out, order, offsets, fd, emit, progress, indexed=False)
            while current["j"] < n_out - 1:
                start(current["j"] + 1)
            current["pending"].flush()
        finally:
            current["files"].close()

    def __exit__(self, exc_type, exc, tb):
        return self._ctx.__exit__(exc_type, exc, tb)


# ---------------------------------------------------------------------------------------------
# A dataset's staged shards: the spilled rows, grouped by bin, for the finishing parts

MARK_ROWS = 4096  # a staged shard marks where every MARK_ROWS-th row starts: a part reads at most this many too many
_FOOTER = 24  # the framed uint64 that closes a staged shard: where its marks start


@dataclass(frozen=True, kw_only=True)
class StagedLayout(Layout):
    """A Parquet dataset's staged shard (`ParquetLayout.staged`): the rows the generator spills (`InstanceRows`, each
    framed as a TFRecord, with its CRC32C), in the shard's final order grouped by bin (bin 0's rows first), then a
    framed record of int64s, the byte offset of every MARK_ROWS-th row and the rows' end, and a framed uint64 saying
    where that record starts. A finishing part reads any run of rows with one read per MARK_ROWS rows and checks
    every row it reads (`staged_blocks`); the shard's receipt holds its sha256 as every intermediate's does."""

    parquet: ParquetLayout

    def check(self, options) -> None:
        self.parquet.check(options)

    def encoder(self, max_seq_length: int, max_predictions_per_seq: int, vocab=None) -> InstanceRows:
        return self.parquet.encoder(max_seq_length, max_predictions_per_seq, vocab)  # the rows its parts read

    def writers(self, paths, index_paths, dims, *, overwrite=False, vocab=None) -> "StagedFiles":
        return StagedFiles(self.parquet, paths, dims, overwrite=overwrite)


class StagedFiles:
    """Staged shards (`StagedLayout`) committed together: output k gets spilled rows order[k], order[k + n], ...,
    grouped by bin, copied out as they are, then its marks."""

    def __init__(self, layout: ParquetLayout, paths: Sequence[str | os.PathLike], dims: dict[str, int], *,
                 overwrite: bool = False):
        self.layout, self.dims = layout, dims
        self._ctx = record_writers([Path(p) for p in paths], [None] * len(paths), overwrite=overwrite)

    def __enter__(self) -> "StagedFiles":
        self.writers = self._ctx.__enter__()
        return self

    def copy(self, order: array, offsets: array, fd: int, progress: Progress | None = None) -> None:
        import numpy as np

        n_out = len(self.writers)
        order, _ = _grouped_by_bin(self.layout, self.dims, order, offsets, fd, n_out)
        sizes = np.diff(np.frombuffer(offsets, np.int64))[np.frombuffer(order, np.int64)]
        copy_spilled(n_out, order, offsets, fd, lambda j, data, lines, count: self.writers[j].write_framed(
            data, lines, count), progress, indexed=False)
        for j, writer in enumerate(self.writers):
            starts = np.concatenate(([0], np.cumsum(sizes[j::n_out])))
            marks = np.append(starts[:-1][::MARK_ROWS], starts[-1])
            writer.write(marks.astype("<i8").tobytes())
            writer.write(struct.pack("<Q", int(starts[-1])))

    def __exit__(self, exc_type, exc, tb):
        return self._ctx.__exit__(exc_type, exc, tb)


def _unframed(framed: bytes) -> bytes | None:
    """The payload of one whole framed record, or None when it is not one (cut short, or a CRC that fails)."""
    payload = framed[12:-4]
    return payload if len(framed) >= 16 and frame_record(payload) == framed else None


def read_staged(path: Path, first: int, count: int, use: Callable[[bytes, int, int], None]) -> None:
    """Rows first .. first + count - 1 of a staged shard (`StagedLayout`), a mark at a time: `use(data, skip, n)` with
    rows skip .. skip + n - 1 of the framed rows in `data`. Damaged (the shard and its receipt removed, so that the
    same command run again makes it again) for closing marks that do not hold, and for rows `use` finds damaged
    (`BadRows`: cut short, or failing their CRC)."""
    import numpy as np

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise PrepError(f"{path}: cannot read the staged shard ({e.strerror})") from None
    try:
        size = os.fstat(fd).st_size
        footer = _unframed(os.pread(fd, _FOOTER, max(0, size - _FOOTER)))
        marks_at = struct.unpack("<Q", footer)[0] if footer is not None and len(footer) == 8 else size
        held = _unframed(os.pread(fd, size - _FOOTER - marks_at, marks_at)) if marks_at < size - _FOOTER else None
        marks = np.frombuffer(held, "<i8") if held is not None and len(held) % 8 == 0 else np.zeros(0, np.int64)
        if (not len(marks) or marks[0] != 0 or marks[-1] != marks_at or (np.diff(marks) < 0).any()
                or first + count > (len(marks) - 1) * MARK_ROWS):
            raise damaged(path, fd, f"its closing marks do not hold rows {first} to {first + count - 1}")
        k = first // MARK_ROWS
        while count:
            skip = first - k * MARK_ROWS
            n = min(count, MARK_ROWS - skip)
            try:
                use(os.pread(fd, int(marks[k + 1] - marks[k]), int(marks[k])), skip, n)
            except BadRows as e:
                raise damaged(path, fd, f"rows {k * MARK_ROWS + skip} to {k * MARK_ROWS + skip + n - 1}: {e}") from None
            first, count, k = first + n, count - n, k + 1
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# Reading

def _open(path: Path):
    """`path` as a pyarrow ParquetFile (its footer read), the pages' checksums verified as they are read where its
    writer wrote them (ours do not: `WRITER`)."""
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

    for batch in f.iter_batches(batch_size=rows, use_threads=False):
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
