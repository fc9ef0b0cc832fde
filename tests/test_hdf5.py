"""NVIDIA's HDF5 layout: the TFRecord instances in the same order, NVIDIA's dtypes and compression, read by
NVIDIA's own reader, written in bounded blocks, and the same bytes on every run."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from shardkit.example import decode_example
from shardkit.records import read_records
from testkit import nvidia_bert
from testkit.instances import assert_hdf5_holds_records
from wikiprep.instances import write_pretraining_files
from wikiprep.layouts import hdf5
from wikiprep.layouts.hdf5 import HDF5_DTYPES
from wikiprep.options import GenerationOptions

REPO = Path(__file__).resolve().parents[1]
from fixture_paths import GOOGLE_REFERENCE as FIXTURES, REFERENCE_VOCAB as VOCAB  # noqa: E402
INPUTS = [str(FIXTURES / "inputs" / "sample_text.txt"), str(FIXTURES / "inputs" / "synthetic_docs.txt")]
OPTIONS = GenerationOptions(random_seed=7, dupe_factor=2)
SMALL_CHUNK = 7  # rows per chunk in the run that crosses many block boundaries


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict:
    """The same instances round-robin over three TFRecord files, three HDF5 files, and three HDF5 files written
    in 7-row chunks (with every block the writer was handed)."""
    folder = tmp_path_factory.mktemp("hdf5")
    runs = {"tfrecord": [folder / f"part{i}.tfrecord" for i in range(3)],
            "hdf5": [folder / f"part{i}.hdf5" for i in range(3)],
            "small": [folder / f"small{i}.h5" for i in range(3)]}
    write_pretraining_files(INPUTS, str(VOCAB), runs["tfrecord"], None, OPTIONS)
    write_pretraining_files(INPUTS, str(VOCAB), runs["hdf5"], None, OPTIONS, layout=hdf5.LAYOUT)
    blocks: list[int] = []
    write = hdf5.HDF5Writer.write
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(hdf5, "MAX_CHUNK_ROWS", SMALL_CHUNK)
        mp.setattr(hdf5.HDF5Writer, "write", lambda self, block: (blocks.append(len(block["input_ids"])),
                                                                   write(self, block))[1])
        write_pretraining_files(INPUTS, str(VOCAB), runs["small"], None, OPTIONS, layout=hdf5.LAYOUT)
    return {**runs, "blocks": blocks}


def _tfrecord_features(path: Path) -> list[dict]:
    return [decode_example(r) for r in read_records(path)]


@pytest.mark.parametrize("run", ["hdf5", "small"])
def test_hdf5_holds_the_tfrecord_instances_in_the_same_order(made, run):
    total = 0
    for tf_path, h5_path in zip(made["tfrecord"], made[run], strict=True):
        count = assert_hdf5_holds_records(h5_path, tf_path)
        assert count > 0
        total += count
    assert total > 900


def test_datasets_have_nvidias_dtypes_shapes_and_compression(made, tmp_path):
    """NVIDIA's own writer (vendored), given the same instances, makes the same datasets: names, dtypes, shapes,
    gzip at the same level, the same values; ours are chunked by whole instances, and nothing else is in the file."""
    for tf_path, h5_path in zip(made["tfrecord"], made["hdf5"]):
        records = _tfrecord_features(tf_path)
        features = {name: np.array([r[name] for r in records], dtype="int32") for name in HDF5_DTYPES}
        features["next_sentence_labels"] = features["next_sentence_labels"].reshape(-1)
        theirs = tmp_path / f"nvidia_{h5_path.name}"
        nvidia_bert.write_like_nvidia(str(theirs), features)
        with h5py.File(h5_path, "r") as ours, h5py.File(theirs, "r") as ref:
            assert sorted(ours.keys()) == sorted(ref.keys()) == sorted(HDF5_DTYPES)
            assert not ours.attrs.keys() and "masked_lm_weights" not in ours
            for name in HDF5_DTYPES:
                a, b = ours[name], ref[name]
                assert (a.dtype, a.shape, a.compression, a.compression_opts) == \
                    (b.dtype, b.shape, b.compression, b.compression_opts), name
                assert a.chunks[1:] == a.shape[1:] and a.chunks[0] <= hdf5.MAX_CHUNK_ROWS, name
                assert np.array_equal(a[:], b[:]), name
        # the file format: superblock version 0, the earliest (byte 8, after the signature), as h5py writes by default
        assert h5_path.read_bytes()[8] == theirs.read_bytes()[8] == 0


def test_nvidias_reader_gives_the_tfrecord_instances(made):
    """pretraining_dataset (NVIDIA's run_pretraining.py, vendored) reads every instance: its masked_lm_labels
    (-1 but at the masked positions) come from the first-zero rule on masked_lm_positions."""
    for tf_path, h5_path in zip(made["tfrecord"], made["hdf5"]):
        records = _tfrecord_features(tf_path)
        ds = nvidia_bert.pretraining_dataset(str(h5_path), max_pred_length=OPTIONS.max_predictions_per_seq)
        assert len(ds) == len(records)
        for i, rec in enumerate(records):
            input_ids, segment_ids, input_mask, masked_lm_labels, next_sentence_labels = (t.array for t in ds[i])
            assert input_ids.tolist() == rec["input_ids"] and segment_ids.tolist() == rec["segment_ids"]
            assert input_mask.tolist() == rec["input_mask"]
            assert int(next_sentence_labels) == rec["next_sentence_labels"][0]
            labels = [-1] * OPTIONS.max_seq_length
            for p, label, w in zip(rec["masked_lm_positions"], rec["masked_lm_ids"], rec["masked_lm_weights"]):
                if w:
                    labels[p] = label
            assert masked_lm_labels.tolist() == labels, f"instance {i}"


def test_written_in_blocks_of_whole_chunks(made):
    """Memory holds one block: the writer is never handed more than a chunk of instances per file."""
    blocks = made["blocks"]
    assert max(blocks) == SMALL_CHUNK and len(blocks) > 40
    with h5py.File(made["small"][0], "r") as f:
        assert all(f[name].chunks[0] == SMALL_CHUNK for name in HDF5_DTYPES)
    assert hdf5.chunk_rows({"max_seq_length": 128, "max_predictions_per_seq": 20}) == 1024
    assert hdf5.chunk_rows({"max_seq_length": 512, "max_predictions_per_seq": 76}) == 512
    assert hdf5.chunk_rows({"max_seq_length": 1_000_000, "max_predictions_per_seq": 20}) == 1


def _create(out: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "wikiprep.cli", "create-pretraining-data",
                           "--input_file=" + ",".join(INPUTS), f"--vocab_file={VOCAB}", f"--output_file={out}",
                           "--random_seed=7", "--dupe_factor=2"], capture_output=True, text=True, env=env,
                          timeout=300)


def test_same_bytes_on_every_run_whatever_the_timing(made, tmp_path):
    """Two processes seconds apart (HDF5 stamps times at one-second resolution, and addresses by the order of
    allocation) give byte-identical files, and equal to the in-process run's."""
    first, second = tmp_path / "a" / "wiki_00000.h5", tmp_path / "b" / "wiki_00000.h5"
    assert _create(first).returncode == 0
    time.sleep(1.2)
    r = _create(second)
    assert r.returncode == 0, r.stderr
    digest = [hashlib.sha256(p.read_bytes()).hexdigest() for p in (first, second)]
    assert digest[0] == digest[1]
    # the same instances as the three files of `made`, in one file: round-robin order restored
    with h5py.File(first, "r") as f:
        ids = f["input_ids"][:]
    parts = [h5py.File(p, "r")["input_ids"][:] for p in made["hdf5"]]
    assert np.array_equal(ids, np.array([parts[k % 3][k // 3] for k in range(len(ids))]))


def test_an_output_without_instances_is_an_empty_file_nvidias_reader_reads(tmp_path):
    text = tmp_path / "two.txt"
    text.write_text("The old city is north of the river.\nIt was new.\n\nA city is in the south.\nIt is old.\n")
    outs = [tmp_path / f"w{i}.hdf5" for i in range(12)]
    stats = write_pretraining_files([str(text)], str(VOCAB), outs, None, GenerationOptions(dupe_factor=1),
                                    layout=hdf5.LAYOUT)
    sizes = [hdf5.count_instances(p) for p in outs]
    assert sum(sizes) == stats["instances"] and 0 in sizes
    empty = outs[sizes.index(0)]
    assert len(nvidia_bert.pretraining_dataset(str(empty), 20)) == 0
    with h5py.File(empty, "r") as f:
        assert f["input_ids"].shape == (0, 128) and f["next_sentence_labels"].shape == (0,)


def test_nvidias_trainer_takes_only_files_named_training(tmp_path):
    """The file-discovery rule docs/outputs.md states: run_pretraining.py trains on the files of --input_dir whose name
    contains 'training', so our wiki_*.hdf5 shards need links (or a copy) under such names."""
    (tmp_path / "wiki_00000.hdf5").write_bytes(b"")
    (tmp_path / "training_wiki_00000.hdf5").symlink_to(tmp_path / "wiki_00000.hdf5")
    assert nvidia_bert.training_files(str(tmp_path)) == [str(tmp_path / "training_wiki_00000.hdf5")]
