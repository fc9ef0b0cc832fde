"""ImageNet (ILSVRC-2012) to the sharded TFRecords of TensorFlow's build_imagenet_data.py.

Three steps, each a plain function so that a Luigi task can wrap each one:

1. `make_plan` lists the inputs (explicitly sorted), labels every image by its synset's position
   in the sorted synset list, shuffles with a seed and fixes which image goes to which shard.
   The plan is plain JSON (`write_plan` / `read_plan`): the whole run is reproducible from it.
2. `write_shard(plan, split, i, out)` writes `out/<split>-%05d-of-%05d` and `out/idx/<shard>.idx`
   atomically. Shards are independent, so any number of workers can write them, in any order,
   and give the same bytes.
3. `finalize` checks every shard is there and writes MANIFEST.json (sha256, size, record counts,
   and the input files left out and why).

The plan also records what identifies the inputs (`make_plan`'s identity: the names and sizes of
the image trees, the labels, synsets and names read), never where they live. `check_output_dir`
compares it, the seed, the shard counts and the options that decide what is left out with those
of the dataset an output folder holds, before anything is written, and refuses any difference.
`convert_dataset` (the `imagenet-prep convert` command) leaves a folder holding this very dataset
untouched, and a failed or interrupted run leaves the folder as it found it.

Records carry the 15 keys of build_imagenet_data.py with the same types. Unlike that script the
inputs are sorted before the shuffle (its glob order was not), validation may be flat with any of
three label files, CMYK/PNG images are found by content, the size comes from the JPEG header
instead of a full TensorFlow decode, and unreadable files are left out and listed instead of
killing the run. The shuffle is the reference's own (`random.Random(seed).shuffle` over the image
list, seed 12345, for both splits), over the list ordered as its `_find_image_files` orders it
(synset by synset, in synset-list order) but sorted within each synset.

Inputs may be folders or the original uncompressed tar archives (ILSVRC2012_img_train.tar with
its per-class tars inside, ILSVRC2012_img_val.tar): members are read in place by offset, never
extracted.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import random
import re
import tarfile
from pathlib import Path
from typing import Callable

from shardkit.atomic import (make_parent_folder, read_receipt, receipt_path, remove_all_stale_temps, remove_stale_temps,
                             write_bytes, write_json)
from shardkit.errors import PrepError
from shardkit.manifest import MANIFEST, write_manifest
from shardkit.pool import forked_each
from shardkit.progress import Progress, Stage, throttle
from shardkit.records import RecordWriter, check_index_size
from shardkit.verified import read_committed

from . import images, labels
from .schema import RecordEncoder

log = logging.getLogger(__name__)

PLAN_FORMAT = "imagenet_prep.plan/1"
SPLITS = ("train", "validation")
IDX_DIR = "idx"
IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")
WORK_DIR, PLAN_NAME = ".work", "plan.json"  # the plan, in a hidden folder: it names machine-specific paths
SHARD_RE = re.compile(r"(train|validation)-(\d{5})-of-(\d{5})")


def shard_name(split: str, index: int, num_shards: int) -> str:
    """'train-00000-of-01024', as build_imagenet_data.py names them."""
    return "%s-%.5d-of-%.5d" % (split, index, num_shards)


def index_path(output_dir: str | Path, name: str) -> Path:
    """`<output_dir>/idx/<shard>.idx`: beside the shards, never matching a `train*` glob in their folder."""
    return Path(output_dir) / IDX_DIR / f"{name}.idx"


def shard_bounds(num_images: int, num_shards: int, index: int) -> tuple[int, int]:
    """[lo, hi) of shard `index`: np.linspace(0, N, S + 1).astype(int) in exact integer arithmetic,
    so shard sizes differ by at most one."""
    return index * num_images // num_shards, (index + 1) * num_images // num_shards


# ---------------------------------------------------------------------------------------------
# Inputs: a folder or an uncompressed tar archive, listed as relative paths

def _is_image_name(name: str) -> bool:
    return name.lower().endswith(IMAGE_SUFFIXES)


def _list_dir(root: Path, listed: Callable[[int], None] | None = None) -> tuple[list[str], set[str], dict[str, int]]:
    """(relative paths of files one and two levels down, top-level folder names, {file: size}); hidden names
    skipped. Nested folders are listed as `<top>/<name>/`, without a size. `listed(n)` is told of each
    top-level folder's n entries once they are listed (1.3 million files take minutes on a network file system)."""
    files, dirs, sizes = [], set(), {}

    def size(entry: os.DirEntry) -> int:
        try:
            return entry.stat().st_size
        except OSError as e:
            raise PrepError(f"{entry.path}: cannot be listed ({e.strerror or e})") from None

    with os.scandir(root) as tops:
        for top in tops:
            if top.name.startswith("."):
                continue
            if not top.is_dir():
                files.append(top.name)
                sizes[top.name] = size(top)
                continue
            dirs.add(top.name)
            with os.scandir(top.path) as subs:
                for sub in subs:
                    if sub.name.startswith("."):
                        continue
                    rel = f"{top.name}/{sub.name}"
                    if sub.is_dir():
                        files.append(rel + "/")
                    else:
                        files.append(rel)
                        sizes[rel] = size(sub)
            if listed is not None:
                listed(len(files))
    if listed is not None:  # files at the top level only (flat validation images)
        listed(len(files))
    return files, dirs, sizes


def _safe_member_name(where: str, member: tarfile.TarInfo) -> str | None:
    """The member's relative name, None for folders; PrepError for anything that is not a plain file
    at a plain relative path (absolute, '..', links, devices, sparse files). `where` names the archive."""
    name = member.name
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if name.startswith(("/", "\\")) or ".." in parts or (parts and ":" in parts[0]):
        raise PrepError(f"{where}: unsafe member path {name!r} (absolute or leaving the archive)")
    if member.isdir():
        return None
    if not member.isreg() or member.issparse():
        raise PrepError(f"{where}: member {name!r} is a link, device or sparse file; only plain files are accepted")
    return "/".join(parts)


def _check_tar_end(where: str, archive: tarfile.TarFile, fileobj, size: int) -> None:
    """PrepError unless `archive` stopped at its end. tarfile takes a corrupt header after the first
    for the end of the archive and silently drops every member after it; a real end is the end of
    the data or a zero block. Every member must also lie within the `size` bytes of the archive."""
    last = archive.members[-1] if archive.members else None
    if last is not None and last.offset_data + last.size > size:
        raise PrepError(f"{where}: truncated (the data ends inside {last.name!r})")
    fileobj.seek(archive.offset)
    block = fileobj.read(tarfile.BLOCKSIZE)
    if block.strip(b"\0"):
        raise PrepError(f"{where}: corrupt at byte {archive.offset} (not a tar header there); the members from "
                        f"there on cannot be listed")


def _list_tar(tar_path: Path) -> tuple[list[str], set[str], dict[str, tuple[int, int]]]:
    """Like _list_dir for an uncompressed tar, plus {relative path: (offset, size)} of each file.

    A member `<wnid>.tar` (the layout of ILSVRC2012_img_train.tar) is opened in place and its
    files listed as `<wnid>/<name>`; a problem inside it is reported as `<archive>: <wnid>.tar: ...`.
    """
    files, dirs, where = [], set(), {}
    with open(tar_path, "rb") as raw:
        size = os.fstat(raw.fileno()).st_size
        try:
            outer = tarfile.open(fileobj=raw, mode="r:")
        except tarfile.TarError as e:
            raise PrepError(f"{tar_path}: not an uncompressed tar archive ({e}); compressed archives cannot be "
                            f"read in place, decompress or extract them first") from None
        with outer:
            members = iter(outer)
            while True:
                try:
                    m = next(members)
                except StopIteration:
                    break
                except tarfile.TarError as e:
                    raise PrepError(f"{tar_path}: corrupt or truncated at byte {outer.offset} ({e})") from None
                if m.offset_data + m.size > size:
                    raise PrepError(f"{tar_path}: truncated (the data ends inside {m.name!r})")
                rel = _safe_member_name(str(tar_path), m)
                if rel is None:
                    dirs.add(m.name.strip("/").split("/")[0])
                    continue
                if rel.endswith(".tar") and "/" not in rel:
                    wnid = rel[:-4]
                    dirs.add(wnid)
                    for irel, offset, isize in _list_inner_tar(f"{tar_path}: {rel}", outer.extractfile(m), m.size):
                        key = f"{wnid}/{irel}"
                        files.append(key)
                        where[key] = (m.offset_data + offset, isize)
                    continue
                parts = rel.split("/")
                if parts[0].startswith(".") or parts[-1].startswith("."):
                    continue
                if len(parts) > 1:
                    dirs.add(parts[0])
                files.append(rel)
                where[rel] = (m.offset_data, m.size)
            _check_tar_end(str(tar_path), outer, raw, size)
    return files, dirs, where


def _list_inner_tar(where: str, fileobj, size: int) -> list[tuple[str, int, int]]:
    """(relative name, data offset within the member, size) of each file of a per-class tar inside an archive."""
    out = []
    try:
        with tarfile.open(fileobj=fileobj, mode="r:") as inner:
            for im in inner:
                irel = _safe_member_name(where, im)
                if irel is not None:
                    out.append((irel, im.offset_data, im.size))
            _check_tar_end(where, inner, fileobj, size)
    except tarfile.TarError as e:
        raise PrepError(f"{where}: not a readable tar archive ({e})") from None
    return out


def _open_input(path: str | Path, what: str, listed: Callable[[int], None] | None = None
                ) -> tuple[dict, list[str], set[str], dict[str, int], dict | None]:
    """(source description for the plan, file list, top-level folders, {file: size}, tar offsets or None);
    `listed` as `_list_dir`'s."""
    p = Path(path).resolve()
    if p.is_dir():
        files, dirs, sizes = _list_dir(p, listed)
        return {"kind": "dir", "path": str(p)}, files, dirs, sizes, None
    if p.is_file():
        if not p.name.endswith(".tar"):
            raise PrepError(f"{p}: {what} must be a folder or an uncompressed .tar archive")
        files, dirs, where = _list_tar(p)
        return {"kind": "tar", "path": str(p)}, files, dirs, {rel: size for rel, (_, size) in where.items()}, where
    raise PrepError(f"{p}: {what} not found")


def _digest(lines) -> str:
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _listing_identity(files: list[str], sizes: dict[str, int]) -> dict:
    """What identifies a tree of inputs cheaply: its relative file names and sizes (never where it lives, never
    the bytes themselves, which would mean reading every image twice). The same tree as a folder or a tar
    archive gives the same identity."""
    return {"count": len(files), "sha256": _digest(f"{rel}\t{sizes.get(rel, '')}\n" for rel in sorted(files))}


class _Reader:
    """Reads a planned file's bytes from its folder or, by offset, from its tar archive."""

    def __init__(self, spec: dict):
        self.spec = spec
        self.root = Path(spec["source"]["path"])
        self._prefix = os.path.join(self.root, "")  # joined as text: a Path per image cost more than its read
        self.tar = open(self.root, "rb", buffering=0) if spec["source"]["kind"] == "tar" else None

    def where(self, i: int) -> str:
        rel = self.spec["files"][i]
        return f"{self.root}:{rel}" if self.tar else str(self.root / rel)

    def read(self, i: int) -> bytes:
        rel = self.spec["files"][i]
        try:
            if self.tar is None:  # four system calls (open() and readall() make eight)
                fd = os.open(self._prefix + rel, os.O_RDONLY | os.O_CLOEXEC)
                try:
                    size = os.fstat(fd).st_size
                    data = os.read(fd, size)
                    if len(data) < size:  # one read(2) stops at ~2 GiB: the rest to the end, as readall() does
                        data = b"".join([data, *iter(lambda: os.read(fd, 1 << 24), b"")])
                    return data
                finally:
                    os.close(fd)
            offset, size = self.spec["offsets"][i], self.spec["sizes"][i]
            data = os.pread(self.tar.fileno(), size, offset)
            if len(data) != size:
                raise OSError("archive shorter than when it was planned")
            return data
        except OSError as e:
            raise PrepError(f"{self.where(i)}: cannot be read now ({e.strerror or e}); did the inputs change "
                            f"since the plan was made?") from None

    def close(self):
        if self.tar:
            self.tar.close()


# ---------------------------------------------------------------------------------------------
# The plan

def _collect_split(split: str, path, synsets: list[str], index_of: dict[str, int],
                   stem_labels: dict[str, str] | None, labels_path, ignored: list[dict],
                   listed: Callable[[int], None] | None = None) -> tuple[dict, dict]:
    """One split's plan entry, files in the sorted pre-shuffle order (label, file name), and the identity of
    its input (`_listing_identity`); `listed` as `_list_dir`'s."""
    source, files, dirs, sizes, where = _open_input(path, f"{split} input", listed)
    identity = _listing_identity(files, sizes)
    files.sort()  # listing order is the file system's; messages and the ignored list must not depend on it
    root = source["path"]
    items = []  # (label, basename, rel)
    if stem_labels is None:  # <wnid>/ folders
        if not dirs and any(_is_image_name(rel) for rel in files):
            raise PrepError(f"{root}: {split} images are flat, not in <wnid>/ folders; give their label file "
                            f"(--val-labels)" if split == "validation" else
                            f"{root}: {split} images are flat, not in <wnid>/ folders")
        for d in sorted(dirs):
            if d not in index_of:
                raise PrepError(f"{root}/{d}: folder is not one of the {len(synsets)} synsets "
                                f"(expected {split} images in <wnid>/ folders)")
        for rel in files:
            parts = rel.rstrip("/").split("/")
            if len(parts) != 2 or rel.endswith("/"):
                why = "not inside a <wnid>/ folder" if len(parts) == 1 else "nested folder, not read"
                ignored.append({"file": f"{split}/{rel.rstrip('/')}", "reason": why})
            elif not _is_image_name(parts[1]):
                ignored.append({"file": f"{split}/{rel}", "reason": "not an image file name"})
            else:
                items.append((index_of[parts[0]] + 1, parts[1], rel))
    else:  # flat, labelled by file name
        if dirs:
            raise PrepError(f"{root}/{sorted(dirs)[0]}: {split} images must be flat when labels come from "
                            f"{labels_path} (leave the label file out for <wnid>/ folders)")
        image_files = [rel for rel in files if _is_image_name(rel)]
        if len(image_files) != len(stem_labels):
            raise PrepError(f"{labels_path}: labels {len(stem_labels)} images but {root} holds {len(image_files)}")
        seen = {}
        for rel in files:
            if not _is_image_name(rel):
                ignored.append({"file": f"{split}/{rel}", "reason": "not an image file name"})
                continue
            stem = rel.rsplit(".", 1)[0]
            if stem in seen:
                raise PrepError(f"{root}/{rel}: same image as {seen[stem]} (two files, one label)")
            seen[stem] = rel
            wnid = stem_labels.get(stem)
            if wnid is None:
                raise PrepError(f"{root}/{rel}: no label for this image in {labels_path}")
            items.append((index_of[wnid] + 1, rel, rel))
    items.sort()
    for a, b in zip(items, items[1:]):
        if a[:2] == b[:2]:
            raise PrepError(f"{root}: {b[2]} and {a[2]} have the same name and synset")
    if not items:
        raise PrepError(f"{root}: no {split} images found (expected {'<wnid>/' if stem_labels is None else ''}"
                        f"*.JPEG)")
    spec = {"source": source, "files": [rel for _, _, rel in items], "labels": [lab for lab, _, _ in items]}
    if where is not None:
        spec["offsets"] = [where[rel][0] for rel in spec["files"]]
        spec["sizes"] = [where[rel][1] for rel in spec["files"]]
    return spec, identity


def _shuffle(spec: dict, seed: int) -> None:
    order = list(range(len(spec["files"])))
    random.Random(seed).shuffle(order)
    for key in ("files", "labels", "offsets", "sizes"):
        if key in spec:
            spec[key] = [spec[key][i] for i in order]


def check_parameters(**values: int) -> None:
    """PrepError naming the flag (`--train-shards 0: ...`) unless every value is a valid integer: shard and
    worker counts and --max-pixels positive, --seed non-negative. Cheap: run before anything is listed or written."""
    for name, value in values.items():
        least = 0 if name == "seed" else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise PrepError(f"--{name.replace('_', '-')} {value!r}: must be a "
                            f"{'non-negative' if least == 0 else 'positive'} integer")


def make_plan(train_dir, validation_dir, val_labels=None, *, synsets_file=None, metadata_file=None,
              bbox_dir=None, train_shards: int = 1024, validation_shards: int = 128, seed: int = 12345,
              strict: bool = False, verify_decode: bool = False, max_pixels: int = images.MAX_PIXELS,
              progress: Progress | None = None) -> dict:
    """List, label, shuffle and shard the inputs; returns the plan (plain JSON-serializable dict).
    `progress(done, None)` counts the input files listed (their number is what is being found out), and ends
    with (n, n) once all n are.

    train_dir: `<wnid>/*.JPEG` folders, or ILSVRC2012_img_train.tar. validation_dir: flat images
    with `val_labels` (TF labels .txt, Kaggle LOC_val_solution.csv, devkit ground truth or devkit
    folder), or `<wnid>/` folders with val_labels None; or ILSVRC2012_img_val.tar. Either may be
    None to convert one split only. strict: an unreadable image fails its shard instead of being
    left out. verify_decode: fully decode every copied JPEG with PIL (slow). Bad input -> PrepError.
    """
    if train_dir is None and validation_dir is None:
        raise PrepError("give --train-dir and/or --validation-dir")
    if val_labels is not None and validation_dir is None:
        raise PrepError(f"--val-labels {val_labels}: given without --validation-dir")
    check_parameters(train_shards=train_shards, validation_shards=validation_shards, seed=seed, max_pixels=max_pixels)
    synsets = labels.load_synsets(synsets_file)
    names = labels.load_names(synsets, metadata_file)
    index_of = {wnid: i for i, wnid in enumerate(synsets)}
    if bbox_dir is not None and not Path(bbox_dir).is_dir():
        raise PrepError(f"{bbox_dir}: bounding-box folder not found (expected <wnid>/<image>.xml)")
    # What the inputs say, each digested in a canonical form (so the shipped synset list or names given as
    # a file, or TF's 21,842-line metadata file holding the same names, are the same input): compared by
    # check_output_dir, so that a rerun from other inputs never returns or mixes with this dataset.
    identity = {
        "train_dir": None, "validation_dir": None, "val_labels": None,
        "synsets_file": {"count": len(synsets), "sha256": _digest(f"{w}\n" for w in synsets)},
        "metadata_file": {"count": len(synsets), "sha256": _digest(f"{w}\t{names[w]}\n" for w in synsets)},
        "bbox_dir": None,
    }
    if bbox_dir is not None:
        bbox_files, _, bbox_sizes = _list_dir(Path(bbox_dir))
        identity["bbox_dir"] = _listing_identity(bbox_files, bbox_sizes)

    plan = {
        "format": PLAN_FORMAT,
        "seed": seed,
        "synsets": synsets,
        "names": [names[w] for w in synsets],
        "bbox_dir": str(Path(bbox_dir).resolve()) if bbox_dir is not None else None,
        "options": {"strict": bool(strict), "verify_decode": bool(verify_decode), "max_pixels": max_pixels},
        "inputs": {"train": str(train_dir) if train_dir is not None else None,
                   "validation": str(validation_dir) if validation_dir is not None else None,
                   "val_labels": str(val_labels) if val_labels is not None else None,
                   "val_label_source": None,
                   "synsets_file": str(synsets_file) if synsets_file else None,
                   "metadata_file": str(metadata_file) if metadata_file else None},
        "identity": identity,
        "ignored": [],
        "splits": {},
    }
    progress = throttle(progress)
    listed = [0, 0]  # input files listed: before this split, and so far

    def report(n: int) -> None:
        listed[1] = listed[0] + n
        if progress is not None:
            progress(listed[1], None)

    for split, path, shards in (("validation", validation_dir, validation_shards),
                                ("train", train_dir, train_shards)):
        if path is None:
            continue
        stem_labels = None
        if split == "validation":
            if val_labels is not None:
                stem_labels, kind = labels.read_validation_labels(val_labels, synsets)
                identity["val_labels"] = {"count": len(stem_labels), "sha256": _digest(
                    [f"{kind}\n", *(f"{stem} {wnid}\n" for stem, wnid in sorted(stem_labels.items()))])}
            else:
                kind = "folders"
            plan["inputs"]["val_label_source"] = kind
        listed[0] = listed[1]
        spec, identity[f"{split}_dir"] = _collect_split(split, path, synsets, index_of, stem_labels,
                                                        val_labels if split == "validation" else None,
                                                        plan["ignored"], listed=report)
        if shards > len(spec["files"]):
            raise PrepError(f"{spec['source']['path']}: --{split}-shards {shards} is more than the "
                            f"{len(spec['files'])} {split} images found")
        _shuffle(spec, seed)
        spec["num_shards"] = shards
        plan["splits"][split] = spec
    plan["ignored"].sort(key=lambda d: d["file"])
    if progress is not None:
        progress(listed[1], listed[1])  # every input listed: now the total is known
    return plan


def write_plan(plan: dict, path: str | Path, *, overwrite: bool = False) -> None:
    """Commit the plan as canonical JSON (atomically; `overwrite` as in `shardkit.atomic`)."""
    write_json(path, plan, overwrite=overwrite)


def read_plan(path: str | Path) -> dict:
    path = Path(path)
    try:
        plan = json.loads(read_committed(path).decode("utf-8"))  # checked against its receipt, when it has one
    except FileNotFoundError:
        raise PrepError(f"{path}: plan not found") from None
    except ValueError as e:
        raise PrepError(f"{path}: not a valid plan ({e})") from None
    if not isinstance(plan, dict) or plan.get("format") != PLAN_FORMAT:
        raise PrepError(f"{path}: not an {PLAN_FORMAT} plan")
    return plan


def num_shards(plan: dict, split: str) -> int:
    return plan["splits"][split]["num_shards"]


# ---------------------------------------------------------------------------------------------
# Shards

def _split_spec(plan: dict, split: str, index: int) -> dict:
    spec = plan.get("splits", {}).get(split)
    if spec is None:
        raise PrepError(f"plan has no {split!r} split (it has {sorted(plan.get('splits', {}))})")
    if not isinstance(index, int) or not 0 <= index < spec["num_shards"]:
        raise PrepError(f"--index {index!r} is outside 0..{spec['num_shards'] - 1}, the {split} shards")
    return spec


def write_shard(plan: dict, split: str, index: int, output_dir: str | Path, *, overwrite: bool = False,
                progress: Progress | None = None) -> dict:
    """Write one shard and its index file atomically; returns its record count and the files left out.

    Without `overwrite` an existing shard or index is never replaced: identical is accepted, different
    refused (`shardkit.atomic.commit`).

    Result (JSON-serializable): split, index, shard (file name), records, planned, left_out
    [{file, reason}], converted [{file, reason}], boxes, annotation_problems [{file, reason}], files
    {path relative to output_dir: {sha256, size}} of the shard and its index, hashed as they were
    written (finalize lists them in MANIFEST.json without reading them again).
    `progress(done, total)` counts the shard's planned images.
    """
    spec = _split_spec(plan, split, index)
    n_shards = spec["num_shards"]
    lo, hi = shard_bounds(len(spec["files"]), n_shards, index)
    name = shard_name(split, index, n_shards)
    stage = Stage(log, f"shard {name}")
    progress = throttle(progress)
    output_dir = Path(output_dir)
    synsets, names = plan["synsets"], plan["names"]
    opts = plan["options"]
    strict, verify, max_pixels = opts["strict"], opts["verify_decode"], opts["max_pixels"]
    bbox_dir = plan.get("bbox_dir")
    challenge = set(synsets)
    left_out, converted, problems = [], [], []
    boxes_written = 0
    reader = _Reader(spec)
    encoder = RecordEncoder(synsets, names)
    try:
        with RecordWriter(output_dir / name, index_path(output_dir, name), overwrite=overwrite,
                          sha256=True) as writer:
            for i in range(lo, hi):
                if progress is not None:
                    progress(i - lo, hi - lo)
                rel = spec["files"][i]
                label = spec["labels"][i]
                wnid = synsets[label - 1]
                file_id = f"{split}/{rel}"
                try:
                    img = images.prepare_image(reader.read(i), max_pixels=max_pixels, verify_decode=verify)
                except images.ImageRejected as e:
                    if strict:
                        raise PrepError(f"{reader.where(i)}: {e}; --strict fails on an unreadable image instead "
                                        f"of leaving it out") from None
                    left_out.append({"file": file_id, "reason": str(e)})
                    continue
                if img.converted:
                    converted.append({"file": file_id, "reason": f"{img.converted} re-encoded as RGB JPEG"})
                basename = rel.rsplit("/", 1)[-1]
                boxes = []
                if bbox_dir is not None:
                    xml = labels.bbox_xml_path(bbox_dir, wnid, basename)
                    if xml.is_file():
                        try:
                            boxes = labels.read_bbox_xml(xml, wnid, challenge)
                        except (SyntaxError, ValueError, OSError) as e:  # ET.ParseError is a SyntaxError
                            if strict:
                                raise PrepError(f"{xml}: unreadable bounding-box annotation ({e}); --strict "
                                                f"fails on it instead of leaving the boxes out") from None
                            problems.append({"file": f"bbox/{wnid}/{xml.name}", "reason": str(e)})
                boxes_written += len(boxes)
                head, tail = encoder.around(len(img.data), img.height, img.width, label, basename, boxes)
                writer.write_parts((head, img.data, tail))
            records = writer.count
    finally:
        reader.close()
    if progress is not None:
        progress(hi - lo, hi - lo)
    files = {p.relative_to(output_dir).as_posix(): digest for p, digest in writer.files().items()}
    stage.finish(records, "images", files[name]["size"])
    return {"split": split, "index": index, "shard": name, "records": records, "planned": hi - lo,
            "left_out": left_out, "converted": converted, "boxes": boxes_written,
            "annotation_problems": problems, "files": files}


# ---------------------------------------------------------------------------------------------
# The manifest

# What check_output_dir compares, by the flag that sets it (the tasks' parameters are spelled the same), and
# for an input's identity the unit its count is in.
_INPUTS = {"--train-dir": ("train_dir", "files"), "--validation-dir": ("validation_dir", "files"),
           "--val-labels": ("val_labels", "labels"), "--synsets-file": ("synsets_file", "synsets"),
           "--metadata-file": ("metadata_file", "names"), "--bbox-dir": ("bbox_dir", "files")}


def describe(document: dict) -> dict:
    """What makes a dataset's bytes, by flag: from a plan, the seed, the shard counts, the identity of every
    input (see make_plan) and the options that decide which images are left out; from a MANIFEST.json,
    which names no inputs, the seed and shard counts only. --strict is not among them: a strict run
    writes the same bytes or fails. KeyError/TypeError/AttributeError for a document that is neither."""
    plan = document.get("format") == PLAN_FORMAT
    shards_key = "num_shards" if plan else "shards"
    out = {"--seed": document["seed"],
           **{f"--{name}-shards": document["splits"][name][shards_key] if name in document["splits"] else None
              for name in SPLITS}}
    if plan:
        if "identity" in document:  # not in a plan from before inputs were identified: check_output_dir says so
            out.update({flag: document["identity"][key] for flag, (key, _) in _INPUTS.items()})
        out.update({"--max-pixels": document["options"]["max_pixels"],
                    "--verify-decode": document["options"]["verify_decode"]})
    return out


def _shown(flag: str, value) -> str:
    if value is None:
        return "none"
    if flag in _INPUTS:
        return f"{value['count']} {_INPUTS[flag][1]} (sha256 {value['sha256'][:12]})"
    return repr(value)


def _read_held(path: Path, output_dir: Path) -> tuple[dict, dict] | None:
    """(document, describe(document)) of a MANIFEST.json or plan in the output folder, None when absent."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        return document, describe(document)
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError):
        raise PrepError(f"{path}: not an ImageNet dataset's {path.name}; give another --output-dir") from None


def check_output_dir(output_dir: str | Path, plan: dict | Callable[[], dict]) -> dict | None:
    """Refuse an output folder that holds an ImageNet dataset made otherwise, or files this plan would not write.

    What the folder holds is read from its MANIFEST.json and from the plan of the run that made it (or
    is making it: .work/plan.json), and compared by `describe` with this run's plan; every difference is
    named with both values. A finished dataset without its plan is refused too: nothing says which
    inputs made it. `plan` may be a function making it, called only when the folder holds something.
    Returns the MANIFEST.json of a finished dataset made exactly so, else None. Run before anything is
    written: a refused run never changes a good dataset, and a rerun never returns one made otherwise.
    """
    output_dir = Path(output_dir)
    if output_dir.exists() and not output_dir.is_dir():
        raise PrepError(f"--output-dir {output_dir}: not a folder")
    if not output_dir.is_dir():
        return None
    # A MANIFEST.json no longer the size its receipt says is damaged, not another dataset's: the plan says what
    # made the folder, and the task that wrote the manifest makes it again.
    damaged = receipt_path(output_dir / MANIFEST).is_file() and read_receipt(output_dir / MANIFEST) is None
    manifest = None if damaged else _read_held(output_dir / MANIFEST, output_dir)
    held_plan = _read_held(output_dir / WORK_DIR / PLAN_NAME, output_dir)
    proceed = f"give another --output-dir, or remove {output_dir} to rebuild it"
    if manifest is None and held_plan is None:
        strays = _split_files(output_dir)
        if strays:  # every run of ours writes its plan first: these are another tool's, or a copy's
            raise PrepError(f"{strays[0]}: a shard or index file that no {MANIFEST} or {WORK_DIR}/{PLAN_NAME} in "
                            f"{output_dir} accounts for (another tool's?); give another --output-dir, or remove it")
        return None
    wanted = describe(plan := plan() if callable(plan) else plan)
    differ = {}
    for held in (manifest, held_plan):
        if held is not None:
            for flag, value in held[1].items():
                if value != wanted[flag]:
                    differ.setdefault(flag, f"{flag} {_shown(flag, value)} there, {_shown(flag, wanted[flag])} here")
    if "--synsets-file" in differ:
        differ.pop("--metadata-file", None)  # names are digested per synset: other synsets, other names
    if differ:
        raise PrepError(f"{output_dir}: holds an ImageNet dataset made with other parameters "
                        f"({'; '.join(differ.values())}); {proceed}")
    unknown = (f"{WORK_DIR}/{PLAN_NAME}, which names them, is missing" if held_plan is None else
               None if "identity" in held_plan[0] else "its plan, from an older imagenet-prep, does not name them")
    if unknown:
        raise PrepError(f"{output_dir}: holds an ImageNet dataset whose inputs cannot be compared with these "
                        f"({unknown}); {proceed}")
    _check_no_strays(plan, output_dir)
    return manifest[0] if manifest is not None else None


def _split_files(output_dir: Path) -> list[Path]:
    """The files readers would glob as shards (`train*`, `validation*`) and the index files, temporaries aside."""
    idx = output_dir / IDX_DIR
    found = [p for p in output_dir.iterdir() if p.name.startswith(SPLITS)]
    found += [p for p in idx.iterdir() if p.name.endswith(".idx")] if idx.is_dir() else []
    return sorted(p for p in found if ".tmp-" not in p.name)


def _check_no_strays(plan: dict, output_dir: Path) -> None:
    """PrepError for a shard or index file in output_dir that the plan does not write: readers glob
    `train*` / `validation*` and Graphcore's demands exactly 1024/128 matches; DALI pairs index files
    with shards. Leftovers of another run (other shard counts) must not stay."""
    names = set(_shard_names(plan))
    for p in _split_files(output_dir):
        if p.parent == output_dir and p.name not in names:
            raise PrepError(f"{p}: not a shard of this conversion (other shard counts?); remove it, readers glob "
                            f"train*/validation*")
        if p.parent != output_dir and p.name[:-4] not in names:
            raise PrepError(f"{p}: index file of a shard this conversion does not write; remove it")


def _shard_names(plan: dict) -> list[str]:
    return [shard_name(split, i, spec["num_shards"]) for split, spec in plan["splits"].items()
            for i in range(spec["num_shards"])]


def finalize(plan: dict, output_dir: str | Path, shard_results: list[dict], *, overwrite: bool = False,
             rehash: bool = False) -> dict:
    """Check every planned shard was written as reported, then write MANIFEST.json; returns it.

    MANIFEST.json takes each file's sha256 from its shard's result, as its writer hashed it, unless `rehash`
    (a manifest made again after damage, which may have reached a result's receipt too): every file is
    hashed then.

    Dead writers' temporaries (this host) are removed first; a live writer's is left: a duplicate
    run may still be writing a shard this one has finished (`shardkit.atomic`).
    """
    output_dir = Path(output_dir)
    expected = {}
    for split, spec in plan["splits"].items():
        for i in range(spec["num_shards"]):
            expected[shard_name(split, i, spec["num_shards"])] = (split, i, spec)
    results = {}
    for r in shard_results:
        if r.get("shard") not in expected:
            raise PrepError(f"{output_dir}: a shard result for {r.get('shard')!r}, which the plan does not have")
        if r["shard"] in results:
            raise PrepError(f"{output_dir}: two results for {r['shard']}")
        results[r["shard"]] = r
    for name, (split, i, spec) in expected.items():
        if name not in results:
            raise PrepError(f"{output_dir / name}: no result for this shard (not written?)")
        r = results[name]
        lo, hi = shard_bounds(len(spec["files"]), spec["num_shards"], i)
        if r["planned"] != hi - lo or r["records"] + len(r["left_out"]) != hi - lo:
            raise PrepError(f"{output_dir / name}: result does not match the plan ({r['records']} records + "
                            f"{len(r['left_out'])} left out, plan has {hi - lo} images)")
        check_index_size(output_dir / name, index_path(output_dir, name), r["records"])
    remove_all_stale_temps(output_dir)
    remove_all_stale_temps(output_dir / IDX_DIR)
    _check_no_strays(plan, output_dir)  # checked before any work too, but a file may have come since

    def gather(key: str) -> list[dict]:
        return sorted((d for r in results.values() for d in r[key]), key=lambda d: d["file"])

    splits = {}
    for split, spec in plan["splits"].items():
        rs = [r for r in results.values() if r["split"] == split]
        splits[split] = {"shards": spec["num_shards"], "images": len(spec["files"]),
                         "records": sum(r["records"] for r in rs), "left_out": sum(len(r["left_out"]) for r in rs),
                         "converted": sum(len(r["converted"]) for r in rs), "boxes": sum(r["boxes"] for r in rs)}
    extra = {
        "dataset": "imagenet",
        "format": "TFRecord of tf.train.Example, the 15 keys of build_imagenet_data.py",
        "labels": "image/class/label = 1 + position of the synset in the sorted synset list (1..%d)"
                  % len(plan["synsets"]),
        "seed": plan["seed"],
        "val_label_source": plan["inputs"].get("val_label_source"),
        "splits": splits,
        "left_out": gather("left_out"),
        "converted": gather("converted"),
        "annotation_problems": gather("annotation_problems"),
        "ignored": plan.get("ignored", []),
    }
    counts = {name: results[name]["records"] for name in expected}
    # The sha256 each writer took as it wrote (sizes are checked again); a result without them, from an
    # older imagenet-prep's receipt, leaves its files to be hashed here.
    known = {}
    for name, r in ({} if rehash else results).items():
        own = (name, f"{IDX_DIR}/{name}.idx")
        known.update({path: digest for path, digest in (r.get("files") or {}).items() if path in own})
    return write_manifest(output_dir, counts, extra, overwrite=overwrite, known_files=known)


# ---------------------------------------------------------------------------------------------
# Everything in one call (the `imagenet-prep convert` command)

def _write_one(plan: dict, job: tuple[str, int, str, bool]) -> dict:
    split, index, output_dir, overwrite = job
    return write_shard(plan, split, index, output_dir, overwrite=overwrite)


def convert_dataset(train_dir, validation_dir, val_labels, output_dir, *, workers: int = 1, overwrite: bool = False,
                    progress: Progress | None = None, **plan_args) -> dict:
    """make_plan + every shard (with `workers` processes) + finalize; writes output_dir/.work/plan.json too.

    Returns the manifest. The bytes do not depend on `workers`. Everything that can be checked is,
    before anything is written: the parameters, the inputs and their labels (make_plan), and what
    output_dir holds (check_output_dir). A folder already holding this very dataset, finished and with
    every file at its listed size, is returned as it is: nothing is rewritten. A run that fails
    afterwards (with `strict`, an unreadable image) or is interrupted leaves the folder as it found it.
    `overwrite` (the command line, as build_imagenet_data.py) replaces shards and MANIFEST.json of an
    unfinished run of this dataset; without it they are kept when identical and refused when not.
    `progress(done, total)` counts the planned images of every shard: image by image with one worker,
    shard by shard with several.
    """
    check_parameters(workers=workers)
    output_dir = Path(output_dir)
    plan = make_plan(train_dir, validation_dir, val_labels, **plan_args)
    held = check_output_dir(output_dir, plan)
    if held is not None and _intact(output_dir, held):
        dropped = held["left_out"] + held["annotation_problems"]
        if plan["options"]["strict"] and dropped:
            more = f" and {len(dropped) - 1} more" if len(dropped) > 1 else ""
            raise PrepError(f"{output_dir}: holds this dataset made without --strict, which left out "
                            f"{dropped[0]['file']}{more} ({dropped[0]['reason']}); --strict fails on them: give "
                            f"another --output-dir")
        return held
    with _undone_on_failure(output_dir, plan):
        make_parent_folder(output_dir / WORK_DIR / PLAN_NAME)  # a read-only or full disk: one line
        # Replaced whatever `overwrite` says: check_output_dir found the folder to hold this very dataset (or
        # nothing), and the plan records where this run's inputs are, which may have moved since.
        write_plan(plan, output_dir / WORK_DIR / PLAN_NAME, overwrite=True)
        jobs = [(split, i, str(output_dir), overwrite) for split in SPLITS if split in plan["splits"]
                for i in range(plan["splits"][split]["num_shards"])]
        stage = Stage(log, f"convert {output_dir}")
        progress = throttle(progress)
        total = sum(len(plan["splits"][split]["files"]) for split in SPLITS if split in plan["splits"])
        done = 0
        if progress is not None:
            progress(0, total)
        if workers == 1:
            results = []
            for s, i, _, _ in jobs:
                shard_progress = None if progress is None else lambda d, _n, before=done: progress(before + d, total)
                results.append(write_shard(plan, s, i, output_dir, overwrite=overwrite, progress=shard_progress))
                done += results[-1]["planned"]
        else:
            # A child process per shard, forked with the plan in its memory; results as they finish, the first
            # failure stops the run, and finalize orders them by shard.
            results = []

            def shard_path(job: tuple) -> str:
                return str(output_dir / shard_name(job[0], job[1], plan["splits"][job[0]]["num_shards"]))

            with forked_each(functools.partial(_write_one, plan), jobs, workers, name=shard_path) as finished:
                for result in finished:
                    results.append(result)
                    done += result["planned"]
                    if progress is not None:
                        progress(done, total)
        manifest = finalize(plan, output_dir, results, overwrite=overwrite)
        stage.finish(sum(r["records"] for r in results), "images",
                     sum((output_dir / r["shard"]).stat().st_size for r in results))
        return manifest


def _intact(output_dir: Path, manifest: dict) -> bool:
    """Every file MANIFEST.json lists is there at its listed size (what a receipt checks; not the checksums),
    and the manifest has the summaries finalize writes (what the command prints)."""
    try:
        return (all((output_dir / f["path"]).stat().st_size == f["size"] for f in manifest["files"])
                and all(isinstance(st[k], int) for st in manifest["splits"].values()
                        for k in ("records", "shards", "left_out", "converted"))
                and all(isinstance(d["file"], str) and isinstance(d["reason"], str)
                        for k in ("left_out", "annotation_problems") for d in manifest[k]))
    except (OSError, KeyError, TypeError, AttributeError):
        return False


@contextlib.contextmanager
def _undone_on_failure(output_dir: Path, plan: dict):
    """On an exception or Ctrl-C in the block, leave output_dir as it was before: remove the files and folders
    the block created (shards, index files, MANIFEST.json, the plan) and their temporaries, and put back a
    plan it replaced. A shard that was there before stays: check_output_dir found it to be of this
    dataset, so the block rewrote it with the same bytes."""
    output_dir = output_dir.absolute()
    plan_path = output_dir / WORK_DIR / PLAN_NAME
    outputs = [output_dir / MANIFEST, plan_path] + [q for name in _shard_names(plan)
                                                    for q in (output_dir / name, index_path(output_dir, name))]
    existed = {q for q in outputs if q.exists()}
    old_plan = plan_path.read_bytes() if plan_path in existed else None
    folders = [d for d in (*reversed(output_dir.parents), output_dir, output_dir / WORK_DIR, output_dir / IDX_DIR)
               if not d.exists()]
    try:
        yield
    except BaseException:
        for q in outputs:
            remove_stale_temps(q)  # those of worker processes stopped mid-write (dead by now: forked_each reaped them)
            if q not in existed:
                q.unlink(missing_ok=True)
        if old_plan is not None and (not plan_path.is_file() or plan_path.read_bytes() != old_plan):
            write_bytes(plan_path, old_plan, overwrite=True)
        for d in reversed(folders):
            with contextlib.suppress(OSError):
                d.rmdir()  # only when empty: never what someone else put there meanwhile
        raise
