"""MANIFEST.json: every file of a dataset with its sha256, size and record count, sorted by path.

`check_manifest` trusts nothing in it: the manifest must have the shape `build_manifest` writes,
every path must stay inside the folder, every listed file must match, and every data file in
the folder must be listed (a temporary left by an interrupted run, a stray copy).

A dataset's report (`report/`: report.html, stats.json, plots) describes the data and is not part
of it: it is made after MANIFEST.json, from the files the manifest lists, so it is neither listed
nor refused as unlisted, and neither is the temporary folder it is built in (`report.tmp-HOST-PID/`,
which the report's own manifest check would otherwise find, and a duplicate run's too).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Sequence

from .atomic import TMP_MARK as _TMP_MARK, sha256_file, write_json
from .errors import PrepError

MANIFEST = "MANIFEST.json"
REPORT_DIR = "report"  # the dataset's report folder, beside its data and outside its manifest


def _in_temporary(rel: Path) -> bool:
    """A path inside a temporary folder (a report being written by a live run, `report.tmp-HOST-PID/...`)."""
    return any(_TMP_MARK in part for part in rel.parts[:-1])


def _is_data_file(folder: Path, p: Path) -> bool:
    """A file the manifest lists: not in a hidden folder (.receipts/, .work/ hold bookkeeping such as
    machine-specific paths, not data), not in the report folder or its temporary, and not the manifest itself."""
    rel = p.relative_to(folder)
    folders = rel.parts[:-1]
    return (p.is_file() and rel.as_posix() != MANIFEST and not any(part.startswith(".") for part in folders)
            and not (folders and (folders[0] == REPORT_DIR or folders[0].startswith(REPORT_DIR + _TMP_MARK))))


def build_manifest(folder: str | Path, record_counts: dict[str, int], extra: dict | None = None, *,
                   known_files: dict[str, dict] | None = None) -> dict:
    """Describe every data file under `folder` (receipts, temporaries and the manifest itself left out).

    `record_counts` maps a relative path to its number of records; files not in it get none.
    `known_files` maps a relative path to the {"sha256", "size"} its writer already computed: such a
    file is not read again, only its size compared (a file of another size is a PrepError); every
    other file is hashed here. For a dataset of hundreds of GB the hashing is minutes of one
    process, while each shard's writer hashed its own file in parallel with the others.
    """
    folder = Path(folder)
    known_files = dict(known_files or {})
    files = []
    for p in sorted(folder.rglob("*"), key=lambda q: q.relative_to(folder).as_posix()):
        if not _is_data_file(folder, p) or _TMP_MARK in p.name or _in_temporary(p.relative_to(folder)):
            continue
        rel = p.relative_to(folder).as_posix()
        size = p.stat().st_size
        known = known_files.pop(rel, None)
        if known is not None and known["size"] != size:
            raise PrepError(f"{p}: {size} bytes, but its writer recorded {known['size']}; write it again")
        entry = {"path": rel, "sha256": known["sha256"] if known is not None else sha256_file(p), "size": size}
        if rel in record_counts:
            entry["records"] = record_counts[rel]
        files.append(entry)
    if known_files:
        missing = min(known_files)
        raise PrepError(f"{folder / missing}: missing, but its writer recorded it")
    manifest = {"files": files}
    if extra:
        manifest.update(extra)
    return manifest


def write_manifest(folder: str | Path, record_counts: dict[str, int], extra: dict | None = None, *,
                   overwrite: bool = False, known_files: dict[str, dict] | None = None) -> dict:
    """Build the manifest (`build_manifest`) and commit it as MANIFEST.json."""
    manifest = build_manifest(folder, record_counts, extra, known_files=known_files)
    write_json(Path(folder) / MANIFEST, manifest, overwrite=overwrite)
    return manifest


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry_problem(entry) -> str | None:
    """What is wrong with one entry of "files", or None."""
    if not isinstance(entry, dict):
        return f"an entry is {type(entry).__name__}, not an object"
    path = entry.get("path")
    if not isinstance(path, str) or not path:
        return f"an entry has no \"path\" string: {_short(entry)}"
    parts = PurePosixPath(path).parts
    if path.startswith("/") or "\\" in path or ".." in parts or "." in parts or path != PurePosixPath(path).as_posix():
        return f"path {path!r} leaves the folder or is not a plain relative path"
    if not isinstance(entry.get("sha256"), str) or not re.fullmatch(r"[0-9a-f]{64}", entry["sha256"]):
        return f"{path}: \"sha256\" is not 64 hex digits"
    if not _is_count(entry.get("size")):
        return f"{path}: \"size\" is not a non-negative integer"
    if "records" in entry and not _is_count(entry["records"]):
        return f"{path}: \"records\" is not a non-negative integer"
    return None


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_manifest(folder: str | Path) -> dict:
    """MANIFEST.json of `folder`, checked for shape (not yet against the files); PrepError naming the problem."""
    folder = Path(folder)
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PrepError(f"{path}: no manifest (is this a finished dataset folder?)") from None
    except IsADirectoryError:
        raise PrepError(f"{path}: a folder, not a manifest") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise PrepError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise PrepError(f"{path}: not a manifest (expected an object with a \"files\" list, got {_short(manifest)})")
    seen = set()
    for entry in manifest["files"]:
        problem = _entry_problem(entry)
        if problem:
            raise PrepError(f"{path}: {problem}")
        if entry["path"] in seen:
            raise PrepError(f"{path}: {entry['path']} is listed twice")
        seen.add(entry["path"])
    return manifest


def _check_listed_file(folder: Path, known_files: dict[str, dict], entry: dict) -> None:
    """Raise PrepError unless the file of one manifest entry is in the folder with its size and sha256 (the
    one in `known_files` when it names the file, else its bytes hashed now)."""
    p = folder / entry["path"]
    if not p.resolve().is_relative_to(folder.resolve()):
        raise PrepError(f"{p}: a link out of the dataset folder (to {p.resolve()})")
    if not p.is_file():
        raise PrepError(f"{p}: listed in {MANIFEST} but missing")
    known = known_files.get(entry["path"])
    if known is not None and known["size"] != p.stat().st_size:
        known = None  # not the file its writer hashed: read it
    digest = known["sha256"] if known is not None else None
    if p.stat().st_size != entry["size"] or (digest or sha256_file(p)) != entry["sha256"]:
        raise PrepError(f"{p}: checksum differs from {MANIFEST}")


def check_manifest(folder: str | Path, file_map: Callable[[Callable, Iterable], Iterable] = map, *,
                   temporaries: bool = True, known_files: dict[str, dict] | None = None,
                   progress: Callable[[int, int | None], None] | None = None) -> dict:
    """Check `folder` against its MANIFEST.json; raise PrepError naming the first problem.

    Every listed file exists with its size and sha256, and every data file of the folder is listed.
    `file_map` hashes the listed files: `map`, or a `shardkit.pool.file_map` of worker processes
    (the same first problem, in manifest order). `temporaries` False passes over unlisted temporaries
    (`NAME.tmp-HOST-PID`): what a report checks, whose words must not depend on a writer at work
    beside it (a duplicate run's, a live writer's); `verify` names them. `known_files` ({path: {"sha256",
    "size"}}, as `build_manifest`'s) gives the sha256 of files their writers hashed: those are compared with
    the manifest, and their sizes with the files now, without reading them (the report of a finished dataset
    inside its closing task); `verify` gives none, and reads every byte. `progress(done, total)` counts the
    bytes of the listed files checked.
    """
    folder = Path(folder)
    manifest = read_manifest(folder)
    listed = {e["path"] for e in manifest["files"]}
    total, done = sum(e["size"] for e in manifest["files"]), 0
    for entry, _ in zip(manifest["files"],
                        file_map(functools.partial(_check_listed_file, folder, known_files or {}), manifest["files"])):
        done += entry["size"]
        if progress is not None:
            progress(done, total)
    for p in sorted(folder.rglob("*")):
        if _is_data_file(folder, p) and p.relative_to(folder).as_posix() not in listed:
            rel = p.relative_to(folder)
            temporary = _TMP_MARK in p.name or _in_temporary(rel)
            if temporary and not temporaries:
                continue
            why = "a temporary left by an interrupted run" if temporary else "a file the dataset did not write"
            raise PrepError(f"{p}: not listed in {MANIFEST} ({why}); remove it, or move it elsewhere")
    return manifest


def check_report_folder(out: Path, dataset: Path, markers: Sequence[str] = ()) -> None:
    """Refuse, before anything is read or written, a `stats --out` folder that is the dataset, holds one or lies
    inside one: a report replaces its own files there (stats.json, report.html...), which could be a dataset's
    manifested files, or adds files a dataset's `verify` refuses. A folder holds a dataset when it has a
    MANIFEST.json or one of `markers` (what the library's unfinished datasets already hold: dataset.json...)."""
    out, dataset = Path(out), Path(dataset)
    if out.resolve() == dataset.resolve():
        raise PrepError(f"--out {out}: choose a report folder other than the dataset itself")
    resolved = out.resolve()
    for folder in (resolved, *resolved.parents):
        held = next((m for m in (MANIFEST, *markers) if (folder / m).exists()), None)
        if held is not None:
            where = "holds a dataset" if folder == resolved else f"is inside the dataset {folder}"
            raise PrepError(f"--out {out}: {where} ({folder / held} is there); a report there would replace or "
                            f"add files of that dataset: give a folder outside any dataset")


def unfinished(folder: Path, started_by: Sequence[str]) -> str | None:
    """Why `folder` holds an unfinished dataset (one of `started_by`, which a run writes first, is there and
    MANIFEST.json, which it writes last, is not), or None."""
    folder = Path(folder)
    if not folder.is_dir() or (folder / MANIFEST).exists():
        return None
    started = next((m for m in started_by if (folder / m).is_file()), None)
    return None if started is None else f"{started} is there, {MANIFEST} not yet: the run making it has not finished"


def unfinished_note(folder: Path, started_by: Sequence[str]) -> str | None:
    """The warning a `stats` command gives after reporting on an unfinished dataset (`unfinished`), or None."""
    why = unfinished(folder, started_by)
    return None if why is None else f"{folder}: an unfinished dataset ({why}); the report is of the files written so far"


def manifest_status(folder: Path, records: dict[str, int], name: str | None = None,
                    known_files: dict[str, dict] | None = None, started_by: Sequence[str] = ()) -> dict:
    """What a report says of a folder's MANIFEST.json: checked as `verify` checks it (every listed file's size and
    sha256, nothing unlisted but the temporaries of writers at work), its record counts against `records` (file ->
    records read), the problem, if any, in one line with the folder written as `name`.

    `known_files` as `check_manifest`'s: the sha256 those files' writers took. The status then says
    `"verified": False`: their sizes and record counts were checked, their bytes were not hashed again (the
    finalize task of a large dataset must not read it whole; `verify` does).
    """
    if not (folder.is_dir() and (folder / MANIFEST).is_file()):
        status = {"present": False, "verified": False, "ok": None, "problem": None}
        why = unfinished(folder, started_by)
        return status if why is None else {**status, "unfinished": why}
    hashed = not known_files
    try:
        manifest = check_manifest(folder, temporaries=False, known_files=known_files)
        listed = {e["path"]: e.get("records") for e in manifest["files"]}
        for file, n in records.items():
            if listed.get(file) is not None and listed[file] != n:
                raise PrepError(f"{folder / file}: {n} records but {MANIFEST} says {listed[file]}")
        return {"present": True, "verified": hashed, "ok": True, "problem": None, "files": len(manifest["files"])}
    except PrepError as e:
        problem = str(e) if name is None else str(e).replace(str(folder), name)
        return {"present": True, "verified": hashed, "ok": False, "problem": problem}


def status_words(status: dict) -> str:
    """`manifest_status` in words, for a report: what was checked, and no more."""
    if status.get("unfinished"):
        return f"none yet: an UNFINISHED dataset ({status['unfinished']}); the figures are of the files written so far"
    if not status.get("present"):
        return "none in the folder: records read, checksums not checked"
    if not status.get("ok"):
        return f"does NOT match: {status['problem']}"
    if status.get("verified"):
        return f"verified: every one of its {status['files']} files matches (size, sha256, records)"
    return (f"matches: the sizes and record counts of its {status['files']} files checked, their sha256 taken by "
            f"their writers as they wrote them (verify hashes every byte again)")
