"""The files of a text corpus: which there are, what they hold, and whether they changed.

A corpus folder is walked recursively, its files taken in sorted order of their path relative to
it (`/`-separated). `.gz`, `.bz2`, `.xz` and `.zst` files are read decompressed, as they are on disk
(`open_text`). Every file is read once (`check_file`, in worker processes): its size, the sha256 of
its bytes on disk, and whether it is skipped: not UTF-8 (`not_utf8`), empty (`empty`), or nothing
but whitespace (`whitespace_only`); a UTF-8 byte-order mark counts as nothing.

What that reading found is the corpus' identity (`inventory`), committed once as a JSON file with
a receipt (`write_inventory`). Later runs do not hash the corpus again: they compare the folder's
names, sizes and modification times with it (`changes`), a stat per file, and hash again only a file
whose time moved; any difference is refused by the caller with what changed.
"""

from __future__ import annotations

import bz2
import codecs
import functools
import gzip
import hashlib
import io
import logging
import lzma
import os
from pathlib import Path
from typing import IO

from shardkit.errors import PrepError
from shardkit.pool import file_map
from shardkit.progress import Stage

log = logging.getLogger(__name__)

FORMAT = "wikiprep-text-files-1"
COMPRESSED = (".gz", ".bz2", ".xz", ".zst")
BOM = codecs.BOM_UTF8
SKIP_REASONS = ("not_utf8", "empty", "whitespace_only")
_BLOCK = 1 << 20


def is_compressed(path: str | os.PathLike) -> bool:
    return str(path).endswith(COMPRESSED)


def open_text(path: str | os.PathLike) -> IO[bytes]:
    """The bytes of a corpus file, decompressed when its name ends in .gz, .bz2, .xz or .zst."""
    path = str(path)
    try:
        if path.endswith(".gz"):
            return gzip.open(path, "rb")
        if path.endswith(".bz2"):
            return bz2.open(path, "rb")
        if path.endswith(".xz"):
            return lzma.open(path, "rb")
        if path.endswith(".zst"):
            import zstandard
            return io.BufferedReader(zstandard.open(path, "rb"))  # its reader has no readline
        return open(path, "rb")
    except OSError as e:
        raise PrepError(f"{path}: cannot read ({e.strerror or e})") from None


def corpus_files(folder: str | os.PathLike) -> list[str]:
    """The files below `folder`, as `/`-separated paths relative to it, in sorted order; PrepError when the
    folder is missing or holds no file."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PrepError(f"{folder}: not a folder of text files" if folder.exists() else f"{folder}: no such folder")
    found = []
    for top, dirs, names in os.walk(folder):
        dirs.sort()
        for name in names:
            path = Path(top) / name
            if path.is_file():
                found.append(path.relative_to(folder).as_posix())
    if not found:
        raise PrepError(f"{folder}: holds no file")
    return sorted(found)


def check_file(path: str | os.PathLike) -> dict:
    """One corpus file read once: its size on disk, sha256, modification time, the bytes of text it holds
    decompressed (`text_bytes`), and `skipped` with its `detail` when it is skipped (the module's docstring)."""
    path = Path(path)
    digest = hashlib.sha256()
    try:
        st = path.stat()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(_BLOCK), b""):
                digest.update(block)
    except OSError as e:
        raise PrepError(f"{path}: cannot read ({e.strerror})") from None
    entry = {"size": st.st_size, "sha256": digest.hexdigest(), "mtime_ns": st.st_mtime_ns}
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    text_bytes, printing, first = 0, False, True
    with open_text(path) as f:
        while True:
            try:
                block = f.read(_BLOCK)
            except (OSError, EOFError, ValueError, lzma.LZMAError) as e:
                raise PrepError(f"{path}: not a valid {path.suffix[1:]} file ({e})") from None
            except Exception as e:  # zstandard's ZstdError derives from Exception alone
                raise PrepError(f"{path}: not a valid {path.suffix[1:]} file ({e})") from None
            if first and block.startswith(BOM):
                block = block[len(BOM):]
                text_bytes += len(BOM)
            first = False
            pending = len(decoder.getstate()[0])  # the bytes of a character the last block cut, before `block`
            try:
                text = decoder.decode(block, final=not block)
            except UnicodeDecodeError as e:
                offset = text_bytes - pending + e.start
                return {**entry, "skipped": "not_utf8",
                        "detail": f"not UTF-8 (byte 0x{e.object[e.start]:02x} at offset {offset})"}
            text_bytes += len(block)
            printing = printing or not text.isspace() and text != ""
            if not block:
                break
    entry["text_bytes"] = text_bytes
    if text_bytes == 0 or text_bytes == len(BOM) and not printing:
        return {**entry, "skipped": "empty", "detail": "empty"}
    if not printing:
        return {**entry, "skipped": "whitespace_only", "detail": "nothing but whitespace"}
    return entry


def _check_one(folder: str, rel: str) -> dict:
    return {"path": rel, **check_file(Path(folder) / rel)}


def inventory(folder: str | os.PathLike, *, jobs: int | None = None) -> dict:
    """Every file of the corpus `folder` read once (`check_file`), in up to `jobs` worker processes (default:
    the CPUs), in sorted order; each skipped file named in the log."""
    folder = Path(folder)
    names = corpus_files(folder)
    stage = Stage(log, f"read the files of {folder}")
    with file_map(jobs or os.cpu_count() or 1) as map_:
        files = list(map_(functools.partial(_check_one, str(folder)), names))
    log_skipped(folder, files)
    stage.finish(len(files), "files", sum(f["size"] for f in files))
    return {"format": FORMAT, "files": files}


def log_skipped(folder: Path | str, files: list[dict]) -> None:
    for f in files:
        if f.get("skipped"):
            log.warning("%s: skipped: %s", Path(folder) / f["path"], f["detail"])


def skipped_counts(files: list[dict]) -> dict[str, int]:
    """{reason: files}, for every reason (0 where none)."""
    counts = dict.fromkeys(SKIP_REASONS, 0)
    for f in files:
        if f.get("skipped"):
            counts[f["skipped"]] += 1
    return counts


def identity(files: list[dict]) -> dict[str, dict]:
    """{path: {size, sha256}}: what names the corpus' content in dataset.json."""
    return {f["path"]: {"size": f["size"], "sha256": f["sha256"]} for f in files}


def changes(folder: str | os.PathLike, held: dict) -> list[str]:
    """How the files of `folder` differ from the inventory `held`: files added, removed, of another size,
    or of other content (hashed again only when its modification time moved). [] when none."""
    folder = Path(folder)
    now = corpus_files(folder) if folder.is_dir() else []
    before = {f["path"]: f for f in held["files"]}
    found = [f"{p} added" for p in now if p not in before]
    found += [f"{p} removed" for p in before if p not in set(now)]
    for rel in now:
        entry = before.get(rel)
        if entry is None:
            continue
        try:
            st = (folder / rel).stat()
        except OSError:
            found.append(f"{rel} unreadable")
            continue
        if st.st_size != entry["size"]:
            found.append(f"{rel} {st.st_size} bytes, {entry['size']} before")
        elif st.st_mtime_ns != entry["mtime_ns"] and check_file(folder / rel)["sha256"] != entry["sha256"]:
            found.append(f"{rel} changed (another sha256)")
    return found
