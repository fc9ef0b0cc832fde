"""Sentence shards merged one task per shard, through the `luigi` command line: each shard alone, the same
bytes as every bucket of that shard in dump order, a dump that cannot fill the shards refused once, and a
data folder whose sentence shards were committed whole (before they were one task each) taken as it is."""

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from shardkit.atomic import receipt_path, write_dir_receipt
from wikiprep import sentences
from wikiprep.wikipedia.samples import write_sample_dump
from workflows import DEMO_DATE, DEMO_WIKI, SentenceShards

REPO = Path(__file__).resolve().parents[1]
LUIGI = str(Path(sys.executable).with_name("luigi"))
NUM_SHARDS = 3


def run_luigi(task, data, *args, num_shards=NUM_SHARDS, workers=1):
    """`luigi --module workflows TASK` on the sample dump (beside `data`, in `site/`)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("LUIGI_CONFIG_PATH", None)
    return subprocess.run([LUIGI, "--module", "workflows", task, "--data-dir", str(data), "--dump-url", site(data),
                           "--wiki", DEMO_WIKI, "--dump-date", DEMO_DATE, "--num-shards", str(num_shards), *args,
                           "--local-scheduler", "--workers", str(workers)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def site(data: Path) -> str:
    return (data.parent / "site").as_uri()


def copy(split: Path, tmp_path: Path) -> Path:
    """A copy of the split data folder, with the sample dump beside it."""
    shutil.copytree(split.parent / "site", tmp_path / "site")
    shutil.copytree(split, tmp_path / "data")
    return tmp_path / "data"


@pytest.fixture(scope="module")
def split(tmp_path_factory) -> Path:
    """A data folder where the sample dump's two parts are split in 3 buckets each, and nothing more."""
    root = tmp_path_factory.mktemp("split")
    write_sample_dump(root / "site", DEMO_WIKI, DEMO_DATE)
    data = root / "data"
    r = run_luigi("SplitDump", data, workers=2)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not (data / f"{DEMO_WIKI}-{DEMO_DATE}" / "sentences").exists()
    return data


def folders(data: Path) -> tuple[list[Path], Path]:
    """The split folders in dump order, and the sentence shards' folder."""
    work = data / f"{DEMO_WIKI}-{DEMO_DATE}"
    name = sentences.split_name(NUM_SHARDS, 12345, 200)
    # The sample dump's parts are numbered 1 and 2: in dump order their names sort.
    splits = sorted(p for p in (work / "split" / name).iterdir() if not p.name.startswith("."))
    assert len(splits) == 2
    return splits, work / "sentences" / name


def test_a_shard_merges_alone_into_the_buckets_of_every_piece_in_dump_order(split, tmp_path):
    data = copy(split, tmp_path)
    splits, folder = folders(data)
    r = run_luigi("SentenceShard", data, "--shard", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert sorted(p.name for p in folder.iterdir()) == [".receipts", "shard_00001.txt"]
    shard = (folder / "shard_00001.txt").read_bytes()
    assert shard == b"".join((s / "bucket_00001.txt").read_bytes() for s in splits)
    receipt = json.loads(receipt_path(folder / "shard_00001.txt").read_text())
    split_stats = [json.loads(receipt_path(s).read_text())["stats"] for s in splits]
    assert receipt["stats"] == {"documents": shard.count(b"\n\n"),
                                "sentences": sum(1 for line in shard.splitlines() if line)}
    assert receipt["stats"]["documents"] == sum(s["documents_per_shard"][1] for s in split_stats) > 0
    assert receipt["corpus"]["documents"] == sum(s["documents"] for s in split_stats)

    # The others, then the whole set: each shard once, the one already there untouched.
    before = (folder / "shard_00001.txt").stat()
    r = run_luigi("SentenceShards", data, workers=2)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (folder / "shard_00001.txt").stat().st_ino == before.st_ino
    for i in range(NUM_SHARDS):
        name = sentences.bucket_name(i)
        assert (folder / sentences.shard_name(i)).read_bytes() == b"".join((s / name).read_bytes() for s in splits)
    r = run_luigi("SentenceShard", data, "--shard", "3")
    assert r.returncode != 0 and "wikiprep: error: --shard 3: must be from 0 to 2 (--num-shards 3)" in r.stderr


def test_a_dump_that_leaves_a_shard_empty_is_refused_once_before_any_shard_is_written(split, tmp_path):
    """Every shard waits for SplitDump, which judges the split receipts: one failure, one line, even with
    several worker processes; run again, it is refused before any work."""
    data = copy(split, tmp_path)
    expected = "wikiprep: error: --num-shards 40: "
    for attempt in (1, 2):
        r = run_luigi("SentenceShards", data, num_shards=40, workers=2)
        assert r.returncode != 0
        lines = [line for line in r.stderr.splitlines() if line.startswith("wikiprep: error:")]
        assert len(lines) == 1 and lines[0].startswith(expected) and "of the sentence shards would be empty" in lines[0], \
            r.stderr[-3000:]
        assert "Traceback" not in r.stderr
        assert not (data / f"{DEMO_WIKI}-{DEMO_DATE}" / "sentences").exists()
        if attempt == 2:  # refused when Luigi asks whether SplitDump is complete, before any work
            assert "Did not run any tasks" in r.stderr, r.stderr[-3000:]


def test_sentence_shards_committed_whole_by_the_previous_version_are_taken_as_they_are(split, tmp_path):
    """A data folder where one task merged every shard into one folder with one receipt (the layout before
    each shard was its own task): nothing merged again, the same stats for stats.json, and a shard lost
    since (with the previous version's dead temporary folder) merged alone, to the same bytes."""
    data = copy(split, tmp_path)
    r = run_luigi("SentenceShards", data, workers=2)
    assert r.returncode == 0, r.stderr[-3000:]
    _, folder = folders(data)
    task = SentenceShards(data_dir=str(data), dump_url=site(data), wiki=DEMO_WIKI, dump_date=DEMO_DATE,
                          num_shards=NUM_SHARDS)
    stats = task.stats()
    shards = {p.name: p.read_bytes() for p in folder.glob("shard_*.txt")}
    # The previous layout: no receipt per shard, one receipt for the folder, its stats merge_splits' result.
    shutil.rmtree(folder / ".receipts")
    write_dir_receipt(folder, stats=stats)
    inodes = {p.name: p.stat().st_ino for p in folder.glob("shard_*.txt")}

    r = run_luigi("SentenceShards", data)
    assert r.returncode == 0 and "Did not run any tasks" in r.stderr, r.stderr[-3000:]
    assert not (folder / ".receipts").exists()
    assert {p.name: p.stat().st_ino for p in folder.glob("shard_*.txt")} == inodes
    assert task.stats() == stats

    # A killed run of the previous version left its folder temporary (its pid is no longer running).
    dead = folder.with_name(f"{folder.name}.tmp-{socket.gethostname()}-{2 ** 22 + 1}")  # above Linux's pid_max
    dead.mkdir()
    (dead / "shard_00000.txt").write_bytes(b"half")
    (folder / "shard_00002.txt").unlink()
    r = run_luigi("SentenceShards", data)
    assert r.returncode == 0, r.stderr[-3000:]
    assert {p.name: p.read_bytes() for p in folder.glob("shard_*.txt")} == shards
    assert sorted(p.name for p in (folder / ".receipts").iterdir()) == ["shard_00002.txt.json"]
    assert {p.name: p.stat().st_ino for p in folder.glob("shard_*.txt") if p.name != "shard_00002.txt"} == \
        {k: v for k, v in inodes.items() if k != "shard_00002.txt"}
    assert not dead.exists()
    assert task.stats() == stats


def test_more_shards_than_open_files_allowed_split_in_any_limit(split, tmp_path):
    """--num-shards far above the open-file limit (1,200 buckets under a limit of 256, soft and hard, as 1,024
    under Debian's usual limit would be): a split holds one bucket file open at a time, so SplitPart finishes, and
    its buckets hold what the 3-shard split's do, spread by the same hash."""
    import resource

    data = copy(split, tmp_path)
    part = sorted(p.name for p in (tmp_path / "site" / DEMO_WIKI / DEMO_DATE).glob("*.bz2"))[0]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("LUIGI_CONFIG_PATH", None)

    def limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    r = subprocess.run([LUIGI, "--module", "workflows", "SplitPart", "--part", part, "--data-dir", str(data),
                        "--dump-url", site(data), "--wiki", DEMO_WIKI, "--dump-date", DEMO_DATE, "--num-shards", "1200",
                        "--local-scheduler"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                       preexec_fn=limit)
    assert r.returncode == 0, r.stderr[-3000:]
    work = data / f"{DEMO_WIKI}-{DEMO_DATE}" / "split"
    many = work / "n1200_seed12345_min200" / part[:-4]
    buckets = sorted(many.glob("bucket_*.txt"))
    assert len(buckets) == 1200
    documents = [doc for b in buckets for doc in b.read_text(encoding="utf-8").split("\n\n") if doc]
    three = [doc for b in sorted((work / "n3_seed12345_min200" / part[:-4]).glob("bucket_*.txt"))
             for doc in b.read_text(encoding="utf-8").split("\n\n") if doc]
    assert len(documents) > 10 and sorted(documents) == sorted(three)
