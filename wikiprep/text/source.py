"""A folder of text files as a `wikiprep.corpus.Source`: its pieces are the files, or byte ranges of the large
ones, and the documents of a piece are what its format's reader gives (`readers`).

Where its files live under the data folder DATA, NAME being the corpus' name (the folder's by default):

    DATA/NAME/text_files.json         the corpus' files as first read (`files.inventory`), with a receipt
    DATA/NAME/split/, sentences/, vocab/, seq128_mask20_dup5/ ...   as for any corpus

The inventory is made once, the first time the corpus is used; afterwards each process compares
the folder with it (`files.changes`, a stat per file) the first time it asks, and a changed corpus
is refused, naming what changed, before any work. Its skipped files are left out of the pieces,
named in the log, and counted by reason in the dataset's stats.json (`figures`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Iterator

from shardkit.atomic import read_receipt, write_json, write_receipt
from shardkit.errors import PrepError

from ..corpus import Document, Source
from . import files, readers

INVENTORY = "text_files.json"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")
# Inventories checked in this process, by path: a Luigi worker asks for the pieces in every task's complete().
_CHECKED: dict[tuple[str, str], dict] = {}
# The pieces of a checked inventory, by (inventory, format, piece size): asked for by every piece task.
_PIECES: dict[tuple[str, str, float], list] = {}
_PIECE_SETS: dict[tuple[str, str, float], frozenset] = {}


@dataclass(frozen=True)
class TextPiece:
    """Files `index` to `last` (in the corpus' sorted order; `last` None: `index` alone) read whole, or the byte
    range `slice` of `slices` equal ranges of file `index`. Its name is the first file's index, with the last's
    or the range's."""

    index: int
    slice: int = 0
    slices: int = 1
    last: int | None = None

    @property
    def name(self) -> str:
        if self.slices > 1:
            return f"{self.index:06d}_{self.slice:04d}of{self.slices:04d}"
        return f"{self.index:06d}" if self.last in (None, self.index) else f"{self.index:06d}-{self.last:06d}"


def check_name(name: str) -> None:
    if not NAME.match(name) or name in ("downloads", "luigid"):
        raise PrepError(f"--name {name!r}: the corpus' folder under --data-dir: letters, digits, '.', '_', '+', "
                        f"'-', at most 100, not 'downloads' nor 'luigid'")


def default_name(text_dir: str) -> str:
    """The corpus' name when none is given: its folder's own name."""
    return Path(text_dir).resolve().name


@dataclass(frozen=True)
class TextSource(Source):
    """The text files of `text_dir` in `text_format`, named `name`, their work under `data_dir`/`name`.

    `strict_utf8`: a file that is not UTF-8 is an error, not skipped. `piece_mb`: the size of the byte
    ranges large uncompressed files are cut into (it changes no byte). `plan` True: a dry run, which
    reads the corpus if it must but writes nothing.
    """

    data_dir: str
    text_dir: str
    text_format: str
    given_name: str = ""
    text_field: str = "text"
    strict_utf8: bool = False
    piece_mb: float = 64.0
    plan: bool = False

    shard_prefix: ClassVar[str] = "text"
    # The corpus is its files' names and contents: where the folder is, and how the work is cut, change no byte.
    same_bytes = ("text_dir", "text_piece_mb")

    def __post_init__(self):
        if self.text_format not in readers.FORMATS:
            raise PrepError(f"--text-format {self.text_format!r}: expected {' or '.join(readers.FORMATS)}")
        check_name(self.corpus_name)

    @property
    def corpus_name(self) -> str:
        return self.given_name or default_name(self.text_dir)

    @property
    def name(self) -> str:
        return f"{self.corpus_name} ({self.text_format} in {self.text_dir})"

    @property
    def work_dir(self) -> Path:
        return Path(self.data_dir) / self.corpus_name

    @property
    def inventory_path(self) -> Path:
        return self.work_dir / INVENTORY

    def inventory(self) -> dict:
        """The corpus' files (`files.inventory`): read from DATA/NAME/text_files.json and checked against the
        folder once per process, or made (and committed, unless a dry run) when there is none."""
        key = (str(self.inventory_path), str(Path(self.text_dir).resolve()))
        held = _CHECKED.get(key)
        if held is None:
            path = self.inventory_path
            if read_receipt(path) is not None:
                held = json.loads(path.read_text(encoding="utf-8"))
                self._check_reading(held)
                changed = files.changes(self.text_dir, held)
                if changed:
                    shown = "; ".join(changed[:5]) + (f"; and {len(changed) - 5} more" if len(changed) > 5 else "")
                    raise PrepError(f"{self.text_dir}: changed since {path} was made ({shown}); the work under "
                                    f"{self.work_dir} was made from the files as they were: give another --name, "
                                    f"or remove {self.work_dir} to build it again")
                files.log_skipped(self.text_dir, held["files"])
            else:
                held = {**files.inventory(self.text_dir), **self._reading()}
                self._check_strict(held)  # before anything is written
                if not self.plan:
                    self.work_dir.mkdir(parents=True, exist_ok=True)
                    write_json(path, held)
                    write_receipt(path)
            _CHECKED[key] = held
        self._check_strict(held)
        return held

    def _reading(self) -> dict:
        """How the files are read into documents: what the work under DATA/NAME was made with."""
        return {"text_format": self.text_format, "text_field": self.text_field if self.text_format == "jsonl" else None}

    def _check_reading(self, held: dict) -> None:
        made = {key: held.get(key) for key in self._reading()}
        if made != self._reading():
            differ = "; ".join(f"--{key.replace('_', '-')} {made[key]!r} there, {value!r} here"
                               for key, value in self._reading().items() if made[key] != value)
            raise PrepError(f"{self.work_dir}: made from {self.text_dir} read otherwise ({differ}); give "
                            f"another --name, or remove {self.work_dir} to build it again")

    def _check_strict(self, held: dict) -> None:
        bad = [f for f in held["files"] if f.get("skipped") == "not_utf8"] if self.strict_utf8 else []
        if bad:
            raise PrepError(f"{Path(self.text_dir) / bad[0]['path']}: {bad[0]['detail']} (--text-strict-utf8)")

    def kept_files(self) -> list[tuple[int, dict]]:
        """(index, entry) of every file not skipped, in corpus order."""
        return [(i, f) for i, f in enumerate(self.inventory()["files"]) if not f.get("skipped")]

    def description(self) -> dict:
        return {"text_dir": str(Path(self.text_dir).resolve()), "text_format": self.text_format,
                "text_field": self.text_field if self.text_format == "jsonl" else None,
                "text_piece_mb": self.piece_mb, "text_files": files.identity(self.inventory()["files"])}

    def pieces(self) -> list[TextPiece]:
        key = (str(self.inventory_path), self.text_format, self.piece_mb)
        if key not in _PIECES:
            _PIECES[key] = self._cut()
        return _PIECES[key]

    def _cut(self) -> list[TextPiece]:
        """Runs of consecutive files of at most --text-piece-mb together, each file larger than that alone, cut
        into byte ranges when its format allows (uncompressed, one document per line or per run of lines)."""
        out = []
        ranged = self.text_format in readers.RANGED
        limit = self.piece_mb * 1e6 if self.piece_mb > 0 else 0
        group: list[int] = []
        group_bytes = 0

        def flush() -> None:
            nonlocal group, group_bytes
            if group:
                out.append(TextPiece(group[0], last=group[-1] if len(group) > 1 else None))
            group, group_bytes = [], 0

        for index, entry in self.kept_files():
            size = entry["size"]
            if limit and size > limit and ranged and not files.is_compressed(entry["path"]):
                flush()
                slices = math.ceil(size / limit)
                out += [TextPiece(index, k, slices) for k in range(slices)]
                continue
            if group and (not limit or group_bytes + size > limit):
                flush()
            group.append(index)
            group_bytes += size
        flush()
        if not out:
            skipped = files.skipped_counts(self.inventory()["files"])
            raise PrepError(f"{self.text_dir}: every file is skipped ({', '.join(f'{n} {r}' for r, n in skipped.items() if n)})")
        return out

    def piece(self, index: int, slice_: int, slices: int, last: int | None = None) -> TextPiece:
        """The piece that Luigi parameters name; PrepError for one that is not of this corpus."""
        piece = TextPiece(index, slice_, slices, None if last == index else last)
        key = (str(self.inventory_path), self.text_format, self.piece_mb)
        if piece not in _PIECE_SETS.setdefault(key, frozenset(self.pieces())):
            raise PrepError(f"--file-index {index} --last-file {last} --slice {slice_} --slices {slices}: not a piece "
                            f"of {self.name}")
        return piece

    def _parts(self, piece: TextPiece) -> list[tuple[dict, int, int | None]]:
        """(file entry, start, stop) of each file the piece reads, in order; stop None: to its end."""
        entries = self.inventory()["files"]
        if piece.slices == 1:
            last = piece.index if piece.last is None else piece.last
            return [(e, 0, None) for e in entries[piece.index:last + 1] if not e.get("skipped")]
        size = entries[piece.index]["size"]
        cut = [size * k // piece.slices for k in range(piece.slices + 1)]
        stop = None if piece.slice == piece.slices - 1 else cut[piece.slice + 1]
        return [(entries[piece.index], cut[piece.slice], stop)]

    def piece_size(self, piece: TextPiece) -> int:
        total = 0
        for entry, start, stop in self._parts(piece):
            size = entry.get("text_bytes", entry["size"]) if files.is_compressed(entry["path"]) else entry["size"]
            total += (size if stop is None else stop) - start
        return total

    def documents(self, piece: TextPiece, *, min_chars: int) -> Iterator[Document]:
        done = 0  # the bytes of the piece's earlier files, for each document's `read`
        for entry, start, stop in self._parts(piece):
            for doc in readers.documents(self.text_format, Path(self.text_dir) / entry["path"], entry["path"], start,
                                         stop, text_field=self.text_field, min_chars=min_chars):
                yield dataclasses.replace(doc, read=done + doc.read) if done else doc
            size = entry.get("text_bytes", entry["size"]) if files.is_compressed(entry["path"]) else entry["size"]
            done += (size if stop is None else stop) - start

    def needs_punkt(self) -> bool:
        """Whether its documents are split into sentences (every format but `sentences`, which is already)."""
        return self.text_format != "sentences"

    def figures(self) -> dict:
        """The skipped files, counted by reason and named, for the dataset's stats.json."""
        held = self.inventory()["files"]
        return {"skipped_files": files.skipped_counts(held),
                "skipped": [{"path": f["path"], "reason": f["skipped"], "detail": f["detail"]}
                            for f in held if f.get("skipped")]}
