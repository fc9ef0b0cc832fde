"""Graphcore's static-mask ("remask") rearrangement and loader spec, vendored so the tests hold us to its layout.

From graphcore/examples, applications/tensorflow/bert/bert_data/create_pretraining_data.py
(`write_instance_to_example_files`, its `if args.remask:` branch) and bert_data/pretraining.py
(`get_pretraining_dataset`, `name_to_features` with `use_static_mask`), at commit 187775b1
(Poplar SDK 2.5, 2022-05; the TF1 BERT has since left the repository's head). Copyright (c)
2020-2021 Graphcore Ltd.; Copyright 2018 The Google AI Language Team Authors. Licensed under
the Apache License, Version 2.0 (http://www.apache.org/licenses/LICENSE-2.0); distributed on an
"AS IS" BASIS, WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND.

Changes: the branch is a function of the values the writer holds at that point, and
`create_int_feature`/`create_float_feature` return `(kind, values)` pairs for
`shardkit.example.encode_example` instead of protobuf features; the rearrangement is
Graphcore's, unchanged. The spec is Graphcore's, built with TensorFlow 2's `tf.io` names.
"""

import collections

from shardkit.example import FLOAT, INT64, encode_example


def create_int_feature(values):
    return INT64, list(values)


def create_float_feature(values):
    return FLOAT, list(values)


def remask_features(input_ids, segment_ids, masked_lm_positions, masked_lm_ids, next_sentence_label,
                    max_seq_length, mask_tokens, pad_position_value):
    """Graphcore's remask features of one instance. `input_ids` and `segment_ids` padded with zeros to
    `max_seq_length`, `masked_lm_positions` and `masked_lm_ids` not padded, as the writer holds them there."""
    masked_lm_positions = list(masked_lm_positions)
    masked_lm_ids = list(masked_lm_ids)
    masked_lm_weights = [1.0] * len(masked_lm_ids)

    # Removing this makes sure that the logic below doesn't mask the CLS token as idx of CLS == 0.
    while len(masked_lm_ids) < mask_tokens:
        masked_lm_ids.append(0)
        masked_lm_weights.append(0.0)

    # Main Change to original script. This handles the re-arranging of samples to put mask_tokens at the start.
    formatted_input = [0] * max_seq_length
    formatted_pos = [pad_position_value] * max_seq_length
    formatted_seg = [0] * max_seq_length
    formatted_label = [0] * mask_tokens

    current_mask_idx = 0
    current_seq_idx = mask_tokens
    for idx, input_id in enumerate(input_ids):
        if input_id == 0:
            continue
        try:
            masked_lm_idx = masked_lm_positions.index(idx)
            formatted_input[current_mask_idx] = input_id
            formatted_pos[current_mask_idx] = idx
            formatted_seg[current_mask_idx] = segment_ids[idx]
            formatted_label[current_mask_idx] = masked_lm_ids[
                masked_lm_idx]
            current_mask_idx += 1
        except ValueError:
            formatted_input[current_seq_idx] = input_id
            formatted_pos[current_seq_idx] = idx
            formatted_seg[current_seq_idx] = segment_ids[idx]
            current_seq_idx += 1

    mask_tokens_padding_idx = [current_mask_idx]
    sequence_padding_idx = [current_seq_idx]
    nsp_label = [next_sentence_label]

    features = collections.OrderedDict()
    features["input_ids"] = create_int_feature(formatted_input)
    features["input_position"] = create_int_feature(formatted_pos)
    features["segment_ids"] = create_int_feature(formatted_seg)

    features["mask_padding_index"] = create_int_feature(
        mask_tokens_padding_idx)
    features["seq_padding_index"] = create_int_feature(
        sequence_padding_idx)
    features["masked_lm_positions"] = create_int_feature(
        masked_lm_positions)
    features["masked_labels"] = create_int_feature(formatted_label)
    features["masked_lm_ids"] = create_int_feature(masked_lm_ids)
    features["masked_lm_weights"] = create_float_feature(
        masked_lm_weights)
    features["next_sentence_labels"] = create_int_feature(nsp_label)
    return features


def remask_record(*args, **kwargs) -> bytes:
    """The `tf.train.Example` bytes of `remask_features` (deterministic serialization: features by name)."""
    return encode_example([(name, kind, values) for name, (kind, values) in remask_features(*args, **kwargs).items()])


def static_mask_features(tf, max_seq_length, max_predictions_per_seq):
    """Graphcore's loader spec for static-mask records (`name_to_features` when `use_static_mask`)."""
    return {
        "input_ids":
        tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_position":
        tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids":
        tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "mask_padding_index":
        tf.io.FixedLenFeature([1], tf.int64),
        "seq_padding_index":
        tf.io.FixedLenFeature([1], tf.int64),
        "masked_labels":
        tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
        "masked_lm_weights":
        tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32),
        "next_sentence_labels":
        tf.io.FixedLenFeature([1], tf.int64),
    }
