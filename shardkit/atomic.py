"""Atomic commits of output files.

Every output is written to a temporary file in its final folder, flushed and fsynced,
then renamed into place; a receipt (JSON, in the folder's `.receipts/`) is committed the
same way, last. A file
whose receipt exists is complete; a file without one is an interrupted run and is
rewritten. Temporary files carry the host and pid so two workers never share one.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import socket
from pathlib import Path
from typing import IO, Iterator

RECEIPTS_DIR = ".receipts"  # receipts live apart, so globs such as `train*` or `wiki_*` never see them
_TMP_MARK = ".tmp-"


def _tmp_path(path: Path) -> Path:
    return path.with_name(f"{path.name}{_TMP_MARK}{socket.gethostname()}-{os.getpid()}")


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing; on success fsync and rename it to `path`.

    On any exception the temporary file is removed and `path` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path(path)
    if "b" not in mode and encoding is None:
        encoding = "utf-8"
    f = open(tmp, mode, encoding=encoding)
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_write(path, "wb") as f:
        f.write(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_write(path, "w") as f:
        f.write(text)


def write_json(path: str | os.PathLike, obj) -> None:
    """Canonical JSON (sorted keys, fixed indent, trailing newline) so equal data gives equal bytes."""
    write_text(path, json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def receipt_path(path: str | os.PathLike) -> Path:
    """`folder/name` -> `folder/.receipts/name.json`."""
    path = Path(path)
    return path.parent / RECEIPTS_DIR / (path.name + ".json")


def write_receipt(path: str | os.PathLike, *, sha256: str | None = None, **info) -> dict:
    """Commit the receipt of an already-committed `path`: its size and sha256 plus `info`.

    Pass `sha256` when it was computed while writing, to spare re-reading a large file.
    """
    path = Path(path)
    receipt = {"file": path.name, "size": path.stat().st_size, "sha256": sha256 or sha256_file(path), **info}
    write_json(receipt_path(path), receipt)
    return receipt


def read_receipt(path: str | os.PathLike) -> dict | None:
    """The receipt of `path`, or None when there is none or the file no longer matches its size."""
    path = Path(path)
    rp = receipt_path(path)
    try:
        receipt = json.loads(rp.read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    try:
        if path.stat().st_size != receipt.get("size"):
            return None
    except FileNotFoundError:
        return None
    return receipt


def _remove(p: Path) -> None:
    if p.is_dir():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def remove_stale_temps(path: str | os.PathLike) -> None:
    """Delete the temporaries a killed run left for this one output (never other tasks', never `.part` downloads).

    Only `path`'s own temporaries: a sibling task may be writing its own in the same folder right now.
    """
    path = Path(path)
    for p in path.parent.glob(f"{glob.escape(path.name)}{_TMP_MARK}*"):
        _remove(p)


def remove_all_stale_temps(folder: str | os.PathLike) -> None:
    """Delete every temporary in `folder`: only once no task can still be writing there (a final step)."""
    for p in Path(folder).glob(f"*{_TMP_MARK}*"):
        if p.is_file():
            _remove(p)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Build a folder under a temporary sibling name; on success fsync its files and rename it to `path`.

    An existing `path` without a receipt is a leftover of a killed run and is replaced.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path(path)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        for p in sorted(tmp.rglob("*"), reverse=True):  # files before the folders holding them
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(tmp)
        if path.exists():
            shutil.rmtree(path)
        os.rename(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _files_below(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and RECEIPTS_DIR not in p.relative_to(folder).parts)


def write_dir_receipt(folder: str | os.PathLike, **info) -> dict:
    """Commit the receipt of a committed folder: every file's size and sha256, plus `info`."""
    folder = Path(folder)
    files = {rel: {"size": (folder / rel).stat().st_size, "sha256": sha256_file(folder / rel)}
             for rel in _files_below(folder)}
    receipt = {"folder": folder.name, "files": files, **info}
    write_json(receipt_path(folder), receipt)
    return receipt


def read_dir_receipt(folder: str | os.PathLike) -> dict | None:
    """The receipt of a committed folder, or None when missing or when its files no longer match it."""
    folder = Path(folder)
    try:
        receipt = json.loads(receipt_path(folder).read_text(encoding="utf-8"))
        names = _files_below(folder)
    except (FileNotFoundError, ValueError, NotADirectoryError):
        return None
    if names != sorted(receipt.get("files", {})):
        return None
    if any((folder / n).stat().st_size != e["size"] for n, e in receipt["files"].items()):
        return None
    return receipt


@contextlib.contextmanager
def atomic_write_together(paths: list[str | os.PathLike]) -> Iterator[list[IO[bytes]]]:
    """`atomic_write` for several files that are only valid together (records and their index, the
    outputs of one run): one binary temporary per path, all opened before the block runs, and renamed
    into place, in the order given, only once the block has finished and every one is fsynced.

    On any exception before the renames every temporary is removed and every path left as it was.
    Put last the files readers look for: a rename that fails midway (the path became a folder) leaves
    the earlier ones committed. `paths` must be distinct.
    """
    paths = [Path(p) for p in paths]
    tmps: list[Path] = []
    files: list[IO[bytes]] = []
    try:
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmps.append(_tmp_path(path))
            files.append(open(tmps[-1], "wb"))
        yield files
        for f in files:
            f.flush()
            os.fsync(f.fileno())
            f.close()
        for tmp, path in zip(tmps, paths):
            os.replace(tmp, path)
    except BaseException:
        for f in files:
            f.close()
        for tmp in tmps:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        raise
    for folder in dict.fromkeys(path.parent for path in paths):
        fsync_dir(folder)
