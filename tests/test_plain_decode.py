"""`example.decode_batch` against TensorFlow's `parse_example`: the same arrays for every record it takes, and
NotPlainExample (TensorFlow's turn) for every record it does not; `reader.file_batches(tensorflow=False)` gives
TensorFlow's batches, and its errors, without importing it for a file of plain records.

Each check runs on both paths of `decode_batch` (the `decoder` fixture): the compiled one (`shardkit/_examples.c`,
with the Python scan made to fail if it is reached) and the pure-Python one (SHARDKIT_PURE_PYTHON=1); records that
differ from the plain form in every way we could think of, and random damage to plain ones, get the same decision
and the same arrays, bit for bit, from both, and from TensorFlow for every record they take."""

import random
import shlex
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pytest
import tensorflow as tf

from shardkit import example, records
from shardkit.errors import PrepError
from wikiprep import layouts, reader
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
    """The same arrays bit for bit: -0.0 is not 0.0, and a NaN keeps its payload."""
    assert set(got) == set(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
        assert got[name].tobytes() == want[name].tobytes(), name


needs_compiled = pytest.mark.skipif(example._compiled is None, reason="shardkit._examples is not built (no C compiler)")


@pytest.fixture(params=["compiled", "python"])
def decoder(request, monkeypatch) -> str:
    """Which path of `decode_batch` the test runs on; on the compiled one, the Python scan fails if it is reached."""
    if request.param == "python":
        monkeypatch.setenv(example.PURE_PYTHON_ENV, "1")
        return request.param
    if example._compiled is None:
        pytest.skip("shardkit._examples is not built (no C compiler)")
    monkeypatch.delenv(example.PURE_PYTHON_ENV, raising=False)

    def python_scan(*args):
        raise AssertionError("the compiled path reached the Python scan")

    monkeypatch.setattr(example, "_plain_features", python_scan)
    return request.param


def _cc_found() -> bool:
    cc = shlex.split(sysconfig.get_config_var("CC") or "cc")[:1]
    return bool(cc) and shutil.which(cc[0]) is not None


@pytest.mark.skipif(not _cc_found(), reason="no C compiler here: the Python path is what an install gives")
def test_the_extension_is_built_where_a_compiler_is():
    # pip skips an optional extension that fails to compile, with a warning nobody reads: here it fails instead.
    assert example._compiled is not None, "make setup (pip install -e .) did not build shardkit/_examples.c"


@needs_compiled
def test_the_environment_variable_forces_python(monkeypatch):
    monkeypatch.setenv(example.PURE_PYTHON_ENV, "1")
    assert example.compiled_decoder() is None
    monkeypatch.setenv(example.PURE_PYTHON_ENV, "0")
    assert example.compiled_decoder() is example._compiled


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
def test_the_arrays_tensorflow_parses(proto, decoder):
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
    "bytes where int64 are wanted": record(entry("ids", b"\x0a\x07" + b"\x0a\x05abcde"), *GOOD[1:]),
    "a Feature of no kind": record(entry("ids", b""), *GOOD[1:]),
    "an empty list where 5 values are wanted": record(entry("ids", b"\x1a\x00"), *GOOD[1:]),
    "an empty packed list where 5 values are wanted": record(entry("ids", packed(0x1A, b"")), *GOOD[1:]),
    "a varint of 11 bytes": record(entry("ids", packed(0x1A, b"\x01\x02\x03\x04" + b"\x80" * 10 + b"\x00")),
                                   *GOOD[1:]),
    "a record's values ending inside a varint": record(*GOOD[:2], entry("label", packed(0x1A, b"\x81")), GOOD[3]),
    "a key cut short": b"\x0a\x07\x0a\x05\x0a\x09label",
    "a length past the end": b"\x0a\x7f" + b"".join(GOOD),
    "a length of 2**64": b"\x0a" + b"\x80" * 9 + b"\x02" + b"".join(GOOD),
    "a length of 2**70 in a feature": record(entry("ids", b"\x1a" + b"\x80" * 10 + b"\x01"), *GOOD[1:]),
    "a length varint cut short": b"\x0a\x85",
    "a map entry without its value": record(b"\x0a\x05\x0a\x03ids", *GOOD),
    "a value before its key": record(b"\x0a\x0a\x12\x03\x1a\x01\x00\x0a\x03ids", *GOOD),
    "an entry longer than its Features": b"\x0a\x02" + b"".join(GOOD)[:2] + b"".join(GOOD)[2:],
    "an empty record": b"",
}

# Records the plain form takes that a decoder could easily get wrong; TensorFlow reads them the same.
PLAIN = {
    "negative int64s, ten bytes each": record(entry("ids", packed(0x1A, b"".join(
        example.varint(v) for v in (-1, -2**63, -300, 2**63 - 1, 0)))), *GOOD[1:]),
    "a tenth byte with bits past 64 (dropped)": record(entry("ids", packed(0x1A, b"\x01\x02\x03\x04" + b"\xff" * 9
                                                                           + b"\x7f")), *GOOD[1:]),
    "a varint written longer than it needs": record(entry("ids", packed(0x1A, b"\x81\x00\x02\x03\x04" + b"\x80" * 9
                                                                        + b"\x00")), *GOOD[1:]),
    "a length written longer than it needs": b"\x0a" + bytes([len(b"".join(GOOD)) | 0x80, 0]) + b"".join(GOOD),
    "features in two Features fields (merged)": record(*GOOD[:2]) + record(*GOOD[2:]),
    "an empty list, without its packed field": record(*GOOD[:3], entry("positions", b"\x1a\x00")),
    "a feature not asked for twice": record(*GOOD, entry("other", b"\x0a\x00"), entry("other", b"\x12\x00")),
    "a feature not asked for of any kind": record(entry("other", b"\x0a\x03\x0a\x01z"), *GOOD),
    "features in reverse order": record(*reversed(GOOD)),
    "floats of every kind": record(GOOD[0], entry("weights", packed(0x12, bytes.fromhex("0000c07f" "00000080"
                                                                                        "0100807f"))), *GOOD[2:]),
}


def test_records_a_decoder_could_get_wrong_are_tensorflows(decoder):
    for what, data in PLAIN.items():
        assert_same(example.decode_batch([record(*GOOD), data], FEATURES), tf_parsed([record(*GOOD), data]))


def _outcome(monkeypatch, batch: list[bytes], python: bool) -> dict | None:
    with monkeypatch.context() as m:
        m.setenv(example.PURE_PYTHON_ENV, "1" if python else "0")
        try:
            return example.decode_batch(batch, FEATURES)
        except example.NotPlainExample:
            return None


def _damaged(rng: random.Random, data: bytes) -> bytes:
    """`data` with one random change: a byte changed, inserted or removed, the end cut off, a run repeated."""
    b = bytearray(data)
    i = rng.randrange(len(b) + 1)
    change = rng.randrange(6) if i < len(b) else 3
    if change == 0:
        b[i] = rng.randrange(256)
    elif change == 1:
        b[i] = rng.choice([0x00, 0x0A, 0x12, 0x1A, 0x7F, 0x80, 0xFF])  # tags, lengths, varint edges
    elif change == 2:
        del b[i:]
    elif change == 3:
        b.insert(i, rng.choice([0x00, 0x0A, 0x12, 0x1A, 0x80, rng.randrange(256)]))
    elif change == 4:
        del b[i]
    else:
        j = rng.randrange(i, len(b) + 1)
        b[j:j] = b[i:j]
    return bytes(b)


@needs_compiled
def test_both_paths_take_and_refuse_the_same_records(monkeypatch):
    """The tables above on both paths, then random damage to plain records: the same decision on both, the same
    arrays from both, and from TensorFlow, for every record they take."""
    for what, data in {**NOT_PLAIN, **PLAIN}.items():
        for batch in ([record(*GOOD), data], [data, record(*GOOD)]):  # a varint cut short, the next record after it
            compiled, python = _outcome(monkeypatch, batch, False), _outcome(monkeypatch, batch, True)
            assert (compiled is None) == (python is None) == (what in NOT_PLAIN), what
            if python is not None:
                assert_same(compiled, python)
    rng = random.Random(11)
    plain = [random_record(rng, proto=proto) for proto in (False, True) for _ in range(20)]
    taken = 0
    for _ in range(2500):
        data = _damaged(rng, rng.choice(plain))
        if rng.random() < 0.3:
            data = _damaged(rng, data)
        compiled, python = _outcome(monkeypatch, [data], False), _outcome(monkeypatch, [data], True)
        assert (compiled is None) == (python is None), data.hex()
        if python is not None:
            taken += 1
            assert_same(compiled, python)
            assert_same(python, tf_parsed([data]))
    assert taken > 100  # damage that still reads: a changed value, a feature not asked for


def test_records_from_a_generator(decoder):
    rng = random.Random(8)
    batch = [random_record(rng, proto=False) for _ in range(20)]
    assert_same(example.decode_batch((r for r in batch), FEATURES), tf_parsed(batch))


def test_records_tensorflow_may_read_otherwise_or_refuses_are_not_taken(decoder):
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


def test_file_batches_without_tensorflow_are_tensorflows(tmp_path, decoder):
    rng = random.Random(3)
    path = tmp_path / "wiki_00000.tfrecord"
    records.write_records(path, [bert_record(rng) for _ in range(reader.BATCH * 2 + 5)])
    found = reader.RecordFiles(path, layouts.DEFAULT, [path], {SEQ: 8, PRED: 2})
    plain, parsed = list(reader.file_batches(found, path, tensorflow=False)), list(reader.file_batches(found, path))
    assert [len(b["input_ids"]) for b in plain] == [reader.BATCH, reader.BATCH, 5]
    for got, want in zip(plain, parsed, strict=True):
        assert_same(got, want)


def test_a_record_it_does_not_take_is_tensorflows_from_its_batch_on(tmp_path, decoder):
    """A record of the wrong length in the second batch: the first batch is decoded, the second is TensorFlow's
    error, word for word what the TensorFlow reader says."""
    rng = random.Random(4)
    path = tmp_path / "wiki_00000.tfrecord"
    payloads = [bert_record(rng) for _ in range(reader.BATCH + 3)]
    payloads[reader.BATCH + 1] = bert_record(rng, seq=7)
    records.write_records(path, payloads)
    found = reader.RecordFiles(path, layouts.DEFAULT, [path], {SEQ: 8, PRED: 2})
    errors = []
    for tensorflow in (False, True):
        batches = reader.file_batches(found, path, tensorflow=tensorflow)
        assert len(next(batches)["input_ids"]) == reader.BATCH
        with pytest.raises(PrepError) as e:
            next(batches)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and f"record {reader.BATCH + 1}" in errors[0]


def test_a_file_of_plain_records_is_read_without_importing_tensorflow(tmp_path, decoder):
    rng = random.Random(5)
    path = tmp_path / "wiki_00000.tfrecord"
    records.write_records(path, [bert_record(rng) for _ in range(10)])
    code = ("import sys; from pathlib import Path; from wikiprep import layouts, reader\n"
            "from wikiprep.schema import PRED, SEQ\n"
            f"p = Path({str(path)!r}); found = reader.RecordFiles(p, layouts.DEFAULT, [p], {{SEQ: 8, PRED: 2}})\n"
            "n = sum(len(b['input_ids']) for b in reader.file_batches(found, p, tensorflow=False))\n"
            "print(n, 'tensorflow' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["10", "False"]
