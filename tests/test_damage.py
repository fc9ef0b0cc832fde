"""A finished dataset damaged on disk, then the same command again: the rerun notices (a stat per file against
MANIFEST.json and the receipts), removes what no longer matches, rebuilds exactly that, and ends with every file
byte-identical to the undamaged dataset; the dry run says what it would rebuild. The same for an ImageNet dataset.
An intermediate damaged at its size (a flipped byte) before the stage that reads it: that stage names it, commits
nothing made of it, removes it with its receipt, and the same command again ends byte-identical. Through Luigi's
command line on the embedded samples, as a user runs it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixture_paths import REFERENCE_VOCAB
from wikiprep.dataset import folder_name
from wikiprep.options import GenerationOptions
from workflows import DEMO_DATE, DEMO_WIKI
from imagenet_prep.samples import write_sample_tree
from workflows.wiki import write_sample_dump

REPO = Path(__file__).resolve().parents[1]
LUIGI = str(Path(sys.executable).with_name("luigi"))
DATASET = f"{DEMO_WIKI}-{DEMO_DATE}/{folder_name(GenerationOptions(dupe_factor=5), num_shards=2)}"


def _args(site: Path, data: Path) -> list[str]:
    return ["--data-dir", str(data), "--dump-url", site.as_uri(), "--wiki", DEMO_WIKI, "--dump-date", DEMO_DATE,
            "--num-shards", "2", "--vocab-file", str(REFERENCE_VOCAB)]


def _luigi(task: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("LUIGI_CONFIG_PATH", None)
    return subprocess.run([LUIGI, "--module", "workflows", task, *args, "--local-scheduler"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=600)


def _run(*args: str) -> subprocess.CompletedProcess:
    return _luigi("Pretrain128", *args)


def _plan(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "workflows", "plan", "Pretrain128", *args], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _tree(folder: Path) -> dict[str, str]:
    """Every file below `folder` (receipts and the report included) by its sha256."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    root = tmp_path_factory.mktemp("damage")
    site = root / "site"
    write_sample_dump(site, wiki=DEMO_WIKI, date=DEMO_DATE)
    data = root / "data"
    r = _run(*_args(site, data))
    assert r.returncode == 0, r.stderr[-3000:]
    return site, data, _tree(data / DATASET)


@pytest.fixture
def copy(finished, tmp_path):
    """A copy of the finished data folder, to damage."""
    site, data, tree = finished
    shutil.copytree(data, tmp_path / "data", symlinks=True)
    return site, tmp_path / "data", tree


def _truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


@pytest.mark.parametrize("damage", [
    pytest.param(lambda d: (d / "wiki_00001.tfrecord").unlink(), id="a shard removed"),
    pytest.param(lambda d: _truncate(d / "wiki_00000.tfrecord"), id="a shard truncated"),
    pytest.param(lambda d: (d / "wiki_00000.index").unlink(), id="an index removed"),
    pytest.param(lambda d: _truncate(d / "wiki_00001.index"), id="an index truncated"),
    pytest.param(lambda d: (d / "stats.json").unlink(), id="stats.json removed"),
    pytest.param(lambda d: _truncate(d / "stats.json"), id="stats.json truncated"),
    pytest.param(lambda d: _truncate(d / "vocab.txt"), id="vocab.txt truncated"),
    pytest.param(lambda d: _truncate(d / "MANIFEST.json"), id="MANIFEST.json truncated"),
    pytest.param(lambda d: shutil.rmtree(d / "report"), id="the report removed"),
])
def test_a_damaged_finished_dataset_is_rebuilt_where_damaged(copy, damage):
    site, data, tree = copy
    damage(data / DATASET)
    plan = _plan(*_args(site, data))
    assert "nothing to run" not in plan, plan
    r = _run(*_args(site, data))
    assert r.returncode == 0, r.stderr[-3000:]
    assert _tree(data / DATASET) == tree
    verify = subprocess.run([str(Path(sys.executable).with_name("wikiprep")), "verify", str(data / DATASET)],
                            capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stderr
    assert "nothing to run: the dataset is complete" in _plan(*_args(site, data))


def test_a_rebuilt_manifest_never_copies_a_hash_from_a_damaged_receipt(copy):
    """The receipt of a good shard says another sha256 (same size), and stats.json is gone: the manifest made
    again hashes the files themselves, so verify passes and blames no good shard."""
    site, data, tree = copy
    folder = data / DATASET
    receipt = folder / ".receipts" / "wiki_00000.tfrecord.json"
    held = json.loads(receipt.read_text(encoding="utf-8"))
    held["sha256"] = "0" * 64
    receipt.write_text(json.dumps(held), encoding="utf-8")
    (folder / "stats.json").unlink()
    r = _run(*_args(site, data))
    assert r.returncode == 0, r.stderr[-3000:]
    shard = next(e for e in json.loads((folder / "MANIFEST.json").read_text())["files"]
                 if e["path"] == "wiki_00000.tfrecord")
    assert shard["sha256"] == tree["wiki_00000.tfrecord"]
    verify = subprocess.run([str(Path(sys.executable).with_name("wikiprep")), "verify", str(folder)],
                            capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stderr


def test_an_intact_dataset_runs_nothing(copy):
    site, data, tree = copy
    r = _run(*_args(site, data))
    assert r.returncode == 0 and "complete ones were encountered" in r.stderr and "ran successfully" not in r.stderr
    assert _tree(data / DATASET) == tree


# ---------------------------------------------------------------------------------------------
# Intermediates damaged at their size: every stage that reads a committed file hashes it against its receipt

SPLIT = "n2_seed12345_min200"
PART1 = f"{DEMO_WIKI}-{DEMO_DATE}-pages-articles1.xml-p1p4854"
VOCAB_SIZE = "3000"
TRAINED_DATASET = DATASET


def _trained_args(site: Path, data: Path) -> list[str]:
    """A dataset whose vocabulary is trained on the corpus (TrainVocab), small to keep the test quick."""
    return [a for a in _args(site, data) if a not in ("--vocab-file", str(REFERENCE_VOCAB))] + \
        ["--vocab-size", VOCAB_SIZE]


def _dump_args(site: Path, data: Path) -> list[str]:
    return ["--data-dir", str(data), "--dump-url", site.as_uri(), "--wiki", DEMO_WIKI, "--dump-date", DEMO_DATE]


@pytest.fixture(scope="module")
def trained(finished, tmp_path_factory):
    """The undamaged data folder of a run that trains its vocabulary, every file by its sha256."""
    site = finished[0]
    data = tmp_path_factory.mktemp("trained") / "data"
    r = _run(*_trained_args(site, data))
    assert r.returncode == 0, r.stderr[-3000:]
    return _tree(data)


def _flip(path: Path) -> None:
    """One byte changed, the size kept: a lowercase letter from the middle on becomes the next letter."""
    data = bytearray(path.read_bytes())
    i = next(i for i in range(len(data) // 2, len(data)) if 0x61 <= data[i] <= 0x7a)
    data[i] = 0x61 + (data[i] - 0x61 + 1) % 26
    path.write_bytes(bytes(data))


W = f"{DEMO_WIKI}-{DEMO_DATE}"
# (stage run first, its arguments, the file then damaged, what the reader must not have committed, trained vocab?)
INTERMEDIATES = [
    pytest.param("TrainPunkt", _dump_args, f"{W}/extracted/{PART1}.jsonl", f"{W}/split/{SPLIT}/{PART1}", False,
                 id="an extracted part, read by SplitPart"),
    pytest.param("SplitDump", lambda s, d: _args(s, d)[:-2], f"{W}/split/{SPLIT}/{PART1}/bucket_00001.txt",
                 f"{W}/sentences/{SPLIT}/shard_00001.txt", False, id="a per-piece sentence file, read by SentenceShard"),
    pytest.param("SentenceShards", lambda s, d: _args(s, d)[:-2], f"{W}/sentences/{SPLIT}/shard_00000.txt",
                 f"{DATASET}/wiki_00000.tfrecord", False, id="a sentence shard, read by PretrainShard"),
    pytest.param("SentenceShards", lambda s, d: _args(s, d)[:-2], f"{W}/sentences/{SPLIT}/shard_00001.txt",
                 f"{W}/vocab/{SPLIT}_uncased_{VOCAB_SIZE}.txt", True, id="a sentence shard, read by TrainVocab"),
    pytest.param("TrainVocab", _trained_args, f"{W}/vocab/{SPLIT}_uncased_{VOCAB_SIZE}.txt",
                 f"{DATASET}/wiki_00000.tfrecord", True, id="the trained vocab.txt, read by PretrainShard"),
]


@pytest.mark.parametrize("stage, stage_args, damaged, not_made, trained_vocab", INTERMEDIATES)
def test_a_damaged_intermediate_is_named_and_made_again(finished, trained, tmp_path, stage, stage_args, damaged,
                                                        not_made, trained_vocab):
    site = finished[0]
    data = tmp_path / "data"
    r = _luigi(stage, *stage_args(site, data))
    assert r.returncode == 0, r.stderr[-3000:]
    _flip(data / damaged)
    args = _trained_args(site, data) if trained_vocab else _args(site, data)
    r = _run(*args)
    assert r.returncode != 0
    errors = [line for line in r.stderr.splitlines() if line.startswith("wikiprep: error:")]
    assert errors and errors[0].startswith(f"wikiprep: error: {data / damaged}: damaged since it was committed: "
                                           "sha256 "), r.stderr[-3000:]
    assert f"{data / damaged}: damaged" in r.stderr
    # What was damaged went with its receipt (or Luigi, finding it missing, made it again already), and what its
    # reader would have made was not committed: every file there now is the undamaged run's.
    expected = trained if trained_vocab else _tree(finished[1])
    assert {name: digest for name, digest in _tree(data).items() if expected.get(name) != digest} == {}
    assert not (data / not_made).exists()
    r = _run(*args)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _tree(data) == expected
    verify = subprocess.run([str(Path(sys.executable).with_name("wikiprep")), "verify", str(data / DATASET)],
                            capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stderr


# ---------------------------------------------------------------------------------------------
# A finished ImageNet dataset damaged on disk: the same command notices (sizes from MANIFEST.json and the shards'
# receipts) and rebuilds exactly what is damaged

def _imagenet(raw: dict, out: Path) -> subprocess.CompletedProcess:
    return _luigi("ImageNet", "--train-dir", raw["train_dir"], "--validation-dir", raw["validation_dir"],
                  "--val-labels", raw["val_labels"], "--output-dir", str(out), "--train-shards", "4",
                  "--validation-shards", "2")


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagenet")
    raw = {k: str(v) for k, v in write_sample_tree(root / "raw").items()}
    r = _imagenet(raw, root / "out")
    assert r.returncode == 0, r.stderr[-3000:]
    return raw, root / "out", _tree(root / "out")


@pytest.mark.parametrize("damage", [
    pytest.param(lambda d: (d / "train-00001-of-00004").unlink(), id="a shard removed"),
    pytest.param(lambda d: _truncate(d / "validation-00000-of-00002"), id="a shard truncated"),
    pytest.param(lambda d: (d / "idx" / "train-00002-of-00004.idx").unlink(), id="an index removed"),
    pytest.param(lambda d: _truncate(d / "idx" / "validation-00001-of-00002.idx"), id="an index truncated"),
    pytest.param(lambda d: (d / "MANIFEST.json").unlink(), id="MANIFEST.json removed"),
    pytest.param(lambda d: _truncate(d / "MANIFEST.json"), id="MANIFEST.json truncated"),
    pytest.param(lambda d: _truncate(d / "report" / "stats.json"), id="the report's stats.json truncated"),
    pytest.param(lambda d: shutil.rmtree(d / "report"), id="the report removed"),
])
def test_a_damaged_imagenet_dataset_is_rebuilt_where_damaged(imagenet, tmp_path, damage):
    raw, finished, tree = imagenet
    out = tmp_path / "out"
    shutil.copytree(finished, out, symlinks=True)
    damage(out)
    r = _imagenet(raw, out)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _tree(out) == tree
    verify = subprocess.run([str(Path(sys.executable).with_name("imagenet-prep")), "verify", str(out)],
                            capture_output=True, text=True, timeout=300)
    assert verify.returncode == 0, verify.stderr


def test_a_damaged_imagenet_plan_is_named_and_made_again(imagenet, tmp_path):
    """The plan flipped by one byte after ImageNetPlan committed it, before the shards read it."""
    raw, _, tree = imagenet
    out = tmp_path / "out"
    r = _luigi("ImageNetPlan", "--train-dir", raw["train_dir"], "--validation-dir", raw["validation_dir"],
               "--val-labels", raw["val_labels"], "--output-dir", str(out), "--train-shards", "4",
               "--validation-shards", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    plan = out / ".work" / "plan.json"
    _flip(plan)
    r = _imagenet(raw, out)
    assert r.returncode != 0 and f"imagenet-prep: error: {plan}: damaged since it was committed: sha256 " in r.stderr
    assert {name: digest for name, digest in _tree(out).items() if tree.get(name) != digest} == {}
    assert not list(out.glob("train-*"))  # no shard was made of the damaged plan
    r = _imagenet(raw, out)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _tree(out) == tree
def _receipt(rel: str, change) -> callable:
    """The receipt of `rel` (relative to the data folder) replaced by change(its parsed JSON), as JSON."""
    def damage(data: Path) -> None:
        path = data / rel
        rp = path.parent / ".receipts" / f"{path.name}.json"
        rp.write_text(json.dumps(change(json.loads(rp.read_text(encoding="utf-8")))), encoding="utf-8")
    return damage


EXTRACTED = f"{DEMO_WIKI}-{DEMO_DATE}/extracted/{DEMO_WIKI}-{DEMO_DATE}-pages-articles1.xml-p1p4854.jsonl"
SPLIT = f"{DEMO_WIKI}-{DEMO_DATE}/split/n2_seed12345_min200/{DEMO_WIKI}-{DEMO_DATE}-pages-articles1.xml-p1p4854"
SENTENCES = f"{DEMO_WIKI}-{DEMO_DATE}/sentences/n2_seed12345_min200/shard_00000.txt"


@pytest.mark.parametrize("damage", [
    pytest.param(_receipt(EXTRACTED, lambda r: [r]), id="an extraction's receipt a list"),
    pytest.param(_receipt(EXTRACTED, lambda r: "done"), id="an extraction's receipt a string"),
    pytest.param(_receipt(EXTRACTED, lambda r: {k: v for k, v in r.items() if k != "stats"}),
                 id="an extraction's receipt without its stats"),
    pytest.param(_receipt(SPLIT, lambda r: {**r, "files": list(r["files"])}), id="a split's receipt listing no sizes"),
    pytest.param(_receipt(SENTENCES, lambda r: {**r, "stats": "many"}), id="a sentence shard's stats a string"),
    pytest.param(_receipt(f"{DATASET}/wiki_00001.tfrecord", lambda r: {**r, "size": str(r["size"])}),
                 id="a shard's size a string"),
])
def test_a_receipt_of_the_wrong_shape_is_no_receipt(copy, damage):
    """A receipt that parses but has not its writer's shape: the output is checked again (made again, found
    identical, kept) and the receipt written again; never a traceback. The dataset's manifest and stats.json, and
    a sentence shard with its records, are removed, so that the rerun reads every receipt below them."""
    site, data, tree = copy
    damage(data)
    (data / DATASET / "MANIFEST.json").unlink()
    (data / DATASET / "stats.json").unlink()
    (data / SENTENCES.replace("00000", "00001")).unlink()  # merged again: the corpus is judged from the receipts
    (data / DATASET / "wiki_00001.tfrecord").unlink()
    r = _run(*_args(site, data))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert _tree(data / DATASET) == tree
    r = _run(*_args(site, data))
    assert r.returncode == 0 and "ran successfully" not in r.stderr, r.stderr[-3000:]  # the receipts are whole again
