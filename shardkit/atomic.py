"""Atomic commits of output files.

Every output is written to a temporary file in its final folder, flushed and fsynced,
then renamed into place; a receipt (JSON, in the folder's `.receipts/`) is committed the
same way, last. A file
whose receipt exists is complete; a file without one is an interrupted run and is
rewritten. Temporary files carry the host and pid so two workers never share one, and so
that the next write of the same file can tell a dead writer's temporary (this host, no
such process: SIGKILL, a node's crash) from a live one and remove it.

A write that fails (a full disk, a folder where the file should be) removes its temporary
and raises a PrepError naming the file it was writing, never the temporary.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import json
import os
import re
import shutil
import socket
from pathlib import Path
from typing import IO, Iterator

from .errors import PrepError

RECEIPTS_DIR = ".receipts"  # receipts live apart, so globs such as `train*` or `wiki_*` never see them
TMP_MARK = _TMP_MARK = ".tmp-"  # in every temporary's name, and in no committed file's


def temp_path(path: Path, purpose: str = "") -> Path:
    """`NAME.tmp-HOST-PID` (`NAME.tmp-HOST-PID.PURPOSE` for a scratch file beside an output, such as a
    spill): this process's temporary of `path`, which the next write of `path` removes if we die."""
    return path.with_name(f"{path.name}{_TMP_MARK}{socket.gethostname()}-{os.getpid()}"
                          + (f".{purpose}" if purpose else ""))


_WRITER = re.compile(r"(?P<host>.+)-(?P<pid>\d+)(?:\.[\w-]+)?")


def _writer_is_dead(tmp: Path) -> bool:
    """True when `tmp` was left by a process of this host that no longer runs.

    A temporary of another host, or of a live process (maybe a racing worker), is not ours to remove.
    """
    writer = _WRITER.fullmatch(tmp.name.rpartition(_TMP_MARK)[2])
    if writer is None or writer["host"] != socket.gethostname() or int(writer["pid"]) == os.getpid():
        return False
    try:
        os.kill(int(writer["pid"]), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def remove_dead_temps(path: str | os.PathLike) -> None:
    """Remove the temporaries of `path` whose writer died on this host (SIGKILL, a crash, a full disk)."""
    path = Path(path)
    for p in path.parent.glob(f"{glob.escape(path.name)}{_TMP_MARK}*"):
        if _writer_is_dead(p):
            _remove(p)


_REASONS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
            errno.EFBIG: "file too large for this file system or limit", errno.EROFS: "read-only file system",
            errno.EACCES: "permission denied", errno.EPERM: "permission denied", errno.EIO: "input/output error"}


def _first_non_folder(path: Path) -> Path | None:
    """The first ancestor of `path` (or `path` itself) that exists and is not a folder."""
    for p in reversed([path, *path.parents]):
        if p.exists() and not p.is_dir():
            return p
    return None


def make_parent_folder(path: Path) -> None:
    """Create `path`'s folder; PrepError naming the file in the way when a parent is a file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = _first_non_folder(path.parent)
        raise PrepError(f"{blocker or path.parent}: not a folder; cannot create {path} under it") from None


def check_output_root(path: str | os.PathLike, flag: str) -> None:
    """Refuse, before any work, a root of outputs (`--data-dir`) that is, or lies under, a file."""
    path = Path(path)
    blocker = _first_non_folder(path)
    if blocker == path:
        raise PrepError(f"{flag} {path}: is a file, not a folder")
    if blocker is not None:
        raise PrepError(f"{flag} {path}: {blocker} is a file, not a folder")


def write_error(path: Path, e: OSError) -> PrepError:
    """The one line for a failed write of `path`, never naming our temporary."""
    reason = _REASONS.get(e.errno, e.strerror or str(e))
    return PrepError(f"{path}: cannot write: {reason}")


def _is_own_write_error(e: BaseException, tmp: Path) -> bool:
    """An OSError of writing `tmp` itself (a full disk: no file name), not one of reading some input."""
    return (isinstance(e, OSError) and not isinstance(e, PrepError)
            and (e.filename is None or Path(e.filename) == tmp or Path(e.filename).is_relative_to(tmp)))


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _open_temp(path: Path, mode: str = "wb", encoding: str | None = None) -> tuple[Path, IO]:
    """The temporary of `path`, opened: its folder made, dead writers' temporaries of it removed."""
    if path.is_dir():
        raise PrepError(f"{path}: is a folder; cannot write a file there")
    make_parent_folder(path)
    remove_dead_temps(path)
    tmp = temp_path(path)
    if "b" not in mode and encoding is None:
        encoding = "utf-8"
    try:
        return tmp, open(tmp, mode, encoding=encoding)
    except OSError as e:
        raise write_error(path, e) from e


def _discard(opened: list[tuple[Path, IO]]) -> None:
    for tmp, f in opened:
        # close() flushes what is buffered, and fails again on a full disk: the temporary goes regardless.
        with contextlib.suppress(OSError):
            f.close()
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing; on success fsync and rename it to `path`.

    On any exception (SIGTERM included, once `shardkit.signals` turned it into one) the
    temporary is removed and `path` is left as it was; an OSError of the write itself (a full
    disk) becomes a PrepError naming `path`. Dead writers' temporaries of `path` are removed first.
    """
    path = Path(path)
    tmp, f = _open_temp(path, mode, encoding)
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException as e:
        _discard([(tmp, f)])
        if _is_own_write_error(e, tmp):
            raise write_error(path, e) from e
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
    if path.exists() and not path.is_dir():
        raise PrepError(f"{path}: is a file; a folder is written there")
    make_parent_folder(path)
    remove_dead_temps(path)
    tmp = temp_path(path)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
    except OSError as e:
        raise write_error(path, e) from e
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
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if _is_own_write_error(e, tmp):
            raise write_error(path, e) from e
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

    On any exception before the renames every temporary is removed and every path left as it was,
    and an OSError of a write becomes a PrepError naming its file, as in `atomic_write`.
    Put last the files readers look for: a rename that fails midway (the path became a folder) leaves
    the earlier ones committed. `paths` must be distinct.
    """
    paths = [Path(p) for p in paths]
    opened: list[tuple[Path, IO[bytes]]] = []
    try:
        for path in paths:
            opened.append(_open_temp(path))
        yield [f for _, f in opened]
        for _, f in opened:
            f.flush()
            os.fsync(f.fileno())
            f.close()
        for (tmp, _), path in zip(opened, paths):
            os.replace(tmp, path)
    except BaseException as e:
        _discard(opened)
        for (tmp, _), path in zip(opened, paths):
            if _is_own_write_error(e, tmp):  # a full disk (no file name) is put on the first of them
                raise write_error(path, e) from e
        raise
    for folder in dict.fromkeys(path.parent for path in paths):
        fsync_dir(folder)
