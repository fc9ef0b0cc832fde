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

from shardkit.errors import PrepError

from .options import GenerationOptions
from .schema import PAD_POSITION_VALUE, REMASK_INSTANCE

STANDARD, REMASK = "standard", "remask"
LAYOUTS = (STANDARD, REMASK)
_INT64 = (-(1 << 63), (1 << 63) - 1)


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
    """The remask record bytes of an instance, from the generator's emit arguments (varint-encoded tokens)."""

    def __init__(self, table: list[bytes], max_seq_length: int, max_predictions_per_seq: int,
                 pad_position_value: int = PAD_POSITION_VALUE):
        self.id_of = {b: i for i, b in enumerate(table)}
        self.seq = max_seq_length
        self.pred = max_predictions_per_seq
        self.pad_position = pad_position_value

    def features(self, ids: list[int], len_a: int, positions: list[int], label_ids: list[int],
                 is_random: bool) -> dict[str, list]:
        """The REMASK_INSTANCE features of one instance: `ids` the real tokens after masking (ints)."""
        seq, pred = self.seq, self.pred
        n, m = len(ids), len(positions)
        rest = n - m
        if m > pred or rest > seq - pred:
            raise PrepError(f"an instance of {n} tokens with {m} masks does not fit the remask layout "
                            f"(max_seq_length={seq}, max_predictions_per_seq={pred})")
        masked = set(positions)
        others = [p for p in range(n) if p not in masked]
        segment = [0] * (len_a + 2) + [1] * (n - len_a - 2)
        gap, tail = pred - m, seq - pred - rest
        pad_position = self.pad_position
        return {
            "input_ids": [ids[p] for p in positions] + [0] * gap + [ids[p] for p in others] + [0] * tail,
            "input_position": positions + [pad_position] * gap + others + [pad_position] * tail,
            "segment_ids": [segment[p] for p in positions] + [0] * gap + [segment[p] for p in others] + [0] * tail,
            "mask_padding_index": [m],
            "seq_padding_index": [pred + rest],
            "masked_lm_positions": list(positions),
            "masked_labels": list(label_ids) + [0] * gap,
            "masked_lm_ids": list(label_ids) + [0] * gap,
            "masked_lm_weights": [1.0] * m + [0.0] * gap,
            "next_sentence_labels": [1 if is_random else 0],
        }

    def encode(self, tokens: list[bytes], len_a: int, len_b: int, positions: list[int], labels: list[bytes],
               is_random: bool) -> bytes:
        id_of = self.id_of
        return REMASK_INSTANCE.encode(self.features([id_of[t] for t in tokens], len_a, positions,
                                                    [id_of[t] for t in labels], is_random))


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
