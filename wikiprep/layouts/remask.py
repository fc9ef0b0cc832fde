"""Graphcore's static-mask ("remask") layout: instances rearranged so the masked tokens come first.

Graphcore's TF1 BERT (`"static_mask": true` configurations) reads records that
`bert_data/create_pretraining_data.py --remask` (Apache-2.0, Copyright (c) 2020 Graphcore Ltd. and
2018 The Google AI Language Team Authors) rearranges: with P = max_predictions_per_seq, the
masked tokens fill slots 0.. in position order, the other tokens fill slots P.., and
`input_position` gives each slot's position in the standard layout (`REMASK_INSTANCE`). The
model then predicts from the first P slots whatever the sentence.

So a sequence of n tokens with m masks fits only when m <= P and n - m <= max_seq_length - P:
a full-length sequence needs exactly P masks, which is why Graphcore forces that count
(`fixed_mask_count`). `check_fits` refuses the options whose instances may not fit, before any
work. `RemaskEncoder` rearranges one instance as the generator emits it; `to_standard` undoes
the rearrangement for a parsed batch (what `verify`, `stats` and the tests read), checking
every invariant on the way.

One deliberate difference: Graphcore's loop takes a slot for every position whose id is not 0,
so a token of id 0 (a masked token replaced by the random word at id 0, `[PAD]` in BERT's
vocabularies, or any real token when a vocabulary has a word at 0) is dropped: a masked one
loses its slot (masked_labels then disagree with masked_lm_ids), an unmasked one leaves the
sequence. Here every real position gets its slot: the same bytes whenever no real token has
id 0, and the instance intact when one does.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardkit.errors import PrepError
from shardkit.example import FLOAT, INT64, varint
from shardkit.schema import Feature, Schema

from ..options import GenerationOptions
from ..schema import PRED, SEQ
from .framed import FramedLayout, feature_entry, feature_key, int64_entry, one_record_batch

# Graphcore's static-mask layout, as `bert_data/create_pretraining_data.py --remask` of its TF1 BERT writes
# it and `bert_data/pretraining.py` (`use_static_mask`) reads it: the masked tokens come first, so the model
# gathers its predictions from fixed slots. A full-length sequence fits only with exactly
# max_predictions_per_seq masks (Graphcore's forced count, `fixed_mask_count`).
REMASK_INSTANCE = Schema("BERT pre-training, Graphcore static mask", [
    Feature("input_ids", INT64, (SEQ,), "the masked tokens (slots 0 to mask_padding_index - 1), zeros up to slot "
                                        "max_predictions_per_seq, then the other tokens in order, then zeros"),
    Feature("input_position", INT64, (SEQ,), "each slot's position in the standard layout; pad_position_value "
                                             "for an empty slot"),
    Feature("segment_ids", INT64, (SEQ,), "each slot's segment id (0 for an empty slot)"),
    Feature("mask_padding_index", INT64, (1,), "the number of masked tokens: the first empty mask slot"),
    Feature("seq_padding_index", INT64, (1,), "the first empty slot after the unmasked tokens"),
    Feature("masked_lm_positions", INT64, None, "positions of the masked tokens, ascending, not padded "
                                                "(as Graphcore writes it; its loader does not read it)"),
    Feature("masked_labels", INT64, (PRED,), "the original token of each mask slot, then zeros"),
    Feature("masked_lm_ids", INT64, (PRED,), "the same as masked_labels (Graphcore writes both)"),
    Feature("masked_lm_weights", FLOAT, (PRED,), "1.0 for each mask slot holding a token, then 0.0"),
    Feature("next_sentence_labels", INT64, (1,), "1: B is a random sentence; 0: B is the actual next"),
])
# What Graphcore's loader parses (`name_to_features` with use_static_mask): all but the two unpadded/duplicate ones.
GRAPHCORE_STATIC_MASK_FEATURES = ("input_ids", "input_position", "segment_ids", "mask_padding_index",
                                  "seq_padding_index", "masked_labels", "masked_lm_weights", "next_sentence_labels")

# Graphcore's `--pad-position-value` default: the input_position of an empty slot.
PAD_POSITION_VALUE = 384
_INT64 = (-(1 << 63), (1 << 63) - 1)


@dataclass(frozen=True, kw_only=True)
class RemaskLayout(FramedLayout):
    """The static-mask TFRecords. `pad_position_value`: the input_position of an empty slot; None when not
    known (a file read back without its dataset.json), which the read-back then does not check."""

    pad_position_value: int | None = PAD_POSITION_VALUE
    parameters = ("pad_position_value",)

    def check(self, options: GenerationOptions) -> None:
        check_fits(options, self.pad_position_value)

    def encoder(self, max_seq_length: int, max_predictions_per_seq: int, vocab=None) -> "RemaskEncoder":
        return RemaskEncoder(max_seq_length, max_predictions_per_seq, self.pad_position_value)

    def compiled_arguments(self, vocab=None) -> dict | None:
        arguments = super().compiled_arguments(vocab)
        return None if arguments is None else {**arguments, "pad_position": varint(self.pad_position_value)}

    def to_standard(self, batch: dict, dims: dict[str, int]) -> dict:
        return to_standard(batch, dims[PRED], self.pad_position_value)

    def example_to_standard(self, ex: dict[str, list], dims: dict[str, int]) -> dict[str, list]:
        standard = self.to_standard(one_record_batch(self.schema, ex), dims)
        return {name: values[0].tolist() for name, values in standard.items()}


LAYOUT = RemaskLayout(name="remask", title="TFRecord, Graphcore static mask", file_kind="TFRecord",
                      flags=("tfrecord", "remask"), folder_suffix="_remask", suffixes=(".tfrecord",),
                      schema=REMASK_INSTANCE, implies_fixed_mask_count=True,
                      flags_note="the remask layout is written as TFRecords (Graphcore's loader reads those)",
                      compiled_code=1)  # _speedups.c: LAYOUT_REMASK


def check_fits(options: GenerationOptions, pad_position_value: int = PAD_POSITION_VALUE) -> None:
    """Refuse, with one PrepError line, options whose instances may not fit the remask layout."""
    seq, pred = options.max_seq_length, options.max_predictions_per_seq
    if not options.fixed_mask_count:
        raise PrepError("the remask layout needs fixed_mask_count=True: a full-length sequence fits only with "
                        f"exactly max_predictions_per_seq={pred} masks (Graphcore forces that count)")
    if options.do_whole_word_mask:
        raise PrepError("the remask layout cannot take do_whole_word_mask=True: a whole word that does not fit is "
                        "skipped, so a full-length sequence may get fewer than max_predictions_per_seq masks "
                        "and not fit (Graphcore's remask masks word pieces)")
    if pred > seq - 3:
        raise PrepError(f"the remask layout cannot fit max_predictions_per_seq={pred} in max_seq_length={seq}: "
                        f"[CLS] and the two [SEP] are never masked, so at most {max(seq - 3, 0)} mask slots "
                        f"leave them room")
    if not _INT64[0] <= pad_position_value <= _INT64[1]:
        raise PrepError(f"pad_position_value={pad_position_value}: not an int64")


class RemaskEncoder:
    """The remask record bytes of an instance, from the generator's emit arguments (varint-encoded tokens).

    `features` says what the record holds (plain ints, as Graphcore's writer computes them);
    `encode` gives `REMASK_INSTANCE.encode` of them, built from the generator's varint bytes
    without per-value Python work, as `tfrecord.InstanceEncoder` does for the standard layout.
    """

    def __init__(self, max_seq_length: int, max_predictions_per_seq: int, pad_position_value: int = PAD_POSITION_VALUE):
        self.seq = max_seq_length
        self.pred = max_predictions_per_seq
        self.pad_position = pad_position_value
        self._pad = varint(pad_position_value)
        self._weights: dict[int, bytes] = {}
        self._labels = [feature_entry("next_sentence_labels", INT64, [v]) for v in (0, 1)]

    def _check(self, n: int, m: int) -> None:
        if m > self.pred or n - m > self.seq - self.pred:
            raise PrepError(f"an instance of {n} tokens with {m} masks does not fit the remask layout "
                            f"(max_seq_length={self.seq}, max_predictions_per_seq={self.pred})")

    def features(self, ids: list[int], len_a: int, positions: list[int], label_ids: list[int],
                 is_random: bool) -> dict[str, list]:
        """The REMASK_INSTANCE features of one instance: `ids` the real tokens after masking (ints)."""
        seq, pred = self.seq, self.pred
        n, m = len(ids), len(positions)
        self._check(n, m)
        masked = set(positions)
        others = [p for p in range(n) if p not in masked]
        segment = [0] * (len_a + 2) + [1] * (n - len_a - 2)
        gap, tail = pred - m, seq - pred - (n - m)
        pad_position = self.pad_position
        return {
            "input_ids": [ids[p] for p in positions] + [0] * gap + [ids[p] for p in others] + [0] * tail,
            "input_position": positions + [pad_position] * gap + others + [pad_position] * tail,
            "segment_ids": [segment[p] for p in positions] + [0] * gap + [segment[p] for p in others] + [0] * tail,
            "mask_padding_index": [m],
            "seq_padding_index": [pred + n - m],
            "masked_lm_positions": list(positions),
            "masked_labels": list(label_ids) + [0] * gap,
            "masked_lm_ids": list(label_ids) + [0] * gap,
            "masked_lm_weights": [1.0] * m + [0.0] * gap,
            "next_sentence_labels": [1 if is_random else 0],
        }

    def encode(self, tokens: list[bytes], len_a: int, len_b: int, positions: list[int], labels: list[bytes],
               is_random: bool) -> bytes:
        n, m = len(tokens), len(positions)
        self._check(n, m)
        masked = set(positions)
        others = [p for p in range(n) if p not in masked]
        gap, tail = bytes(self.pred - m), bytes(self.seq - self.pred - (n - m))
        pad = self._pad
        first_b = len_a + 2  # positions from here on are segment 1
        masked_in_a = sum(1 for p in positions if p < first_b)
        listed = b"".join([varint(p) for p in positions])
        label_ids = b"".join(labels) + gap
        weights = self._weights.get(m)
        if weights is None:
            weights = self._weights[m] = feature_entry("masked_lm_weights", FLOAT,
                                                       [1.0] * m + [0.0] * (self.pred - m))
        body = b"".join((  # the features in name order, as encode_example writes them
            int64_entry(_KEYS["input_ids"], b"".join([tokens[p] for p in positions]) + gap
                        + b"".join([tokens[p] for p in others]) + tail),
            int64_entry(_KEYS["input_position"], listed + pad * len(gap) + b"".join([varint(p) for p in others])
                        + pad * len(tail)),
            int64_entry(_KEYS["mask_padding_index"], varint(m)),
            int64_entry(_KEYS["masked_labels"], label_ids),
            int64_entry(_KEYS["masked_lm_ids"], label_ids),
            int64_entry(_KEYS["masked_lm_positions"], listed),
            weights,
            self._labels[is_random],
            int64_entry(_KEYS["segment_ids"], b"".join([b"\x01" if p >= first_b else b"\x00" for p in positions])
                        + gap + bytes(first_b - masked_in_a) + b"\x01" * (n - m - first_b + masked_in_a) + tail),
            int64_entry(_KEYS["seq_padding_index"], varint(self.pred + n - m)),
        ))
        return b"\x0a" + varint(len(body)) + body


_KEYS = {name: feature_key(name) for name in REMASK_INSTANCE.names}


def to_standard(b: dict, max_predictions_per_seq: int, pad_position_value: int | None = None) -> dict:
    """The standard-layout (BERT_INSTANCE) batch of a parsed remask batch; ValueError naming the first broken record.

    `b` holds numpy arrays of every REMASK_INSTANCE feature, masked_lm_positions dense and padded
    with -1 (a parse's sparse values). Checks that the slots hold a permutation of the positions
    0..n-1, the masked slots in ascending order, empty slots zero (and at `pad_position_value`
    when given), and that the duplicated features agree.
    """
    import numpy as np

    ids, pos, seg = b["input_ids"], b["input_position"], b["segment_ids"]
    n_rec, seq = ids.shape
    pred = max_predictions_per_seq
    m = b["mask_padding_index"][:, 0]
    s = b["seq_padding_index"][:, 0]

    def fail(ok, what: str):
        if not np.all(ok):
            raise ValueError(f"record {int(np.argmin(ok))} of the batch: {what}")

    fail((m >= 0) & (m <= pred), f"mask_padding_index outside [0, {pred}]")
    fail((s >= pred) & (s <= seq), f"seq_padding_index outside [{pred}, {seq}]")
    n = m + s - pred
    slot = np.arange(seq)
    used = (slot < m[:, None]) | ((slot >= pred) & (slot < s[:, None]))
    fail(((ids == 0) & (seg == 0) | used).all(axis=1), "an empty slot holds a token or a segment id")
    if pad_position_value is not None:
        fail(((pos == pad_position_value) | used).all(axis=1), f"an empty slot's position is not {pad_position_value}")
    fail(((pos >= 0) & (pos < n[:, None]) | ~used).all(axis=1), "a slot's position is outside the sequence")
    rows, cols = np.nonzero(used)
    seen = np.zeros((n_rec, seq), np.int64)
    np.add.at(seen, (rows, pos[rows, cols]), 1)
    fail(((seen == 1) == (slot < n[:, None])).all(axis=1), "the slots do not hold each position once")
    mask_slot = slot[:pred] < m[:, None]
    masked_pos = pos[:, :pred]
    fail(np.where(mask_slot[:, 1:], np.diff(masked_pos, axis=1) > 0, True).all(axis=1),
         "the masked slots are not in ascending position order")
    labels = b["masked_labels"]
    fail((labels == b["masked_lm_ids"]).all(axis=1), "masked_labels and masked_lm_ids differ")
    fail(((labels == 0) | mask_slot).all(axis=1), "masked_labels padding is not zero")
    fail((b["masked_lm_weights"] == mask_slot).all(axis=1), "masked_lm_weights do not mark the mask slots")
    listed = b["masked_lm_positions"]
    width = listed.shape[1]
    listed_n = (listed >= 0).sum(axis=1)
    padded = np.full((n_rec, max(width, pred)), -1, np.int64)
    padded[:, :width] = listed
    fail((listed_n == m) & (np.where(mask_slot, masked_pos, -1) == padded[:, :pred]).all(axis=1),
         "masked_lm_positions differ from the masked slots' positions")

    std_ids = np.zeros_like(ids)
    std_seg = np.zeros_like(seg)
    std_ids[rows, pos[rows, cols]] = ids[rows, cols]
    std_seg[rows, pos[rows, cols]] = seg[rows, cols]
    return {
        "input_ids": std_ids,
        "input_mask": (slot < n[:, None]).astype(ids.dtype),
        "segment_ids": std_seg,
        "masked_lm_positions": np.where(mask_slot, masked_pos, 0),
        "masked_lm_ids": labels.copy(),
        "masked_lm_weights": b["masked_lm_weights"].copy(),
        "next_sentence_labels": b["next_sentence_labels"].copy(),
    }
