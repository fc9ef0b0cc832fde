"""TFRecord files and their index files: framing, CRCs, atomic writing, reading back, checking.

The payloads are opaque bytes here (`example.py` makes and reads `tf.train.Example`s). Index
files hold one `offset length` line per record, `length` counting the whole framed record: the
format of `tfrecord`'s `tfrecord2idx` and of DALI.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import struct
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import crc32c as _crc32c

from .atomic import atomic_write_together, start_writeback
from .errors import PrepError
from .extensions import SHARDKIT_PURE_PYTHON, python_requested

try:
    from . import _examples as _compiled
except ImportError:  # not built: the Python framing below
    _compiled = None


def _mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _masked_crc(data: bytes) -> int:
    return _mask(_crc32c.crc32c(data))


def frame_record(data: bytes) -> bytes:
    """One TFRecord: length, masked CRC32C of the length, data, masked CRC32C of the data."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", _masked_crc(length)) + data + struct.pack("<I", _masked_crc(data))


def _write_all(fd: int, chunks: Sequence[bytes]) -> None:
    """os.writev of every chunk, again from where a short write stopped (as a full disk's first write may)."""
    views = [memoryview(c) for c in chunks if len(c)]
    while views:
        n = os.writev(fd, views)
        if n == 0:
            raise OSError(errno.EIO, "a write of a record wrote nothing")
        while views and n >= len(views[0]):
            n -= len(views.pop(0))
        if views:
            views[0] = views[0][n:]


def index_path_for(record_path: str | Path) -> Path:
    """`wiki_00000.tfrecord` -> `wiki_00000.index` (the name `tfrecord2idx` users give it)."""
    p = Path(record_path)
    return p.with_suffix(".index") if p.suffix == ".tfrecord" else p.with_name(p.name + ".index")


class RecordWriter:
    """Write framed records to `path` and their index to `index_path`, committed together atomically.

    Use as a context manager: neither file appears unless the block finishes without error, and
    the index never without its record file (both temporaries are opened on entry, so an index
    that cannot be written fails before any record is; the record file is renamed into place
    first, the index last: a kill between the two renames leaves a record file without its index
    and without its receipt, which a task takes as not done; its rerun finds the record file
    identical and commits the index).
    `record_writers` commits several record files together. Without `overwrite`, existing files
    are never replaced (`shardkit.atomic.commit`: identical accepted, different refused).

    With `sha256`, the writer hashes both files as it writes them: `files()` gives their sha256
    and size, what MANIFEST.json lists, without reading them again. Every `WRITEBACK_BYTES` of
    records, the kernel is asked to start writing them to the disk (`start_writeback`), so that
    the disk works while the next records are made, and the fsync at the commit has little left.
    """

    WRITEBACK_BYTES = 8 << 20
    UNBUFFERED_BYTES = 64 << 10  # a record this large (an image) goes straight to the file

    def __init__(self, path: str | Path, index_path: str | Path | None = None, *, overwrite: bool = False,
                 sha256: bool = False):
        self.path = Path(path)
        self.index_path = Path(index_path) if index_path is not None else None
        self.overwrite = overwrite
        self.count = 0
        self._offset = 0
        self._written_back = 0
        self._f = self._index = None
        self._sha = hashlib.sha256() if sha256 else None
        self._index_sha = hashlib.sha256() if sha256 else None
        self._index_size = 0

    def __enter__(self) -> "RecordWriter":
        self._ctx = atomic_write_together([self.path] + ([self.index_path] if self.index_path is not None else []),
                                          overwrite=self.overwrite)
        self._f, *index = self._ctx.__enter__()
        self._index = index[0] if index else None
        return self

    def write(self, data: bytes) -> None:
        self._written(frame_record(data))

    def write_parts(self, parts: Sequence[bytes]) -> None:
        """`write(b"".join(parts))`, without joining them: a large part (an image) is written as it is,
        never copied into a record, and its CRC is taken in the same pass as the others'."""
        length = struct.pack("<Q", sum(map(len, parts)))
        crc = 0
        for part in parts:
            crc = _crc32c.crc32c(part, crc)
        self._written(length + struct.pack("<I", _masked_crc(length)), *parts, struct.pack("<I", _mask(crc)))

    def _written(self, *chunks: bytes) -> None:
        """Write one framed record, given as consecutive chunks, and its index line."""
        size = sum(map(len, chunks))
        if size >= self.UNBUFFERED_BYTES:  # one writev: the buffer would only split it in two writes
            self._f.flush()
            try:
                _write_all(self._f.fileno(), chunks)
            except OSError as e:
                e.filename = e.filename or self._f.name  # a full disk is this file's, not the first of the commit's
                raise
        else:
            for chunk in chunks:
                self._f.write(chunk)
        if self._sha is not None:
            for chunk in chunks:
                self._sha.update(chunk)
        if self._index is not None:
            line = b"%d %d\n" % (self._offset, size)
            self._index.write(line)
            self._index_size += len(line)
            if self._index_sha is not None:
                self._index_sha.update(line)
        self._offset += size
        self.count += 1
        if self._offset - self._written_back >= self.WRITEBACK_BYTES:
            self._f.flush()
            start_writeback(self._f.fileno(), self._written_back, self._offset - self._written_back)
            self._written_back = self._offset

    def files(self) -> dict[Path, dict]:
        """{path: {"sha256", "size"}} of the record file and its index, as written (needs `sha256`)."""
        if self._sha is None:
            raise ValueError("RecordWriter(..., sha256=True) hashes what it writes; this one did not")
        out = {self.path: {"sha256": self._sha.hexdigest(), "size": self._offset}}
        if self.index_path is not None:
            out[self.index_path] = {"sha256": self._index_sha.hexdigest(), "size": self._index_size}
        return out

    def write_framed(self, framed: bytes, index_lines: bytes, count: int) -> None:
        """`count` records framed already (`frame_record`'s bytes, one after another) and their index lines,
        offsets counted from `self.offset`: a copy of records made and framed elsewhere, a block at a time."""
        self._f.write(framed)
        if self._index is not None:
            self._index.write(index_lines)
        self._offset += len(framed)
        self.count += count

    @property
    def offset(self) -> int:
        """Bytes written so far: where the next record starts."""
        return self._offset

    def __exit__(self, exc_type, exc, tb):
        self._ctx.__exit__(exc_type, exc, tb)
        return False


@contextlib.contextmanager
def record_writers(paths: Sequence[str | Path], index_paths: Sequence[str | Path | None], *,
                   overwrite: bool = False) -> Iterator[list[RecordWriter]]:
    """A RecordWriter per path (`index_paths[i]` its index, or None), all committed together.

    No record or index file appears unless the block finishes without error; every temporary is
    opened on entry, and every record file is renamed into place before the first index (an index
    is never there without its records; see `RecordWriter`).
    """
    writers = [RecordWriter(p, i) for p, i in zip(paths, index_paths, strict=True)]
    indexed = [w for w in writers if w.index_path is not None]
    with atomic_write_together([w.path for w in writers] + [w.index_path for w in indexed],
                               overwrite=overwrite) as files:
        for w, f in zip(writers, files):
            w._f = f
        for w, f in zip(indexed, files[len(writers):]):
            w._index = f
        yield writers


def write_records(path: str | Path, payloads: Iterable[bytes], index_path: str | Path | None = None, *,
                  overwrite: bool = False) -> int:
    """Write every payload as one record; returns the record count."""
    with RecordWriter(path, index_path, overwrite=overwrite) as w:
        for data in payloads:
            w.write(data)
    return w.count


def read_records(path: str | Path, check_crc: bool = True) -> Iterator[bytes]:
    """Yield the payload of every record in `path`, checking framing and CRCs."""
    framing = compiled_framing()
    if framing is not None:
        return _read_records_compiled(Path(path), check_crc, framing.split_frames)
    return _read_records(Path(path), check_crc)


def compiled_framing():
    """The extension `_examples`, whose `split_frames` read_records uses, or None: not built, or SHARDKIT_PURE_PYTHON
    asks for the Python path (`_read_records`, the reference)."""
    return None if python_requested(SHARDKIT_PURE_PYTHON) else _compiled


def _bad_length_checksum(path: Path, offset: int) -> str:
    """The error of a record header whose length CRC does not match: at byte 0, the file is not a TFRecord file
    at all (a text file, an HDF5 file given by mistake), which is what the user needs to hear."""
    if offset == 0:
        return f"{path}: not a TFRecord file (its first bytes are not a record header: bad length checksum at byte 0)"
    return f"{path}: bad length checksum at byte {offset}"


def _read_records(path: Path, check_crc: bool) -> Iterator[bytes]:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        offset = 0
        while True:
            head = f.read(12)
            if not head:
                return
            if len(head) < 12:
                raise PrepError(f"{path}: truncated record header at byte {offset}")
            (length,) = struct.unpack("<Q", head[:8])
            if check_crc and struct.unpack("<I", head[8:])[0] != _masked_crc(head[:8]):
                raise PrepError(_bad_length_checksum(path, offset))
            # At most what the file holds: read() makes its buffer first, and a damaged length (unchecked, or
            # one whose CRC matches by chance) could ask for exabytes: a MemoryError, not this truncated record.
            data = f.read(min(length, max(0, size - f.tell())))
            tail = f.read(4)
            if len(data) < length or len(tail) < 4:
                raise PrepError(f"{path}: truncated record at byte {offset}")
            if check_crc and struct.unpack("<I", tail)[0] != _masked_crc(data):
                raise PrepError(f"{path}: bad data checksum in the record at byte {offset}")
            yield data
            offset += 16 + length


_READ_BLOCK = 1 << 20


def _read_records_compiled(path: Path, check_crc: bool, split_frames) -> Iterator[bytes]:
    """`_read_records` with the framing and CRCs of each block's whole records done by `split_frames`: the same
    payloads and, at the same record, the same error. A record cut by the block's end waits for the next
    read, which takes at least the rest of it (one long record is read once, not block by block)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pending, offset = b"", 0  # bytes read but not yet taken, and where in the file they start
        while True:
            want = _READ_BLOCK
            if len(pending) >= 12:  # a whole header, its CRC checked: the record needs this much more
                want = max(want, 16 + struct.unpack("<Q", pending[:8])[0] - len(pending))
            block = f.read(max(0, min(want, size - f.tell())))  # never a buffer larger than the file
            buffer = pending + block if pending else block
            payloads, end, problem = split_frames(buffer, check_crc)
            yield from payloads
            offset += end
            if problem == 1:
                raise PrepError(_bad_length_checksum(path, offset))
            if problem == 2:
                raise PrepError(f"{path}: bad data checksum in the record at byte {offset}")
            pending = buffer[end:]
            if not block:  # the end of the file: what is left is a record cut short
                if not pending:
                    return
                if len(pending) < 12:
                    raise PrepError(f"{path}: truncated record header at byte {offset}")
                raise PrepError(f"{path}: truncated record at byte {offset}")


def record_offsets(path: str | Path) -> list[tuple[int, int]]:
    """(offset, framed length) of every record, read from the file itself."""
    out, offset = [], 0
    for data in read_records(path):
        out.append((offset, len(data) + 16))
        offset += len(data) + 16
    return out


def read_index(index_path: str | Path) -> list[tuple[int, int]]:
    """The `(offset, length)` entries of an index file; PrepError when it is missing or a line is not two numbers."""
    index_path = Path(index_path)
    try:
        text = index_path.read_text(encoding="ascii")
    except FileNotFoundError:
        raise PrepError(f"{index_path}: index file missing") from None
    except UnicodeDecodeError:
        raise PrepError(f"{index_path}: not an index file (not ASCII text)") from None
    entries = []
    for number, line in enumerate(text.split("\n"), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2 or not all(f.isdigit() for f in fields):
            raise PrepError(f"{index_path}: line {number} is not 'offset length'")
        entries.append((int(fields[0]), int(fields[1])))
    return entries


def check_index(record_path: str | Path, index_path: str | Path) -> int:
    """Raise PrepError unless `index_path` lists exactly the records of `record_path`; returns the count.

    Reads the whole record file (framing and CRCs); `check_index_size` is the cheap check.
    """
    expected = record_offsets(record_path)
    if read_index(index_path) != expected:
        raise PrepError(f"{index_path}: index does not match {Path(record_path).name}")
    return len(expected)


def check_index_size(record_path: str | Path, index_path: str | Path, records: int) -> None:
    """Raise PrepError unless `index_path` lists `records` entries whose lengths add up to the record file's size.

    Reads only the index: for a writer's own final check, where `check_index` would read every byte again.
    """
    record_path = Path(record_path)
    if not record_path.is_file():
        raise PrepError(f"{record_path}: missing (not written?)")
    entries = read_index(index_path)
    if len(entries) != records or sum(length for _, length in entries) != record_path.stat().st_size:
        raise PrepError(f"{index_path}: lists {len(entries)} records, not the {records} of {record_path.name}, "
                        f"or not its size")


def find_files(folder: str | Path, pattern: str, name_regex: str | None = None) -> list[Path]:
    """The files matching `pattern` (and `name_regex`, when given) in `folder`, sorted.

    PrepError when the folder is missing or holds no such file. The regex keeps out siblings
    the glob would catch, such as a killed run's temporary files.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise PrepError(f"{folder}: not a folder")
    files = sorted(p for p in folder.glob(pattern)
                   if p.is_file() and (name_regex is None or re.fullmatch(name_regex, p.name)))
    if not files:
        raise PrepError(f"{folder}: no {pattern} files")
    return files
