"""JSON that may be damaged or hostile: read with a size cap, parsed with its depth, numbers and strings checked.

Every JSON file the tools read back (a dataset's `dataset.json`, `stats.json`, `MANIFEST.json`, a receipt, an
inventory, a recipe's copy) and every JSON text that comes from outside (a JSONL corpus line) may be anything:
a link to `/dev/zero`, a 3 GB file, a FIFO no one writes to, an array nested a million deep, a number of 5,000
digits (past Python's `int` conversion limit), a lone surrogate escape (`"\\ud800"`, which JSON allows and UTF-8
cannot hold). `read_json` and `parse_json` turn each of these into one `PrepError` naming the file and what is
wrong, never a `MemoryError`, `RecursionError`, `UnicodeEncodeError` or a hang:

- the file is opened without blocking and must be a regular file; at most `cap` + 1 bytes are read;
- nesting deeper than `MAX_DEPTH` is refused before parsing (a scan of the brackets outside strings);
- an integer longer than Python converts, or a string holding a lone surrogate, is refused by name.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from .errors import PrepError

# The largest JSON file read whole by default: far above any the tools write for a dataset (a MANIFEST.json of
# thousands of shards is a few MB), far below what would exhaust memory once parsed (about ten times the text).
MAX_BYTES = 64 << 20
# Deeper than any file the tools write (four or five levels), shallow enough for Python's recursion limit.
MAX_DEPTH = 100

# A \uD800-\uDBFF escape not followed by a \uDC00-\uDFFF one, or a \uDC00-\uDFFF escape not preceded by a
# \uD800-\uDBFF one (the pair is one character; either alone is not text). An escaped backslash before the
# `u` (`\\ud800`) is no escape: the scan counts the backslashes before it.
_SURROGATE_ESCAPE = re.compile(r"(\\+)u([dD][89abAB][0-9a-fA-F]{2})(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})|"
                               r"(?<!\\u[dD][89abAB][0-9a-fA-F]{2})(\\+)u([dD][c-fC-F][0-9a-fA-F]{2})")
_BRACKETS_OR_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def lone_surrogate(text: str) -> str | None:
    """The first lone surrogate escape (`\\ud800`) of JSON `text`, as written there, or None."""
    for m in _SURROGATE_ESCAPE.finditer(text):
        slashes, digits = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(3), m.group(4))
        if len(slashes) % 2 == 1:  # an odd run of backslashes: the last one escapes the `u`
            return "\\u" + digits
    return None


def depth(text: str) -> int:
    """How deeply JSON `text` nests its arrays and objects (0 for a scalar), brackets inside strings ignored."""
    deepest = level = 0
    if "[" not in text and "{" not in text:
        return 0
    for m in _BRACKETS_OR_STRINGS.finditer(text):
        token = m.group()
        if token in "[{":
            level += 1
            deepest = max(deepest, level)
        elif token in "]}":
            level -= 1
    return deepest


def parse_json(text: str | bytes, *, source: str, max_depth: int = MAX_DEPTH) -> Any:
    """JSON `text` parsed; PrepError '<source>: <what is wrong>' for anything that is not JSON the tools can hold
    (the module's docstring). `source` names where the text came from (a path, 'FILE:LINE')."""
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise PrepError(f"{source}: not UTF-8 (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    deepest = depth(text)
    if deepest > max_depth:
        raise PrepError(f"{source}: JSON nested {deepest} levels deep, more than the {max_depth} allowed")
    try:
        value = json.loads(text)
    except RecursionError:  # a depth the scan missed (it cannot: belt and braces for Python's own limit)
        raise PrepError(f"{source}: JSON nested too deeply") from None
    except ValueError as e:
        if "digits" in str(e) and "limit" in str(e).lower():
            raise PrepError(f"{source}: a number of more than {_int_digits()} digits") from None
        raise PrepError(f"{source}: not valid JSON ({e})") from None
    surrogate = lone_surrogate(text) if "\\u" in text else None
    if surrogate is not None:
        raise PrepError(f"{source}: a string holds the lone surrogate {surrogate}, which is not text")
    return value


def _int_digits() -> int:
    import sys

    return sys.get_int_max_str_digits() or 4300


def read_bytes(path: str | os.PathLike, *, cap: int = MAX_BYTES, what: str = "a JSON file") -> bytes:
    """The bytes of regular file `path`, at most `cap`; PrepError '<path>: ...' for something else there (a
    folder, a FIFO, a device: never read) or a file larger than `cap`. FileNotFoundError as it is."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except IsADirectoryError:
        raise PrepError(f"{path}: a folder, not {what}") from None
    except PermissionError as e:
        raise PrepError(f"{path}: cannot read ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise PrepError(f"{path}: a folder, not {what}")
        if not stat.S_ISREG(st.st_mode):
            raise PrepError(f"{path}: not a regular file (a {_kind(st.st_mode)}), not {what}")
        if st.st_size > cap:
            raise PrepError(f"{path}: {st.st_size:,} bytes, larger than {_size(cap)}: not {what}")
        chunks, left = [], cap + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > cap:  # grew as it was read
        raise PrepError(f"{path}: larger than {_size(cap)}: not {what}")
    return data


def read_json(path: str | os.PathLike, *, cap: int = MAX_BYTES, what: str = "a JSON file",
              max_depth: int = MAX_DEPTH) -> Any:
    """JSON file `path` read (`read_bytes`) and parsed (`parse_json`); FileNotFoundError as it is."""
    return parse_json(read_bytes(path, cap=cap, what=what), source=str(path), max_depth=max_depth)


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n:,} bytes"
