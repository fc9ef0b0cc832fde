"""The README's "Reading the outputs" snippets, each run as written on a dataset made by the command line.

A snippet is the ```python block after a `<!-- reading: NAME -->` line. Each runs in a subprocess whose working
folder holds what its paths name (`wiki_00000.hdf5`, `remask/*.tfrecord`, a two-shard dataset folder
`seq128_mask20_dup5/` with its index files, an ImageNet output folder `imagenet/`), and must print what the records
themselves say, read here without the consumer's code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from imagenet_prep import cli as imagenet_cli
from imagenet_prep import samples as imagenet_samples
from shardkit.example import decode_example
from shardkit.records import read_records
from wikiprep.cli import main as wikiprep_main

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "google-reference"
VOCAB = FIXTURES / "bert-base-uncased-vocab.txt"
TEXT = FIXTURES / "inputs" / "sample_text.txt"


DATASET = "seq128_mask20_dup5"


def snippets() -> dict[str, str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return dict(re.findall(r"<!-- reading: ([\w-]+) -->\n```python\n(.*?)\n```", text, re.S))


def test_the_readme_has_a_snippet_per_consumer():
    assert set(snippets()) == {"nvidia-hdf5", "graphcore-static-mask", "google-bert-tfdata", "tfdata-batched",
                               "graphcore-tf2-bert", "graphcore-tf2-cnn", "tfrecord-index", "dali-index"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """wiki_00000.hdf5, remask/wiki_00000.tfrecord (+ .index) and standard.tfrecord: one run's flags each."""
    if not VOCAB.is_file():
        pytest.skip(f"{FIXTURES} is absent: the google-reference fixtures live in the shared folder beside the repo")
    root = tmp_path_factory.mktemp("reading")
    (root / "remask").mkdir()
    (root / DATASET).mkdir()
    flags = [f"--input_file={TEXT}", f"--vocab_file={VOCAB}", "--random_seed=11", "--dupe_factor=2"]
    for extra in (["--output_file=" + str(root / "wiki_00000.hdf5"), "--fixed_mask_count"],
                  ["--output_file=" + str(root / "remask" / "wiki_00000.tfrecord"), "--remask",
                   "--index_file=" + str(root / "remask" / "wiki_00000.index")],
                  ["--output_file=" + str(root / "standard.tfrecord"), "--fixed_mask_count"],
                  ["--output_file=" + ",".join(str(root / DATASET / f"wiki_{i:05d}.tfrecord") for i in range(2)),
                   "--index_file=" + ",".join(str(root / DATASET / f"wiki_{i:05d}.index") for i in range(2))]):
        assert wikiprep_main(["create-pretraining-data", *flags, *extra]) == 0
    tree = imagenet_samples.write_sample_tree(root / "raw", classes=5, per_class=3, val_per_class=2, seed=4)
    assert imagenet_cli.main(["convert", "--train-dir", tree["train_dir"], "--validation-dir", tree["validation_dir"],
                              "--val-labels", tree["val_labels"], "--output-dir", str(root / "imagenet"),
                              "--train-shards", "3", "--validation-shards", "2", "--workers", "1"]) == 0
    return root


def dataset_records(folder: Path) -> list[dict]:
    return [decode_example(r) for path in sorted((folder / DATASET).glob("wiki_*.tfrecord")) for r in read_records(path)]


def run(snippet: str, cwd: Path) -> list[int]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    r = subprocess.run([sys.executable, "-c", snippets()[snippet]], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return [int(v) for v in r.stdout.split()]


def test_nvidia_hdf5_snippet(folder):
    first = decode_example(next(read_records(folder / "standard.tfrecord")))
    count = sum(1 for _ in read_records(folder / "standard.tfrecord"))
    masks = int(sum(first["masked_lm_weights"]))
    assert run("nvidia-hdf5", folder) == [count, masks, first["next_sentence_labels"][0], masks]


def test_graphcore_static_mask_snippet(folder):
    first = decode_example(next(read_records(folder / "standard.tfrecord")))
    masks, n = int(sum(first["masked_lm_weights"])), sum(first["input_mask"])
    assert run("graphcore-static-mask", folder) == [masks, n, *first["input_ids"]]


def test_google_bert_tfdata_snippet(folder):
    records = dataset_records(folder)
    assert run("google-bert-tfdata", folder) == [len(records), int(sum(sum(r["masked_lm_weights"]) for r in records)),
                                                 sum(r["next_sentence_labels"][0] for r in records)]


def test_tfdata_batched_snippet(folder):
    """The recommended batch-then-parse path reads every record of the folder, as the per-record one does."""
    records = dataset_records(folder)
    assert run("tfdata-batched", folder) == [len(records), int(sum(sum(r["masked_lm_weights"]) for r in records)),
                                             sum(r["next_sentence_labels"][0] for r in records)]


def test_graphcore_tf2_bert_snippet(folder):
    first = decode_example(next(read_records(folder / DATASET / "wiki_00000.tfrecord")))
    assert run("graphcore-tf2-bert", folder) == [sum(first["input_mask"]), first["next_sentence_labels"][0],
                                                 *first["masked_lm_ids"]]


def test_graphcore_tf2_cnn_snippet(folder):
    shards = sorted((folder / "imagenet").glob("validation-*"))
    labels = [decode_example(r)["image/class/label"][0] for path in shards for r in read_records(path)]
    assert len(shards) == 2 and min(labels) >= 1
    assert run("graphcore-tf2-cnn", folder) == [len(shards), len(labels), min(labels) - 1, max(labels) - 1]


def test_tfrecord_package_snippet_reads_the_second_half_of_the_shard(folder):
    records = [decode_example(r) for r in read_records(folder / DATASET / "wiki_00000.tfrecord")]
    second_half = records[len(records) // 2:]
    masks = int(sum(sum(r["masked_lm_weights"]) for r in second_half))
    assert run("tfrecord-index", folder) == [len(second_half), masks]


def test_dali_index_snippet(folder):
    counts = [sum(1 for _ in read_records(folder / DATASET / "wiki_00000.tfrecord")),
              sum(1 for _ in read_records(folder / "imagenet" / "train-00000-of-00003"))]
    assert run("dali-index", folder) == [1, counts[0], 1, counts[1]]
