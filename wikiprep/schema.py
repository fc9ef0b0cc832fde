"""The BERT pre-training record in its three layouts: the tables its encoders, parse specs, checks and readers use.

- `BERT_INSTANCE`: the schema of google-research/bert's `run_pretraining.py` (`input_fn_builder`), which
  every TFRecord consumer of BERT pre-training data (Google, NVIDIA's TF, Graphcore's TF1/TF2) parses.
- `HDF5_DTYPES`: NVIDIA's HDF5 layout of the same instances, one dataset per feature (PyTorch BERT).
- `REMASK_INSTANCE`: Graphcore's static-mask ("remask") rearrangement of the same instances (TF1 BERT).
"""

from shardkit.example import FLOAT, INT64
from shardkit.schema import Feature, Schema

SEQ, PRED = "max_seq_length", "max_predictions_per_seq"

BERT_INSTANCE = Schema("BERT pre-training", [
    Feature("input_ids", INT64, (SEQ,), "WordPiece ids of [CLS] A [SEP] B [SEP], masked tokens replaced, then zeros"),
    Feature("input_mask", INT64, (SEQ,), "1 for each real token, 0 for padding"),
    Feature("segment_ids", INT64, (SEQ,), "0 for [CLS] A [SEP], 1 for B [SEP], 0 for padding"),
    Feature("masked_lm_positions", INT64, (PRED,), "positions of the masked tokens, ascending, then zeros"),
    Feature("masked_lm_ids", INT64, (PRED,), "the original token id at each masked position, then zeros"),
    Feature("masked_lm_weights", FLOAT, (PRED,), "1.0 for each real prediction, then 0.0"),
    Feature("next_sentence_labels", INT64, (1,), "1: B is a random sentence; 0: B is the actual next"),
])

# NVIDIA's HDF5 layout, as DeepLearningExamples' PyTorch/LanguageModeling/BERT create_pretraining_data.py
# writes it (`write_instance_to_example_file`) and its run_pretraining.py `pretraining_dataset` reads it:
# one gzip-compressed dataset per feature of BERT_INSTANCE, with these dtypes, [N, length] ([N] for
# next_sentence_labels). No masked_lm_weights: the reader takes the first 0 in masked_lm_positions as the
# end of the masks ([CLS], at 0, is never masked).
HDF5_DTYPES = {
    "input_ids": "i4",
    "input_mask": "i1",
    "segment_ids": "i1",
    "masked_lm_positions": "i4",
    "masked_lm_ids": "i4",
    "next_sentence_labels": "i1",
}

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
