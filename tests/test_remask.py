"""Graphcore's static-mask ("remask") layout: read with Graphcore's own loader spec, undone instance by instance
into the standard record made with the same parameters, and byte-equal to Graphcore's own rearrangement."""

from __future__ import annotations

import os

import numpy as np
import pytest

from shardkit.errors import PrepError
from shardkit.example import decode_example, varint
from shardkit.records import read_records
from testkit import graphcore_remask
from wikiprep.instances import write_pretraining_files
from wikiprep.layouts import remask
from wikiprep.layouts.remask import GRAPHCORE_STATIC_MASK_FEATURES, REMASK_INSTANCE
from wikiprep.options import GenerationOptions

from fixture_paths import GOOGLE_REFERENCE as FIXTURES, REFERENCE_VOCAB as VOCAB  # noqa: E402
INPUTS = [str(FIXTURES / "inputs" / "sample_text.txt"), str(FIXTURES / "inputs" / "synthetic_docs.txt")]

# (max_seq_length, max_predictions_per_seq, pad_position_value): Graphcore's phase 1, and a short one with its own pad.
SETTINGS = [(128, 20, 384), (48, 9, 48)]


@pytest.fixture(scope="module", params=SETTINGS, ids=[f"seq{s}_mask{p}_pad{v}" for s, p, v in SETTINGS])
def made(request, tmp_path_factory) -> dict:
    """Standard records made with --fixed_mask_count and remask records from the same options, two files each."""
    seq, pred, pad = request.param
    options = GenerationOptions(max_seq_length=seq, max_predictions_per_seq=pred, fixed_mask_count=True,
                                random_seed=3, dupe_factor=2)
    folder = tmp_path_factory.mktemp("remask")
    standard = [folder / f"standard{i}.tfrecord" for i in range(2)]
    remasked = [folder / f"remask{i}.tfrecord" for i in range(2)]
    write_pretraining_files(INPUTS, str(VOCAB), standard, None, options)
    write_pretraining_files(INPUTS, str(VOCAB), remasked, None, options,
                            layout=remask.LAYOUT.with_parameters(pad_position_value=pad))
    return {"options": options, "pad": pad, "pairs": list(zip(standard, remasked))}


def _undo(ex: dict, seq: int, pred: int) -> dict:
    """The standard record of a remask record parsed with Graphcore's spec: each slot's token put back at its
    position (written here apart from `remask.to_standard`, which verify and stats use)."""
    m, s = int(ex["mask_padding_index"][0]), int(ex["seq_padding_index"][0])
    n = m + s - pred
    ids, seg = [0] * seq, [0] * seq
    for slot in list(range(m)) + list(range(pred, s)):
        ids[ex["input_position"][slot]] = int(ex["input_ids"][slot])
        seg[ex["input_position"][slot]] = int(ex["segment_ids"][slot])
    return {
        "input_ids": ids,
        "input_mask": [1] * n + [0] * (seq - n),
        "segment_ids": seg,
        "masked_lm_positions": [int(p) for p in ex["input_position"][:m]] + [0] * (pred - m),
        "masked_lm_ids": [int(v) for v in ex["masked_labels"]],
        "masked_lm_weights": [float(w) for w in ex["masked_lm_weights"]],
        "next_sentence_labels": [int(ex["next_sentence_labels"][0])],
    }


def test_graphcores_loader_reads_every_record_and_undoing_gives_the_standard_record(made):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    opts, pad = made["options"], made["pad"]
    seq, pred = opts.max_seq_length, opts.max_predictions_per_seq
    spec = graphcore_remask.static_mask_features(tf, seq, pred)
    total = full = 0
    for standard, remasked in made["pairs"]:
        expected = [decode_example(r) for r in read_records(standard)]
        # as Graphcore's _decode_record, in its tf.data map
        parsed = list(tf.data.TFRecordDataset(str(remasked)).map(lambda r: tf.io.parse_single_example(r, spec))
                      .as_numpy_iterator())
        assert len(parsed) == len(expected) > 0
        for i, (ex, std) in enumerate(zip(parsed, expected)):
            assert _undo(ex, seq, pred) == std, f"{remasked} record {i}"
            empty = [j for j in range(seq) if not (j < ex["mask_padding_index"][0]
                                                   or pred <= j < ex["seq_padding_index"][0])]
            assert all(ex["input_position"][j] == pad and ex["input_ids"][j] == 0 for j in empty)
            full += sum(std["input_mask"]) == seq
        total += len(expected)
    assert full > total // 2  # full-length sequences, each with exactly `pred` masks, fill the layout


def test_records_are_graphcores_own_rearrangement_of_the_standard_records(made):
    """Graphcore's remask branch (vendored), given each standard record's values, writes the same bytes."""
    opts, pad = made["options"], made["pad"]
    checked = 0
    for standard, remasked in made["pairs"]:
        for i, (std, ours) in enumerate(zip(read_records(standard), read_records(remasked), strict=True)):
            ex = decode_example(std)
            m = int(sum(ex["masked_lm_weights"]))
            real = ex["input_ids"][:sum(ex["input_mask"])]
            if 0 in real:  # Graphcore drops a token of id 0 (see the next test); none in this corpus
                continue
            theirs = graphcore_remask.remask_record(ex["input_ids"], ex["segment_ids"], ex["masked_lm_positions"][:m],
                                                    ex["masked_lm_ids"][:m], ex["next_sentence_labels"][0],
                                                    opts.max_seq_length, opts.max_predictions_per_seq, pad)
            assert ours == theirs, f"{remasked} record {i}"
            features = decode_example(ours)
            assert REMASK_INSTANCE.encode(features) == ours  # the fast encoder equals the schema's
            assert features["masked_lm_positions"] == ex["masked_lm_positions"][:m]  # not padded, as written
            assert features["masked_lm_ids"] == features["masked_labels"] == ex["masked_lm_ids"]
            checked += 1
    assert checked > 100


def test_a_token_of_id_0_keeps_its_slot():
    """Graphcore's loop skips every id 0 (its padding test), dropping a masked token replaced by the word at id 0
    (its mask slot is lost, masked_labels no longer match masked_lm_ids) and an unmasked one; every real position
    keeps its slot here, so the instance undoes intact."""
    seq, pred = 12, 4
    ids = [101, 7, 0, 9, 102, 11, 0, 13, 102]  # [CLS] A(3) [SEP] B(3) [SEP]: a masked 0 at 2, a kept 0 at 6
    positions, labels = [2, 5], [8, 12]
    encoder = remask.RemaskEncoder(seq, pred)
    features = encoder.features(ids, 3, positions, labels, False)
    assert encoder.encode([varint(i) for i in ids], 3, 4, positions, [varint(i) for i in labels], False) == \
        REMASK_INSTANCE.encode(features)
    assert features["mask_padding_index"] == [2] and features["seq_padding_index"] == [pred + 7]
    assert features["input_position"][:2] == [2, 5] and features["input_ids"][:2] == [0, 11]
    batch = {name: np.array([values]) for name, values in features.items()}
    standard = remask.to_standard(batch, pred, remask.PAD_POSITION_VALUE)
    assert standard["input_ids"][0].tolist() == ids + [0] * (seq - len(ids))
    assert standard["masked_lm_ids"][0].tolist() == labels + [0, 0]
    theirs = graphcore_remask.remask_features(ids + [0] * 3, [0] * 5 + [1] * 4 + [0] * 3, positions, labels, 0,
                                              seq, pred, remask.PAD_POSITION_VALUE)
    assert theirs["mask_padding_index"][1] == [1] and theirs["seq_padding_index"][1] == [pred + 6]  # both 0s dropped
    assert theirs["masked_labels"][1] == [12, 0, 0, 0] != theirs["masked_lm_ids"][1]


@pytest.mark.parametrize("change, problem", [
    (lambda f: f["input_position"].__setitem__(1, f["input_position"][0]), "do not hold each position once"),
    (lambda f: f["masked_labels"].__setitem__(0, 99), "masked_labels and masked_lm_ids differ"),
    (lambda f: f["mask_padding_index"].__setitem__(0, 9), "mask_padding_index outside [0, 4]"),
    (lambda f: f["input_ids"].__setitem__(3, 7), "an empty slot holds a token"),
    (lambda f: f["masked_lm_positions"].pop(), "masked_lm_positions differ"),
])
def test_undoing_checks_every_invariant_of_the_layout(change, problem):
    features = remask.RemaskEncoder(12, 4).features([101, 7, 8, 102, 11, 12, 102], 2, [1, 4], [5, 6], True)
    change(features)
    width = max(len(features["masked_lm_positions"]), 1)
    batch = {name: np.array([values if name != "masked_lm_positions" else values + [-1] * (width - len(values))])
             for name, values in features.items()}
    with pytest.raises(ValueError, match=problem.replace("[", r"\[")):
        remask.to_standard(batch, 4)


@pytest.mark.parametrize("options, problem", [
    (GenerationOptions(), "needs fixed_mask_count=True"),
    (GenerationOptions(fixed_mask_count=True, do_whole_word_mask=True), "cannot take do_whole_word_mask=True"),
    (GenerationOptions(fixed_mask_count=True, max_seq_length=16, max_predictions_per_seq=14),
     "cannot fit max_predictions_per_seq=14 in max_seq_length=16"),
])
def test_options_whose_instances_may_not_fit_are_refused(options, problem):
    with pytest.raises(PrepError, match=problem):
        remask.check_fits(options)
    remask.check_fits(GenerationOptions(fixed_mask_count=True, max_seq_length=16, max_predictions_per_seq=13))


def test_the_schema_is_graphcores_loader_spec_plus_the_two_written_features():
    import tensorflow as tf

    theirs = graphcore_remask.static_mask_features(tf, 384, 58)
    dims = {"max_seq_length": 384, "max_predictions_per_seq": 58}
    assert REMASK_INSTANCE.tf_spec(tf, dims, GRAPHCORE_STATIC_MASK_FEATURES) == theirs
    assert set(REMASK_INSTANCE.names) - set(theirs) == {"masked_lm_positions", "masked_lm_ids"}
