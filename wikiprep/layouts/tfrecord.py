"""google-research/bert's layout: TFRecords of `BERT_INSTANCE` Examples, an `offset length` index beside each.

What `run_pretraining.py` of google-research/bert, NVIDIA's TF BERT and Graphcore's TF BERT parse,
and the standard layout every other layout is read back to. A dataset of it is the default: its
folder has no suffix, and its description records no layout (as before other layouts existed).
"""

from __future__ import annotations

from dataclasses import dataclass

from shardkit.example import varint

from ..schema import BERT_INSTANCE
from .framed import FramedLayout, feature_entry, feature_key, int64_entry, table


@dataclass(frozen=True, kw_only=True)
class TFRecordLayout(FramedLayout):
    def description(self) -> dict:
        """Nothing: the standard dataset's dataset.json and MANIFEST.json are the bytes they were before other
        layouts existed (a description without a layout's keys is this layout's)."""
        return {}

    def encoder(self, max_seq_length: int, max_predictions_per_seq: int, vocab=None) -> "InstanceEncoder":
        return InstanceEncoder(max_seq_length, max_predictions_per_seq)


LAYOUT = TFRecordLayout(name="tfrecord", title="TFRecord", file_kind="TFRecord", flags=("tfrecord", "standard"),
                        folder_suffix="", suffixes=(".tfrecord",), schema=BERT_INSTANCE,
                        compiled_code=0)  # _speedups.c: LAYOUT_STANDARD


class InstanceEncoder:
    """Record bytes of an instance, equal to `BERT_INSTANCE.encode` of its padded features, several times faster.

    A record is the Example header and one map entry per feature in sorted name order, each
    entry a head (key, lengths) and the packed values. input_mask and segment_ids hold one-byte
    varints (0 or 1), so their packed values are runs of b"\\x00"/b"\\x01" and their heads are
    fixed; the masked_lm_weights and next_sentence_labels entries take few values and are made
    from the schema. input_ids and masked_lm_ids join the varint-encoded tokens; their heads
    depend only on the packed length and are cached. The tables of runs, positions and weights
    entries are `framed.table`s: full lists for the usual lengths, built on demand for long ones.
    """

    def __init__(self, max_seq_length: int, max_predictions_per_seq: int):
        self.seq = max_seq_length
        self.max_pred = max_predictions_per_seq
        self._positions = table(varint, max_seq_length)
        # zeros pad masked_lm_* too: max_predictions_per_seq may exceed max_seq_length (the original pads to it)
        self._zeros = table(b"\x00".__mul__, max(max_seq_length, max_predictions_per_seq) + 1)
        self._ones = table(b"\x01".__mul__, max_seq_length + 1)
        self._heads: dict[tuple[bytes, int], bytes] = {}
        self._mask_head = self._head(_KEY_INPUT_MASK, max_seq_length)
        self._segment_head = self._head(_KEY_SEGMENT_IDS, max_seq_length)
        self._weight_entries = table(self._weights_entry, max_predictions_per_seq + 1)
        self._label_entries = [self._entry("next_sentence_labels", [v]) for v in (0, 1)]

    def _weights_entry(self, m: int) -> bytes:
        """The masked_lm_weights entry of an instance with m masks: m 1.0s, then 0.0s."""
        return self._entry("masked_lm_weights", [1.0] * m + [0.0] * (self.max_pred - m))

    @staticmethod
    def _entry(name: str, values: list) -> bytes:
        return feature_entry(name, BERT_INSTANCE.by_name[name].kind, values)

    def _head(self, key: bytes, packed_length: int) -> bytes:
        """Everything of an int64 feature's map entry before its `packed_length` bytes of values."""
        head = self._heads.get((key, packed_length))
        if head is None:
            entry = int64_entry(key, b"\x00" * packed_length)
            head = self._heads[(key, packed_length)] = entry[:len(entry) - packed_length]
        return head

    def encode(self, tokens: list[bytes], len_a: int, len_b: int, positions: list[int], labels: list[bytes],
               is_random: bool) -> bytes:
        n = len(tokens)
        m = len(positions)
        pad = self.seq - n
        pad_pred = self.max_pred - m
        heads, head, zeros, ones = self._heads, self._head, self._zeros, self._ones
        ids = b"".join(tokens)
        label_ids = b"".join(labels)
        ptable = self._positions
        pos = b"".join([ptable[p] for p in positions])
        zeros_pred = zeros[pad_pred]
        k1 = (_KEY_INPUT_IDS, len(ids) + pad)
        k2 = (_KEY_MASKED_IDS, len(label_ids) + pad_pred)
        k3 = (_KEY_MASKED_POSITIONS, len(pos) + pad_pred)
        body = b"".join((
            heads[k1] if k1 in heads else head(*k1), ids, zeros[pad],
            self._mask_head, ones[n], zeros[pad],
            heads[k2] if k2 in heads else head(*k2), label_ids, zeros_pred,
            heads[k3] if k3 in heads else head(*k3), pos, zeros_pred,
            self._weight_entries[m],
            self._label_entries[is_random],
            self._segment_head, zeros[len_a + 2], ones[len_b + 1], zeros[pad],
        ))
        return b"\x0a" + varint(len(body)) + body


_KEY_INPUT_IDS, _KEY_INPUT_MASK, _KEY_MASKED_IDS, _KEY_MASKED_POSITIONS, _KEY_SEGMENT_IDS = map(
    feature_key, ("input_ids", "input_mask", "masked_lm_ids", "masked_lm_positions", "segment_ids"))
