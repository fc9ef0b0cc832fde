"""TFRecord framing read back: the compiled `split_frames` (shardkit/_examples.c) against the Python reference
`records._read_records`, on the same files: whole, cut at every byte, with every byte flipped, damaged at random."""

import os
import random
import struct
import subprocess
import sys

import pytest

from shardkit import records
from shardkit.errors import PrepError

pytestmark = pytest.mark.skipif(records._compiled is None, reason="shardkit._examples is not built (no C compiler)")


def outcome(read, path, check_crc=True):
    """The payloads `read` gives before it stops, and how it stops (None: the file's end)."""
    payloads = []
    try:
        for payload in read(path, check_crc):
            payloads.append(payload)
    except PrepError as error:
        return payloads, str(error)
    return payloads, None


def compiled(path, check_crc):
    return records._read_records_compiled(path, check_crc, records._compiled.split_frames)


def assert_same(path, blocks=(7, 64, 1 << 20), check_crc=True, monkeypatch=None):
    want = outcome(records._read_records, path, check_crc)
    for block in blocks:
        monkeypatch.setattr(records, "_READ_BLOCK", block)
        assert outcome(compiled, path, check_crc) == want, (path.read_bytes()[:80], block, check_crc)
    return want


def framed(payloads) -> bytes:
    return b"".join(records.frame_record(p) for p in payloads)


def test_known_answers_on_both_crc32c_paths():
    check = ("import os, sys; from shardkit import _examples as E, records as R; "
             "assert E.masked_crc32c(b'') == R._masked_crc(b''); "
             "assert all(E.masked_crc32c(d) == R._masked_crc(d) for d in (os.urandom(n) for n in range(300))); "
             "assert all(E.masked_crc32c(d[k:]) == R._masked_crc(d[k:]) for d in [os.urandom(5000)] for k in range(9)); "
             "import crc32c; assert crc32c.crc32c(b'123456789') == 0xE3069283; "
             "assert E.masked_crc32c(b'123456789') == R._mask(0xE3069283); print(E.crc32c_kind())")
    kinds = set()
    for env in ({}, {"SHARDKIT_CRC32C_TABLE": "1"}):
        run = subprocess.run([sys.executable, "-c", check], env={**os.environ, **env}, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        kinds.add(run.stdout.strip())
    assert "table" in kinds  # the portable path ran (and on x86-64 the SSE4.2 one too)


def test_whole_files_read_alike(tmp_path, monkeypatch):
    rng = random.Random(1)
    cases = {
        "empty": [],
        "one_empty_record": [b""],
        "small": [b"payload-one", b"payload-two", b""],
        "random": [os.urandom(rng.randrange(0, 3000)) for _ in range(200)],
        "longer_than_a_block": [os.urandom(300_000), b"x", os.urandom(2_500_000), b""],
    }
    for name, payloads in cases.items():
        path = tmp_path / f"{name}.tfrecord"
        path.write_bytes(framed(payloads))
        assert assert_same(path, monkeypatch=monkeypatch) == (payloads, None)


def test_tensorflows_own_files_read_alike(tmp_path, monkeypatch):
    tf = pytest.importorskip("tensorflow")
    path = tmp_path / "tf.tfrecord"
    payloads = [os.urandom(n) for n in (0, 1, 11, 4096, 70_000)]
    with tf.io.TFRecordWriter(str(path)) as writer:
        for p in payloads:
            writer.write(p)
    assert assert_same(path, monkeypatch=monkeypatch) == (payloads, None)


def test_files_cut_at_every_byte_read_alike(tmp_path, monkeypatch):
    data = framed([b"alpha", b"", b"gamma" * 30, b"d"])
    path = tmp_path / "cut.tfrecord"
    stops = set()
    for n in range(len(data) + 1):
        path.write_bytes(data[:n])
        payloads, stop = assert_same(path, blocks=(5, 64, 1 << 20), monkeypatch=monkeypatch)
        stops.add(stop and stop.split(": ", 1)[1].rsplit(" at byte", 1)[0])
    assert stops == {None, "truncated record header", "truncated record"}


@pytest.mark.parametrize("check_crc", [True, False])
def test_every_byte_flipped_reads_alike(tmp_path, monkeypatch, check_crc):
    data = framed([b"alpha", b"", b"gamma" * 30, b"d"])
    path = tmp_path / "flip.tfrecord"
    stops = set()
    for i in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(data)
            damaged[i] ^= mask
            path.write_bytes(bytes(damaged))
            payloads, stop = assert_same(path, blocks=(5, 1 << 20), check_crc=check_crc, monkeypatch=monkeypatch)
            stops.add(stop and stop.split(": ", 1)[1].rsplit(" at byte", 1)[0])
    if check_crc:  # at byte 0 the file is said not to be a TFRecord file at all
        assert stops == {"bad length checksum", "bad data checksum in the record",
                         "not a TFRecord file (its first bytes are not a record header: bad length checksum"}
    else:
        assert None in stops and "truncated record" in stops


def test_random_damage_reads_alike(tmp_path, monkeypatch):
    rng = random.Random(20261124)
    path = tmp_path / "random.tfrecord"
    for case in range(1500):
        data = bytearray(framed([bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
                                 for _ in range(rng.randrange(0, 6))]))
        for _ in range(rng.randrange(0, 3)):
            if data and rng.random() < 0.6:
                data[rng.randrange(len(data))] = rng.randrange(256)
            elif data:
                del data[rng.randrange(len(data)):]
            else:
                data += os.urandom(rng.randrange(1, 20))
        if rng.random() < 0.2:  # a length that passes its CRC and promises more than the file holds
            head = struct.pack("<Q", rng.choice([rng.randrange(1, 100), 2**40, 2**63]))
            data += head + struct.pack("<I", records._masked_crc(head)) + os.urandom(rng.randrange(0, 20))
        path.write_bytes(bytes(data))
        assert_same(path, blocks=(rng.randrange(1, 64), 1 << 20), check_crc=rng.random() < 0.8, monkeypatch=monkeypatch)


def test_read_records_takes_the_compiled_path_unless_python_is_asked_for(monkeypatch):
    monkeypatch.delenv("SHARDKIT_PURE_PYTHON", raising=False)
    assert records.compiled_framing() is records._compiled
    monkeypatch.setenv("SHARDKIT_PURE_PYTHON", "1")
    assert records.compiled_framing() is None
