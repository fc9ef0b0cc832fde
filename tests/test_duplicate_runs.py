"""Two runs on one DATA_DIR, through the `luigi` command line: racing for the same tasks they end with the
bytes of one run; an output already there with other content stops the run with one line, changing nothing.

The runs fetch the sample dump from a real HTTP server on 127.0.0.1 (tests/dumpserver.py) that holds
its answer for dumpstatus.json until both runs have asked for it: from there both schedule every task
before either has finished one, whatever the load on the machine, so both execute the same tasks
(asserted from their logs, else the test would prove nothing).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dumpserver import DumpServer
from wikiprep.dataset import folder_name
from wikiprep.options import GenerationOptions
from wikiprep.wikipedia.samples import write_sample_dump
from workflows import DEMO_DATE, DEMO_WIKI

REPO = Path(__file__).resolve().parents[1]
LUIGI = [sys.executable, "-m", "luigi", "--module", "workflows"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "of", "and", "in", "to", "is", "was", "it",
         "city", "river", "north", "south", "old", "new", "##s", "##ed", "##ing", ".", ","]
DATASET = Path(f"{DEMO_WIKI}-{DEMO_DATE}") / folder_name(GenerationOptions(dupe_factor=5), num_shards=2)
DONE = re.compile(r"\) done\s+(\w+\(.*\))$", re.M)  # Luigi's "Worker(...) done   Task(...)" lines


def _args(site_url: str, data: Path, vocab: Path) -> list[str]:
    # --no-lock: Luigi's process lock refuses a second identical command on one machine (exit 10), which
    # would hide the race; two hosts, or two Slurm elements, never share such a lock.
    return ["Pretrain128", "--data-dir", str(data), "--dump-url", site_url, "--wiki", DEMO_WIKI, "--dump-date",
            DEMO_DATE, "--num-shards", "2", "--vocab-file", str(vocab), "--local-scheduler", "--workers", "1",
            "--no-lock"]


def _start(args: list[str], log: Path) -> subprocess.Popen:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    env.pop("LUIGI_CONFIG_PATH", None)
    with open(log, "w") as f:
        return subprocess.Popen(LUIGI + args, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT, text=True)


def _tree(folder: Path) -> dict[str, str]:
    """sha256 of every file below `folder` (receipts included), by relative path."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The sample dump on an HTTP server, a fixed vocabulary, and the dataset of one serial run."""
    root = tmp_path_factory.mktemp("duplicates")
    write_sample_dump(root / "site", wiki=DEMO_WIKI, date=DEMO_DATE)
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    with DumpServer(root / "site") as srv:
        serial = _start(_args(srv.url, root / "serial", vocab), root / "serial.log")
        assert serial.wait(timeout=600) == 0, (root / "serial.log").read_text()[-3000:]
        yield srv, vocab, root


def test_two_runs_racing_on_one_data_dir_end_with_the_bytes_of_one(world, tmp_path):
    srv, vocab, root = world
    srv.add_fault(f"/{DEMO_WIKI}/{DEMO_DATE}/dumpstatus.json", "barrier", times=2, barrier=threading.Barrier(2),
                  seconds=120)
    data = tmp_path / "data"
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    runs = [_start(_args(srv.url, data, vocab), log) for log in logs]
    codes = [run.wait(timeout=600) for run in runs]
    texts = [log.read_text() for log in logs]
    assert codes == [0, 0], "\n\n".join(t[-3000:] for t in texts)

    done = [set(DONE.findall(t)) for t in texts]
    both = {task.split("(")[0] for task in done[0] & done[1]}
    # Each task executed by both runs, its output committed by one and found identical by the other.
    assert {"ExtractPart", "SplitPart", "SentenceShard", "PretrainShard", "Pretrain128"} <= both, both

    assert _tree(data) == _tree(root / "serial"), "not the bytes of one serial run (receipts included)"
    assert (data / DATASET / "MANIFEST.json").read_bytes() == (root / "serial" / DATASET / "MANIFEST.json").read_bytes()
    assert not [p for p in data.rglob("*") if ".tmp-" in p.name or p.name.endswith(".lock")]


def test_an_output_already_there_with_other_content_fails_the_run_naming_it_and_changes_nothing(world, tmp_path):
    srv, vocab, root = world
    data = tmp_path / "data"
    shutil.copytree(root / "serial", data)
    dataset = data / DATASET
    # A shard made otherwise (by an older version, say) whose receipt was lost; the dataset not finished.
    shard = dataset / "wiki_00001.tfrecord"
    shard.write_bytes((dataset / "wiki_00000.tfrecord").read_bytes())
    for p in (dataset / ".receipts" / "wiki_00001.tfrecord.json", dataset / ".receipts" / "MANIFEST.json.json",
              dataset / "MANIFEST.json"):
        p.unlink()
    before = _tree(data)

    run = _start(_args(srv.url, data, vocab), tmp_path / "run.log")
    assert run.wait(timeout=600) != 0
    log = (tmp_path / "run.log").read_text()
    lines = [line for line in log.splitlines() if line.startswith("wikiprep: error: ")]
    there = hashlib.sha256(shard.read_bytes()).hexdigest()[:16]
    assert len(lines) == 1 and lines[0].startswith(
        f"wikiprep: error: {shard}: exists with other content than this run's (sha256 {there} there, "), log[-3000:]
    assert lines[0].endswith("from this run); left as it is: remove it to write it again"), lines[0]
    assert "Traceback" not in log
    assert _tree(data) == before, "the failed run changed what was there"


def test_a_lost_nodes_temporaries_are_swept_when_the_dataset_is_finalized(world, tmp_path):
    """A node lost mid-shard leaves its temporary, which no host can prove dead; its element, requeued
    elsewhere, committed the shard. Once every shard is committed the finalize removes such leftovers,
    so the dataset verifies without a hand, and a live writer's temporary of this host is left alone."""
    srv, vocab, root = world
    data = tmp_path / "data"
    shutil.copytree(root / "serial", data)
    folder = data / DATASET
    for name in ("MANIFEST.json", ".receipts/MANIFEST.json.json"):
        (folder / name).unlink()
    lost = folder / "wiki_00001.tfrecord.tmp-lost-node-4242"
    lost.write_bytes(b"half a shard")
    spill = folder / "wiki_00000.tfrecord.tmp-lost-node-4242.spill"
    spill.write_bytes(b"x" * 100)
    live = folder / f"wiki_00000.tfrecord.tmp-{socket.gethostname()}-{os.getpid()}"
    live.write_bytes(b"a live writer's")
    run = _start(_args(srv.url, data, vocab), tmp_path / "finalize.log")
    assert run.wait(timeout=600) == 0, (tmp_path / "finalize.log").read_text()[-3000:]
    assert not lost.exists() and not spill.exists()
    assert live.exists()
    assert (folder / "MANIFEST.json").read_bytes() == (root / "serial" / DATASET / "MANIFEST.json").read_bytes()
    live.unlink()
    verify = subprocess.run([sys.executable, "-m", "wikiprep.cli", "verify", str(folder)], cwd=REPO,
                            capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert verify.returncode == 0, verify.stdout + verify.stderr
