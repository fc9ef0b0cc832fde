"""Committed files read back against the sha256 their writer recorded, hashed as they are read.

A file a pipeline committed has a record of its bytes: its own receipt (`shardkit.atomic.write_receipt`:
size and sha256), or, for a file of a committed folder, its entry in the folder's receipt
(`write_dir_receipt`). A stage that reads such a file opens it with `open_committed` (or `read_committed`):
the bytes are hashed as the reader takes them, never in a second pass, and as soon as it has taken as many
as the record says, or met the end sooner, the size and sha256 are compared. The comparison happens
inside the reader's last read, so a stage that reads its input to the end inside its atomic write learns of
damage before it commits anything made of it.

On a difference `Damaged` is raised (a PrepError naming the file and what differs), and the damaged output
and its receipt are removed first (the output itself, or the whole folder its receipt is of: a folder is
committed as one), the output before its receipt, so that a kill in between leaves a receipt without its
output, which the rerun takes as not done, never an output without receipt, which it would refuse to
replace. Only what a receipt says was committed is removed, and only while its path is still the file that
was read (a racing rerun may have made it again since). The same command run again makes it again.

A file without a record (a user's own input: a --vocab-file, a corpus' text) is read as it is.

Two kinds of reader need one more call:

- a reader that stops early (a sample: Punkt's first characters, the vocabulary's share of each shard)
  hashes the rest with `verify_rest(f)` (or `check_file(path)`, or in a thread with `Remainders`) before
  it commits anything;
- a reader that fails on what it read (bad JSON, bytes that are not UTF-8, a bz2 checksum) calls
  `verify_rest(f)` before raising its own error, so that damage is named as damage, not as bad content.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .atomic import receipt_path, remove_output
from .errors import PrepError

_BUFFER = 1 << 20  # the reads each hashed block comes in: few Python calls per MB


class Damaged(PrepError):
    """A committed file whose bytes differ from its receipt's record (removed, with its receipt, when raised)."""


@dataclass(frozen=True)
class Record:
    """What a receipt recorded of committed file `path`: its `size` and `sha256`, and the `output` the receipt
    is of (the file itself, or the folder holding it) with that `receipt`."""

    path: Path
    size: int
    sha256: str
    output: Path
    receipt: Path


def _load(path: Path) -> dict | None:
    try:
        held = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return held if isinstance(held, dict) else None


def _record(path: Path, entry, output: Path, receipt: Path) -> Record | None:
    if not isinstance(entry, dict):
        return None
    size, sha256 = entry.get("size"), entry.get("sha256")
    if not isinstance(size, int) or isinstance(size, bool) or not isinstance(sha256, str) or len(sha256) != 64:
        return None
    return Record(path, size, sha256.lower(), output, receipt)


def record_of(path: str | os.PathLike) -> Record | None:
    """The record of `path`'s bytes: its own receipt's, else its entry in the receipt of the folder holding it;
    None when neither has one (a file this pipeline did not commit)."""
    path = Path(path)
    own = receipt_path(path)
    held = _load(own)
    if held is not None and "files" not in held:
        return _record(path, held, path, own)
    folder = receipt_path(path.parent)
    held = _load(folder)
    if held is not None and isinstance(held.get("files"), dict):
        return _record(path, held["files"].get(path.name), path.parent, folder)
    return None


class _HashingReader(io.RawIOBase):
    """A file's bytes as read, hashed on the way, compared with its record once all are read (`_compare`)."""

    def __init__(self, record: Record):
        self.record = record
        self._file = open(record.path, "rb", buffering=0)
        self._hash = hashlib.sha256()
        self.done = 0  # bytes read, and hashed
        self._verified = False

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._file.fileno()

    def tell(self) -> int:
        return self.done

    def readinto(self, buffer) -> int:
        n = self._file.readinto(buffer)
        if n:
            with memoryview(buffer) as view:
                self._hash.update(view[:n])
            self.done += n
        size = self.record.size
        if self.done > size or (self.done == size and not self._verified) or (not n and self.done < size):
            self._compare()
        return n

    def _compare(self) -> None:
        record = self.record
        if self.done == record.size:
            digest = self._hash.hexdigest()
            if digest == record.sha256:
                self._verified = True
                return
            what = f"sha256 {digest[:12]}, its receipt says {record.sha256[:12]} ({record.size} bytes both)"
        elif self.done < record.size:
            what = f"{self.done} bytes, its receipt says {record.size}"
        else:
            what = f"more than the {record.size} bytes its receipt says"
        raise Damaged(f"{record.path}: damaged since it was committed: {what}; "
                      f"{_remove(record, self._file.fileno())}")

    def finish(self) -> None:
        """Read and hash what is left, comparing at the end: Damaged when the file differs from its record."""
        buffer = bytearray(_BUFFER)
        while self.readinto(buffer):
            pass

    def close(self) -> None:
        if not self.closed:
            self._file.close()
        super().close()


def _remove(record: Record, fd: int) -> str:
    """Remove a damaged output, then its receipt, while its path is still the file open on `fd`; what was done."""
    held = os.fstat(fd)
    try:
        now = os.lstat(record.path)
    except FileNotFoundError:
        return "removed already: run the same command again to make it again"
    if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
        return "made again since: run the same command again"
    remove_output(record.output)
    remove_output(record.receipt)
    what = "removed with its receipt" if record.output == record.path else \
        f"removed with its folder {record.output} and that folder's receipt"
    return f"{what}: run the same command again to make it again"


def damaged(path: str | os.PathLike, fd: int, what: str) -> PrepError:
    """The error to raise for committed file `path`, open on `fd`, that a reader found damaged by checks of its own:
    one that reads only byte ranges of it, which the file's sha256 cannot check, and checks each record's CRC
    instead (a finishing part reading its rows of a staged shard). Damaged, the file and its receipt removed as a
    hashed read removes them; a PrepError naming it when it has no record (not committed by this pipeline)."""
    record = record_of(path)
    if record is None:
        return PrepError(f"{path}: {what}")
    return Damaged(f"{path}: damaged since it was committed: {what}; {_remove(record, fd)}")


def open_committed(path: str | os.PathLike, mode: str = "rb", *, encoding: str | None = None,
                   errors: str | None = None, newline: str | None = None) -> IO:
    """`open(path, mode)` for reading ("rb" or "r"), hashing what is read against the file's record when it has
    one (`record_of`): the read that reaches its recorded size, or ends short of it, raises Damaged on a
    difference. Without a record, the plain file. FileNotFoundError (and other OSErrors) as `open` raises them."""
    if mode not in ("rb", "r"):
        raise ValueError(f"open_committed reads, in mode 'rb' or 'r', not {mode!r}")
    record = record_of(path)
    if record is None:
        return open(path, mode, encoding=encoding, errors=errors, newline=newline)
    raw = _HashingReader(record)
    buffered = io.BufferedReader(raw, buffer_size=_BUFFER)
    if mode == "rb":
        return buffered
    return io.TextIOWrapper(buffered, encoding=encoding or "utf-8", errors=errors, newline=newline)


def read_committed(path: str | os.PathLike) -> bytes:
    """The whole of `path`, checked against its record (`open_committed`)."""
    with open_committed(path) as f:
        return f.read()


def _hashing_reader(f: IO) -> _HashingReader | None:
    raw = getattr(getattr(f, "buffer", f), "raw", None)
    return raw if isinstance(raw, _HashingReader) else None


def verify_rest(f: IO) -> None:
    """Hash the rest of `f` (from `open_committed`) and compare: Damaged when the file differs from its record.

    For a reader that stops early, before it commits what it made, and for one about to raise an error about
    what it read, so that damage is named as such. Nothing for a file without a record."""
    raw = _hashing_reader(f)
    if raw is not None and not raw.closed:
        raw.finish()


def check_file(path: str | os.PathLike) -> None:
    """Hash the whole of `path` against its record: Damaged when it differs. Nothing without a record."""
    with open_committed(path) as f:
        verify_rest(f)


class Remainders:
    """The rest of files read only in part, hashed in a thread behind the reader, one file at a time.

    `add(f)` takes over `f` (from `open_committed`), which the thread finishes (`verify_rest`) and closes while
    the reader goes on with its next file; at most two files are open. `wait()` (also on leaving the `with`
    block without an exception) returns once every file is checked, raising the first Damaged: call it before
    committing anything made of them. hashlib and file reads let go of the GIL, so the hashing costs the
    reader little time."""

    def __init__(self):
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="verify")
        self._pending: concurrent.futures.Future | None = None

    def add(self, f: IO) -> None:
        self._wait_pending()
        self._pending = self._pool.submit(self._finish, f)

    @staticmethod
    def _finish(f: IO) -> None:
        with f:
            verify_rest(f)

    def _wait_pending(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def wait(self) -> None:
        try:
            self._wait_pending()
        finally:
            self._pool.shutdown(wait=True)

    def __enter__(self) -> Remainders:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.wait()
        else:
            with contextlib.suppress(Exception):
                self.wait()
