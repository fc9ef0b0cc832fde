"""Instances as plain feature dicts, in memory: what the tests compare with the reference fixtures.

`wikiprep.instances` writes records with bounded memory through a fast encoder; this module
drives the same generator and keeps every instance as a dict of padded int/float lists (the
fixtures' form), so a test can compare features one by one and check that the writer's bytes
equal `BERT_INSTANCE.encode` of them.
"""

from __future__ import annotations

import random
from typing import Iterator, Sequence

from wikiprep import instances
from wikiprep.options import GenerationOptions
from wikiprep.schema import BERT_INSTANCE


def instance_features(ids: list[int], len_a: int, len_b: int, positions: list[int], label_ids: list[int],
                      is_random: bool, max_seq_length: int, max_predictions_per_seq: int) -> dict[str, list]:
    """The seven padded features of one instance (ids as ints), as the original writes them."""
    n, m = len(ids), len(positions)
    pad, mpad = max_seq_length - n, max_predictions_per_seq - m
    return {
        "input_ids": list(ids) + [0] * pad,
        "input_mask": [1] * n + [0] * pad,
        "segment_ids": [0] * (len_a + 2) + [1] * (len_b + 1) + [0] * pad,
        "masked_lm_positions": list(positions) + [0] * mpad,
        "masked_lm_ids": list(label_ids) + [0] * mpad,
        "masked_lm_weights": [1.0] * m + [0.0] * mpad,
        "next_sentence_labels": [1 if is_random else 0],
    }


def encode_features(features: dict[str, list]) -> bytes:
    """The `tf.train.Example` bytes of a feature dict."""
    return BERT_INSTANCE.encode(features)


def generate_instances(input_files: Sequence[str], vocab_file: str,
                       options: GenerationOptions) -> Iterator[dict[str, list]]:
    """The feature dicts of every instance in output order (all held in memory: small inputs only)."""
    vocab, corpus = instances.prepare(input_files, vocab_file, options)
    id_of = {b: i for i, b in enumerate(corpus.table)}
    rng = random.Random(options.random_seed)
    made: list[tuple] = []

    def emit(tokens, la, lb, positions, labels, is_random):
        made.append(([id_of[t] for t in tokens], la, lb, positions, [id_of[t] for t in labels], is_random))

    instances.generate(corpus, vocab, options, rng, emit)
    order = list(range(len(made)))
    rng.shuffle(order)  # draw: shuffle(instances)
    for k in order:
        yield instance_features(*made[k], options.max_seq_length, options.max_predictions_per_seq)


def assert_hdf5_holds_records(h5_path, record_path) -> int:
    """Assert that HDF5 file `h5_path` (NVIDIA's layout) holds the instances of TFRecord file `record_path`,
    in the same order, feature by feature; returns how many. What every HDF5 test compares."""
    import h5py  # only the HDF5 tests need it

    from shardkit.example import decode_example
    from shardkit.records import read_records
    from wikiprep.layouts.hdf5 import HDF5_DTYPES

    records = [decode_example(r) for r in read_records(record_path)]
    with h5py.File(h5_path, "r") as f:
        data = {name: f[name][:] for name in HDF5_DTYPES}
    assert len(data["input_ids"]) == len(records), f"{h5_path}: {len(data['input_ids'])} rows, {len(records)} records"
    for i, rec in enumerate(records):
        for name in HDF5_DTYPES:
            expected = rec[name][0] if name == "next_sentence_labels" else rec[name]
            assert data[name][i].tolist() == expected, f"{h5_path} instance {i} {name}"
    return len(records)
