"""Checking a finished BERT dataset folder: `verify(path)` stops at the first problem with one PrepError line.

It checks MANIFEST.json checksums and record counts, every index file against its shard, the
instance total in stats.json, and reads every record (`reader.file_batches`: each layout reads its
own files, TensorFlow with its schema at the folder's dimensions for TFRecords, h5py for NVIDIA's
HDF5 files) and checks the invariants every instance of the generator keeps (`check_batch`, on the
standard layout, which a layout's read-back checks and rearranges its records into first).
"""

from __future__ import annotations

import functools
import json
import logging
from pathlib import Path

from shardkit.errors import PrepError
from shardkit.manifest import MANIFEST, check_manifest
from shardkit.pool import file_map
from shardkit.progress import Progress, Stage, throttle

from .reader import RecordFiles, file_batches, open_records
from .schema import SEQ

log = logging.getLogger(__name__)


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


def verify(path: str | Path, jobs: int = 1, progress: Progress | None = None) -> dict:
    """Check a BERT dataset folder, or record files without a manifest; PrepError naming the first problem.

    A folder with MANIFEST.json gets every check of the module docstring. A record file (of any
    layout), or a folder of them without MANIFEST.json, gets the record checks only (framing and
    CRCs, the index beside a file when there is one, parsing, invariants); a
    folder with dataset.json but no MANIFEST.json is an unfinished dataset and is refused.
    `jobs` worker processes check files in parallel (`shardkit.pool.file_map`): each stage's files
    in file order, so the summary and the first problem are those of `jobs` 1.
    Returns a summary: files, records, bytes, the dimensions, the layout's name, and whether a manifest was checked.
    `progress(done, total)` counts bytes: of the files MANIFEST.json lists as they are hashed (total None,
    the whole not known yet), then of the record files as their records are read and checked, file by file.
    """
    stage = Stage(log, f"verify {path}")
    with file_map(jobs) as each_file:
        summary = _verify(Path(path), each_file, throttle(progress))
    stage.finish(summary["records"], "records", summary["bytes"])
    return summary


def _verify(path: Path, each_file, progress: Progress | None) -> dict:
    with_manifest = path.is_dir() and (path / MANIFEST).exists()
    if path.is_dir() and not with_manifest and (path / "dataset.json").is_file():
        raise PrepError(f"{path}: dataset.json but no {MANIFEST}: an unfinished dataset (run its task again to "
                        f"finish it)")
    # Checksums first, before any record is read. The bar counts the bytes hashed, then those read as records:
    # the second total is known once the files are found, so until then the whole is not (None).
    hashed = [0]

    def hashing(done: int, _total: int | None) -> None:
        hashed[0] = done
        if progress is not None:
            progress(done, None)

    manifest = check_manifest(path, each_file, progress=hashing) if with_manifest else None
    records = open_records(path)
    files = records.files
    counts: dict[Path, int] = {}
    if manifest is not None:
        listed = {e["path"]: e for e in manifest.get("files", [])}
        counted = each_file(records.layout.count, files)
        for file in files:
            rel = file.relative_to(path).as_posix()
            if rel not in listed:
                raise PrepError(f"{file}: not listed in {MANIFEST}")
            counts[file] = next(counted)  # a problem of this file's index, after its listing as serially
            expected = listed[rel].get("records")
            if expected is not None and expected != counts[file]:
                raise PrepError(f"{file}: {counts[file]} records but {MANIFEST} says {expected}")
        records.layout.check_counts(counts)  # its readers' rules about the counts (LDDL's balance)
        stats_path = path / "stats.json"
        if stats_path.is_file():
            try:
                declared = json.loads(stats_path.read_text(encoding="utf-8")).get("total", {}).get("instances")
            except (ValueError, AttributeError):
                raise PrepError(f"{stats_path}: not valid JSON") from None
            if declared is not None and declared != sum(counts.values()):
                raise PrepError(f"{stats_path}: says {declared} instances but the shards hold {sum(counts.values())}")
    elif records.layout.indexed:  # an index is not required, but one that is there must match
        indexed = [file for file in files if records.layout.index_path(file).is_file()]
        counts.update(zip(indexed, each_file(records.layout.count, indexed)))
    sizes = {file: file.stat().st_size for file in files}
    total, done = hashed[0] + sum(sizes.values()), hashed[0]
    parsed = {}
    if progress is not None:
        progress(0, total)
    for file, n in zip(files, each_file(functools.partial(_parse, records), files)):
        parsed[file] = n
        done += sizes[file]
        if progress is not None:
            progress(done, total)
    for file, n in parsed.items():
        if file in counts and n != counts[file]:
            raise PrepError(f"{file}: {n} records read, the {'index' if records.layout.indexed else 'file'} "
                            f"lists {counts[file]}")
    return {"files": len(files), "records": sum(parsed.values()), **records.dims, "layout": records.layout.name,
            "manifest": with_manifest, "bytes": sum(sizes.values())}  # the records' bytes, once (not hashed + parsed)


def _parse(records: RecordFiles, file: Path) -> int:
    """Parse every record of one file and check each batch (`check_batch`); returns the records parsed."""
    parsed = 0
    for batch in file_batches(records, file):
        problem = check_batch(batch, records.dims[SEQ])
        if problem:
            raise PrepError(f"{file}: batch from record {parsed}: {problem}")
        parsed += len(batch["input_ids"])
    return parsed
