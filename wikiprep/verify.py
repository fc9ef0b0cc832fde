"""Checking a finished BERT dataset folder: `verify(folder)` stops at the first problem with one PrepError line.

It checks MANIFEST.json checksums and record counts, every index file against its shard, the
instance total in stats.json, and parses every record with TensorFlow (the BERT schema at the
folder's dimensions) and checks the invariants every instance of the generator keeps (`check_batch`).
"""

from __future__ import annotations

import json
from pathlib import Path

from shardkit.errors import PrepError
from shardkit.manifest import check_manifest
from shardkit.records import check_index, index_path_for
from shardkit.tf import import_tensorflow

from .reader import dataset_dims, find_record_files, parsed_batches
from .schema import SEQ


def check_batch(b: dict, seq: int) -> str | None:
    """The first violation of the BERT record invariants in a parsed batch, or None."""
    import numpy as np

    mask, ids, seg = b["input_mask"], b["input_ids"], b["segment_ids"]
    pos, mids, w = b["masked_lm_positions"], b["masked_lm_ids"], b["masked_lm_weights"]
    labels = b["next_sentence_labels"]
    n_real = mask.sum(axis=1)
    checks = [
        (np.isin(labels, (0, 1)).all(axis=1), "next_sentence_labels not 0 or 1"),
        (np.isin(mask, (0, 1)).all(axis=1) & (np.diff(mask, axis=1) <= 0).all(axis=1),
         "input_mask is not ones then zeros"),
        (n_real >= 5, "fewer than 5 real tokens"),
        ((ids * (1 - mask) == 0).all(axis=1) & (seg * (1 - mask) == 0).all(axis=1), "padding is not zero"),
        (np.isin(seg, (0, 1)).all(axis=1), "segment_ids not 0 or 1"),
        (np.isin(w, (0.0, 1.0)).all(axis=1) & (np.diff(w, axis=1) <= 0).all(axis=1),
         "masked_lm_weights not ones then zeros"),
    ]
    for ok, what in checks:
        if not ok.all():
            return f"record {int(np.argmin(ok))} of the batch: {what}"
    real = w > 0
    bad_pos = (real & ((pos <= 0) | (pos >= n_real[:, None]) | (pos >= seq))).any(axis=1)
    increasing = np.where(real[:, 1:], np.diff(pos, axis=1) > 0, True).all(axis=1)
    pad_zero = ((pos * ~real) == 0).all(axis=1) & ((mids * ~real) == 0).all(axis=1)
    for ok, what in ((~bad_pos, "masked position outside the real tokens"),
                     (increasing, "masked_lm_positions not sorted ascending"),
                     (pad_zero, "masked_lm padding is not zero")):
        if not ok.all():
            return f"record {int(np.argmin(ok))} of the batch: {what}"
    return None


def verify(folder: str | Path) -> dict:
    """Check a BERT dataset folder (see the module docstring); PrepError naming the first problem.

    Returns a summary: files, records, bytes and the dimensions.
    """
    folder = Path(folder)
    files = find_record_files(folder)
    manifest = check_manifest(folder)
    listed = {e["path"]: e for e in manifest.get("files", [])}
    counts = {}
    for path in files:
        rel = path.relative_to(folder).as_posix()
        if rel not in listed:
            raise PrepError(f"{path}: not listed in MANIFEST.json")
        counts[path] = check_index(path, index_path_for(path))
        expected = listed[rel].get("records")
        if expected is not None and expected != counts[path]:
            raise PrepError(f"{path}: {counts[path]} records but MANIFEST.json says {expected}")
    total = sum(counts.values())
    stats_path = folder / "stats.json"
    if stats_path.is_file():
        try:
            declared = json.loads(stats_path.read_text(encoding="utf-8")).get("total", {}).get("instances")
        except (ValueError, AttributeError):
            raise PrepError(f"{stats_path}: not valid JSON") from None
        if declared is not None and declared != total:
            raise PrepError(f"{stats_path}: says {declared} instances but the shards hold {total}")
    dims = dataset_dims(folder, files[0])
    tf = import_tensorflow()
    parsed = dict.fromkeys(files, 0)
    for path, batch in parsed_batches(tf, files, dims):
        problem = check_batch(batch, dims[SEQ])
        if problem:
            raise PrepError(f"{path}: batch from record {parsed[path]}: {problem}")
        parsed[path] += len(batch["input_ids"])
    for path, n in parsed.items():
        if n != counts[path]:
            raise PrepError(f"{path}: TensorFlow read {n} records, the index lists {counts[path]}")
    return {"files": len(files), "records": total, **dims, "bytes": sum(p.stat().st_size for p in files)}
