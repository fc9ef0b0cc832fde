"""`wikiprep inspect`: BERT pre-training instances as a person reads them.

Each instance of a record file (of any layout: TFRecords as google-research/bert or Graphcore's
static mask writes them, NVIDIA's HDF5; ours or the original tools') is brought to the standard
layout (`reader.file_instances`) and printed as text:

    --- record 1 (299 bytes): B is random
    lengths: A 9, B 6 (without [CLS] and [SEP]), real 18, padded 32; 3 masked of at most 5
    A: [CLS] it was new and [MASK] river was {new} . [SEP]
    B: the north river [MASK] old . [SEP]
    masked: 5 the -> [MASK] | 8 old -> {new} random | 14 is -> [MASK]

Tokens come from `--vocab-file`, else from the `vocab.txt` beside the file, else the ids are
shown. A masked position shows what the record holds there: `[MASK]`, or in braces the random
token or the original one the generator left (BERT's 80/10/10 rule); `masked:` gives each
position, its original token (masked_lm_ids) and which of the three it is.

A vocabulary that cannot be the one the records were made with (an id beyond its end, a first
token that is not its [CLS]) is one PrepError line, never a screen of `<id>` placeholders.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from shardkit.errors import PrepError, excerpt

from . import reader
from .schema import PRED, SEQ
from .tokenization import Vocab

NEXT_SENTENCE = {0: "B is the real next", 1: "B is random"}


@dataclass(frozen=True)
class Instance:
    """One instance in the standard layout, as plain ints (padding included), and where it came from."""

    what: str                        # "record 3 (412 bytes)" or "instance 3"
    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    masked_lm_positions: list[int]
    masked_lm_ids: list[int]
    masked_lm_weights: list[float]
    next_sentence_label: int

    @property
    def real(self) -> int:
        return sum(1 for v in self.input_mask if v)

    def segment(self, which: int) -> list[int]:
        """The positions of segment A (0: [CLS] A [SEP]) or B (1: B [SEP]) among the real tokens."""
        return [i for i in range(self.real) if self.segment_ids[i] == which]

    def masks(self) -> list[tuple[int, int]]:
        """(position, original id) of each real prediction."""
        return [(p, i) for p, i, w in zip(self.masked_lm_positions, self.masked_lm_ids, self.masked_lm_weights) if w]


def instances(records: reader.RecordFiles, path: Path, n: int) -> Iterator[Instance]:
    """The first `n` instances of one file of `records`, in the standard layout."""
    for what, ex in reader.file_instances(records, path, n):
        yield Instance(what, *(list(ex[name]) for name in ("input_ids", "input_mask", "segment_ids",
                                                           "masked_lm_positions", "masked_lm_ids",
                                                           "masked_lm_weights")),
                       next_sentence_label=int(ex["next_sentence_labels"][0]))


class TokenNames:
    """Names of token ids: a vocabulary's tokens, or the ids themselves when there is none."""

    def __init__(self, vocab: Vocab | None):
        self.vocab = vocab
        self.mask_id = vocab.mask_id if vocab is not None else None

    def __call__(self, ids: Sequence[int]) -> list[str]:
        return self.vocab.tokens(ids) if self.vocab is not None else [str(i) for i in ids]

    def check(self, path: Path, instance: Instance) -> None:
        """PrepError when the vocabulary cannot be the records': an id past its end, or no [CLS] first."""
        if self.vocab is None:
            return
        ids = instance.input_ids[:instance.real] + [i for _, i in instance.masks()]
        size = len(self.vocab.id_to_token)
        beyond = [i for i in ids if not 0 <= i < size]
        if beyond:
            raise PrepError(f"{self.vocab.path}: {size} tokens, but {instance.what.split(' (')[0]} of {path} holds id "
                            f"{max(beyond)}: not the vocabulary these records were made with (give --vocab-file)")
        if ids and ids[0] != self.vocab.cls_id:
            raise PrepError(f"{self.vocab.path}: {instance.what.split(' (')[0]} of {path} starts with id {ids[0]}, "
                            f"{excerpt(self.vocab.id_to_token[ids[0]])} in this vocabulary, not its [CLS] "
                            f"({self.vocab.cls_id}): not the vocabulary these records were made with (give --vocab-file)")


def mask_kind(written: int, original: int, mask_id: int | None) -> str:
    """What the generator put at a masked position: '[MASK]', 'kept' (the original token) or 'random'."""
    if mask_id is not None and written == mask_id:
        return "[MASK]"
    return "kept" if written == original else "random"


def instance_lines(instance: Instance, names: TokenNames, max_predictions: int) -> list[str]:
    """The text of one instance: header, lengths, A, B and the masked positions."""
    real, ids = instance.real, instance.input_ids
    written = names(ids[:real])
    masks = instance.masks()
    shown = list(written)
    for position, original in masks:
        if 0 <= position < real and mask_kind(ids[position], original, names.mask_id) != "[MASK]":
            shown[position] = "{" + written[position] + "}"
    a, b = instance.segment(0), instance.segment(1)
    label = NEXT_SENTENCE.get(instance.next_sentence_label,
                              f"next_sentence_labels {instance.next_sentence_label} (neither 0 nor 1)")
    entries = []
    for (position, original), name in zip(masks, names([i for _, i in masks])):
        if not 0 <= position < real:
            entries.append(f"{position} {name} -> (outside the {real} real tokens)")
            continue
        kind = mask_kind(ids[position], original, names.mask_id)
        entries.append(f"{position} {name} -> {shown[position]}" + ("" if kind == "[MASK]" else f" {kind}"))
    return [
        f"--- {instance.what}: {label}",
        f"lengths: A {max(len(a) - 2, 0)}, B {max(len(b) - 1, 0)} (without [CLS] and [SEP]), real {real}, "
        f"padded {len(ids)}; {len(masks)} masked of at most {max_predictions}",
        "A: " + " ".join(shown[i] for i in a),
        "B: " + " ".join(shown[i] for i in b),
        "masked: " + (" | ".join(entries) if entries else "(none)"),
    ]


def vocab_for(path: Path, vocab_file: str | Path | None) -> tuple[Vocab | None, str]:
    """The vocabulary to name tokens with, and how the header says where it came from."""
    if vocab_file is not None:
        return Vocab(vocab_file), f"tokens from {vocab_file}"
    beside = path.parent / "vocab.txt"
    if beside.is_file():
        return Vocab(beside), f"tokens from {beside} (beside the file)"
    return None, "token ids (no vocab.txt beside the file; give --vocab-file to see tokens)"


def inspect_lines(path: str | Path, n: int, vocab_file: str | Path | None = None) -> Iterator[str]:
    """The first `n` instances of the record file `path` as text lines, after one header line."""
    path = Path(path)
    if path.is_dir():
        raise PrepError(f"{path}: a folder; give one of its record files (wiki_00000.tfrecord, ...)")
    if not path.is_file():
        raise PrepError(f"{path}: no such record file")
    vocab, source = vocab_for(path, vocab_file)
    records = reader.open_records(path, vocab_file)
    names = TokenNames(vocab)
    yield (f"{path}: {records.layout.title}, seq {records.dims[SEQ]}, {records.dims[PRED]} predictions; "
           f"{source}. A masked position shows [MASK], or {{token}}: the random or the kept original")
    shown = 0
    for instance in instances(records, path, n):
        names.check(path, instance)
        yield from instance_lines(instance, names, records.dims[PRED])
        shown += 1
    if shown == 0:
        yield f"{path}: no instances"
