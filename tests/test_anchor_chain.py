"""The anchors' chain of the side-by-side benchmark (benchmarks/anchors/), on real files.

1. The vendored google-research/bert create_pretraining_data.py writes exactly the reference
   instances of a fixture case (decoded with TensorFlow), so the benchmark times the original.
2. run_anchor_chain on the embedded sample dump: WikiExtractor, Punkt, the original script and
   tfrecord2idx all run; TensorFlow parses every record with Google's fixed-length schema, and
   each index has one `offset length` line per record, tiling its file.

TensorFlow and `tfrecord` cannot share a process, so TensorFlow runs in a subprocess here.
"""

from __future__ import annotations

import bz2
import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from wikiprep.wikipedia.samples import write_sample_dump

REPO = Path(__file__).resolve().parents[1]
from fixture_paths import GOOGLE_REFERENCE as FIXTURES, REFERENCE_VOCAB as VOCAB  # noqa: E402
ANCHORS = REPO / "benchmarks" / "anchors"

# Decodes every record of each file given and prints {path: [features, ...]} as JSON.
DECODE = """
import json, sys
import tensorflow as tf
out = {}
for path in sys.argv[1:]:
    rows = []
    for raw in tf.data.TFRecordDataset(path):
        ex = tf.train.Example.FromString(raw.numpy())
        rows.append({k: (list(f.int64_list.value) if f.HasField("int64_list")
                         else [float(x) for x in f.float_list.value])
                     for k, f in sorted(ex.features.feature.items())})
    out[path] = rows
print(json.dumps(out))
"""


def _env() -> dict:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")


def _decode(paths) -> dict:
    done = subprocess.run([sys.executable, "-c", DECODE, *map(str, paths)], env=_env(),
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@pytest.fixture
def vocab() -> Path:
    return VOCAB


def _load_chain():
    spec = importlib.util.spec_from_file_location("anchor_chain", ANCHORS / "chain.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_vendored_google_script_writes_the_reference_instances(vocab, tmp_path):
    case = next(c for c in json.loads((FIXTURES / "cases.json").read_text())["cases"]
                if c["name"] == "sample_128_dup5_seed12345")
    out = tmp_path / "out.tfrecord"
    argv = [sys.executable, str(ANCHORS / "google_create_pretraining_data.py"),
            "--input_file=" + ",".join(str(FIXTURES / f) for f in case["input_files"]),
            f"--output_file={out}", f"--vocab_file={vocab}"]
    argv += [f"--{k}={v}" for k, v in case["flags"].items()]
    subprocess.run(argv, env=_env(), capture_output=True, check=True)
    expected = [json.loads(line) for line in
                gzip.open(FIXTURES / "expected" / f"{case['name']}.jsonl.gz", "rt")]
    assert len(expected) == case["count"] == 60
    assert _decode([out])[str(out)] == expected


def test_anchor_chain_on_the_sample_dump(vocab, tmp_path):
    chain = _load_chain()
    parts = sorted(write_sample_dump(tmp_path / "site").glob("*.bz2"))
    assert len(parts) == 2
    result = chain.run_anchor_chain(parts, vocab, tmp_path / "work", processes=2)

    xml = sum(len(bz2.decompress(p.read_bytes())) for p in parts)
    assert result["xml_bytes"] == xml == result["stages"]["extract"]["xml_bytes"]
    stages = result["stages"]
    assert list(stages) == ["extract", "sentences", "instances", "index"]
    for name, stage in stages.items():
        assert stage["seconds"] > 0 and stage["in_bytes"] > 0 and stage["out_bytes"] > 0, name
        assert stage["peak_rss_mb"] > 1, name
    assert stages["extract"]["in_bytes"] == sum(p.stat().st_size for p in parts)
    # Each stage reads what the one before wrote.
    assert stages["sentences"]["in_bytes"] == stages["extract"]["out_bytes"]
    assert stages["instances"]["in_bytes"] == stages["sentences"]["out_bytes"]
    assert stages["index"]["in_bytes"] == stages["instances"]["out_bytes"]
    assert stages["sentences"]["articles"] > 10 and stages["sentences"]["sentences"] > 1000
    # The original loads TensorFlow and holds every instance: far above the extractor's RSS.
    assert stages["instances"]["peak_rss_mb"] > stages["extract"]["peak_rss_mb"]

    records = [Path(p) for p in result["outputs"]]
    indexes = [Path(p) for p in result["indexes"]]
    assert [r.name for r in records] == ["shard_0.tfrecord", "shard_1.tfrecord"]
    decoded = _decode(records)
    total = 0
    for record, index in zip(records, indexes):
        rows = decoded[str(record)]
        assert rows, record
        for row in rows:
            assert {k: len(v) for k, v in row.items()} == {
                "input_ids": 128, "input_mask": 128, "segment_ids": 128,
                "masked_lm_positions": 20, "masked_lm_ids": 20, "masked_lm_weights": 20,
                "next_sentence_labels": 1}
            assert row["input_ids"][0] == 101 and row["next_sentence_labels"][0] in (0, 1)
        entries = [tuple(map(int, line.split())) for line in index.read_text().splitlines()]
        assert len(entries) == len(rows)
        offset = 0
        for start, length in entries:
            assert start == offset
            offset += length
        assert offset == record.stat().st_size
        total += len(rows)
    assert result["instances"] == total
    # Both shards got sentences: articles were dealt round-robin over 2 shard files.
    assert all(Path(p).stat().st_size > 0 for p in (tmp_path / "work" / "shards").glob("*.txt"))
