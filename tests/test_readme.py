"""The README's "Reading the outputs" snippets, each run as written on a dataset made by the command line.

A snippet is the ```python block after a `<!-- reading: NAME -->` line. Each runs in a subprocess whose working
folder holds what its paths name (`wiki_00000.hdf5`, `remask/*.tfrecord`), and must print what the standard
TFRecord made with the same flags says.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from shardkit.example import decode_example
from shardkit.records import read_records
from wikiprep.cli import main as wikiprep_main

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "google-reference"
VOCAB = FIXTURES / "bert-base-uncased-vocab.txt"
TEXT = FIXTURES / "inputs" / "sample_text.txt"


def snippets() -> dict[str, str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return dict(re.findall(r"<!-- reading: ([\w-]+) -->\n```python\n(.*?)\n```", text, re.S))


def test_the_readme_has_a_snippet_per_consumer():
    assert set(snippets()) == {"nvidia-hdf5", "graphcore-static-mask"}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """wiki_00000.hdf5, remask/wiki_00000.tfrecord (+ .index) and standard.tfrecord: one run's flags each."""
    if not VOCAB.is_file():
        pytest.skip(f"{FIXTURES} is absent: the google-reference fixtures live in the shared folder beside the repo")
    root = tmp_path_factory.mktemp("reading")
    (root / "remask").mkdir()
    flags = [f"--input_file={TEXT}", f"--vocab_file={VOCAB}", "--random_seed=11", "--dupe_factor=2"]
    for extra in (["--output_file=" + str(root / "wiki_00000.hdf5"), "--fixed_mask_count"],
                  ["--output_file=" + str(root / "remask" / "wiki_00000.tfrecord"), "--remask",
                   "--index_file=" + str(root / "remask" / "wiki_00000.index")],
                  ["--output_file=" + str(root / "standard.tfrecord"), "--fixed_mask_count"]):
        assert wikiprep_main(["create-pretraining-data", *flags, *extra]) == 0
    return root


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
