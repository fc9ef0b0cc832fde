"""The thin trainers learn from real TFRecords written by `shardkit.records`, and reject bad input.

Datasets are made here, small but learnable: BERT instances of Zipf-distributed words whose
second segment repeats the first unless it is a "random next"; ImageNet records whose
JPEGs (drawn with PIL) are one colour and shape per class. Each trainer runs ~120 steps and
must bring its loss clearly down.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from shardkit.errors import PrepError
from shardkit.example import BYTES, FLOAT, INT64, encode_example
from shardkit.records import RecordWriter, index_path_for
from trainers.bert import train_bert
from trainers.cnn import train_imagenet

SEQ, MAX_PRED, VOCAB = 64, 8, 1000
CLS, SEP, MASK, FIRST_WORD = 2, 3, 4, 10
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# Word ids drawn Zipf-like, as in real text: the rank-r word has probability ~ 1/r^1.3.
_WORDS = list(range(FIRST_WORD, VOCAB))
_WORD_WEIGHTS = [1.0 / (r + 1) ** 1.3 for r in range(len(_WORDS))]


def _bert_instance(rng: random.Random) -> bytes:
    """Segment B repeats segment A, except for label 1 ("random next") when it is drawn afresh.

    Masked words are learnable from their frequency and (for label 0) from the other segment.
    """
    len_a = rng.randint(10, 25)
    len_b = min(len_a, SEQ - 3 - len_a)
    a = rng.choices(_WORDS, _WORD_WEIGHTS, k=len_a)
    is_random = rng.random() < 0.5
    b = rng.choices(_WORDS, _WORD_WEIGHTS, k=len_b) if is_random else a[:len_b]
    tokens = [CLS] + a + [SEP] + b + [SEP]
    segments = [0] * (len_a + 2) + [1] * (len_b + 1)
    candidates = [i for i, t in enumerate(tokens) if t not in (CLS, SEP)]
    positions = sorted(rng.sample(candidates, rng.randint(3, MAX_PRED)))
    labels = [tokens[p] for p in positions]
    for p in positions:
        tokens[p] = MASK
    n, m = len(tokens), len(positions)
    pad, pad_pred = SEQ - n, MAX_PRED - m
    return encode_example([
        ("input_ids", INT64, tokens + [0] * pad),
        ("input_mask", INT64, [1] * n + [0] * pad),
        ("segment_ids", INT64, segments + [0] * pad),
        ("masked_lm_positions", INT64, positions + [0] * pad_pred),
        ("masked_lm_ids", INT64, labels + [0] * pad_pred),
        ("masked_lm_weights", FLOAT, [1.0] * m + [0.0] * pad_pred),
        ("next_sentence_labels", INT64, [int(is_random)]),
    ])


@pytest.fixture(scope="module")
def bert_dataset(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("bert_ds")
    rng = random.Random(7)
    for shard in range(2):
        path = folder / f"wiki_{shard:05d}.tfrecord"
        with RecordWriter(path, index_path_for(path)) as w:
            for _ in range(600):
                w.write(_bert_instance(rng))
    names = {0: "[PAD]", CLS: "[CLS]", SEP: "[SEP]", MASK: "[MASK]"}
    (folder / "vocab.txt").write_text("".join(names.get(i, f"tok{i}") + "\n" for i in range(VOCAB)))
    return folder


# Class k is a shape of one colour on a grey ground; position and size vary per image.
COLOURS = [(220, 30, 30), (30, 200, 40), (40, 60, 230), (240, 220, 30)]
LABELS = [1, 250, 500, 1000]  # label ends included: 1..1000 maps onto logits 0..999


def _jpeg(rng: random.Random, k: int) -> bytes:
    img = Image.new("RGB", (48, 40), (128, 128, 128))
    draw = ImageDraw.Draw(img)
    x, y, s = rng.randint(0, 20), rng.randint(0, 14), rng.randint(18, 26)
    if k % 2 == 0:
        draw.ellipse([x, y, x + s, y + s], fill=COLOURS[k])
    else:
        draw.rectangle([x, y, x + s, y + s], fill=COLOURS[k])
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def _imagenet_example(rng: random.Random, k: int, i: int) -> bytes:
    return encode_example([
        ("image/encoded", BYTES, [_jpeg(rng, k)]),
        ("image/height", INT64, [40]),
        ("image/width", INT64, [48]),
        ("image/colorspace", BYTES, [b"RGB"]),
        ("image/channels", INT64, [3]),
        ("image/format", BYTES, [b"JPEG"]),
        ("image/filename", BYTES, [f"n{k:08d}_{i}.JPEG".encode()]),
        ("image/class/label", INT64, [LABELS[k]]),
        ("image/class/synset", BYTES, [f"n{k:08d}".encode()]),
        ("image/class/text", BYTES, [f"class {k}".encode()]),
        ("image/object/bbox/xmin", FLOAT, []),
        ("image/object/bbox/xmax", FLOAT, []),
        ("image/object/bbox/ymin", FLOAT, []),
        ("image/object/bbox/ymax", FLOAT, []),
        ("image/object/bbox/label", INT64, []),
    ])


@pytest.fixture(scope="module")
def imagenet_dataset(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("imagenet_ds")
    rng = random.Random(3)
    items = [(k, i) for k in range(len(COLOURS)) for i in range(20)]
    rng.shuffle(items)
    shards = 2
    for s in range(shards):
        with RecordWriter(folder / f"train-{s:05d}-of-{shards:05d}") as w:
            for k, i in items[s::shards]:
                w.write(_imagenet_example(rng, k, i))
    (folder / "idx").mkdir()
    (folder / "MANIFEST.json").write_text("{}\n")  # siblings the trainer must leave alone
    return folder


def _read_metrics(out: Path) -> list[dict]:
    with open(out / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def _assert_outputs(out: Path, steps: int, columns: list[str]) -> list[float]:
    rows = _read_metrics(out)
    assert len(rows) == steps
    assert list(rows[0].keys()) == columns
    assert [int(r["step"]) for r in rows] == list(range(1, steps + 1))
    png = (out / "loss.png").read_bytes()
    assert png.startswith(PNG_MAGIC) and len(png) > 5000
    with Image.open(out / "loss.png") as im:
        assert im.format == "PNG" and im.size[0] >= 300
    assert not [p.name for p in out.iterdir() if ".tmp-" in p.name]
    return [float(r["loss"]) for r in rows]


BERT_COLUMNS = ["step", "loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "examples_per_s"]


def test_train_bert_loss_falls(bert_dataset, tmp_path):
    steps = 120
    result = train_bert(bert_dataset, tmp_path / "out", steps=steps, batch_size=32, seed=0, holdout_files=1,
                        compact_vocab=True)
    losses = _assert_outputs(tmp_path / "out", steps, BERT_COLUMNS)
    rows = _read_metrics(tmp_path / "out")
    for r in rows:  # loss is the sum of the two heads' losses
        assert float(r["loss"]) == pytest.approx(float(r["mlm_loss"]) + float(r["nsp_loss"]), rel=1e-4, abs=1e-4)
        assert 0 <= float(r["mlm_accuracy"]) <= 1 and 0 <= float(r["nsp_accuracy"]) <= 1
        assert float(r["examples_per_s"]) > 0
    # Accuracy grows with training, on the shard trained on and on the one held out.
    mean = lambda col, part: sum(float(r[col]) for r in part) / len(part)  # noqa: E731
    assert mean("mlm_accuracy", rows[-10:]) > mean("mlm_accuracy", rows[:10]) + 0.05
    assert result["files"] == 1 and result["eval_files"] == 1 and result["eval_examples"] == 600
    assert result["eval_mlm_loss"] < 6.0 and result["eval_mlm_accuracy"] > 0.05, result
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    # Untrained, MLM loss is about ln(1000) = 6.9 and NSP ln(2) = 0.69.
    assert 6.0 < first < 9.0
    assert last < first - 1.5, (first, last)
    assert result["first_loss"] == pytest.approx(first, rel=1e-4)
    assert result["last_loss"] == pytest.approx(last, rel=1e-4)
    assert (result["seq_length"], result["max_predictions_per_seq"], result["vocab_size"]) == (SEQ, MAX_PRED, VOCAB)
    # The text's words (Zipf-drawn from 990), [CLS], [SEP], [MASK]'s id, and one id for whatever else.
    assert 800 < result["model_vocab_size"] < VOCAB - 5
    assert 0 < result["eval_mlm_loss_mask_slots"] and 0 <= result["eval_mlm_accuracy_mask_slots"] <= 1
    assert result["steps"] == steps and result["seconds_per_step"] > 0


def test_train_imagenet_loss_falls(imagenet_dataset, tmp_path):
    steps = 100
    result = train_imagenet(imagenet_dataset, tmp_path / "out", steps=steps, batch_size=16, image_size=32, seed=0)
    losses = _assert_outputs(tmp_path / "out", steps, ["step", "loss", "accuracy", "examples_per_s"])
    first, last = sum(losses[:10]) / 10, sum(losses[-10:]) / 10
    assert first > 5.0  # untrained: about ln(1000) = 6.9
    assert last < first - 3.0, (first, last)
    assert result["first_loss"] == pytest.approx(first, rel=1e-4)
    assert result["last_loss"] == pytest.approx(last, rel=1e-4)
    assert result["files"] == 2


def _overfit_instance(rng: random.Random, seq: int, pred: int, real: int, decoy: int) -> bytes:
    """`real` masked slots of weight 1, then padding slots of weight 0 that point at the first real
    slot's position with another answer (`decoy`): a loss that ignored masked_lm_weights would have
    to predict two answers at one place, and could not reach 0."""
    n = seq - 4
    tokens = [CLS] + rng.choices(_WORDS[:50], k=n) + [SEP]
    positions = sorted(rng.sample(range(1, n + 1), real))
    labels = [tokens[p] for p in positions]
    for p in positions:
        tokens[p] = MASK
    pad = seq - len(tokens)
    return encode_example([
        ("input_ids", INT64, tokens + [0] * pad),
        ("input_mask", INT64, [1] * len(tokens) + [0] * pad),
        ("segment_ids", INT64, [0] * seq),
        ("masked_lm_positions", INT64, positions + [positions[0]] * (pred - real)),
        ("masked_lm_ids", INT64, labels + [decoy] * (pred - real)),
        ("masked_lm_weights", FLOAT, [1.0] * real + [0.0] * (pred - real)),
        ("next_sentence_labels", INT64, [rng.random() < 0.5]),
    ])


def test_bert_overfits_a_fixed_batch_on_weighted_slots_only(tmp_path):
    """Eight instances, batch 8: the model sees the same batch every step and must learn it by heart,
    masked-LM answers (weighted slots only) and next-sentence labels alike."""
    folder = tmp_path / "tiny"
    folder.mkdir()
    rng = random.Random(5)
    with RecordWriter(folder / "wiki_00000.tfrecord") as w:
        for _ in range(8):
            w.write(_overfit_instance(rng, seq=24, pred=6, real=2, decoy=VOCAB - 1))
    (folder / "vocab.txt").write_text("".join(f"tok{i}\n" for i in range(VOCAB)))
    steps = 60
    result = train_bert(folder, tmp_path / "out", steps=steps, batch_size=8, learning_rate=1e-2, warmup_fraction=0.05)
    rows = _read_metrics(tmp_path / "out")
    assert list(rows[0]) == BERT_COLUMNS and len(rows) == steps
    assert float(rows[0]["mlm_loss"]) > 5.0  # untrained: about ln(1000)
    # Weights ignored, each instance's 4 decoys (weight 0) would share a place with its first real slot:
    # the best answer there is 4/5 decoy, so loss >= 5/6 * H(1/5, 4/5) = 0.42 and accuracy <= 5/6.
    assert result["last_mlm_loss"] < 0.1, result
    assert result["last_mlm_accuracy"] == 1.0
    assert result["last_nsp_loss"] < 0.2 and result["last_nsp_accuracy"] == 1.0, result


def test_bert_bad_input(tmp_path, bert_dataset):
    missing = tmp_path / "nowhere"
    with pytest.raises(PrepError, match="nowhere"):
        train_bert(missing, tmp_path / "out")

    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "wiki_00000.index").write_text("")
    with pytest.raises(PrepError, match=r"empty: no \*\.tfrecord files"):
        train_bert(empty, tmp_path / "out")

    garbage = tmp_path / "garbage"
    garbage.mkdir()
    good = bert_dataset / "wiki_00000.tfrecord"
    (garbage / "wiki_00000.tfrecord").write_bytes(good.read_bytes())
    (garbage / "wiki_00001.tfrecord").write_bytes(b"this is not a tfrecord file at all" * 4)
    with pytest.raises(PrepError, match="wiki_00001.tfrecord"):
        train_bert(garbage, tmp_path / "out", steps=2)

    # Framed correctly but not a BERT record: an ImageNet-style example.
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    with RecordWriter(wrong / "wiki_00000.tfrecord") as w:
        w.write(encode_example([("image/class/label", INT64, [3])]))
    with pytest.raises(PrepError, match=r"wiki_00000.tfrecord.*input_ids"):
        train_bert(wrong, tmp_path / "out", steps=2)

    # A record corrupted after the first one: found while training, the file still named.
    late = tmp_path / "late"
    late.mkdir()
    data = bytearray(good.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (late / "wiki_00000.tfrecord").write_bytes(bytes(data))
    (late / "vocab.txt").write_bytes((bert_dataset / "vocab.txt").read_bytes())  # else the vocab scan finds it
    with pytest.raises(PrepError, match="wiki_00000.tfrecord"):
        train_bert(late, tmp_path / "out", steps=50, batch_size=32)

    # Token ids past the end of the folder's vocab.txt.
    small_vocab = tmp_path / "small_vocab"
    small_vocab.mkdir()
    (small_vocab / "wiki_00000.tfrecord").write_bytes(good.read_bytes())
    (small_vocab / "vocab.txt").write_text("".join(f"tok{i}\n" for i in range(100)))
    with pytest.raises(PrepError, match=r"small_vocab.*vocab size 100.*is not in \[0, 100\)"):
        train_bert(small_vocab, tmp_path / "out", steps=2)

    with pytest.raises(PrepError, match="steps"):
        train_bert(bert_dataset, tmp_path / "out", steps=0)
    assert not (tmp_path / "out").exists()


def test_imagenet_bad_input(tmp_path, imagenet_dataset):
    with pytest.raises(PrepError, match="nowhere"):
        train_imagenet(tmp_path / "nowhere", tmp_path / "out")

    only_val = tmp_path / "only_val"
    only_val.mkdir()
    src = imagenet_dataset / "train-00000-of-00002"
    (only_val / "validation-00000-of-00001").write_bytes(src.read_bytes())
    with pytest.raises(PrepError, match=r"only_val.*train-\*-of-\*"):
        train_imagenet(only_val, tmp_path / "out")

    bad_label = tmp_path / "bad_label"
    bad_label.mkdir()
    with RecordWriter(bad_label / "train-00000-of-00001") as w:
        w.write(encode_example([("image/encoded", BYTES, [_jpeg(random.Random(0), 0)]),
                                ("image/class/label", INT64, [0])]))
    with pytest.raises(PrepError, match=r"train-00000-of-00001.*label"):
        train_imagenet(bad_label, tmp_path / "out", steps=2)

    # A record whose image is not a JPEG, behind a good one: found while training.
    bad_jpeg = tmp_path / "bad_jpeg"
    bad_jpeg.mkdir()
    with RecordWriter(bad_jpeg / "train-00000-of-00001") as w:
        w.write(_imagenet_example(random.Random(1), 0, 0))
        w.write(encode_example([("image/encoded", BYTES, [b"not a jpeg"]), ("image/class/label", INT64, [5])]))
    with pytest.raises(PrepError, match=r"train-00000-of-00001.*record 1"):
        train_imagenet(bad_jpeg, tmp_path / "out", steps=3, batch_size=2)
    assert not (tmp_path / "out").exists()


LUIGI = str(Path(sys.executable).with_name("luigi"))
REPO = Path(__file__).resolve().parents[1]


def _train_bert_task(dataset: Path, out: Path, steps: int) -> subprocess.Popen:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("LUIGI_CONFIG_PATH", None)
    return subprocess.Popen([LUIGI, "--module", "workflows", "TrainBert", "--dataset-dir", str(dataset), "--steps",
                             str(steps), "--out-dir", str(out), "--local-scheduler"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _finish(proc: subprocess.Popen) -> tuple[int, str]:
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def test_train_task_commits_once(bert_dataset, tmp_path):
    """TrainBert through Luigi's command line: killed while training it leaves nothing; run to the end it
    commits metrics.csv and loss.png, then their receipt; run again it is complete and rewrites nothing;
    with the receipt gone (a run killed between its commit and its receipt) a rerun refuses, in one
    line and before training, to replace the outputs there."""
    out = tmp_path / "out"
    proc = _train_bert_task(bert_dataset, out, steps=100_000)
    for line in proc.stderr:  # progress lines: the kill lands mid-training
        if "step 100/100000" in line:
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert not out.exists() or not list(out.iterdir()), list(out.iterdir())

    code, err = _finish(_train_bert_task(bert_dataset, out, steps=20))
    assert code == 0, err
    _assert_outputs(out, 20, BERT_COLUMNS)
    receipt = out / ".receipts" / "metrics.csv.json"
    committed = {p.name: p.read_bytes() for p in (out / "metrics.csv", out / "loss.png", receipt)}
    assert json.loads(committed["metrics.csv.json"])["result"]["steps"] == 20

    code, err = _finish(_train_bert_task(bert_dataset, out, steps=20))
    assert code == 0, err
    assert {p.name: p.read_bytes() for p in (out / "metrics.csv", out / "loss.png", receipt)} == committed

    receipt.unlink()
    code, err = _finish(_train_bert_task(bert_dataset, out, steps=20))
    lines = [line for line in err.splitlines() if line.startswith("wikiprep: error:")]
    assert code != 0 and len(lines) == 1 and "Traceback" not in err and "step 20/20" not in err, err
    assert lines[0] == f"wikiprep: error: {out / 'metrics.csv'}: already there, from another run; left as it is: " \
                       "remove it to train again"
    assert {p.name: p.read_bytes() for p in (out / "metrics.csv", out / "loss.png")} == \
           {k: v for k, v in committed.items() if k != "metrics.csv.json"}
    assert sorted(p.name for p in out.iterdir()) == [".receipts", "loss.png", "metrics.csv"]
