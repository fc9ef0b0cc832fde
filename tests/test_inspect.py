"""`wikiprep inspect` and `imagenet-prep inspect`, run as users run them, on real files, checked against an
independent decode; and every sub-command of both programs ending quietly when its output pipe closes.

The independent decode reads the records' framing by hand and takes the features from elsewhere: the
reference instances of google-research's create_pretraining_data.py (decoded by TensorFlow into the
fixtures), or TensorFlow's own parse of the shards (in a subprocess), and names tokens with the vocabulary
file read as lines. The files inspected come from the original tools themselves where they exist: the
vendored create_pretraining_data.py (benchmarks/anchors/) and build_imagenet_data.py's `_convert_to_example`
writing through tf.train.Example (protobuf orders the features its own way, unlike our encoder).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from imagenet_prep import samples as imagenet_samples

REPO = Path(__file__).resolve().parents[1]
from fixture_paths import GOOGLE_REFERENCE as FIXTURES, REFERENCE_VOCAB as VOCAB  # noqa: E402
INPUTS = FIXTURES / "inputs"
ANCHORS = REPO / "benchmarks" / "anchors"
CASE = "sample_128_dup5_seed12345"  # 60 instances, seq 128, 20 predictions

PROGRAMS = {
    "wikiprep": [sys.executable, "-c", "import sys; from wikiprep.cli import main; sys.exit(main())"],
    "imagenet-prep": [sys.executable, "-c", "import sys; from imagenet_prep.cli import main; sys.exit(main())"],
}


def _env() -> dict:
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO))


def run(program: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(PROGRAMS[program] + list(args), capture_output=True, text=True, env=_env(), timeout=300,
                          **kwargs)


@pytest.fixture(scope="module")
def fixtures() -> Path:
    return FIXTURES


# ---------------------------------------------------------------------------------------------
# The independent decode

def framed_sizes(path: Path) -> list[int]:
    """The payload size of each record of a TFRecord file, from its framing (u64 length, u32 crc, data, u32 crc)."""
    data, pos, sizes = path.read_bytes(), 0, []
    while pos < len(data):
        (n,) = struct.unpack_from("<Q", data, pos)
        sizes.append(n)
        pos += 12 + n + 4
    return sizes


def vocab_lines(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").split("\n")[:-1]]


def expected_instance(ex: dict, tokens: list[str] | None) -> list[str]:
    """What inspect must print for one instance (every line but the `--- ...` header): `ex` the padded features,
    `tokens` the vocabulary's lines (None: ids)."""
    real = sum(ex["input_mask"])
    name = (lambda i: tokens[i]) if tokens is not None else str
    mask_id = tokens.index("[MASK]") if tokens is not None else None
    shown = [name(i) for i in ex["input_ids"][:real]]
    masks = [(p, i) for p, i, w in zip(ex["masked_lm_positions"], ex["masked_lm_ids"], ex["masked_lm_weights"]) if w]
    entries = []
    for p, original in masks:
        written = ex["input_ids"][p]
        if written == mask_id:
            entries.append(f"{p} {name(original)} -> [MASK]")
        else:
            shown[p] = "{" + shown[p] + "}"
            entries.append(f"{p} {name(original)} -> {shown[p]} {'kept' if written == original else 'random'}")
    seg = ex["segment_ids"][:real]
    a = [t for t, s in zip(shown, seg) if s == 0]
    b = [t for t, s in zip(shown, seg) if s == 1]
    return [f"lengths: A {len(a) - 2}, B {len(b) - 1} (without [CLS] and [SEP]), real {real}, "
            f"padded {len(ex['input_ids'])}; {len(masks)} masked of at most {len(ex['masked_lm_ids'])}",
            "A: " + " ".join(a), "B: " + " ".join(b), "masked: " + (" | ".join(entries) or "(none)")]


def label_words(ex: dict) -> str:
    return {0: "B is the real next", 1: "B is random"}[ex["next_sentence_labels"][0]]


def blocks(stdout: str) -> list[list[str]]:
    """The printed instances: each its `--- ` header line and the lines after it."""
    out: list[list[str]] = []
    for line in stdout.splitlines()[1:]:
        if line.startswith("--- "):
            out.append([line])
        else:
            out[-1].append(line)
    return out


# ---------------------------------------------------------------------------------------------
# wikiprep inspect

@pytest.fixture(scope="module")
def bert_files(fixtures, tmp_path_factory) -> dict:
    """The reference case written by the original script, by ours as TFRecord and as HDF5, and its instances."""
    root = tmp_path_factory.mktemp("inspect")
    case = next(c for c in json.loads((FIXTURES / "cases.json").read_text())["cases"] if c["name"] == CASE)
    flags = [f"--{k}={v}" for k, v in case["flags"].items()]
    inputs = "--input_file=" + ",".join(str(FIXTURES / f) for f in case["input_files"])
    google = root / "google" / "out.tfrecord"
    google.parent.mkdir()
    subprocess.run([sys.executable, str(ANCHORS / "google_create_pretraining_data.py"), inputs,
                    f"--output_file={google}", f"--vocab_file={VOCAB}", *flags],
                   env=_env(), capture_output=True, check=True, timeout=300)
    ours = {}
    for suffix, folder in ((".tfrecord", "ours"), (".hdf5", "ours_hdf5")):
        ours[suffix] = root / folder / f"wiki_00000{suffix}"
        res = run("wikiprep", "create-pretraining-data", inputs, f"--output_file={ours[suffix]}",
                  f"--vocab_file={VOCAB}", *flags)
        assert res.returncode == 0, res.stderr
        shutil.copy(VOCAB, root / folder / "vocab.txt")
    big = root / "big" / "wiki_00000.tfrecord"  # for the pipe: more output than a pipe holds
    res = run("wikiprep", "create-pretraining-data", inputs, f"--output_file={big}", f"--vocab_file={VOCAB}",
              "--dupe_factor=20")
    assert res.returncode == 0, res.stderr
    shutil.copy(VOCAB, big.parent / "vocab.txt")
    with gzip.open(FIXTURES / "expected" / f"{CASE}.jsonl.gz", "rt", encoding="utf-8") as f:
        expected = [json.loads(line) for line in f]
    assert len(expected) == case["count"] == 60
    return {"google": google, "tfrecord": ours[".tfrecord"], "hdf5": ours[".hdf5"], "big": big,
            "expected": expected, "root": root}


def test_inspect_a_file_of_the_original_script_shows_each_instance_as_decoded_independently(bert_files):
    google, expected = bert_files["google"], bert_files["expected"]
    res = run("wikiprep", "inspect", str(google), "-n", "60", "--vocab-file", str(VOCAB))
    assert res.returncode == 0 and res.stderr == "", res.stderr
    header = res.stdout.splitlines()[0]
    assert header.startswith(f"{google}: TFRecord, seq 128, 20 predictions; tokens from {VOCAB}."), header
    tokens = vocab_lines(VOCAB)
    sizes = framed_sizes(google)
    shown = blocks(res.stdout)
    assert len(shown) == len(sizes) == 60
    for k, (block, ex) in enumerate(zip(shown, expected)):
        assert block[0] == f"--- record {k} ({sizes[k]} bytes): {label_words(ex)}"
        assert block[1:] == expected_instance(ex, tokens), k
    text = res.stdout
    # The reference holds all three kinds of masked position, and both labels.
    assert " -> [MASK]" in text and " random" in text and " kept" in text
    assert "B is random" in text and "B is the real next" in text


def test_our_tfrecord_and_hdf5_files_show_the_same_instances_tokens_from_the_vocab_beside_them(bert_files):
    tokens = vocab_lines(VOCAB)
    for key in ("tfrecord", "hdf5"):
        path = bert_files[key]
        res = run("wikiprep", "inspect", str(path), "-n", "7")
        assert res.returncode == 0, res.stderr
        assert f"tokens from {path.parent / 'vocab.txt'} (beside the file)" in res.stdout.splitlines()[0]
        shown = blocks(res.stdout)
        assert len(shown) == 7
        for k, (block, ex) in enumerate(zip(shown, bert_files["expected"])):
            what = f"record {k} ({framed_sizes(path)[k]} bytes)" if key == "tfrecord" else f"instance {k}"
            assert block == [f"--- {what}: {label_words(ex)}"] + expected_instance(ex, tokens), (key, k)


def test_without_a_vocab_the_ids_are_shown(bert_files):
    res = run("wikiprep", "inspect", str(bert_files["google"]), "-n", "2")  # no vocab.txt beside it
    assert res.returncode == 0, res.stderr
    assert "token ids (no vocab.txt beside the file; give --vocab-file to see tokens)" in res.stdout.splitlines()[0]
    for block, ex in zip(blocks(res.stdout), bert_files["expected"]):
        assert block[1:] == expected_instance(ex, None)
        assert block[2].startswith("A: 101 ")  # [CLS]


def test_a_vocab_that_is_not_the_records_one_is_one_error_line(bert_files, tmp_path):
    small = tmp_path / "small.txt"
    small.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n", encoding="utf-8")
    google = bert_files["google"]
    res = run("wikiprep", "inspect", str(google), "--vocab-file", str(small))
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.splitlines() == [
        f"wikiprep: error: {small}: 6 tokens, but record 0 of {google} holds id "
        f"{max(bert_files['expected'][0]['input_ids'])}: not the vocabulary these records were made with "
        f"(give --vocab-file)"]
    # Large enough, but another vocabulary: its [CLS] is elsewhere.
    other = tmp_path / "other.txt"
    other.write_text("\n".join(reversed(vocab_lines(VOCAB))) + "\n", encoding="utf-8")
    res = run("wikiprep", "inspect", str(google), "--vocab-file", str(other))
    assert res.returncode == 1 and len(res.stderr.splitlines()) == 1, res.stderr
    assert "starts with id 101" in res.stderr and f"not its [CLS] ({len(vocab_lines(VOCAB)) - 1 - 101})" in res.stderr


# ---------------------------------------------------------------------------------------------
# imagenet-prep inspect

# Writes, as build_imagenet_data.py does (its _convert_to_example, tf.train.Example, TFRecordWriter), a shard of
# two records (one with two boxes, one with none), then prints TensorFlow's parse of every record of the shards given.
TF_SIDE = r"""
import json, sys
import tensorflow as tf
from testkit.build_imagenet_data import _convert_to_example
out, image, ours = sys.argv[1], open(sys.argv[2], "rb").read(), sys.argv[3:]

shape = tf.image.decode_jpeg(image, channels=3).shape
with tf.io.TFRecordWriter(out) as w:
    w.write(_convert_to_example("/data/train/n01751748/n01751748_10.JPEG", image, 66, "n01751748", "sea snake",
                                [[0.125, 0.25, 0.875, 0.75], [0.0, 0.5, 0.5, 1.0]], shape[0], shape[1])
            .SerializeToString())
    w.write(_convert_to_example("/data/validation/ILSVRC2012_val_00000001.JPEG", image, 66, "n01751748",
                                "sea snake", [], shape[0], shape[1]).SerializeToString())
spec = {k: tf.io.FixedLenFeature([], tf.string) for k in ("image/encoded", "image/format", "image/filename",
                                                          "image/colorspace", "image/class/synset",
                                                          "image/class/text")}
spec.update({k: tf.io.FixedLenFeature([], tf.int64) for k in ("image/height", "image/width", "image/channels",
                                                             "image/class/label")})
spec.update({f"image/object/bbox/{e}": tf.io.VarLenFeature(tf.float32) for e in ("xmin", "xmax", "ymin", "ymax")})
spec["image/object/bbox/label"] = tf.io.VarLenFeature(tf.int64)
parsed = {}
for path in [out] + ours:
    rows = []
    for raw in tf.data.TFRecordDataset(path):
        ex = tf.io.parse_single_example(raw, spec)
        row = {}
        for k, v in ex.items():
            v = tf.sparse.to_dense(v).numpy().tolist() if isinstance(v, tf.SparseTensor) else v.numpy()
            row[k] = len(v) if k == "image/encoded" else v.decode() if isinstance(v, bytes) else \
                v if isinstance(v, list) else int(v)
        rows.append(row)
    parsed[path] = rows
print(json.dumps(parsed))
"""


def expected_record(k: int, size: int, row: dict) -> list[str]:
    edges = [row[f"image/object/bbox/{e}"] for e in ("xmin", "xmax", "ymin", "ymax")]
    boxes = [f"label {lab} x {x0:.3f}-{x1:.3f} y {y0:.3f}-{y1:.3f}"
             for lab, x0, x1, y0, y1 in zip(row["image/object/bbox/label"], *edges)]
    return [f"--- record {k} ({size} bytes): {row['image/filename']}",
            f"label {row['image/class/label']}, synset {row['image/class/synset']}: {row['image/class/text']}",
            f"{row['image/height']}x{row['image/width']} (height x width), {row['image/format']}, "
            f"{row['image/colorspace']}, {row['image/channels']} channels; {row['image/encoded']} bytes encoded",
            f"boxes ({len(boxes)}): " + (" | ".join(boxes) or "none")]


@pytest.fixture(scope="module")
def imagenet_shards(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("imagenet-inspect")
    tree = imagenet_samples.write_sample_tree(root / "raw", classes=3, per_class=4, val_per_class=1, seed=3)
    out = root / "ours"
    res = run("imagenet-prep", "convert", "--train-dir", tree["train_dir"], "--validation-dir", tree["validation_dir"],
              "--val-labels", tree["val_labels"], "--output-dir", str(out), "--train-shards", "2",
              "--validation-shards", "1")
    assert res.returncode == 0, res.stderr
    ours = sorted(str(p) for p in out.glob("train-*"))
    reference = root / "reference" / "train-00000-of-00001"
    reference.parent.mkdir()
    image = next(Path(tree["train_dir"]).rglob("*.JPEG"))
    done = subprocess.run([sys.executable, "-c", TF_SIDE, str(reference), str(image), *ours], env=_env(),
                          capture_output=True, text=True, check=True, timeout=300)
    return {"reference": reference, "ours": [Path(p) for p in ours], "parsed": json.loads(done.stdout)}


def test_imagenet_inspect_shows_build_imagenet_data_records_as_tensorflow_parses_them(imagenet_shards):
    path = imagenet_shards["reference"]
    res = run("imagenet-prep", "inspect", str(path))
    assert res.returncode == 0 and res.stderr == "", res.stderr
    rows = imagenet_shards["parsed"][str(path)]
    sizes = framed_sizes(path)
    assert res.stdout.splitlines() == [f"{path}: TFRecord, ImageNet records (build_imagenet_data.py's 15 keys)"] + \
        expected_record(0, sizes[0], rows[0]) + expected_record(1, sizes[1], rows[1])
    assert "boxes (2): label 66 x 0.125-0.875 y 0.250-0.750 | label 66 x 0.000-0.500 y 0.500-1.000" in res.stdout
    assert "n01751748_10.JPEG" in res.stdout and "boxes (0): none" in res.stdout


def test_imagenet_inspect_shows_our_shards_records_as_tensorflow_parses_them(imagenet_shards):
    for path in imagenet_shards["ours"]:
        rows = imagenet_shards["parsed"][str(path)]
        res = run("imagenet-prep", "inspect", str(path), "-n", "4")
        assert res.returncode == 0, res.stderr
        sizes = framed_sizes(path)
        assert len(rows) >= 4
        assert res.stdout.splitlines()[1:] == [line for k in range(4) for line in expected_record(k, sizes[k], rows[k])]


# ---------------------------------------------------------------------------------------------
# A closed output pipe ends every command quietly

def test_inspect_piped_into_head_prints_its_lines_and_ends_quietly(bert_files):
    """A real pipe, `wikiprep inspect F | head -3`, with more output than a pipe buffers (64 KiB)."""
    path = bert_files["big"]
    whole = run("wikiprep", "inspect", str(path), "-n", "1000")
    assert whole.returncode == 0 and len(whole.stdout.encode()) > 1 << 17
    program = subprocess.Popen(PROGRAMS["wikiprep"] + ["inspect", str(path), "-n", "1000"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=_env())
    head = subprocess.Popen(["head", "-3"], stdin=program.stdout, stdout=subprocess.PIPE)
    program.stdout.close()  # head alone reads it: when head exits, the pipe's reader is gone
    shown = head.communicate(timeout=120)[0].decode()
    err = program.communicate(timeout=120)[1].decode()
    assert shown.splitlines() == whole.stdout.splitlines()[:3]
    assert program.returncode == 141, err
    assert err == ""


def _closed_pipe_run(argv: list[str], cwd: Path) -> tuple[int, str]:
    """Run with standard output a pipe whose reader closed before the program started: its first write fails."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(argv, stdout=write_end, stderr=subprocess.PIPE, env=_env(), cwd=cwd, timeout=300)
    finally:
        os.close(write_end)
    return done.returncode, done.stderr.decode()


def test_every_command_ends_quietly_when_its_output_is_closed(bert_files, imagenet_shards, tmp_path):
    """One command of each kind per program (the runner, shardkit.cli.run, is shared): the HDF5 dataset for
    wikiprep's verify and stats, which then read it without loading TensorFlow."""
    hdf5_folder = bert_files["hdf5"].parent
    imagenet = imagenet_shards["ours"][0].parent
    commands = [
        ["wikiprep", "inspect", str(bert_files["tfrecord"])],
        ["wikiprep", "verify", str(bert_files["hdf5"])],
        ["wikiprep", "stats", str(hdf5_folder), "--out", str(tmp_path / "wiki-report")],
        ["imagenet-prep", "inspect", str(imagenet_shards["ours"][0])],
        ["imagenet-prep", "verify", str(imagenet)],
    ]
    for program, *args in commands:
        code, err = _closed_pipe_run(PROGRAMS[program] + args, tmp_path)
        assert (code, err) == (141, ""), (program, args[0], err[-2000:])
    assert (tmp_path / "wiki-report" / "stats.json").is_file()  # the work was done; only the printing was cut
