"""Checking a finished shard folder: `verify(folder)` stops at the first problem with one PrepError line.

It checks the shard names and counts (and that nothing else in the folder matches the
`train*`/`validation*` globs readers use), MANIFEST.json checksums and record counts, every index
file against its shard, and parses every record with TensorFlow using the 15-key schema of
build_imagenet_data.py: labels in 1..1000 and matching the synset, JPEG start/end markers and
header size equal to image/height and width, and the first image of each shard decoded by
tf.io.decode_jpeg (every image with `decode_all`).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from shardkit.errors import PrepError
from shardkit.manifest import MANIFEST, check_manifest
from shardkit.pool import file_map
from shardkit.progress import Progress, Stage, throttle
from shardkit.records import check_index
from shardkit.tf import error_text, import_tensorflow

from . import convert, images, labels
from .reader import find_shards, iter_parsed

log = logging.getLogger(__name__)


def verify(folder: str | Path, synsets_file=None, decode_all: bool = False, jobs: int = 1,
           progress: Progress | None = None) -> dict:
    """Check a shard folder (see the module docstring); returns {split: records}. PrepError on a problem.

    `jobs` worker processes check shards in parallel (`shardkit.pool.file_map`), each shard whole and
    the results taken in shard order: the totals and the first problem are those of `jobs` 1.
    `progress(done, total)` counts bytes: of the files MANIFEST.json lists as they are hashed (total None,
    the whole not known yet), then of the shards as their records are checked, shard by shard."""
    folder = Path(folder)
    stage = Stage(log, f"verify {folder}")
    progress = throttle(progress)
    shards = find_shards(folder)
    synsets = labels.load_synsets(synsets_file)
    sizes = {shard: shard.stat().st_size for paths in shards.values() for shard in paths}
    total, done = sum(sizes.values()), 0
    with file_map(jobs) as each_file:
        hashed = [0]  # the bar counts the bytes hashed (the whole not yet known), then those read as records

        def hashing(n: int, _total: int | None) -> None:
            hashed[0] = n
            if progress is not None:
                progress(n, None)

        manifest_counts, manifest_splits = _manifest_records(folder, check_manifest(folder, each_file,
                                                                                    progress=hashing))
        total, done = hashed[0] + total, hashed[0]
        check = functools.partial(_check_shard, folder, manifest_counts, synsets, decode_all)
        totals = {}
        if progress is not None:
            progress(0, total)
        for split, paths in shards.items():
            totals[split] = 0
            for shard, count in zip(paths, each_file(check, paths)):
                totals[split] += count
                done += sizes[shard]
                if progress is not None:
                    progress(done, total)
    for split in convert.SPLITS:
        want = manifest_splits.get(split)
        if want is not None and totals.get(split) != want:
            raise PrepError(f"{folder}: {totals.get(split)} {split} records, MANIFEST.json says {want}")
    stage.finish(sum(totals.values()), "records", total)
    return totals


def _check_shard(folder: Path, manifest_counts: dict[str, int | None], synsets: list[str], decode_all: bool,
                 shard: Path) -> int:
    """Check one shard: its index, its count against MANIFEST.json, every record; returns its record count."""
    count = check_index(shard, convert.index_path(folder, shard.name))
    listed = manifest_counts.get(shard.name)
    if listed != count:
        raise PrepError(f"{shard}: {count} records, MANIFEST.json " +
                        (f"says {listed}" if listed is not None else "gives no record count for it"))
    if count == 0:
        raise PrepError(f"{shard}: no records (DALI refuses empty index files)")
    tf = import_tensorflow()
    for first, rec in iter_parsed(tf, shard, check_crc=False):  # check_index already checked the CRCs
        for j in range(len(rec["image/class/label"])):
            _check_record(tf, shard, first + j, rec, j, synsets, decode=decode_all or first + j == 0)
    return count


def _manifest_records(folder: Path, manifest: dict) -> tuple[dict[str, int | None], dict[str, int]]:
    """({file: records}, {split: records}) of a MANIFEST.json that `check_manifest` has checked (its "files"
    entries have their types); PrepError naming a "splits" field of the wrong type."""
    where = folder / MANIFEST
    splits = manifest.get("splits", {})
    if not isinstance(splits, dict) or not all(isinstance(v, dict) for v in splits.values()):
        raise PrepError(f"{where}: splits is not an object of {{split: {{records, ...}}}}")

    def count(value, field: str):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise PrepError(f"{where}: {field} is {value!r}, not a record count")
        return value

    counts = {f["path"]: f.get("records") for f in manifest["files"]}
    return counts, {split: count(v.get("records"), f"splits.{split}.records") for split, v in splits.items()}


def _check_record(tf, shard: Path, index: int, rec: dict, j: int, synsets: list[str], decode: bool) -> None:
    """Check record `index` of the shard, `j` of its parsed batch; `decode`: also decode its JPEG with TensorFlow."""
    fname = rec["image/filename"][j].decode("utf-8", "replace")
    where = f"{shard}: record {index} ({fname})"
    label = int(rec["image/class/label"][j])
    if not 1 <= label <= len(synsets):
        raise PrepError(f"{where}: image/class/label {label} outside 1..{len(synsets)}")
    synset = rec["image/class/synset"][j].decode("ascii", "replace")
    if synset != synsets[label - 1]:
        raise PrepError(f"{where}: label {label} is {synsets[label - 1]} in the sorted synset list, record says {synset}")
    fixed = (rec["image/colorspace"][j], rec["image/channels"][j], rec["image/format"][j])
    if fixed != (b"RGB", 3, b"JPEG"):
        raise PrepError(f"{where}: colorspace/channels/format are {fixed}, expected (RGB, 3, JPEG)")
    if not fname or not rec["image/class/text"][j]:
        raise PrepError(f"{where}: empty image/filename or image/class/text")
    n = len(rec["image/object/bbox/xmin"][j])
    for k in ("xmax", "ymin", "ymax"):
        if len(rec[f"image/object/bbox/{k}"][j]) != n:
            raise PrepError(f"{where}: bbox lists of different lengths")
    if n and (list(rec["image/object/bbox/label"][j]) != [label] * n):
        raise PrepError(f"{where}: image/object/bbox/label differs from image/class/label")
    for k in ("xmin", "xmax", "ymin", "ymax"):
        v = rec[f"image/object/bbox/{k}"][j]
        if n and (v.min() < 0 or v.max() > 1):
            raise PrepError(f"{where}: bbox {k} outside [0, 1]")
    data = rec["image/encoded"][j]
    if not data.startswith(b"\xff\xd8\xff"):
        raise PrepError(f"{where}: image/encoded does not start with a JPEG start-of-image marker")
    try:
        head = images.read_jpeg_header(data)
    except images.ImageRejected as e:
        raise PrepError(f"{where}: image/encoded: {e}") from None
    h, w = int(rec["image/height"][j]), int(rec["image/width"][j])
    if (head.height, head.width) != (h, w) or head.components not in (1, 3):
        raise PrepError(f"{where}: JPEG header says {head.width}x{head.height}x{head.components}, "
                        f"record says {w}x{h}")
    if decode:
        try:
            shape = tuple(tf.io.decode_jpeg(data, channels=3).shape)
        except tf.errors.InvalidArgumentError as e:
            raise PrepError(f"{where}: image/encoded does not decode with tf.io.decode_jpeg "
                            f"({error_text(e)})") from None
        if shape != (h, w, 3):
            raise PrepError(f"{where}: decodes to {shape}, record says {h}x{w}x3")
