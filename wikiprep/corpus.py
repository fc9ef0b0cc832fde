"""A corpus as the BERT stages see it: pieces of parallel work, each a stream of cleaned documents.

Everything from sentence splitting on (Punkt training, the sentence shards, the vocabulary, the
instances, the dataset folder) takes its text from a `Source` and knows nothing else of where the
text came from. A source says:

- what its pieces are (`pieces`): the units of parallel work, in corpus order; each is split into
  sentences on its own, and the sentence shards are merged from the pieces in this order;
- the documents of a piece (`documents`): an id, stable across runs (a document's shard is a hash
  of it), and its paragraphs, already cleaned; a document it drops comes with the reason, so the
  dataset's stats count it;
- what it is (`description`), recorded in the dataset's `dataset.json` and `MANIFEST.json`, and
  which of those keys change how the work is cut but not a byte (`same_bytes`);
- the prefix of the dataset's shard files (`shard_prefix`: `wiki_00000.tfrecord`);
- the language of its text (`language`), which chooses the sentence splitter's rules
  (`sentences.sentence_splitter`): Chinese and Japanese end sentences without a space after them.

Wikipedia is one (`wikiprep.wikipedia.source.WikipediaSource`); a new corpus is one more module
with a class like it.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar, Iterator, Protocol


@dataclass(frozen=True, slots=True)
class Document:
    """One document of a piece. `paragraphs` is empty when the source drops it, and `dropped` says why
    ("too_short", "empty", ...); `read` is how many bytes of the piece's input were read once it was,
    for progress. `split` False: the paragraphs are already its sentences, one each (the original
    generator's input format), and are not split again."""

    id: int | str
    paragraphs: list[str]
    dropped: str | None = None
    read: int = 0
    split: bool = True


class Piece(Protocol):
    """A unit of parallel work: what matters to the BERT stages is its name, unique within the corpus
    and usable as a file name (the split of a piece is a folder named so)."""

    @property
    def name(self) -> str: ...


class Source(abc.ABC):
    """A corpus behind the one interface the BERT stages use (the module's docstring says what each part is for)."""

    shard_prefix: ClassVar[str]
    # Keys of `description()` that change how the work is cut, never a byte of the dataset: a folder made
    # with other values of them is the same dataset.
    same_bytes: ClassVar[tuple[str, ...]] = ()

    @property
    @abc.abstractmethod
    def name(self) -> str:
        """The corpus in a message: 'enwiki 20260101'."""

    @abc.abstractmethod
    def description(self) -> dict:
        """What defines the corpus' text, as dataset.json records it (JSON values)."""

    @abc.abstractmethod
    def pieces(self) -> list[Piece]:
        """The pieces, in corpus order."""

    @abc.abstractmethod
    def piece_size(self, piece: Piece) -> int:
        """The bytes `documents(piece)` reads, for progress (0 when unknown)."""

    def language(self) -> str | None:
        """The language of the text, a code such as "en", "zh" or "ja"; None when not known (yet), which
        splits sentences as English. Known by the time a piece is split."""
        return None

    @abc.abstractmethod
    def documents(self, piece: Piece, *, min_chars: int) -> Iterator[Document]:
        """The documents of `piece`, in order, cleaned; one with fewer than `min_chars` characters of
        paragraphs is dropped as "too_short"."""
