"""benchmarks/bench_feed.py runs end to end on a small dataset (both readers, TFRecord and NVIDIA's HDF5),
so the script behind docs/performance.md's feed-throughput figures keeps working; bench_train.py's arithmetic of
baselines is checked on counts whose answers are known."""

import json
import math
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

from shardkit.example import FLOAT, INT64, encode_example
from shardkit.records import RecordWriter

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_train import cross_entropy, entropy  # noqa: E402


def _instance(rng: random.Random, seq: int = 128, pred: int = 20) -> bytes:
    n, m = rng.randint(pred + 3, seq), rng.randint(1, pred)
    positions = sorted(rng.sample(range(1, n - 1), m))
    return encode_example([
        ("input_ids", INT64, [rng.randint(5, 999) for _ in range(n)] + [0] * (seq - n)),
        ("input_mask", INT64, [1] * n + [0] * (seq - n)),
        ("segment_ids", INT64, [0] * (n // 2) + [1] * (n - n // 2) + [0] * (seq - n)),
        ("masked_lm_positions", INT64, positions + [0] * (pred - m)),
        ("masked_lm_ids", INT64, [rng.randint(5, 999) for _ in range(m)] + [0] * (pred - m)),
        ("masked_lm_weights", FLOAT, [1.0] * m + [0.0] * (pred - m)),
        ("next_sentence_labels", INT64, [rng.randint(0, 1)]),
    ])


def test_bench_feed_reads_every_sequence(tmp_path):
    data = tmp_path / "seq128_mask20_dup5"
    data.mkdir()
    rng = random.Random(1)
    for shard in range(2):
        with RecordWriter(data / f"wiki_{shard:05d}.tfrecord") as w:
            for _ in range(300):
                w.write(_instance(rng))
    out = tmp_path / "feed.json"
    r = subprocess.run([sys.executable, "benchmarks/bench_feed.py", "--dataset", str(data), "--work", str(tmp_path / "w"),
                        "--readers", "tfdata_batched,h5py_nvidia", "--cores", "2", "--repeat", "1", "--json", str(out)],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["shards"] == 2 and report["hdf5_mb"] > 0
    # On 2 cores: tf.data's thread pool of 2, and two h5py worker processes with a file each.
    assert set(report["results"]) == {"tfdata_batched/2core", "h5py_nvidia/2core"}
    for name, result in report["results"].items():
        assert result["sequences"] == 600, name  # every sequence of both shards, once
        assert result["sequences_per_s"] > 0 and result["a100s_fed"] == round(result["sequences_per_s"] / 415, 2)


def test_baselines_arithmetic():
    uniform = Counter({t: 5 for t in range(8)})
    assert math.isclose(entropy(uniform), math.log(8))
    assert entropy(Counter({3: 10})) == 0.0
    # Add-one smoothing over a vocabulary of 8: a model that saw only token 0 (6 times) gives it 7/14.
    assert math.isclose(cross_entropy(Counter({0: 1}), Counter({0: 6}), 8), -math.log(7 / 14))
