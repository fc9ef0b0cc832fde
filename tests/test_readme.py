"""The README and docs/: the readers' snippets run as written, the README stays short, and every relative link lands.

A snippet is the ```python block after a `<!-- reading: NAME -->` line in docs/outputs.md ("Reading the outputs").
Each runs in a subprocess whose working folder holds what its paths name (`wiki_00000.hdf5`, `remask/*.tfrecord`, a
two-shard dataset folder `seq128_mask20_dup5/` with its index files, an ImageNet output folder `imagenet/`), and
must print what the records themselves say, read here without the consumer's code. The README shows one of them,
marked the same way, and it must be the tested one, character for character.
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
from fixture_paths import GOOGLE_REFERENCE as FIXTURES, REFERENCE_VOCAB as VOCAB  # noqa: E402
TEXT = FIXTURES / "inputs" / "sample_text.txt"


DATASET = "seq128_mask20_dup5"


README = REPO / "README.md"
DOCS = REPO / "docs"
READING = DOCS / "outputs.md"  # where the per-consumer snippets live
README_MAX_LINES = 250


def snippets(path: Path = READING) -> dict[str, str]:
    text = path.read_text(encoding="utf-8")
    return dict(re.findall(r"<!-- reading: ([\w-]+) -->\n```python\n(.*?)\n```", text, re.S))


def test_the_docs_have_a_snippet_per_consumer():
    assert set(snippets()) == {"nvidia-hdf5", "graphcore-static-mask", "google-bert-tfdata", "tfdata-batched",
                               "graphcore-tf2-bert", "graphcore-tf2-cnn", "tfrecord-index", "dali-index",
                               "lddl-loader", "hf-datasets"}  # the last two run in tests/test_parquet.py


def test_the_readme_example_is_a_tested_snippet():
    shown = snippets(README)
    assert shown, "the README shows how a trainer reads the outputs, marked <!-- reading: NAME -->"
    tested = snippets()
    for name, code in shown.items():
        assert code == tested.get(name), f"README's {name!r} snippet differs from {READING.relative_to(REPO)}'s"


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move reference into docs/ (at most {README_MAX_LINES})"


_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _anchors(text: str) -> set[str]:
    """The heading anchors GitHub makes: lower case, punctuation but - and _ dropped, spaces to -, repeats -1, -2."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", _FENCE.sub("", text), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_lands(path):
    """Each relative link names a file that exists, and a heading of it when it has an #anchor."""
    broken = []
    for target in _LINK.findall(_FENCE.sub("", path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(REPO)}")
    assert not broken, f"{path.relative_to(REPO)}: {broken}"


def test_the_readme_links_every_doc():
    text = README.read_text(encoding="utf-8")
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if f"(docs/{p.name})" not in text]
    assert not missing, f"README's table of docs/ lacks {missing}"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """wiki_00000.hdf5, remask/wiki_00000.tfrecord (+ .index) and standard.tfrecord: one run's flags each."""
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
