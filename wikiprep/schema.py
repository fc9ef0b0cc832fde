"""The BERT pre-training instance: the table its encoders, parse specs, checks and readers use.

`BERT_INSTANCE` is the schema of google-research/bert's `run_pretraining.py` (`input_fn_builder`),
which every TFRecord consumer of BERT pre-training data (Google, NVIDIA's TF, Graphcore's TF1/TF2)
parses: the standard layout, the one every layout is read back to. Each output layout keeps its own
tables (its schema, its dtypes) in its module of `wikiprep.layouts`.
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
