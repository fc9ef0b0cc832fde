"""`imagenet-prep convert / verify / stats` on a generated tree: a good folder passes, each kind of
damage is caught with one line and a non-zero exit, and errors never show a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagenet_prep import cli, convert, samples
from shardkit.manifest import MANIFEST, write_manifest
from shardkit.records import RecordWriter, read_records

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    tree = samples.write_sample_tree(root / "raw", classes=6, per_class=4, val_per_class=2, seed=2)
    out = root / "out"
    rc = cli.main(["convert", "--train-dir", tree["train_dir"], "--validation-dir", tree["validation_dir"],
                   "--val-labels", tree["val_labels"], "--output-dir", str(out), "--train-shards", "3",
                   "--validation-shards", "2", "--workers", "2"])
    assert rc == 0
    return root, out


def _copy(src: Path, dest: Path) -> Path:
    import shutil

    shutil.copytree(src, dest)
    return dest


def _run(capsys, argv) -> tuple[int, str, str]:
    rc = cli.main(argv)
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_convert_then_verify_and_stats(converted, capsys, tmp_path):
    _, out = converted
    rc, stdout, err = _run(capsys, ["verify", str(out)])
    assert rc == 0, err
    assert stdout.strip() == f"OK {out}: train 24 records, validation 12 records"
    rc, stdout, err = _run(capsys, ["stats", str(out), "--out", str(tmp_path / "report")])
    assert rc == 0, err
    report = json.loads((tmp_path / "report" / "stats.json").read_text())
    train = report["splits"]["train"]
    assert (train["records"], train["shards"], train["classes"]) == (24, 3, 6)
    assert train["records_per_shard"] == {"min": 8, "max": 8}
    assert train["per_class"]["1"] == {"synset": "n01440764", "records": 4}
    assert "train: 24 records in 3 shards" in (tmp_path / "report" / "report.txt").read_text()
    assert report["splits"]["validation"]["images_per_class"] == {"min": 2, "max": 2}
    for png in ("class_histogram.png", "image_sizes.png"):
        assert (tmp_path / "report" / png).read_bytes().startswith(b"\x89PNG")


def test_stats_of_an_unfinished_dataset_says_so(converted, capsys, tmp_path):
    """Shards and the plan, no MANIFEST.json yet: the report is made of the shards there, and says it is unfinished."""
    _, out = converted
    folder = _copy(out, tmp_path / "unfinished")
    (folder / "MANIFEST.json").unlink()
    rc, _, err = _run(capsys, ["stats", str(folder), "--out", str(tmp_path / "report")])
    assert rc == 0, err
    assert err.splitlines()[-1] == (f"imagenet-prep: warning: {folder}: an unfinished dataset (.work/plan.json is "
                                    f"there, MANIFEST.json not yet: the run making it has not finished); the report is "
                                    f"of the files written so far")
    assert "none yet: an UNFINISHED dataset" in (tmp_path / "report" / "report.txt").read_text()


def _rewrite_record(folder: Path, shard: str, change) -> None:
    """Replace the first record of `shard` by change(tf.train.Example), fix its index and the manifest,
    so that only the record-level check can find the damage."""
    import tensorflow as tf

    path = folder / shard
    payloads = list(read_records(path))
    ex = tf.train.Example.FromString(payloads[0])
    change(ex.features.feature)
    payloads[0] = ex.SerializeToString(deterministic=True)
    with RecordWriter(path, convert.index_path(folder, shard), overwrite=True) as w:  # damaged on purpose
        for p in payloads:
            w.write(p)
    manifest = json.loads((folder / MANIFEST).read_text())
    counts = {f["path"]: f["records"] for f in manifest["files"] if "records" in f}
    (folder / MANIFEST).unlink()
    write_manifest(folder, counts, {k: v for k, v in manifest.items() if k != "files"})


def _set_int(key, value):
    def change(feat):
        feat[key].int64_list.value[:] = [value]
    return change


def _set_bytes(key, value):
    def change(feat):
        feat[key].bytes_list.value[:] = [value(feat[key].bytes_list.value[0]) if callable(value) else value]
    return change


def _break_scan(data: bytes) -> bytes:
    """The JPEG with its first scan naming a component its frame lacks: the header reads fine, decoding fails."""
    pos = 2
    while data[pos + 1] != 0xDA:
        pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    return data[:pos + 5] + b"\x09" + data[pos + 6:]


@pytest.mark.parametrize("damage, message", [
    (_set_int("image/class/label", 0), "record 0 (n0"),
    (_set_int("image/class/label", 0), "image/class/label 0 outside 1..1000"),
    (_set_int("image/class/label", 2), "label 2 is n01443537 in the sorted synset list"),
    (_set_int("image/height", 7), "record says"),
    (_set_bytes("image/encoded", lambda d: d[:-2]), "no end-of-image marker"),
    (_set_bytes("image/encoded", lambda d: b"\x89PNG" + d[4:]), "start-of-image"),
    (lambda feat: feat.pop("image/class/synset"),
     "record 0: does not parse with the 15-key ImageNet schema: no image/class/synset feature"),
    (lambda feat: feat["image/height"].ClearField("int64_list") or feat["image/height"].float_list.value.append(1.0),
     "record 0: does not parse with the 15-key ImageNet schema: feature image/height is float, expected int64"),
    (_set_bytes("image/encoded", _break_scan),
     "image/encoded does not decode with tf.io.decode_jpeg (Invalid JPEG data or crop window)"),
    (lambda feat: feat["image/object/bbox/xmin"].float_list.value.append(0.5), "bbox lists of different lengths"),
])
def test_verify_finds_damaged_records(converted, capsys, tmp_path, damage, message):
    _, out = converted
    folder = _copy(out, tmp_path / "out")
    _rewrite_record(folder, "train-00001-of-00003", damage)
    rc, _, err = _run(capsys, ["verify", str(folder)])
    assert rc == 1
    assert err.startswith(f"imagenet-prep: error: {folder / 'train-00001-of-00003'}: record 0") and message in err, err
    assert err.count("\n") == 1
    assert "{{" not in err and "[Op:" not in err and "::" not in err, err  # none of TensorFlow's internals


def test_verify_finds_damaged_files(converted, capsys, tmp_path):
    _, out = converted
    cases = {
        "index": (lambda f: (f / "idx" / "train-00000-of-00003.idx").write_text("0 10\n"), "idx"),
        "missing shard": (lambda f: (f / "train-00002-of-00003").unlink(), "train-00002-of-00003: missing shard"),
        "stray": (lambda f: (f / "train-00000-of-00003.receipt.json").write_text("{}"), "stray file"),
        "checksum": (lambda f: (f / "validation-00000-of-00002").write_bytes(b"x"), "checksum differs"),
        "manifest": (lambda f: (f / MANIFEST).unlink(), "no manifest"),
    }
    for name, (damage, message) in cases.items():
        folder = _copy(out, tmp_path / name.replace(" ", "-"))
        damage(folder)
        rc, _, err = _run(capsys, ["verify", str(folder)])
        assert rc == 1 and message in err and err.count("\n") == 1, (name, err)


def test_errors_are_one_line_without_traceback(tmp_path):
    """The installed console script, as users run it."""
    exe = Path(sys.executable).with_name("imagenet-prep")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "imagenet_prep.cli"]
    p = subprocess.run(cmd + ["convert", "--train-dir", str(tmp_path / "nope"), "--output-dir", str(tmp_path / "o")],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 1
    assert p.stderr == f"imagenet-prep: error: {tmp_path / 'nope'}: train input not found\n"
    assert not (tmp_path / "o").exists()


def _group(pgid: int) -> list[int]:
    """The live processes of process group `pgid` (zombies aside: a reaped child is gone)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def test_sigterm_to_a_convert_and_its_workers_stops_them_all_and_leaves_nothing(tmp_path):
    """What Slurm does at a time limit: SIGTERM to the command and its worker processes at once. One line, exit
    status 143, no process left, and the folder the run created is gone (no shard, index, plan or temporary)."""
    tree = samples.write_sample_tree(tmp_path / "raw", classes=10, per_class=120, val_per_class=12, seed=3)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "imagenet_prep.cli", "convert", "--train-dir", tree["train_dir"], "--validation-dir",
           tree["validation_dir"], "--val-labels", tree["val_labels"], "--output-dir", str(out),
           "--train-shards", "300", "--validation-shards", "30", "--workers", "2"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    deadline = time.monotonic() + 120
    while not (out.is_dir() and [p for p in out.rglob("*") if ".tmp-" in p.name and "train-" in p.name]):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before a shard was being written"
        time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.startswith("imagenet-prep: terminated (SIGTERM)") and err.count("\n") == 1, err
    assert _group(proc.pid) == []
    assert not out.exists()


def _tree_bytes(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _other_inputs(root: Path, tmp_path: Path) -> dict[str, str]:
    """Inputs differing from the converted fixture's in one way each, for the placeholders of the cases below."""
    import shutil

    raw = root / "raw"
    labels = (raw / samples.VAL_LABELS_NAME).read_text().splitlines(True)
    (tmp_path / "relabelled.txt").write_text("".join([labels[1], labels[0], *labels[2:]]))
    shutil.copytree(raw / "train", tmp_path / "train-less")
    next((tmp_path / "train-less").glob("*/*.JPEG")).unlink()
    wnids = sorted(d.name for d in (raw / "train").iterdir())
    (tmp_path / "synsets.txt").write_text("".join(w + "\n" for w in wnids))
    shutil.copytree(raw, tmp_path / "elsewhere" / "raw")
    return {"RELABELLED": str(tmp_path / "relabelled.txt"), "TRAIN_LESS": str(tmp_path / "train-less"),
            "SYNSETS": str(tmp_path / "synsets.txt"), "MOVED": str(tmp_path / "elsewhere" / "raw")}


@pytest.mark.parametrize("change, expected", [
    ({"--train-shards": "4"}, ["--train-shards 3 there, 4 here"]),
    ({"--validation-shards": "1", "--seed": "7"}, ["--seed 12345 there, 7 here; --validation-shards 2 there, 1 here"]),
    ({"--validation-dir": None, "--val-labels": None}, ["--validation-shards 2 there, none here",
                                                       "--validation-dir 12 files (sha256 ", "--val-labels 12 labels"]),
    ({"--val-labels": "RELABELLED"}, ["(--val-labels 12 labels (sha256 ", ") there, 12 labels (sha256 "]),
    ({"--train-dir": "TRAIN_LESS"}, ["(--train-dir 24 files (sha256 ", ") there, 23 files (sha256 "]),
    ({"--synsets-file": "SYNSETS"}, ["--synsets-file 1000 synsets (sha256 ", ") there, 6 synsets (sha256 "]),
    ({"--max-pixels": "1000000"}, ["(--max-pixels 89478485 there, 1000000 here)"]),
    ({"--verify-decode": True}, ["(--verify-decode False there, True here)"]),
])
def test_convert_into_a_dataset_made_otherwise_is_refused_and_changes_nothing(converted, capsys, tmp_path, change,
                                                                             expected):
    root, out = converted
    target = _copy(out, tmp_path / "out")
    before = _tree_bytes(target)
    other_inputs = _other_inputs(root, tmp_path)
    same = {"--train-dir": str(root / "raw" / "train"), "--validation-dir": str(root / "raw" / "validation"),
            "--val-labels": str(root / "raw" / samples.VAL_LABELS_NAME), "--output-dir": str(target),
            "--train-shards": "3", "--validation-shards": "2", "--workers": "2"}
    other = {k: other_inputs.get(v, v) for k, v in {**same, **change}.items() if v is not None}
    rc, _, err = _run(capsys, ["convert", *[a for k, v in other.items() for a in ((k,) if v is True else (k, v))]])
    assert rc == 1
    assert err.startswith(f"imagenet-prep: error: {target}: holds an ImageNet dataset made with other parameters")
    assert all(text in err for text in expected) and "give another --output-dir" in err and err.count("\n") == 1, err
    assert _tree_bytes(target) == before  # refused before anything was written


def test_convert_into_the_same_dataset_does_nothing_wherever_the_inputs_are(converted, capsys, tmp_path):
    root, out = converted
    target = _copy(out, tmp_path / "out")
    before = _tree_bytes(target)
    moved = _other_inputs(root, tmp_path)["MOVED"]
    for raw in (str(root / "raw"), moved):  # the same images elsewhere are the same inputs
        argv = ["convert", "--train-dir", f"{raw}/train", "--validation-dir", f"{raw}/validation", "--val-labels",
                f"{raw}/{samples.VAL_LABELS_NAME}", "--output-dir", str(target), "--train-shards", "3",
                "--validation-shards", "2"]
        rc, stdout, err = _run(capsys, argv)
        assert rc == 0, err
        assert f"{target} already holds this dataset" in stdout
        assert _tree_bytes(target) == before
    (target / "train-00001-of-00003").unlink()  # no longer intact: made again, the same bytes
    rc, stdout, err = _run(capsys, argv)
    assert rc == 0 and f"wrote {target}" in stdout, err
    assert _tree_bytes(target).keys() == before.keys()
    assert {k: v for k, v in _tree_bytes(target).items() if k != ".work/plan.json"} == \
        {k: v for k, v in before.items() if k != ".work/plan.json"}


def test_convert_into_a_dataset_whose_inputs_are_unknown_is_refused(converted, capsys, tmp_path):
    root, out = converted
    raw = root / "raw"
    argv = ["convert", "--train-dir", str(raw / "train"), "--validation-dir", str(raw / "validation"),
            "--val-labels", str(raw / samples.VAL_LABELS_NAME), "--train-shards", "3", "--validation-shards", "2"]
    older = _copy(out, tmp_path / "older")
    plan = json.loads((older / ".work" / "plan.json").read_text())
    del plan["identity"]  # as imagenet-prep wrote plans before it identified the inputs
    (older / ".work" / "plan.json").write_text(json.dumps(plan))
    copied = _copy(out, tmp_path / "copied")
    (copied / ".work" / "plan.json").unlink()  # the dataset copied without its hidden folders
    for target, why in ((older, "its plan, from an older imagenet-prep, does not name them"),
                        (copied, ".work/plan.json, which names them, is missing")):
        before = _tree_bytes(target)
        rc, _, err = _run(capsys, argv + ["--output-dir", str(target)])
        assert rc == 1 and err == (f"imagenet-prep: error: {target}: holds an ImageNet dataset whose inputs cannot be "
                                   f"compared with these ({why}); give another --output-dir, or remove {target} to "
                                   f"rebuild it\n"), err
        assert _tree_bytes(target) == before
