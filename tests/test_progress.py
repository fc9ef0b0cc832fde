"""Progress of the long stages: the libraries' callbacks, luigid's view of a task, the bars, the log lines.

Each library stage is called with a callback that records every call: `done` must never go back and
the last call must say `done == total`, the total being what the stage works through (bytes of the
input, images, records, steps). The Luigi tasks run through Luigi's command line, against a real
luigid on 127.0.0.1 (the percentage and status message must be readable through its API afterwards)
and with `--local-scheduler` (the stage's INFO line on the console, no DEBUG line unless asked for).
The command lines run on a pipe (no bar, no control character) and on a pseudo-terminal (a bar).
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import random
import re
import select
import struct
import subprocess
import termios
from pathlib import Path

import pytest

from shardkit import progress as progress_module
from testkit.synthetic_dump import write_synthetic_dump
from test_luigid import BIN, REPO, Luigid, env, wait_for
from wikiprep import instances, layouts, sentences, stats, verify, vocab
from wikiprep.wikipedia import extract
from wikiprep.wikipedia.source import extracted_documents
from wikiprep.options import GenerationOptions
from wikiprep.tokenization import Vocab

from fixture_paths import REFERENCE_INPUTS, REFERENCE_VOCAB as VOCAB  # noqa: E402
INPUTS = sorted(REFERENCE_INPUTS.glob("*.txt"))
WIKI, DATE = "enwiki", "20260101"
OPTS = GenerationOptions(max_seq_length=128, max_predictions_per_seq=20, dupe_factor=3, random_seed=7)
STAGE_LINE = r"[\d,]+ {unit}, [\d,.]+ MB in [\d.]+ s \([\d,.]+ MB/s\)"


class Recorder:
    """A progress callback that keeps every call."""

    def __init__(self):
        self.calls: list[tuple[int, int | None]] = []

    def __call__(self, done, total):
        self.calls.append((done, total))

    def check(self, total: int | None = None) -> None:
        """Called at least once, `done` never decreasing nor above a known total, the last call done == total."""
        assert self.calls, "the stage reported no progress"
        dones = [d for d, _ in self.calls]
        assert dones == sorted(dones), self.calls
        assert all(t is None or d <= t for d, t in self.calls), self.calls
        assert self.calls[-1][0] == self.calls[-1][1], self.calls[-1]
        if total is not None:
            assert self.calls[-1] == (total, total)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("site")
    write_synthetic_dump(root, WIKI, DATE, xml_mb=0.6, parts=2)
    return root


def parts(site: Path) -> list[Path]:
    return sorted((site / WIKI / DATE).glob("*.bz2"))


def test_throttle_passes_the_first_and_final_calls_and_few_between():
    seen = Recorder()
    throttled = progress_module.throttle(seen, interval=60)
    for done in range(100_000):
        throttled(done, 100_000)
    throttled(100_000, 100_000)
    assert seen.calls == [(0, 100_000), (100_000, 100_000)]
    assert progress_module.throttle(None) is None


def test_extraction_splitting_and_merging_report_bytes(site, tmp_path):
    part = parts(site)[0]
    extracted = tmp_path / "part.jsonl"
    seen = Recorder()
    extract.extract_part(part, extracted, DATE, progress=seen)
    seen.check(part.stat().st_size)  # the bz2 bytes of the part

    seen = Recorder()
    size = os.path.getsize(part)
    start, end = extract.slice_range(part, 1, 2)
    extract.extract_part(part, tmp_path / "slice.jsonl", DATE, byte_range=(start, end), progress=seen)
    seen.check(end - start)  # of a slice: its own range
    assert end - start < size

    punkt = tmp_path / "punkt.json"
    sentences.train_punkt(sentences.punkt_sample([extracted_documents(extracted, min_chars=0)]), punkt)
    seen = Recorder()
    sentences.split_piece(extracted_documents(extracted, min_chars=0), punkt, tmp_path / "split", num_shards=2, seed=1,
                         size=extracted.stat().st_size, progress=seen)
    seen.check(extracted.stat().st_size)

    buckets = [tmp_path / "split" / sentences.bucket_name(0)] * 2
    seen = Recorder()
    sentences.merge_shard(buckets, tmp_path / "shard.txt", progress=seen)
    seen.check(2 * buckets[0].stat().st_size)

    seen = Recorder()
    vocab.count_words([tmp_path / "shard.txt"], max_chars=10_000, progress=seen)
    seen.check()
    assert 10_000 <= seen.calls[-1][0] < 11_000  # the characters taken: the budget, and the rest of a line


@pytest.mark.parametrize("suffix", [".tfrecord", ".hdf5"])
def test_instances_report_input_bytes_through_every_phase(site, tmp_path, suffix):
    out = tmp_path / f"out{suffix}"
    seen = Recorder()
    stats_ = instances.create_pretraining_file([str(p) for p in INPUTS], str(VOCAB), str(out), None, OPTS,
                                               layout=layouts.from_output_names([out], "standard"), progress=seen)
    seen.check(sum(p.stat().st_size for p in INPUTS))
    assert stats_["input_bytes"] == seen.calls[-1][0]

    seen = Recorder()
    summary = verify.verify(out, progress=seen)
    seen.check(out.stat().st_size)
    assert summary["records"] == stats_["instances"]
    if suffix == ".hdf5":  # read by h5py: no TensorFlow in this test
        seen = Recorder()
        stats.write_report(out, tmp_path / "report", progress=seen)
        seen.check(1)


def test_generation_reports_every_pass_over_the_documents():
    vocab_ = Vocab(str(VOCAB))
    corpus = instances.read_corpus([str(p) for p in INPUTS], vocab_)
    seen = Recorder()
    instances.generate(corpus, vocab_, OPTS, random.Random(7), lambda *instance: None, progress=seen)
    seen.check(OPTS.dupe_factor * corpus.num_documents)
    assert len(seen.calls) >= OPTS.dupe_factor  # at least once a pass: unthrottled here, every 64 documents


def test_imagenet_shards_verify_stats_and_training_steps(tmp_path):
    from imagenet_prep import convert, samples
    from imagenet_prep import stats as imagenet_stats
    from imagenet_prep import verify as imagenet_verify
    from trainers.loop import run_steps

    tree = samples.write_sample_tree(tmp_path / "raw", classes=3, per_class=4, val_per_class=1, quirks=False)
    out = tmp_path / "out"
    seen = Recorder()
    plan = convert.make_plan(tree["train_dir"], tree["validation_dir"], tree["val_labels"], train_shards=2,
                             validation_shards=1, progress=seen)
    assert plan["splits"]["train"]["files"] and all(t is None for _, t in seen.calls[:-1])
    seen.check(3 * 4 + 3 * 1)  # the input files listed
    seen = Recorder()
    convert.convert_dataset(tree["train_dir"], tree["validation_dir"], tree["val_labels"], out, train_shards=2,
                            validation_shards=1, progress=seen)
    seen.check(3 * 4 + 3 * 1)  # images
    shards = sorted(out.glob("train-*")) + sorted(out.glob("validation-*"))
    seen = Recorder()
    imagenet_verify.verify(out, progress=seen)
    listed = sum(e["size"] for e in json.loads((out / "MANIFEST.json").read_text())["files"])
    seen.check(listed + sum(p.stat().st_size for p in shards))  # every listed file hashed, then the shards read
    assert seen.calls[0][1] is None  # while hashing, the whole is not known yet
    seen = Recorder()
    imagenet_stats.stats(out, tmp_path / "report", progress=seen)
    seen.check(len(shards))
    seen = Recorder()
    run_steps(lambda batch: {"loss": 1.0 / batch}, range(1, 100), 7, ["step", "loss"], on_error=None, progress=seen)
    seen.check(7)


# ---------------------------------------------------------------------------------------------
# Luigi, through its command line


def extract_args(site: Path, data: Path) -> list[str]:
    return ["ExtractPart", "--data-dir", str(data), "--dump-url", site.as_uri(), "--wiki", WIKI,
            "--dump-date", DATE, "--part", parts(site)[0].name]


def test_luigid_shows_each_tasks_progress_and_status(site, tmp_path):
    luigid = Luigid(tmp_path / "luigid", REPO / "luigi.cfg")
    luigid.start()
    try:
        r = subprocess.run([str(BIN / "luigi"), "--module", "workflows", *extract_args(site, tmp_path / "data"),
                            "--scheduler-host", "127.0.0.1", "--scheduler-port", str(luigid.port)],
                           cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        done = wait_for(lambda: luigid.api("task_list", status="DONE", upstream_status="", search=""),
                        "luigid to list the tasks done")
        by_family = {task["name"]: (task_id, task) for task_id, task in done.items()}
        part = parts(site)[0]
        size_mb = f"{part.stat().st_size / 1e6:.1f}"
        task_id, extract_task = by_family["ExtractPart"]
        assert extract_task["progress_percentage"] == 100
        assert extract_task["status_message"] == f"extract {part.name[:-4]}: {size_mb} of {size_mb} MB"
        assert luigid.api("get_task_status_message", task_id=task_id)["statusMessage"] == \
            extract_task["status_message"]
        assert luigid.api("get_task_progress_percentage", task_id=task_id)["progressPercentage"] == 100
        _, download_task = by_family["DownloadPart"]
        assert download_task["status_message"] == f"download {part.name}: {size_mb} of {size_mb} MB"
        assert download_task["progress_percentage"] == 100
    finally:
        luigid.stop()


def test_console_shows_the_stage_lines_and_no_debug_unless_asked(site, tmp_path):
    data = tmp_path / "data"
    command = [str(BIN / "luigi"), "--module", "workflows", *extract_args(site, data), "--local-scheduler"]
    r = subprocess.run(command, cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    part = parts(site)[0].name
    assert re.search(rf"^INFO: extract {re.escape(part)}: {STAGE_LINE.format(unit='pages')}$", r.stderr, re.M), \
        r.stderr[-3000:]
    assert re.search(rf"^INFO: download {re.escape(part)}: 1 file, ", r.stderr, re.M)
    assert "Luigi Execution Summary" in r.stderr
    assert not re.search(r"^DEBUG", r.stderr, re.M), r.stderr[-3000:]
    # --log-level DEBUG brings the detail back (Luigi's scheduling chatter); complete now, nothing runs.
    r = subprocess.run(command + ["--log-level", "DEBUG"], cwd=REPO, env=env(), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert re.search(r"^DEBUG: Checking if ExtractPart\(", r.stderr, re.M), r.stderr[-3000:]


# ---------------------------------------------------------------------------------------------
# The command lines' bars

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # anything but a tab or a newline


def create_args(out: Path) -> list[str]:
    return ["create-pretraining-data", f"--input_file={','.join(map(str, INPUTS))}", f"--vocab_file={VOCAB}",
            f"--output_file={out}", "--dupe_factor=2"]


def test_no_bar_on_a_pipe(site, tmp_path):
    out = tmp_path / "out.hdf5"
    for args in (create_args(out), ["verify", str(out)], ["stats", str(out), "--out", str(tmp_path / "report")]):
        r = subprocess.run([str(BIN / "wikiprep"), *args], env=env(), capture_output=True, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        assert not CONTROL.search(r.stderr.decode()), (args[0], r.stderr[-500:])
        assert not CONTROL.search(r.stdout.decode()), (args[0], r.stdout[-500:])
        assert b"it/s" not in r.stderr and b"B/s" not in r.stderr


def run_on_terminal(command: list[str]) -> tuple[int, str]:
    """Run with stderr on a pseudo-terminal of 24 x 100 characters; returns the exit status and what it wrote there."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a new pty is 0 x 0: no room for a bar
    proc = subprocess.Popen(command, env=env(), stdout=subprocess.DEVNULL, stderr=child)
    os.close(child)
    written = b""
    while True:
        ready, _, _ = select.select([main], [], [], 1)
        if ready:
            try:
                data = os.read(main, 65536)
            except OSError:  # EIO: the child side is closed
                break
            if not data:
                break
            written += data
        elif proc.poll() is not None:
            break
    os.close(main)
    return proc.wait(timeout=60), written.decode(errors="replace")


def test_a_bar_on_a_terminal(site, tmp_path):
    status, written = run_on_terminal([str(BIN / "wikiprep"), *create_args(tmp_path / "out.tfrecord")])
    assert status == 0, written[-2000:]
    assert "instances: " in written and "\r" in written and "B/s" in written, written[-2000:]
