"""A mixture of corpora: a recipe (a small TOML file) and the `Source` its corpora make together.

    name = "wiki-books"
    [[source]]
    kind = "wikipedia"          # wiki, dump_date, dump_url, multistream, as for Pretrain128
    wiki = "enwiki"
    dump_date = "20261101"
    [[source]]
    kind = "text"               # path, format, text_field, name, as for PretrainText128
    path = "/data/books"
    format = "books"
    repeat = 2                  # upsampling: its documents twice (default 1)

`read_recipe` checks it once, where it enters, and says what is wrong with one line naming the file
and the source. The mixture's documents are its sources' own, split by each source's own stages
(a source already split in the same data folder is not split again) and hashed into the same
shards, so every shard mixes every source; a source with `repeat` N has its buckets N times.
`Mixture` is what the BERT stages see: its description (dataset.json) is the recipe's name and, per
source, its kind, repeat and identity (a dump's date and part checksums, a text folder's files).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Iterator

from shardkit.errors import PrepError

from .corpus import Document, Piece, Source

KINDS = {
    "wikipedia": {"wiki": str, "dump_date": str, "dump_url": str, "multistream": bool},
    "text": {"path": str, "format": str, "text_field": str, "name": str},
}
REQUIRED = {"wikipedia": ("dump_date",), "text": ("path", "format")}


@dataclass(frozen=True)
class RecipeSource:
    """One `[[source]]` of a recipe: its kind, its keys (those of KINDS[kind] given), and its repeat."""

    kind: str
    params: dict
    repeat: int = 1


@dataclass(frozen=True)
class Recipe:
    name: str
    sources: tuple[RecipeSource, ...]


def read_recipe(path: str | Path) -> Recipe:
    """The recipe at `path`, checked; PrepError naming the file and what is wrong."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PrepError(f"--recipe {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PrepError(f"--recipe {path}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise PrepError(f"--recipe {path}: not TOML ({e})") from None
    unknown = sorted(set(data) - {"name", "source"})
    if unknown:
        raise PrepError(f"--recipe {path}: unknown key {unknown[0]!r} (a recipe has name and [[source]] tables)")
    name = data.get("name")
    if not isinstance(name, str) or not name:
        raise PrepError(f"--recipe {path}: no name (name = \"wiki-books\", the dataset's folder under --data-dir)")
    tables = data.get("source")
    if not isinstance(tables, list) or not tables:
        raise PrepError(f"--recipe {path}: no [[source]] table")
    sources = []
    for n, table in enumerate(tables, 1):
        where = f"--recipe {path}: source {n}"
        kind = table.get("kind")
        if kind not in KINDS:
            raise PrepError(f"{where}: kind {kind!r}: expected {' or '.join(KINDS)}")
        allowed = KINDS[kind]
        params = {}
        for key, value in table.items():
            if key in ("kind", "repeat"):
                continue
            if key not in allowed:
                raise PrepError(f"{where}: unknown key {key!r} for kind {kind!r} (expected {', '.join(allowed)}, "
                                f"repeat)")
            if not isinstance(value, allowed[key]):
                raise PrepError(f"{where}: {key} {value!r}: expected a {allowed[key].__name__}")
            params[key] = value
        missing = [k for k in REQUIRED[kind] if k not in params]
        if missing:
            raise PrepError(f"{where}: {missing[0]} must be given for kind {kind!r}")
        repeat = table.get("repeat", 1)
        if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
            raise PrepError(f"{where}: repeat {repeat!r}: expected a whole number, at least 1")
        sources.append(RecipeSource(kind, params, repeat))
    return Recipe(name, tuple(sources))


@dataclass(frozen=True)
class Member:
    """A source of a mixture as the BERT stages see it: the corpus, its kind and repeat, and its identity."""

    kind: str
    source: Source
    repeat: int
    identity: dict


@dataclass(frozen=True)
class MixPiece:
    member: int
    piece: Piece

    @property
    def name(self) -> str:
        return f"{self.member + 1}-{self.piece.name}"


@dataclass(frozen=True)
class Mixture(Source):
    """The corpora of a recipe named `recipe_name`, in recipe order."""

    recipe_name: str
    members: tuple[Member, ...]

    shard_prefix: ClassVar[str] = "mix"

    @property
    def same_bytes(self) -> tuple[str, ...]:  # what changes no byte in any member
        return tuple(sorted({key for m in self.members for key in m.source.same_bytes}))

    @property
    def name(self) -> str:
        return f"mixture {self.recipe_name} ({', '.join(m.source.name for m in self.members)})"

    def description(self) -> dict:
        return {"mixture": self.recipe_name,
                **{f"source_{i + 1}": {"kind": m.kind, "repeat": m.repeat, **m.identity}
                   for i, m in enumerate(self.members)}}

    def pieces(self) -> list[MixPiece]:
        return [MixPiece(i, p) for i, m in enumerate(self.members) for p in m.source.pieces()]

    def piece_size(self, piece: MixPiece) -> int:
        return self.members[piece.member].source.piece_size(piece.piece)

    def documents(self, piece: MixPiece, *, min_chars: int) -> Iterator[Document]:
        return self.members[piece.member].source.documents(piece.piece, min_chars=min_chars)
