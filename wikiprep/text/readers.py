"""The documents of a text file, or of a byte range of one, in each format of a text corpus.

- `books`: the file is one document; its paragraphs are separated by blank lines, and the lines of a
  paragraph are joined by a space (hard-wrapped text, as BookCorpus and Project Gutenberg files are);
- `sentences`: the original generator's input: one sentence per line, a blank line (or one of
  whitespace alone) between documents. A line is a sentence as it is, stripped, never split again;
  every carriage return is dropped, as `create-pretraining-data` reads its input;
- `lines`: every line that is not blank is one document (NVIDIA's intermediate format);
- `jsonl`: every line that is not blank is one JSON object, its text in the field `text_field`;
  each line of that text that is not blank is a paragraph (C4, exported Hugging Face datasets).

A UTF-8 byte-order mark at the start of a file is dropped; CRLF line ends are LF ones. The files were
checked to be UTF-8 once, when the corpus was read (`files.check_file`): a decoding error here means
the file changed since.

Byte ranges (`start`, `stop`), so that one huge file is several pieces of parallel work: a range
holds the documents whose first byte is in it (`lines`, `jsonl`), or, for `sentences`, whose blank
line before them starts in it (the first document of a file belongs to the range at 0). A reader
of a range starting inside a line begins at the next line; ranges that partition a file partition
its documents, whatever their size, and a document's id (`PATH:OFFSET`, the offset of its first
byte in the file; `PATH` alone for a book) does not depend on them. A `books` file and a compressed
file are one range, the whole file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Iterator

from shardkit.errors import PrepError, excerpt

from ..corpus import Document
from .files import BOM, open_text

FORMATS = ("books", "sentences", "lines", "jsonl")
# The formats whose files can be cut into byte ranges (one document never spans a line ending a range).
RANGED = ("sentences", "lines", "jsonl")


def _changed(path: Path, offset: int) -> PrepError:
    return PrepError(f"{path}: not UTF-8 at offset {offset}, though it was when the corpus was read: "
                     f"the file changed since")


def _lines(f: IO[bytes], start: int) -> Iterator[tuple[int, bytes]]:
    """(offset, line with its end) of each line starting at or after `start`; the BOM of a file's first line
    dropped (its offset stays 0)."""
    if start > 0:
        f.seek(start - 1)
        pos = start - 1 + len(f.readline())  # the rest of the line holding byte start - 1
    else:
        pos = 0
        line = f.readline()
        if not line:
            return
        yield 0, line[len(BOM):] if line.startswith(BOM) else line
        pos = len(line)
    for line in iter(f.readline, b""):
        yield pos, line
        pos += len(line)


def _decode(line: bytes, path: Path, offset: int) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _changed(path, offset + e.start) from None


def _kept(doc_id: str, paragraphs: list[str], min_chars: int, read: int, split: bool = True) -> Document:
    """A document, or the reason it is dropped: no paragraph ("empty"), fewer than `min_chars` characters."""
    if not paragraphs:
        return Document(doc_id, [], "empty", read)
    if sum(map(len, paragraphs)) < min_chars:
        return Document(doc_id, [], "too_short", read)
    return Document(doc_id, paragraphs, None, read, split)


def book(path: Path, rel: str, *, min_chars: int) -> Iterator[Document]:
    with open_text(path) as f:
        data = f.read()
    if data.startswith(BOM):
        data = data[len(BOM):]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _changed(path, e.start) from None
    paragraphs, lines = [], []
    for line in text.split("\n"):
        line = line.strip()
        if line:
            lines.append(line)
        elif lines:
            paragraphs.append(" ".join(lines))
            lines = []
    if lines:
        paragraphs.append(" ".join(lines))
    yield _kept(rel, paragraphs, min_chars, len(data))


def lines(path: Path, rel: str, start: int, stop: int | None, *, min_chars: int) -> Iterator[Document]:
    with open_text(path) as f:
        for offset, line in _lines(f, start):
            if stop is not None and offset >= stop:
                return
            text = _decode(line, path, offset).strip()
            if text:
                yield _kept(f"{rel}:{offset}", [text], min_chars, offset + len(line) - start)


def jsonl(path: Path, rel: str, start: int, stop: int | None, *, text_field: str,
          min_chars: int) -> Iterator[Document]:
    with open_text(path) as f:
        for offset, line in _lines(f, start):
            if stop is not None and offset >= stop:
                return
            raw = _decode(line, path, offset)
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                raise PrepError(f"{path}: offset {offset}: not a JSON object: {excerpt(raw.strip())}") from None
            text = record.get(text_field) if isinstance(record, dict) else None
            if not isinstance(text, str):
                raise PrepError(f"{path}: offset {offset}: no text field {text_field!r} (a string) in "
                                f"{excerpt(raw.strip())}; --text-field names it")
            paragraphs = [p for p in (p.strip() for p in text.splitlines()) if p]
            yield _kept(f"{rel}:{offset}", paragraphs, min_chars, offset + len(line) - start)


def sentences(path: Path, rel: str, start: int, stop: int | None, *, min_chars: int) -> Iterator[Document]:
    with open_text(path) as f:
        doc: list[str] = []
        first = 0
        # Within a range starting past 0, documents begin only after a blank line seen in it.
        reading = start == 0
        for offset, line in _lines(f, start):
            text = _decode(line.replace(b"\r", b""), path, offset).strip()
            if text:
                if reading:
                    if not doc:
                        first = offset
                    doc.append(text)
                continue
            if doc:
                yield _kept(f"{rel}:{first}", doc, min_chars, offset - start, split=False)
                doc = []
            if stop is not None and offset >= stop:
                return
            reading = True
        if doc:
            yield _kept(f"{rel}:{first}", doc, min_chars, offset + len(line) - start, split=False)


def documents(fmt: str, path: Path, rel: str, start: int = 0, stop: int | None = None, *, text_field: str = "text",
              min_chars: int) -> Iterator[Document]:
    """The documents of `path` (`rel` within its corpus) in format `fmt`, of the byte range [start, stop)
    (stop None: to the end)."""
    if fmt == "books":
        return book(path, rel, min_chars=min_chars)
    if fmt == "lines":
        return lines(path, rel, start, stop, min_chars=min_chars)
    if fmt == "jsonl":
        return jsonl(path, rel, start, stop, text_field=text_field, min_chars=min_chars)
    if fmt == "sentences":
        return sentences(path, rel, start, stop, min_chars=min_chars)
    raise ValueError(f"unknown text format {fmt!r}")
