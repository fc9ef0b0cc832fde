"""`example.decode_batch` against TensorFlow's `parse_example`: the same arrays for every record it takes, and
NotPlainExample (TensorFlow's turn) for every record it does not; `reader.file_batches(tensorflow=False)` gives
TensorFlow's batches, and its errors, without importing it for a file of plain records."""

import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from shardkit import example, records
from shardkit.errors import PrepError
from wikiprep import reader
from wikiprep.schema import BERT_INSTANCE, PRED, SEQ

FEATURES = [("ids", example.INT64, 5), ("weights", example.FLOAT, 3), ("label", example.INT64, 1),
            ("positions", example.INT64, None)]
SPEC = {"ids": tf.io.FixedLenFeature([5], tf.int64), "weights": tf.io.FixedLenFeature([3], tf.float32),
        "label": tf.io.FixedLenFeature([1], tf.int64), "positions": tf.io.VarLenFeature(tf.int64)}


def tf_parsed(batch: list[bytes]) -> dict:
    parsed = tf.io.parse_example(tf.constant(batch), SPEC)
    return {k: (tf.sparse.to_dense(v, default_value=-1) if isinstance(v, tf.sparse.SparseTensor) else v).numpy()
            for k, v in parsed.items()}


def assert_same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def random_record(rng: random.Random, *, proto: bool) -> bytes:
    big = [0, 1, 127, 128, 16383, 16384, 2**31, 2**40, 2**63 - 1, -1, -2**63, -300]
    values = {"ids": [rng.choice(big + [rng.randrange(30522)]) for _ in range(5)],
              "weights": [rng.choice([0.0, 1.0, -0.0, 1e-30, 3.0e38, rng.random()]) for _ in range(3)],
              "label": [rng.randrange(2)],
              "positions": [rng.randrange(500) for _ in range(rng.randrange(4))],
              "other": [rng.randrange(10)]}  # not asked for: ignored, as TensorFlow does
    kinds = {"weights": example.FLOAT}
    if not proto:
        return example.encode_example([(n, kinds.get(n, example.INT64), v) for n, v in values.items()])
    feature = {n: tf.train.Feature(float_list=tf.train.FloatList(value=v)) if n in kinds
               else tf.train.Feature(int64_list=tf.train.Int64List(value=v)) for n, v in values.items()}
    # protobuf's own serialization: map entries in whatever order it takes
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


@pytest.mark.parametrize("proto", [False, True])
def test_the_arrays_tensorflow_parses(proto):
    rng = random.Random(7)
    batch = [random_record(rng, proto=proto) for _ in range(300)]
    assert_same(example.decode_batch(batch, FEATURES), tf_parsed(batch))
    empty = [r for r in batch if not example.decode_example(r)["positions"]][:3]
    assert_same(example.decode_batch(empty, FEATURES), tf_parsed(empty))  # VarLen all empty: [3, 0]


def entry(name: str, feature: bytes) -> bytes:
    body = b"\x0a" + example.varint(len(name)) + name.encode() + b"\x12" + example.varint(len(feature)) + feature
    return b"\x0a" + example.varint(len(body)) + body


def record(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return b"\x0a" + example.varint(len(body)) + body


def packed(tag: int, payload: bytes) -> bytes:
    inner = b"\x0a" + example.varint(len(payload)) + payload
    return bytes([tag]) + example.varint(len(inner)) + inner


GOOD = [entry("ids", packed(0x1A, b"\x01\x02\x03\x04\x05")), entry("weights", packed(0x12, bytes(12))),
        entry("label", packed(0x1A, b"\x01")), entry("positions", packed(0x1A, b""))]
NOT_PLAIN = {
    "values not packed": record(entry("ids", b"\x1a\x0a" + b"".join(b"\x08" + bytes([i]) for i in range(5))),
                                *GOOD[1:]),
    "a feature missing": record(*GOOD[1:]),
    "a wrong length": record(entry("ids", packed(0x1A, b"\x01\x02")), *GOOD[1:]),
    "a wrong kind": record(entry("ids", packed(0x12, bytes(20))), *GOOD[1:]),
    "a key twice": record(*GOOD, GOOD[0]),
    "a varint cut short": record(entry("ids", packed(0x1A, b"\x01\x02\x03\x04\x85")), *GOOD[1:]),
    "floats cut short": record(GOOD[0], entry("weights", packed(0x12, bytes(11))), *GOOD[2:]),
    "truncated": record(*GOOD)[:-3],
    "truncated in a feature not asked for": record(*GOOD, entry("other", packed(0x1A, b"\x01\x02\x03")))[:-2],
    "another field of Example": record(*GOOD) + b"\x10\x01",
}


def test_records_tensorflow_may_read_otherwise_or_refuses_are_not_taken():
    assert_same(example.decode_batch([record(*GOOD)], FEATURES), tf_parsed([record(*GOOD)]))
    for what, data in NOT_PLAIN.items():
        with pytest.raises(example.NotPlainExample):
            example.decode_batch([record(*GOOD), data], FEATURES)
            pytest.fail(what)


def bert_record(rng: random.Random, seq: int = 8, pred: int = 2) -> bytes:
    return BERT_INSTANCE.encode({"input_ids": [rng.randrange(30522) for _ in range(seq)], "input_mask": [1] * seq,
                                 "segment_ids": [0] * seq, "masked_lm_positions": [1, 2][:pred],
                                 "masked_lm_ids": [5, 6][:pred], "masked_lm_weights": [1.0] * pred,
                                 "next_sentence_labels": [1]})


def test_file_batches_without_tensorflow_are_tensorflows(tmp_path):
    rng = random.Random(3)
    path = tmp_path / "wiki_00000.tfrecord"
    records.write_records(path, [bert_record(rng) for _ in range(reader.BATCH * 2 + 5)])
    found = reader.RecordFiles(path, reader.TFRECORD, [path], {SEQ: 8, PRED: 2})
    plain, parsed = list(reader.file_batches(found, path, tensorflow=False)), list(reader.file_batches(found, path))
    assert [len(b["input_ids"]) for b in plain] == [reader.BATCH, reader.BATCH, 5]
    for got, want in zip(plain, parsed, strict=True):
        assert_same(got, want)


def test_a_record_it_does_not_take_is_tensorflows_from_its_batch_on(tmp_path):
    """A record of the wrong length in the second batch: the first batch is decoded, the second is TensorFlow's
    error, word for word what the TensorFlow reader says."""
    rng = random.Random(4)
    path = tmp_path / "wiki_00000.tfrecord"
    payloads = [bert_record(rng) for _ in range(reader.BATCH + 3)]
    payloads[reader.BATCH + 1] = bert_record(rng, seq=7)
    records.write_records(path, payloads)
    found = reader.RecordFiles(path, reader.TFRECORD, [path], {SEQ: 8, PRED: 2})
    errors = []
    for tensorflow in (False, True):
        batches = reader.file_batches(found, path, tensorflow=tensorflow)
        assert len(next(batches)["input_ids"]) == reader.BATCH
        with pytest.raises(PrepError) as e:
            next(batches)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and f"record {reader.BATCH + 1}" in errors[0]


def test_a_file_of_plain_records_is_read_without_importing_tensorflow(tmp_path):
    rng = random.Random(5)
    path = tmp_path / "wiki_00000.tfrecord"
    records.write_records(path, [bert_record(rng) for _ in range(10)])
    code = ("import sys; from pathlib import Path; from wikiprep import reader; from wikiprep.schema import PRED, SEQ\n"
            f"p = Path({str(path)!r}); found = reader.RecordFiles(p, reader.TFRECORD, [p], {{SEQ: 8, PRED: 2}})\n"
            "n = sum(len(b['input_ids']) for b in reader.file_batches(found, p, tensorflow=False))\n"
            "print(n, 'tensorflow' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["10", "False"]
