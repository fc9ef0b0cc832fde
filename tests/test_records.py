"""TFRecord framing, Example encoding, index files, atomic commits, manifests: against TensorFlow itself."""

import os
import subprocess
import sys

import pytest
import tensorflow as tf

from shardkit import atomic, example, manifest, records
from shardkit.errors import PrepError

FEATURES = [
    ("input_ids", example.INT64, [101, 7592, 30521, 0, 0]),
    ("masked_lm_weights", example.FLOAT, [1.0, 0.0]),
    ("big", example.INT64, [2**40, -1, 65535, 65536]),
    ("image/encoded", example.BYTES, [b"\xff\xd8\xff", b""]),
    ("empty", example.FLOAT, []),
]


def tf_example():
    def feat(kind, values):
        if kind == example.INT64:
            return tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        if kind == example.FLOAT:
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
    return tf.train.Example(features=tf.train.Features(feature={n: feat(k, v) for n, k, v in FEATURES}))


def test_example_bytes_equal_protobuf_deterministic_serialization():
    assert example.encode_example(FEATURES) == tf_example().SerializeToString(deterministic=True)
    # The order features are given in does not matter: the bytes are canonical.
    assert example.encode_example(list(reversed(FEATURES))) == example.encode_example(FEATURES)


def test_tensorflow_reads_written_records_and_index(tmp_path):
    path = tmp_path / "x.tfrecord"
    payloads = [example.encode_example([("i", example.INT64, [n] * n)]) for n in range(1, 6)]
    assert records.write_records(path, payloads, records.index_path_for(path)) == 5
    got = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
    assert got == payloads
    parsed = tf.io.parse_single_example(got[2], {"i": tf.io.FixedLenFeature([3], tf.int64)})
    assert parsed["i"].numpy().tolist() == [3, 3, 3]
    assert records.check_index(path, tmp_path / "x.index") == 5


def test_index_matches_tfrecord2idx(tmp_path):
    path = tmp_path / "x.tfrecord"
    records.write_records(path, [b"a" * n for n in (1, 300, 70000)], tmp_path / "x.index")
    # The tfrecord package cannot share a process with TensorFlow (duplicate proto symbols).
    subprocess.run([sys.executable, "-m", "tfrecord.tools.tfrecord2idx", str(path), str(tmp_path / "ref.idx")],
                   check=True, capture_output=True)
    assert (tmp_path / "ref.idx").read_text() == (tmp_path / "x.index").read_text()


@pytest.mark.parametrize("index_text,problem", [
    ("0 17\n17 bad\n", "line 2 is not 'offset length'"),
    ("0 17 3\n", "line 1 is not 'offset length'"),
    ("0 17\n17 17\n", "index does not match"),
    ("0 17\n", "index does not match"),
])
def test_a_wrong_index_is_one_line_naming_it(tmp_path, index_text, problem):
    path = tmp_path / "x.tfrecord"
    records.write_records(path, [b"payload-one", b"payload-two"])  # two records of 16 + 11 bytes
    (tmp_path / "x.index").write_text(index_text)
    with pytest.raises(PrepError, match=problem):
        records.check_index(path, tmp_path / "x.index")
    with pytest.raises(PrepError):
        records.check_index_size(path, tmp_path / "x.index", 2)
    (tmp_path / "x.index").write_text("0 27\n27 27\n")
    assert records.check_index(path, tmp_path / "x.index") == 2
    records.check_index_size(path, tmp_path / "x.index", 2)


def test_corruption_is_reported_with_the_file(tmp_path):
    path = tmp_path / "x.tfrecord"
    records.write_records(path, [b"payload-one", b"payload-two"])
    data = bytearray(path.read_bytes())
    data[14] ^= 0xFF  # inside the first record's payload (12-byte header)
    path.write_bytes(bytes(data))
    with pytest.raises(PrepError, match="x.tfrecord: bad data checksum in the record at byte 0"):
        list(records.read_records(path))
    path.write_bytes(bytes(data[:20]))
    with pytest.raises(PrepError, match="x.tfrecord: truncated"):
        list(records.read_records(path))


def test_failed_write_leaves_nothing_behind(tmp_path):
    path = tmp_path / "out" / "x.tfrecord"
    with pytest.raises(RuntimeError):
        with records.RecordWriter(path, records.index_path_for(path)) as w:
            w.write(b"abc")
            raise RuntimeError("killed")
    assert sorted(os.listdir(path.parent)) == []


def test_a_record_file_is_never_committed_without_its_index(tmp_path):
    path = tmp_path / "x.tfrecord"
    (tmp_path / "plain_file").write_text("")
    with pytest.raises(PrepError, match="not a folder"):  # the index's folder cannot be made: fails on entry, before any record
        with records.RecordWriter(path, tmp_path / "plain_file" / "x.index") as w:
            w.write(b"abc")
    assert sorted(os.listdir(tmp_path)) == ["plain_file"]


def test_record_writers_commit_every_file_or_none(tmp_path):
    paths = [tmp_path / f"x{i}.tfrecord" for i in range(3)]
    paths[1].write_bytes(b"an older good file")
    (tmp_path / "plain_file").write_text("")
    with pytest.raises(PrepError, match="not a folder"):  # the last index cannot be written: not even x0 and its index appear
        with records.record_writers(paths, [tmp_path / "x0.index", None, tmp_path / "plain_file" / "x2.index"]):
            pass
    with pytest.raises(RuntimeError):
        with records.record_writers(paths, [tmp_path / "x0.index", None, tmp_path / "x2.index"]) as writers:
            for w in writers:
                w.write(b"abc")
            raise RuntimeError("killed after every record was written")
    assert sorted(os.listdir(tmp_path)) == ["plain_file", "x1.tfrecord"]
    assert paths[1].read_bytes() == b"an older good file"

    def write(writers):
        for n, w in enumerate(writers):
            for k in range(n + 1):
                w.write(b"r" * k)

    # Never replaced unless asked: x1 differs, so none is committed (not x0, whose turn came first).
    with pytest.raises(PrepError, match=f"{paths[1]}: exists with other content than this run's"):
        with records.record_writers(paths, [tmp_path / "x0.index", None, tmp_path / "x2.index"]) as writers:
            write(writers)
    assert sorted(os.listdir(tmp_path)) == ["plain_file", "x1.tfrecord"]
    assert paths[1].read_bytes() == b"an older good file"
    with records.record_writers(paths, [tmp_path / "x0.index", None, tmp_path / "x2.index"], overwrite=True) as writers:
        write(writers)
    assert [len(list(records.read_records(p))) for p in paths] == [1, 2, 3]
    assert records.check_index(paths[2], tmp_path / "x2.index") == 3 and not (tmp_path / "x1.index").exists()
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


def test_receipts_mark_completion_and_detect_truncation(tmp_path):
    path = tmp_path / "data.bin"
    assert atomic.read_receipt(path) is None
    atomic.write_bytes(path, b"0123456789")
    assert atomic.read_receipt(path) is None  # committed data without a receipt is not complete
    receipt = atomic.write_receipt(path, records=3)
    assert atomic.read_receipt(path) == receipt and receipt["size"] == 10 and receipt["records"] == 3
    assert atomic.receipt_path(path).parent.name == ".receipts"
    path.write_bytes(b"01234")
    assert atomic.read_receipt(path) is None


def test_atomic_dir_commit_and_receipt(tmp_path):
    folder = tmp_path / "buckets"
    with pytest.raises(ValueError):
        with atomic.atomic_dir(folder) as tmp:
            (tmp / "a.txt").write_text("half")
            raise ValueError
    assert not folder.exists() and list(tmp_path.iterdir()) == []
    with atomic.atomic_dir(folder) as tmp:
        (tmp / "a.txt").write_text("one")
        (tmp / "b.txt").write_text("two")
    assert atomic.read_dir_receipt(folder) is None
    atomic.write_dir_receipt(folder, note="x")
    assert sorted(atomic.read_dir_receipt(folder)["files"]) == ["a.txt", "b.txt"]
    (folder / "b.txt").write_text("changed size")
    assert atomic.read_dir_receipt(folder) is None


def test_manifest_lists_data_files_and_catches_changes(tmp_path):
    atomic.write_bytes(tmp_path / "b.tfrecord", b"bbbb")
    atomic.write_bytes(tmp_path / "a.tfrecord", b"aa")
    atomic.write_receipt(tmp_path / "a.tfrecord")
    m = manifest.write_manifest(tmp_path, {"a.tfrecord": 7}, extra={"dataset": {"seed": 1}})
    assert [f["path"] for f in m["files"]] == ["a.tfrecord", "b.tfrecord"]
    assert m["files"][0]["records"] == 7 and "records" not in m["files"][1]
    first = (tmp_path / "MANIFEST.json").read_bytes()
    manifest.write_manifest(tmp_path, {"a.tfrecord": 7}, extra={"dataset": {"seed": 1}})
    assert (tmp_path / "MANIFEST.json").read_bytes() == first
    manifest.check_manifest(tmp_path)
    (tmp_path / "b.tfrecord").write_bytes(b"bbbx")
    with pytest.raises(PrepError, match="b.tfrecord: checksum differs"):
        manifest.check_manifest(tmp_path)


def test_manifest_takes_the_hashes_writers_recorded_and_checks_their_sizes(tmp_path):
    """Known files are not read again: a recorded hash is what the manifest lists (a wrong one shows it);
    other files are hashed. A known file of another size, or missing, is refused."""
    atomic.write_bytes(tmp_path / "a.tfrecord", b"aa")
    atomic.write_bytes(tmp_path / "b.tfrecord", b"bbbb")
    recorded = {"a.tfrecord": {"sha256": "0" * 64, "size": 2}}
    m = manifest.build_manifest(tmp_path, {}, known_files=recorded)
    assert [(f["path"], f["sha256"]) for f in m["files"]] == [
        ("a.tfrecord", "0" * 64), ("b.tfrecord", atomic.sha256_file(tmp_path / "b.tfrecord"))]
    true = {"a.tfrecord": {"sha256": atomic.sha256_file(tmp_path / "a.tfrecord"), "size": 2}}
    assert manifest.build_manifest(tmp_path, {"a.tfrecord": 1}, known_files=true) == \
        manifest.build_manifest(tmp_path, {"a.tfrecord": 1})
    with pytest.raises(PrepError, match=r"a\.tfrecord: 2 bytes, but its writer recorded 3"):
        manifest.build_manifest(tmp_path, {}, known_files={"a.tfrecord": {"sha256": "0" * 64, "size": 3}})
    with pytest.raises(PrepError, match=r"c\.tfrecord: missing, but its writer recorded it"):
        manifest.build_manifest(tmp_path, {}, known_files={"c.tfrecord": {"sha256": "0" * 64, "size": 3}})


@pytest.mark.parametrize("size", [0, 1, 115, 116, 127, 128, 16379, 16384, 65535, 65536, 2**21 - 8, 2**21])
def test_a_bytes_entry_head_is_the_entry_without_its_value(size):
    """Every varint that precedes the value changes width somewhere in these sizes."""
    value = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    assert example.bytes_entry_head("image/encoded", size) + value == \
        example.feature_entry("image/encoded", example.BYTES, [value])
    assert example.varint(size) == example._varint_slow(size)


def test_records_written_in_parts_are_the_joined_records_and_hashed_as_written(tmp_path):
    payloads = [b"", b"a", bytes(range(256)) * 400, b"z" * 70000]
    records.write_records(tmp_path / "whole.tfrecord", payloads, tmp_path / "whole.index")
    writer = records.RecordWriter(tmp_path / "parts.tfrecord", tmp_path / "parts.index", sha256=True)
    writer.WRITEBACK_BYTES = 50_000  # the early writeback taken too, which changes nothing in the bytes
    with writer:
        for data in payloads:
            cut = min(10, len(data)), max(10, len(data) - 3)
            writer.write_parts((data[:cut[0]], data[cut[0]:cut[1]], data[cut[1]:]))
    for suffix in (".tfrecord", ".index"):
        assert (tmp_path / f"parts{suffix}").read_bytes() == (tmp_path / f"whole{suffix}").read_bytes()
    assert writer.files() == {p: {"sha256": atomic.sha256_file(p), "size": p.stat().st_size}
                              for p in (tmp_path / "parts.tfrecord", tmp_path / "parts.index")}
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(tmp_path / "parts.tfrecord"))] == payloads
