"""The Luigi layer end to end on the embedded samples, through the `luigi` command line as users run it."""

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tensorflow as tf

from testkit.reports import as_hashed
from wikiprep.dataset import folder_name
from wikiprep.options import GenerationOptions
from workflows import DEMO_DATE, DEMO_WIKI

REPO = Path(__file__).resolve().parents[1]
LUIGI = str(Path(sys.executable).with_name("luigi"))
# The demo's dataset (4 shards): seq128_mask20_dup5_shards4 in the demo's data folder, as in pretrain_args' runs.
DATASET = Path(f"{DEMO_WIKI}-{DEMO_DATE}") / folder_name(GenerationOptions(dupe_factor=5), num_shards=4)


def run_luigi(*args, cwd=REPO, timeout=900):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("LUIGI_CONFIG_PATH", None)
    return subprocess.run([LUIGI, "--module", "workflows", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    r = run_luigi("Demo", "--out-dir", str(out), "--steps", "150", "--local-scheduler", "--workers", "2")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return out


def pretrain_args(demo_dir, data_dir, workers):
    return ["Pretrain128", "--data-dir", str(data_dir), "--dump-url", (demo_dir / "dumps-site").as_uri(),
            "--wiki", DEMO_WIKI, "--dump-date", DEMO_DATE, "--num-shards", "4", "--vocab-size", "8000",
            "--local-scheduler", "--workers", str(workers)]


def test_demo_builds_every_output(demo):
    summary = json.loads((demo / "summary.json").read_text())
    dataset = Path(summary["bert_dataset"])
    assert dataset == demo / "data" / DATASET
    downloads = demo / "data" / "downloads" / DEMO_WIKI / DEMO_DATE
    assert len(list(downloads.glob("*.bz2"))) == 2
    shards = sorted(dataset.glob("wiki_*.tfrecord"))
    assert [p.name for p in shards] == [f"wiki_{i:05d}.tfrecord" for i in range(4)]
    assert all(p.with_suffix(".index").is_file() for p in shards)
    stats = json.loads((dataset / "stats.json").read_text())
    assert stats["total"]["instances"] >= 2000, stats["total"]
    assert stats["dropped_documents"], "redirect/namespace/disambiguation pages should be reported as dropped"

    schema = {"input_ids": tf.io.FixedLenFeature([128], tf.int64),
              "input_mask": tf.io.FixedLenFeature([128], tf.int64),
              "segment_ids": tf.io.FixedLenFeature([128], tf.int64),
              "masked_lm_positions": tf.io.FixedLenFeature([20], tf.int64),
              "masked_lm_ids": tf.io.FixedLenFeature([20], tf.int64),
              "masked_lm_weights": tf.io.FixedLenFeature([20], tf.float32),
              "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64)}
    n = 0
    for raw in tf.data.TFRecordDataset([str(p) for p in shards]):
        tf.io.parse_single_example(raw, schema)  # every record must parse with the reference spec
        n += 1
    assert n == stats["total"]["instances"]
    manifest = json.loads((dataset / "MANIFEST.json").read_text())
    assert sum(f.get("records", 0) for f in manifest["files"]) == n
    # The manifest's shard and index hashes are those the shard tasks recorded, and they are the files' own.
    listed = {f["path"]: (f["sha256"], f["size"]) for f in manifest["files"]}
    for shard in shards:
        receipt = json.loads((dataset / ".receipts" / f"{shard.name}.json").read_text())
        index = dataset / receipt["index"]["file"]
        assert listed[shard.name] == (receipt["sha256"], receipt["size"])
        assert listed[index.name] == (receipt["index"]["sha256"], receipt["index"]["size"])
        assert receipt["index"]["sha256"] == hashlib.sha256(index.read_bytes()).hexdigest()

    for tool, folder in (("wikiprep", dataset), ("imagenet-prep", Path(summary["imagenet_dataset"]))):
        r = subprocess.run([str(Path(sys.executable).with_name(tool)), "verify", str(folder)],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr

    for name in ("train_bert", "train_imagenet"):
        t = summary[name]
        rows = (Path(t["out_dir"]) / "metrics.csv").read_text().splitlines()
        assert rows[0].split(",")[:2] == ["step", "loss"] and len(rows) == 151
        assert (Path(t["out_dir"]) / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert t["last_loss"] < t["first_loss"], t

    r = subprocess.run([sys.executable, "-m", "workflows", "summary", str(demo)], capture_output=True, text=True)
    assert r.returncode == 0 and "metrics.csv" in r.stdout and str(dataset) in r.stdout

    # Each dataset's task wrote its report inside it, outside MANIFEST.json (verify passed above), naming the
    # dataset by its folder's name only; `summary` (what `make demo` ends with) prints where.
    for folder in (dataset, Path(summary["imagenet_dataset"])):
        report = folder / "report"
        assert str(report / "report.html") in r.stdout
        page = (report / "report.html").read_text()
        assert page.count('<img src="data:image/png;base64,') == len(list(report.glob("*.png"))) >= 5
        assert str(demo) not in page and str(demo) not in (report / "stats.json").read_text()
        assert (folder / ".receipts" / "report.json").is_file()
        assert not [f for f in json.loads((folder / "MANIFEST.json").read_text())["files"]
                    if f["path"].startswith("report")]
    # The task made the BERT report from its shards' receipts, without reading a record: the same bytes as
    # `wikiprep stats`, which reads every record and hashes every file, but for the manifest line that says so.
    assert all("report_stats" in json.loads((dataset / ".receipts" / f"{p.name}.json").read_text()) for p in shards)
    assert _same_report_as_wikiprep_stats(dataset)


def _same_report_as_wikiprep_stats(dataset: Path) -> bool:
    """The task's report inside `dataset` is the bytes `wikiprep stats` writes for it, file by file, but for the line
    that says the task took the sha256 from the writers (`testkit.reports`). The command runs from the folder's
    parent, so that it names the folder as the task does: by its name."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report"
        r = subprocess.run([str(Path(sys.executable).with_name("wikiprep")), "stats", dataset.name, "--out", str(out)],
                           cwd=dataset.parent, capture_output=True, text=True,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        assert r.returncode == 0, r.stderr[-3000:]
        assert json.loads((out / "stats.json").read_text())["manifest"]["ok"]
        return as_hashed(dataset / "report") == {p.name: p.read_bytes() for p in out.iterdir()}


def test_same_bytes_whatever_the_worker_count(demo, tmp_path):
    r = run_luigi(*pretrain_args(demo, tmp_path / "data", workers=1))
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "data" / DATASET / "MANIFEST.json").read_bytes() == \
        (demo / "data" / DATASET / "MANIFEST.json").read_bytes()
    assert _tree_digest(tmp_path / "data" / DATASET / "report") == _tree_digest(demo / "data" / DATASET / "report")


def test_sigterm_mid_run_leaves_no_temporary_and_the_rerun_gives_the_same_bytes(demo, tmp_path):
    """What Slurm does at a time limit: SIGTERM to every process of the job, the worker processes included."""
    data = tmp_path / "data"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("LUIGI_CONFIG_PATH", None)
    proc = subprocess.Popen([LUIGI, "--module", "workflows", *pretrain_args(demo, data, workers=2)], cwd=REPO,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 600
    # Once the sentence shards exist, instance generation writes its temporaries.
    while not list((data / DATASET).glob("*.tmp-*")):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before writing a shard"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    proc.communicate(timeout=120)
    assert proc.returncode != 0
    time.sleep(0.5)  # the forked workers exit on their own SIGTERM
    assert not [p for p in data.rglob("*") if ".tmp-" in p.name], "temporaries left after SIGTERM"

    r = run_luigi(*pretrain_args(demo, data, workers=2))
    assert r.returncode == 0, r.stderr[-3000:]
    assert (data / DATASET / "MANIFEST.json").read_bytes() == (demo / "data" / DATASET / "MANIFEST.json").read_bytes()


def test_rerun_after_losing_outputs_gives_identical_files(demo, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(demo / "data", data)
    dataset = data / DATASET
    before = (dataset / "MANIFEST.json").read_bytes()
    # A run killed between a shard's commit and its receipt, before the manifest, beside a writer of this
    # host that died mid-write and a temporary of another host: its writer may still run, so the shard's
    # own task leaves it, and the finalize, which runs once every shard is committed, removes it.
    (dataset / ".receipts" / "wiki_00002.tfrecord.json").unlink()
    # A shard whose receipt was written before receipts held the report's figures: the report reads it instead.
    old_receipt = dataset / ".receipts" / "wiki_00001.tfrecord.json"
    receipt = json.loads(old_receipt.read_text())
    del receipt["report_stats"]
    old_receipt.write_text(json.dumps(receipt))
    (dataset / ".receipts" / "MANIFEST.json.json").unlink()
    (dataset / "MANIFEST.json").unlink()
    dead_pid = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                                  text=True).stdout)
    (dataset / f"wiki_00002.tfrecord.tmp-{socket.gethostname()}-{dead_pid}").write_bytes(b"junk")
    (dataset / "wiki_00002.tfrecord.tmp-node17-1").write_bytes(b"junk")
    # And a report killed half-written (its folder is committed as one: only its temporary can be half).
    report = _tree_digest(dataset / "report")
    shutil.rmtree(dataset / "report")
    (dataset / ".receipts" / "report.json").unlink()
    (dataset / f"report.tmp-{socket.gethostname()}-{dead_pid}").mkdir()
    (dataset / f"report.tmp-{socket.gethostname()}-{dead_pid}" / "stats.json").write_text("{")
    r = run_luigi(*pretrain_args(demo, data, workers=2))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "PretrainShard" in r.stderr + r.stdout  # ran again: its file found identical
    assert (dataset / "MANIFEST.json").read_bytes() == before
    assert (dataset / ".receipts" / "wiki_00002.tfrecord.json").is_file()
    assert [p.name for p in dataset.glob("*.tmp-*")] == []
    assert _tree_digest(dataset / "report") == report and (dataset / ".receipts" / "report.json").is_file()
    assert "report_stats" not in json.loads(old_receipt.read_text())  # complete: not run again


@pytest.mark.parametrize("change, expected", [
    ({"--dump-date": "latest"}, "--dump-date 'latest'"),
    ({"--dump-date": "20250101"}, "20250101"),
    ({"--vocab-file": "/nonexistent/vocab.txt"}, "/nonexistent/vocab.txt"),
])
def test_bad_parameters_give_one_clear_line(demo, tmp_path, change, expected):
    args = pretrain_args(demo, tmp_path / "data", workers=1)
    for flag, value in change.items():
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    r = run_luigi(*args)
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.startswith("wikiprep: error:")]
    assert lines and expected in lines[0], r.stderr[-3000:]
    assert "Traceback" not in r.stderr


def _tree_digest(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("change, expected", [
    # (Another shard count, seed or whole-word masking is a sibling dataset in a folder of its own: test_siblings.)
    ({"--vocab-size": "9000"}, ["vocab_size 8000 there, 9000 here"]),
    ({"--short-seq-prob": "0.2", "--fixed-mask-count": None}, ["fixed_mask_count False there, True here",
                                                               "short_seq_prob 0.1 there, 0.2 here"]),
    ({"--dupe-factor": "5", "--masked-lm-prob": "0.2"}, ["masked_lm_prob 0.15 there, 0.2 here"]),
    ({"--vocab-file": "OTHER_VOCAB"}, ["vocab_sha256 '"]),
    ({"--vocab-file": "NOT_A_VOCAB"}, ["not a BERT vocabulary"]),
])
def test_a_rerun_with_other_content_parameters_is_refused_before_any_work(demo, tmp_path, change, expected):
    data = tmp_path / "data"
    shutil.copytree(demo / "data", data)
    before = _tree_digest(data)
    (tmp_path / "OTHER_VOCAB").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n##s\n")
    (tmp_path / "NOT_A_VOCAB").write_text("just some text\n")
    args = pretrain_args(demo, data, workers=1)
    for flag, value in change.items():
        value = str(tmp_path / value) if value in ("OTHER_VOCAB", "NOT_A_VOCAB") else value
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag] + ([value] if value is not None else [])
    r = run_luigi(*args)
    assert r.returncode != 0, r.stderr[-3000:]
    lines = [line for line in r.stderr.splitlines() if line.startswith("wikiprep: error:")]
    assert len(lines) == 1, r.stderr[-3000:]
    for text in expected:
        assert text in lines[0], lines[0]
    if "not a BERT vocabulary" not in expected[0]:
        assert "give another --data-dir, or remove" in lines[0]
    assert "Traceback" not in r.stderr
    assert _tree_digest(data) == before  # nothing ran: no shard, no split, no receipt changed


def test_a_rerun_that_changes_only_how_work_is_cut_is_complete(demo, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(demo / "data", data)
    r = run_luigi(*pretrain_args(demo, data, workers=1), "--extract-slice-mb", "50")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "complete ones were encountered" in r.stdout + r.stderr


def test_imagenet_bytes_do_not_depend_on_where_the_inputs_live(demo, tmp_path):
    raw = tmp_path / "elsewhere" / "raw"
    shutil.copytree(demo / "imagenet-raw", raw)
    r = run_luigi("ImageNet", "--train-dir", str(raw / "train"), "--validation-dir", str(raw / "validation"),
                  "--val-labels", str(raw / "validation_labels.txt"), "--output-dir", str(tmp_path / "out"),
                  "--train-shards", "4", "--validation-shards", "2", "--local-scheduler", "--workers", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "out" / "MANIFEST.json").read_bytes() == (demo / "imagenet" / "MANIFEST.json").read_bytes()
    names = sorted(p.name for p in (tmp_path / "out").iterdir() if not p.name.startswith("."))
    assert names == ["MANIFEST.json", "idx", "report", "train-00000-of-00004", "train-00001-of-00004",
                     "train-00002-of-00004", "train-00003-of-00004", "validation-00000-of-00002",
                     "validation-00001-of-00002"]
    # The report names the dataset by its folder ("out" here, "imagenet" in the demo), and says the same of it.
    ours, theirs = (json.loads((folder / "report" / "stats.json").read_text()) for folder in (tmp_path / "out",
                                                                                             demo / "imagenet"))
    assert (ours.pop("folder"), theirs.pop("folder")) == ("out", "imagenet") and ours == theirs


@pytest.mark.parametrize("log_args", [[], ["--log-level", "DEBUG"]])
def test_imagenet_bad_input_gives_one_imagenet_prep_line(demo, tmp_path, log_args):
    raw = demo / "imagenet-raw"
    missing = tmp_path / "no-such-train-dir"
    r = run_luigi("ImageNet", "--train-dir", str(missing), "--validation-dir", str(raw / "validation"),
                  "--val-labels", str(raw / "validation_labels.txt"), "--output-dir", str(tmp_path / "out"),
                  "--train-shards", "4", "--validation-shards", "2", "--local-scheduler", "--workers", "1", *log_args)
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.startswith("imagenet-prep: error:")]
    assert len(lines) == 1 and str(missing) in lines[0], r.stderr[-3000:]
    assert "wikiprep: error:" not in r.stderr
    # At luigi.cfg's level the line is the whole story; --log-level DEBUG keeps the traceback behind it.
    assert ("Traceback" in r.stderr) == bool(log_args), r.stderr[-3000:]


def test_imagenet_rerun_with_other_shard_counts_is_refused_before_any_work(demo, tmp_path):
    out = tmp_path / "imagenet"
    shutil.copytree(demo / "imagenet", out)
    before = _tree_digest(out)
    raw = demo / "imagenet-raw"
    r = run_luigi("ImageNet", "--train-dir", str(raw / "train"), "--validation-dir", str(raw / "validation"),
                  "--val-labels", str(raw / "validation_labels.txt"), "--output-dir", str(out),
                  "--train-shards", "3", "--validation-shards", "2", "--seed", "9", "--local-scheduler",
                  "--workers", "1")
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.startswith("imagenet-prep: error:")]
    assert len(lines) == 1, r.stderr[-3000:]
    assert "--seed 12345 there, 9 here; --train-shards 4 there, 3 here" in lines[0], lines[0]
    assert "Traceback" not in r.stderr
    assert _tree_digest(out) == before


def _imagenet_inputs_changed(raw: Path, tmp_path: Path, change: str) -> dict:
    """The demo's ImageNet arguments with one input changed: relabelled (two validation labels swapped),
    one train image fewer, or the same tree moved elsewhere."""
    args = {"--train-dir": raw / "train", "--validation-dir": raw / "validation",
            "--val-labels": raw / "validation_labels.txt"}
    if change == "relabelled":
        lines = args["--val-labels"].read_text().splitlines(True)
        args["--val-labels"] = tmp_path / "relabelled.txt"
        args["--val-labels"].write_text("".join([lines[1], lines[0], *lines[2:]]))
    elif change == "train-less":
        args["--train-dir"] = tmp_path / "train-less"
        shutil.copytree(raw / "train", args["--train-dir"])
        sorted(args["--train-dir"].glob("*/*.JPEG"))[0].unlink()
    elif change == "moved":
        shutil.copytree(raw, tmp_path / "moved")
        args = {flag: tmp_path / "moved" / path.relative_to(raw) for flag, path in args.items()}
    return {flag: str(path) for flag, path in args.items()}


@pytest.mark.parametrize("change, expected", [
    ("relabelled", "(--val-labels 50 labels (sha256 "),
    ("train-less", "(--train-dir 200 files (sha256 "),
])
@pytest.mark.parametrize("state", ["finished", "in progress"])
def test_imagenet_rerun_from_other_inputs_is_refused_before_any_work(demo, tmp_path, change, expected, state):
    out = tmp_path / "imagenet"
    shutil.copytree(demo / "imagenet", out)
    if state == "in progress":  # killed after the plan and a shard: the plan, not MANIFEST.json, says what it is
        for name in ("MANIFEST.json", ".receipts/MANIFEST.json.json", "train-00001-of-00004",
                     ".receipts/train-00001-of-00004.json"):
            (out / name).unlink()
    before = _tree_digest(out)
    args = _imagenet_inputs_changed(demo / "imagenet-raw", tmp_path, change)
    r = run_luigi("ImageNet", *[a for kv in args.items() for a in kv], "--output-dir", str(out),
                  "--train-shards", "4", "--validation-shards", "2", "--local-scheduler", "--workers", "1")
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.startswith("imagenet-prep: error:")]
    assert len(lines) == 1, r.stderr[-3000:]
    assert f"{out}: holds an ImageNet dataset made with other parameters {expected}" in lines[0], lines[0]
    assert "give another --output-dir, or remove" in lines[0] and "Traceback" not in r.stderr
    assert _tree_digest(out) == before  # not returned as complete, nor finished from the old plan


def test_imagenet_rerun_from_the_same_images_elsewhere_is_complete(demo, tmp_path):
    out = tmp_path / "imagenet"
    shutil.copytree(demo / "imagenet", out)
    before = _tree_digest(out)
    args = _imagenet_inputs_changed(demo / "imagenet-raw", tmp_path, "moved")
    r = run_luigi("ImageNet", *[a for kv in args.items() for a in kv], "--output-dir", str(out),
                  "--train-shards", "4", "--validation-shards", "2", "--local-scheduler", "--workers", "1")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "complete ones were encountered" in r.stdout + r.stderr
    assert _tree_digest(out) == before



@pytest.mark.parametrize("flag, value", [("--train-shards", "0"), ("--validation-shards", "-1"), ("--seed", "-5")])
def test_imagenet_bad_counts_are_refused_by_their_flag_before_any_work(demo, tmp_path, flag, value):
    raw = demo / "imagenet-raw"
    args = {"--train-dir": str(raw / "train"), "--validation-dir": str(raw / "validation"),
            "--val-labels": str(raw / "validation_labels.txt"), "--output-dir": str(tmp_path / "out"),
            "--train-shards": "4", "--validation-shards": "2", flag: value}
    r = run_luigi("ImageNet", *[a for kv in args.items() for a in kv], "--local-scheduler", "--workers", "1")
    assert r.returncode != 0
    lines = [line for line in r.stderr.splitlines() if line.startswith("imagenet-prep: error:")]
    assert lines == [f"imagenet-prep: error: {flag} {value}: must be a "
                     f"{'non-negative' if flag == '--seed' else 'positive'} integer"], r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()
