"""Counts and histograms of a folder of BERT records: `dataset_stats`, its text report, and `write_report`.

Every record is read as a trainer reads it (through `reader.batches`: TensorFlow for TFRecords in
either layout, h5py for NVIDIA's HDF5 files), so the figures describe what a trainer gets.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from shardkit.atomic import write_json, write_text
from shardkit.errors import PrepError
from shardkit.progress import Progress, Stage, throttle

from .reader import KIND_NAMES, batches, open_records
from .schema import PRED, SEQ
from .tokenization import UNK, Vocab

log = logging.getLogger(__name__)


def dataset_stats(folder: str | Path, progress: Progress | None = None) -> dict:
    """Counts and histograms of every record of a folder of BERT records (or of one record file), in any layout.

    `progress(done, total)` counts the record files read."""
    import numpy as np

    folder = Path(folder)
    found = open_records(folder)
    files, dims = found.files, found.dims
    seq, max_pred = dims[SEQ], dims[PRED]
    vocab_path = (folder if folder.is_dir() else folder.parent) / "vocab.txt"
    unk_id = Vocab(vocab_path).unk_id if vocab_path.is_file() else None
    lengths = np.zeros(seq + 1, np.int64)
    masked = np.zeros(max_pred + 1, np.int64)
    per_file = {p: 0 for p in files}
    random_next = tokens = unk = 0
    stage = Stage(log, f"stats {folder}")
    progress, reading = throttle(progress), None
    for path, b in batches(found):
        if path != reading and progress is not None:  # a new file: the ones before it are read
            progress(files.index(path), len(files))
        reading = path
        n_real = b["input_mask"].sum(axis=1)
        k = (b["masked_lm_weights"] > 0).sum(axis=1)
        lengths += np.bincount(n_real, minlength=seq + 1)[:seq + 1]
        masked += np.bincount(k, minlength=max_pred + 1)[:max_pred + 1]
        random_next += int(b["next_sentence_labels"].sum())
        per_file[path] += len(n_real)
        tokens += int(n_real.sum())
        if unk_id is not None:
            original = b["input_ids"].copy()  # undo the masking: the labels are the original tokens
            rows, cols = np.nonzero(b["masked_lm_weights"] > 0)
            original[rows, b["masked_lm_positions"][rows, cols]] = b["masked_lm_ids"][rows, cols]
            unk += int(((original == unk_id) & (b["input_mask"] == 1)).sum())
    records = int(lengths.sum())
    if records == 0:
        raise PrepError(f"{folder}: the record files hold no records")
    sizes = [p.stat().st_size for p in files]
    if progress is not None:
        progress(len(files), len(files))
    stage.finish(records, "records", sum(sizes))
    mean = sum(sizes) / len(sizes)
    return {
        "folder": str(folder),
        "format": found.kind,
        "max_seq_length": seq,
        "max_predictions_per_seq": max_pred,
        "files": [{"file": p.name, "records": per_file[p], "bytes": p.stat().st_size} for p in files],
        "records": records,
        "tokens": tokens,
        "mean_length": tokens / records,
        "random_next": random_next,
        "random_next_fraction": random_next / records,
        "full_length": int(lengths[seq]),
        "full_length_fraction": float(lengths[seq]) / records,
        "masked_tokens": int((masked * np.arange(max_pred + 1)).sum()),
        "sequence_length_histogram": {str(i): int(v) for i, v in enumerate(lengths) if v},
        "masked_count_histogram": {str(i): int(v) for i, v in enumerate(masked) if v},
        "unk_rate": (unk / (tokens - 3 * records)) if unk_id is not None and tokens > 3 * records else None,
        "unk_tokens": unk if unk_id is not None else None,
        "unk_token": UNK if unk_id is not None else None,
        "bytes_per_file": {"min": min(sizes), "max": max(sizes), "mean": mean,
                           "std": math.sqrt(sum((s - mean) ** 2 for s in sizes) / len(sizes)),
                           "total": sum(sizes)},
    }


def _histogram_text(hist: dict[str, int], total: int, width: int = 40) -> list[str]:
    if not hist:
        return []
    top = max(hist.values())
    return [f"  {k:>5} {v:>9} {100.0 * v / total:6.2f}% {'#' * max(1, round(width * v / top))}"
            for k, v in hist.items()]


def _length_buckets(hist: dict[str, int], seq: int) -> dict[str, int]:
    """Sequence lengths grouped in 16 equal buckets for the text report."""
    width = max(1, math.ceil(seq / 16))
    out: dict[str, int] = {}
    for k, v in hist.items():
        lo = (int(k) - 1) // width * width + 1
        key = f"{lo}-{min(lo + width - 1, seq)}"
        out[key] = out.get(key, 0) + v
    return out


def stats_report_text(st: dict) -> str:
    b = st["bytes_per_file"]
    lines = [
        f"BERT dataset {st['folder']} ({KIND_NAMES[st['format']]})",
        f"records             {st['records']} in {len(st['files'])} files "
        f"(seq {st['max_seq_length']}, {st['max_predictions_per_seq']} predictions)",
        f"tokens              {st['tokens']} (mean length {st['mean_length']:.1f})",
        f"random next         {st['random_next']} ({100 * st['random_next_fraction']:.2f}%)",
        f"full length         {st['full_length']} ({100 * st['full_length_fraction']:.2f}%)",
        f"masked tokens       {st['masked_tokens']}",
        "[UNK] rate          " + ("no vocab.txt in the folder" if st["unk_rate"] is None
                                  else f"{100 * st['unk_rate']:.4f}% ({st['unk_tokens']} tokens)"),
        f"bytes per file      min {b['min']} max {b['max']} mean {b['mean']:.0f} std {b['std']:.0f} "
        f"total {b['total']}",
        "",
        "sequence length (real tokens incl. [CLS]/[SEP]):",
        *_histogram_text(_length_buckets(st["sequence_length_histogram"], st["max_seq_length"]), st["records"]),
        "",
        "masked tokens per record:",
        *_histogram_text(st["masked_count_histogram"], st["records"]),
        "",
        "records per file:",
        *[f"  {f['file']} {f['records']} records {f['bytes']} bytes" for f in st["files"]],
    ]
    return "\n".join(lines) + "\n"


def write_report(folder: str | Path, out: str | Path, *, overwrite: bool = False,
                 progress: Progress | None = None) -> str:
    """Commit `out/stats.json` and `out/report.txt` for the dataset in `folder`; returns the report's text.

    `overwrite` replaces a report already there (the command line); without it an existing one is
    kept when identical and refused when not (`shardkit.atomic`).
    """
    folder, out = Path(folder), Path(out)
    if out.resolve() == folder.resolve():
        raise PrepError(f"--out {out}: choose a report folder other than the dataset itself")
    st = dataset_stats(folder, progress)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "stats.json", st, overwrite=overwrite)
    text = stats_report_text(st)
    write_text(out / "report.txt", text, overwrite=overwrite)
    return text
