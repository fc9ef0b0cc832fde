"""The dry run, `python -m workflows plan Pretrain128 ...` and `make plan-128`, through the command line against
the sample dump on a real HTTP server (tests/dumpserver.py), whose request log says what was fetched.

Before any run it counts every task as to run, fetches dumpstatus.json and nothing else, and writes nothing;
after a complete run (Luigi's command line) it counts every task complete and fetches nothing; with a shard's
receipt gone it names that shard and the manifest, and counts a download whose receipt is gone as incomplete
but not run (Luigi does not look below the complete extraction).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dumpserver import DumpServer
from wikiprep.dataset import folder_name
from wikiprep.options import GenerationOptions
from wikiprep.wikipedia.samples import write_sample_dump
from workflows import DEMO_DATE, DEMO_WIKI

REPO = Path(__file__).resolve().parents[1]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "of", "and", "in", "to", "is", "was", "it",
         "city", "river", "north", "south", "old", "new", "##s", "##ed", "##ing", ".", ","]
DATASET = Path(f"{DEMO_WIKI}-{DEMO_DATE}") / folder_name(GenerationOptions(dupe_factor=5), num_shards=2)
STATUS = f"/{DEMO_WIKI}/{DEMO_DATE}/dumpstatus.json"
# The sample dump has 2 parts; 2 shards.
EVERY_TASK = {"DownloadPart": 2, "ExtractPart": 2, "TrainPunkt": 1, "SplitPart": 2, "SplitDump": 1,
              "SentenceShard": 2, "PretrainShard": 2, "Pretrain128": 1}


def _env() -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    env.pop("LUIGI_CONFIG_PATH", None)
    return env


def _params(url: str, data: Path, vocab: Path | None) -> list[str]:
    return ["--data-dir", str(data), "--dump-url", url, "--wiki", DEMO_WIKI, "--dump-date", DEMO_DATE,
            "--num-shards", "2"] + (["--vocab-file", str(vocab)] if vocab else [])


def plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "workflows", "plan", *args], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=300)


def table(stdout: str) -> dict[str, tuple[int, int, int]]:
    """{task kind: (tasks, complete, to run)} from the plan's table."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split() == ["task", "tasks", "complete", "to", "run"])
    rows = {}
    for line in lines[start + 1:]:
        kind, *numbers = line.split()
        if kind == "total":
            break
        rows[kind] = tuple(map(int, numbers))
    return rows


def tree(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("plan")
    write_sample_dump(root / "site", wiki=DEMO_WIKI, date=DEMO_DATE)
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    with DumpServer(root / "site") as srv:
        yield srv, vocab, root


def test_before_a_run_every_task_is_to_run_and_only_the_dump_status_is_fetched(site, tmp_path):
    srv, vocab, _ = site
    data = tmp_path / "data"
    before = len(srv.log)
    res = plan("Pretrain128", *_params(srv.url, data, vocab))
    assert res.returncode == 0, res.stderr
    assert table(res.stdout) == {kind: (n, 0, n) for kind, n in EVERY_TASK.items()}
    assert f"dump parts: 2, from {srv.url}{STATUS}, fetched now and not saved" in res.stdout
    assert f"  PretrainShard: {DATASET}/wiki_00000.tfrecord" in res.stdout.splitlines()
    assert [seen.path for seen in srv.log[before:]] == [STATUS]
    assert not data.exists(), "a plan wrote into the data folder"

    # Without a vocabulary, one is trained: its task and the one gathering the sentence shards for it appear.
    res = plan("--all", "Pretrain128", *_params(srv.url, data, None))
    assert res.returncode == 0, res.stderr
    assert table(res.stdout) == {kind: (n, 0, n) for kind, n in
                                 {**EVERY_TASK, "SentenceShards": 1, "TrainVocab": 1}.items()}
    assert [seen.path for seen in srv.log[before:]] == [STATUS, STATUS]
    assert not data.exists()


def test_after_a_run_everything_is_complete_and_nothing_is_fetched(site, tmp_path):
    srv, vocab, _ = site
    data = tmp_path / "data"
    run = subprocess.run([sys.executable, "-m", "luigi", "--module", "workflows", "Pretrain128",
                          *_params(srv.url, data, vocab), "--local-scheduler", "--workers", "2"],
                         cwd=REPO, env=_env(), capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (data / DATASET / "MANIFEST.json").is_file()
    files, requests = tree(data), len(srv.log)

    # make plan-128, with the variables of make wiki-128 (setup taken as done: this interpreter is the venv's).
    made = subprocess.run(["make", "-o", "setup", "plan-128", f"BIN={Path(sys.executable).parent}",
                           f"DATA_DIR={data}", f"DUMP_URL={srv.url}", f"WIKI={DEMO_WIKI}", f"DUMP_DATE={DEMO_DATE}",
                           "NUM_SHARDS=2", f"VOCAB_FILE={vocab}"],
                          cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    assert table(made.stdout) == {kind: (n, n, 0) for kind, n in EVERY_TASK.items()}
    assert "nothing to run: the dataset is complete" in made.stdout
    assert f"from the copy in {data / 'downloads' / DEMO_WIKI / DEMO_DATE / 'dumpstatus.json'}" in made.stdout
    assert len(srv.log) == requests and tree(data) == files

    # A shard's receipt lost, and a download's (its extraction is complete, so Luigi never looks at it).
    partial = tmp_path / "partial"
    shutil.copytree(data, partial)
    (partial / DATASET / ".receipts" / "wiki_00001.tfrecord.json").unlink()
    (partial / DATASET / ".receipts" / "MANIFEST.json.json").unlink()
    download = next((partial / "downloads" / DEMO_WIKI / DEMO_DATE / ".receipts").glob("*articles1*.json"))
    download.unlink()
    res = plan("Pretrain128", *_params(srv.url, partial, vocab))
    assert res.returncode == 0, res.stderr
    assert table(res.stdout) == {**{kind: (n, n, 0) for kind, n in EVERY_TASK.items()},
                                 "DownloadPart": (2, 1, 0), "PretrainShard": (2, 1, 1), "Pretrain128": (1, 0, 1)}
    assert "(1 incomplete task will not run: a complete task after it holds what it makes)" in res.stdout
    assert res.stdout.splitlines()[-3:] == ["to run:", f"  PretrainShard: {DATASET}/wiki_00001.tfrecord",
                                            f"  Pretrain128: {DATASET}/MANIFEST.json, {DATASET}/report"]
    assert len(srv.log) == requests


def test_a_plan_refuses_what_the_run_would_refuse_with_one_line(site, tmp_path):
    srv, vocab, _ = site
    res = plan("Pretrain128", *_params(srv.url, tmp_path / "data", vocab), "--num-shards", "0")
    assert res.returncode == 1 and res.stderr.splitlines() == ["wikiprep: error: --num-shards 0: must be at least 1"]
    res = plan("Pretrain128", "--data-dir", str(tmp_path / "data"), "--dump-url", srv.url, "--wiki", DEMO_WIKI,
               "--dump-date", "20990101")
    errors = [line for line in res.stderr.splitlines() if line.startswith("wikiprep: error: ")]
    assert res.returncode == 1 and len(errors) == 1 and "no dump for" in errors[0], res.stderr
    assert "Traceback" not in res.stderr
    res = plan("TrainBert", "--dataset-dir", str(tmp_path), "--steps", "1", "--out-dir", str(tmp_path / "o"))
    assert res.returncode == 1 and "give a Pretrain task (Pretrain128, PretrainText128, PretrainMix128" in res.stderr
    # A mistyped task or flag: one line naming the closest, as with `luigi --module workflows` (no traceback).
    res = plan("Pretrain12", *_params(srv.url, tmp_path / "data", vocab))
    assert res.returncode == 1 and res.stderr.splitlines() == [
        "wikiprep: error: plan: no task Pretrain12 (did you mean Pretrain128, Pretrain512 or PretrainMix512?)"]
    res = plan("Pretrain128", *_params(srv.url, tmp_path / "data", vocab), "--num-shard", "3")
    assert res.returncode == 2 and res.stderr.splitlines() == [
        "wikiprep: error: --num-shard: no such parameter (did you mean --num-shards?)"]
    assert not (tmp_path / "data").exists()
