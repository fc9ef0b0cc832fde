"""MANIFEST.json: every file of a dataset with its sha256, size and record count, sorted by path."""

from __future__ import annotations

import json
from pathlib import Path

from .atomic import sha256_file, write_json
from .errors import PrepError

MANIFEST = "MANIFEST.json"


def build_manifest(folder: str | Path, record_counts: dict[str, int], extra: dict | None = None) -> dict:
    """Describe every data file under `folder` (receipts, temporaries and the manifest itself left out).

    `record_counts` maps a relative path to its number of records; files not in it get none.
    """
    folder = Path(folder)
    files = []
    for p in sorted(folder.rglob("*"), key=lambda q: q.relative_to(folder).as_posix()):
        rel = p.relative_to(folder).as_posix()
        # Hidden folders (.receipts/, .work/) hold bookkeeping such as machine-specific paths, not data.
        hidden = any(part.startswith(".") for part in p.relative_to(folder).parts[:-1])
        if not p.is_file() or rel == MANIFEST or hidden or ".tmp-" in p.name:
            continue
        entry = {"path": rel, "sha256": sha256_file(p), "size": p.stat().st_size}
        if rel in record_counts:
            entry["records"] = record_counts[rel]
        files.append(entry)
    manifest = {"files": files}
    if extra:
        manifest.update(extra)
    return manifest


def write_manifest(folder: str | Path, record_counts: dict[str, int], extra: dict | None = None) -> dict:
    manifest = build_manifest(folder, record_counts, extra)
    write_json(Path(folder) / MANIFEST, manifest)
    return manifest


def check_manifest(folder: str | Path) -> dict:
    """Recompute every checksum listed in MANIFEST.json; raise PrepError naming the first mismatch."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PrepError(f"{folder / MANIFEST}: no manifest (is this a finished dataset folder?)") from None
    except ValueError as e:
        raise PrepError(f"{folder / MANIFEST}: not valid JSON ({e})") from None
    for entry in manifest.get("files", []):
        p = folder / entry["path"]
        if not p.is_file():
            raise PrepError(f"{p}: listed in {MANIFEST} but missing")
        if p.stat().st_size != entry["size"] or sha256_file(p) != entry["sha256"]:
            raise PrepError(f"{p}: checksum differs from {MANIFEST}")
    return manifest
