"""A dated Wikipedia dump as a `wikiprep.corpus.Source`: its pieces are the dump's parts (or slices of
multistream parts), and the documents of a piece are the articles WikiExtractor extracted from it
(`extract.extract_part`, one JSON line each), cleaned (`clean.clean_document`).

Where its files live under the data folder DATA:

    DATA/downloads/{wiki}/{date}/             the verified part files (`dump`)
    DATA/{wiki}-{date}/extracted/<piece>.jsonl the extracted articles of each piece
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from shardkit.atomic import read_receipt
from shardkit.errors import PrepError
from shardkit.verified import open_committed, verify_rest

from ..corpus import Document, Source
from . import dump
from .clean import clean_document
from .extract import Piece, part_language, pieces


@functools.lru_cache(maxsize=4)
def _part_language(path: str, size: int) -> str | None:
    """`part_language`, read once per verified part in this process (every shard's task asks for it)."""
    return part_language(Path(path))


def read_extracted(path: str | Path, consumed: list[int] | None = None) -> Iterator[dict]:
    """Stream the articles of one extracted piece (JSON lines with id, title, text). `consumed[0]`, when
    given, follows the bytes of the file read so far (to within the 8 KiB the text layer reads ahead)."""
    path = Path(path)
    try:
        f = open_committed(path, "r", encoding="utf-8")  # checked against its receipt as it is read
    except FileNotFoundError:
        raise PrepError(f"{path}: extracted part not found") from None
    with f:
        n = 0
        try:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    doc = json.loads(line)
                    doc["id"] = int(doc["id"])
                    if not isinstance(doc["text"], str):
                        raise TypeError
                except (ValueError, KeyError, TypeError):
                    verify_rest(f)  # damage is named as such, not as a bad line
                    raise PrepError(f"{path}: line {n} is not an extracted document (JSON with id and text)") \
                        from None
                if consumed is not None:
                    consumed[0] = f.buffer.tell()
                yield doc
        except UnicodeDecodeError:
            verify_rest(f)
            raise PrepError(f"{path}: line {n + 1} is not UTF-8 text") from None


def extracted_documents(path: str | Path, *, min_chars: int) -> Iterator[Document]:
    """The documents of one extracted file: each article's page id and cleaned paragraphs."""
    consumed = [0]
    for doc in read_extracted(path, consumed):
        paragraphs, reason = clean_document(doc, min_chars=min_chars)
        yield Document(doc["id"], paragraphs or [], reason, consumed[0])


@dataclass(frozen=True)
class WikipediaSource(Source):
    """The dump `wiki` of `dump_date` at `dump_url`, with its files under `data_dir`.

    `status`, when given, is the dump's dumpstatus.json already read (a dry run reads it into memory
    and writes nothing); otherwise the parts come from the local copy a run fetched (`dump.dump_parts`,
    with the `download` settings).
    """

    data_dir: str
    dump_url: str
    wiki: str
    dump_date: str
    multistream: bool = False
    extract_slice_mb: float = 100.0
    status: dict | None = None
    download: dict = field(default_factory=dict)  # dump.fetch_dump_status's settings: retries, timeouts
    language_override: str | None = None  # the text's language given by hand, instead of the dump's header's

    shard_prefix = "wiki"
    same_bytes = ("extract_slice_mb",)  # slices cut the work; the shards are the same bytes whatever their size

    def __post_init__(self):
        # Both become folder names: anything but a wiki name and a YYYYMMDD date is refused before a path is made.
        dump.check_dump_id(self.wiki, self.dump_date)

    @property
    def name(self) -> str:
        return f"{self.wiki} {self.dump_date}"

    def description(self) -> dict:
        return {"wiki": self.wiki, "dump_date": self.dump_date, "multistream": self.multistream,
                "extract_slice_mb": self.extract_slice_mb}

    @property
    def download_dir(self) -> Path:
        return Path(self.data_dir) / "downloads" / self.wiki / self.dump_date

    @property
    def work_dir(self) -> Path:
        return Path(self.data_dir) / f"{self.wiki}-{self.dump_date}"

    def parts(self) -> list[dump.Part]:
        """The dump's part files, from the local copy of dumpstatus.json (fetched once, when there is none),
        or from `status`."""
        if self.status is not None:
            return dump.list_parts(self.status, self.wiki, self.dump_date, multistream=self.multistream,
                                   need_hashes=False)
        return dump.dump_parts(self.dump_url, self.wiki, self.dump_date, self.download_dir,
                               multistream=self.multistream, **self.download)

    def language(self) -> str | None:
        """`language_override`, or the dump's own: the xml:lang of its first part's header
        (`extract.part_language`), once that part is downloaded and verified (None before; nothing is
        fetched to learn it)."""
        if self.language_override is not None:
            return self.language_override
        if self.status is None and not (self.download_dir / dump.STATUS_FILE).is_file():
            return None
        try:
            first = self.download_dir / self.parts()[0].name
        except PrepError:
            return None  # no usable status yet: the run that downloads the parts names the problem
        if read_receipt(first) is None:
            return None
        return _part_language(str(first), first.stat().st_size)

    def pieces(self) -> list[Piece]:
        """Whole parts, or slices of about `extract_slice_mb` MB of bz2 of multistream ones, in dump order."""
        return pieces(self.parts(), multistream=self.multistream, slice_mb=self.extract_slice_mb)

    def extracted_path(self, piece: Piece) -> Path:
        return self.work_dir / "extracted" / f"{piece.name}.jsonl"

    def piece_size(self, piece: Piece) -> int:
        try:
            return os.path.getsize(self.extracted_path(piece))
        except OSError:
            return 0  # read_extracted names the missing file

    def documents(self, piece: Piece, *, min_chars: int) -> Iterator[Document]:
        return extracted_documents(self.extracted_path(piece), min_chars=min_chars)
