"""`wikiprep stats` and `imagenet-prep stats` reports, checked against figures computed here, independently,
from the records (parsed by TensorFlow, not through the stats code): stats.json and the page's tables say
the same, and the page is one self-contained file that embeds every PNG written beside it."""

from __future__ import annotations

import base64
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from shardkit.errors import PrepError
from shardkit.manifest import write_manifest
from shardkit.records import read_records

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = Path(__file__).resolve().parents[1]
from fixture_paths import GOOGLE_REFERENCE as FIXTURES, REFERENCE_VOCAB as VOCAB  # noqa: E402
INPUTS = FIXTURES / "inputs"
SEQ, PRED = 128, 20


def run(tool: str, *args: str) -> subprocess.CompletedProcess:
    module = {"wikiprep": "wikiprep.cli", "imagenet-prep": "imagenet_prep.cli"}[tool]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env,
                          timeout=600)


class Tables(html.parser.HTMLParser):
    """Every <table> of a page: {caption or its position: [[cell text, ...], ...]} (header row first)."""

    def __init__(self, page: str):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self.imgs: list[str] = []
        self._rows = self._cell = self._caption = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._rows, self._caption = [], ""
        elif tag == "tr" and self._rows is not None:
            self._rows.append([])
        elif tag in ("td", "th") and self._rows is not None:
            self._cell = ""
        elif tag == "caption":
            self._caption = ""
            self._cell = None
        elif tag == "img":
            self.imgs.append(dict(attrs)["src"])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._rows[-1].append(self._cell.strip())
            self._cell = None
        elif tag == "table":
            self.tables[self._caption or f"table {len(self.tables)}"] = self._rows
            self._rows = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data
        elif self._rows is not None and self._caption is not None and not self._rows:
            self._caption += data


def check_self_contained(out: Path) -> Tables:
    """report.html has no external reference and embeds, as data: URIs, exactly the PNGs written beside it."""
    page = (out / "report.html").read_text(encoding="utf-8")
    assert not re.search(r"https?://", page) and "<script" not in page.lower() and "<link" not in page.lower()
    assert "url(" not in page and "@import" not in page
    tables = Tables(page)
    assert tables.imgs and all(src.startswith("data:image/png;base64,") for src in tables.imgs)
    embedded = sorted(base64.b64decode(src.split(",", 1)[1]) for src in tables.imgs)
    written = sorted(p.read_bytes() for p in out.glob("*.png"))
    assert embedded == written, "every PNG written is embedded, and nothing else"
    assert all(png.startswith(b"\x89PNG") and b"Software" not in png for png in written)
    return tables


def pct(n: int, total: int) -> str:
    return f"{100 * n / total:.2f}%"


# ---------------------------------------------------------------------------------------------
# BERT

@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> dict[str, Path]:
    """The same instances (fixed mask count, so some instances reach 20 masks) as standard TFRecords, remask
    TFRecords and HDF5: three dataset folders with vocab.txt, dataset.json and MANIFEST.json."""
    root = tmp_path_factory.mktemp("bert")
    folders = {}
    for name, suffix, flags in (("standard", ".tfrecord", ["--fixed_mask_count"]),
                                ("remask", ".tfrecord", ["--remask"]), ("hdf5", ".hdf5", ["--fixed_mask_count"])):
        folder = folders[name] = root / name
        folder.mkdir()
        shards = [folder / f"wiki_{i:05d}{suffix}" for i in range(3)]
        indexes = [] if suffix == ".hdf5" else ["--index_file=" + ",".join(str(p.with_suffix(".index"))
                                                                             for p in shards)]
        res = run("wikiprep", "create-pretraining-data", f"--input_file={INPUTS}/sample_text.txt",
                  f"--vocab_file={VOCAB}", "--output_file=" + ",".join(map(str, shards)), "--random_seed=7",
                  "--dupe_factor=3", *indexes, *flags)
        assert res.returncode == 0, res.stderr
        shutil.copy(VOCAB, folder / "vocab.txt")
        (folder / "dataset.json").write_text(json.dumps({"max_seq_length": SEQ, "max_predictions_per_seq": PRED,
                                                         "seed": 7}))
        from wikiprep.layouts import hdf5
        write_manifest(folder, {p.name: hdf5.count_instances(p) if suffix == ".hdf5" else len(list(read_records(p)))
                                for p in shards})
    return folders


def bert_figures(folder: Path) -> dict:
    """The report's figures, computed from the standard TFRecords with TensorFlow's own parser."""
    import tensorflow as tf

    spec = {"input_ids": tf.io.FixedLenFeature([SEQ], tf.int64), "input_mask": tf.io.FixedLenFeature([SEQ], tf.int64),
            "segment_ids": tf.io.FixedLenFeature([SEQ], tf.int64),
            "masked_lm_positions": tf.io.FixedLenFeature([PRED], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([PRED], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([PRED], tf.float32),
            "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64)}
    vocab = VOCAB.read_text(encoding="utf-8").split("\n")
    unk = vocab.index("[UNK]")
    special = {vocab.index(t) for t in ("[CLS]", "[SEP]", "[PAD]")}
    f = {"files": {}, "lengths": Counter(), "a": Counter(), "b": Counter(), "masks": Counter(), "tokens": Counter(),
         "masked": Counter(), "unk": 0, "random": 0, "first": []}
    for path in sorted(folder.glob("*.tfrecord")):
        n = random = 0
        for raw in tf.data.TFRecordDataset(str(path)):
            ex = {k: v.numpy().tolist() for k, v in tf.io.parse_single_example(raw, spec).items()}
            length = sum(ex["input_mask"])
            ids = ex["input_ids"][:length]
            masks = [(p, i) for p, i, w in zip(ex["masked_lm_positions"], ex["masked_lm_ids"], ex["masked_lm_weights"])
                     if w > 0]
            original = list(ids)
            for p, i in masks:
                original[p] = i
            b = sum(ex["segment_ids"][:length])
            f["lengths"][length] += 1
            f["a"][length - b - 2] += 1
            f["b"][b - 1] += 1
            f["masks"][len(masks)] += 1
            f["tokens"].update(t for t in original if t not in special)
            f["masked"].update(i for _, i in masks)
            f["unk"] += original.count(unk)
            random += ex["next_sentence_labels"][0]
            if len(f["first"]) < 5:
                f["first"].append({"tokens": [vocab[t] for t in ids],
                                   "masks": [(p, vocab[ids[p]], vocab[i]) for p, i in masks],
                                   "label": ex["next_sentence_labels"][0]})
            n += 1
        f["files"][path.name] = (n, random, path.stat().st_size)
    f["records"] = sum(n for n, _, _ in f["files"].values())
    f["random"] = sum(r for _, r, _ in f["files"].values())
    return f


def top(counts: Counter, k: int) -> list[tuple[int, int]]:
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


def test_bert_report_matches_the_records(bert, tmp_path):
    out = tmp_path / "report"
    res = run("wikiprep", "stats", str(bert["standard"]), "--out", str(out))
    assert res.returncode == 0, res.stderr
    assert f"wrote {out / 'report.html'}" in res.stdout
    st = json.loads((out / "stats.json").read_text())
    f = bert_figures(bert["standard"])
    n = f["records"]
    assert st["records"] == n and st["random_next"] == f["random"]
    assert {x["file"]: (x["records"], x["random_next"], x["bytes"]) for x in st["files"]} == f["files"]
    assert st["sequence_length_histogram"] == {str(k): v for k, v in sorted(f["lengths"].items())}
    assert st["segment_a_length_histogram"] == {str(k): v for k, v in sorted(f["a"].items())}
    assert st["segment_b_length_histogram"] == {str(k): v for k, v in sorted(f["b"].items())}
    assert st["masked_count_histogram"] == {str(k): v for k, v in sorted(f["masks"].items())}
    assert st["masks_at_max"] == f["masks"][PRED] > 0  # the fixed count: full-length instances get all 20
    assert st["full_length"] == f["lengths"][SEQ]
    assert [(t["id"], t["count"]) for t in st["top_tokens"]] == top(f["tokens"], 30)
    assert [(t["id"], t["count"]) for t in st["top_masked_tokens"]] == top(f["masked"], 30)
    vocab = VOCAB.read_text(encoding="utf-8").split("\n")
    assert [t["token"] for t in st["top_tokens"]] == [vocab[i] for i, _ in top(f["tokens"], 30)]
    assert st["unk_tokens"] == f["unk"]
    assert [(i["tokens"], [(m["position"], m["written"], m["original"]) for m in i["masks"]],
             i["next_sentence_label"]) for i in st["instances"]] == \
        [(x["tokens"], x["masks"], x["label"]) for x in f["first"]]
    assert st["manifest"] == {"present": True, "verified": True, "ok": True, "problem": None, "files": 8}
    assert st["vocab"]["sha256"] and st["parameters"]["seed"] == 7

    tables = check_self_contained(out)
    assert len(tables.imgs) == 5
    masks = tables.tables["Masks per instance"]
    assert masks[1:] == [[str(k), f"{v:,}", pct(v, n)] for k, v in sorted(f["masks"].items())]
    shards = tables.tables["Instances and random-next share per shard"]
    assert shards[1:] == [[name, f"{c:,}", f"{size:,}", f"{r:,}", pct(r, c)]
                          for name, (c, r, size) in f["files"].items()]
    tokens = tables.tables["The 30 commonest masked tokens"]
    assert [(row[1], row[3]) for row in tokens[1:]] == [(vocab[i], f"{c:,}") for i, c in top(f["masked"], 30)]
    every_length = [t for k, t in tables.tables.items() if t[0] == ["real tokens", "instances", "share"]][-1]
    assert every_length[1:] == [[str(k), f"{v:,}", pct(v, n)] for k, v in sorted(f["lengths"].items())]
    assert "random next" in (out / "report.txt").read_text()


def test_every_layout_gives_the_same_report(bert, tmp_path):
    """The remask and HDF5 folders hold the same instances: the same figures, decoded instances included,
    and the same plots; the report of one folder is the same bytes made twice, under two paths."""
    from wikiprep import stats

    figures = {}
    for name, folder in bert.items():
        out = tmp_path / name
        stats.write_report(folder, out, name="dataset")
        st = json.loads((out / "stats.json").read_text())
        assert st["format"] == ("tfrecord" if name == "standard" else name) and st["manifest"]["ok"]
        for instance in st["instances"]:
            assert instance.pop("file").startswith("wiki_00000.")
        figures[name] = ({k: v for k, v in st.items() if k not in ("format", "files", "bytes_per_file", "manifest")},
                         [x["records"] for x in st["files"]],
                         {p.name: p.read_bytes() for p in out.glob("*.png") if p.name != "shards.png"})
    assert figures["remask"] == figures["standard"] == figures["hdf5"]
    moved = tmp_path / "elsewhere" / "copy"
    shutil.copytree(bert["standard"], moved)
    stats.write_report(moved, tmp_path / "again", name="dataset")
    assert {p.name: p.read_bytes() for p in (tmp_path / "again").iterdir()} == \
        {p.name: p.read_bytes() for p in (tmp_path / "standard").iterdir()}


# ---------------------------------------------------------------------------------------------
# ImageNet

def _voc(wnid: str, width: int, height: int, boxes) -> str:
    objs = "".join(f"<object><name>{wnid}</name><bndbox><xmin>{b[0]}</xmin><ymin>{b[1]}</ymin><xmax>{b[2]}</xmax>"
                   f"<ymax>{b[3]}</ymax></bndbox></object>" for b in boxes)
    return f"<annotation><size><width>{width}</width><height>{height}</height></size>{objs}</annotation>"


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory) -> Path:
    """A converted sample with re-encoded images (the quirks), one left out (not an image) and boxes."""
    from PIL import Image

    from imagenet_prep import cli, samples

    root = tmp_path_factory.mktemp("imagenet")
    tree = samples.write_sample_tree(root / "raw", classes=6, per_class=4, val_per_class=2, seed=3)
    train = Path(tree["train_dir"])
    wnids = sorted(p.name for p in train.iterdir())
    (train / wnids[1] / f"{wnids[1]}_9.JPEG").write_bytes(b"not an image at all")
    bbox = root / "bbox"
    for wnid in wnids:
        (bbox / wnid).mkdir(parents=True)
        for n in (1, 2):
            with Image.open(train / wnid / f"{wnid}_{n}.JPEG") as img:
                w, h = img.size
            (bbox / wnid / f"{wnid}_{n}.xml").write_text(_voc(wnid, w, h, [(2, 3, w // 2, h // 2)] * n))
    out = root / "out"
    assert cli.main(["convert", "--train-dir", tree["train_dir"], "--validation-dir", tree["validation_dir"],
                     "--val-labels", tree["val_labels"], "--output-dir", str(out), "--train-shards", "3",
                     "--validation-shards", "2", "--bbox-dir", str(bbox)]) == 0
    return out


def imagenet_figures(folder: Path) -> dict:
    import tensorflow as tf

    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string), "image/class/label": tf.io.FixedLenFeature([], tf.int64),
            "image/width": tf.io.FixedLenFeature([], tf.int64), "image/height": tf.io.FixedLenFeature([], tf.int64),
            "image/filename": tf.io.FixedLenFeature([], tf.string),
            **{f"image/object/bbox/{k}": tf.io.VarLenFeature(tf.float32) for k in ("xmin", "ymin", "xmax", "ymax")}}
    f = {}
    for split in ("train", "validation"):
        s = f[split] = {"classes": Counter(), "sizes": Counter(), "bytes": [], "shards": [], "boxes": 0, "first": []}
        for path in sorted(folder.glob(f"{split}-*")):
            n = 0
            for raw in tf.data.TFRecordDataset(str(path)):
                ex = tf.io.parse_single_example(raw, spec)
                s["classes"][int(ex["image/class/label"])] += 1
                s["sizes"][(int(ex["image/width"]), int(ex["image/height"]))] += 1
                s["bytes"].append(len(ex["image/encoded"].numpy()))
                boxes = tf.sparse.to_dense(ex["image/object/bbox/xmin"]).numpy().tolist()
                s["boxes"] += len(boxes)
                if len(s["first"]) < 8:
                    s["first"].append((ex["image/filename"].numpy().decode(), int(ex["image/class/label"]), len(boxes)))
                n += 1
            s["shards"].append((path.name, n))
    return f


def test_imagenet_report_matches_the_records(imagenet, tmp_path):
    out = tmp_path / "report"
    res = run("imagenet-prep", "stats", str(imagenet), "--out", str(out))
    assert res.returncode == 0, res.stderr
    st = json.loads((out / "stats.json").read_text())
    f = imagenet_figures(imagenet)
    manifest = json.loads((imagenet / "MANIFEST.json").read_text())
    assert st["num_classes"] == 1000 and len(st["class_counts"]) == 1000
    for split, s in f.items():
        sp = st["splits"][split]
        assert {int(k): v["records"] for k, v in sp["per_class"].items()} == dict(s["classes"])
        assert {c["label"]: c[split] for c in st["class_counts"] if c[split]} == dict(s["classes"])
        assert [(x["shard"], x["records"]) for x in sp["shard_records"]] == s["shards"]
        assert sp["jpeg_bytes"]["total"] == sum(s["bytes"]) and sp["jpeg_bytes"]["max"] == max(s["bytes"])
        h = sp["jpeg_bytes_histogram"]
        assert h["counts"] == [sum(1 for b in s["bytes"] if lo <= b < hi) for lo, hi in zip(h["edges"], h["edges"][1:])]
        assert [(c["width"], c["height"], c["images"]) for c in sp["commonest_sizes"]] == \
            [(w, h, c) for (w, h), c in sorted(s["sizes"].items(), key=lambda kv: (-kv[1], kv[0]))[:12]]
        assert sp["boxes"] == s["boxes"]
        assert [(c["file"], c["label"], len(c["boxes"])) for c in sp["contact_sheet"]] == s["first"]
    assert f["train"]["boxes"] > 0 and any(c["boxes"] for c in st["splits"]["train"]["contact_sheet"])
    assert st["converted"] == manifest["converted"] and len(st["converted"]) == 4
    assert st["left_out"] == manifest["left_out"] and len(st["left_out"]) == 1
    assert st["manifest"]["ok"] is True

    tables = check_self_contained(out)
    assert len(tables.imgs) == 6  # classes, sizes, bytes, shards, two contact sheets
    shards = tables.tables["Every shard"]
    assert shards[1:] == [[split, name, f"{n:,}", f"{(imagenet / name).stat().st_size:,}"]
                          for split in f for name, n in f[split]["shards"]]
    every_class = [t for t in tables.tables.values() if t[0] == ["label", "synset", "name", "train", "validation"]][-1]
    assert len(every_class) == 1001
    assert {int(r[0]): int(r[3]) for r in every_class[1:] if r[3] != "0"} == dict(f["train"]["classes"])
    reasons = tables.tables["Left out: 1, by reason"]
    assert reasons[1:] == [[manifest["left_out"][0]["reason"], "1"]]
    assert "train: " in (out / "report.txt").read_text()


def test_a_report_inside_the_dataset_is_outside_its_manifest(bert, tmp_path):
    """Where the tasks keep it: `report/` in the dataset folder, and the temporary folder it is built in, are
    neither listed in MANIFEST.json nor refused by verify; the manifest and the report's own check are unchanged."""
    from shardkit.manifest import build_manifest
    from wikiprep import stats, verify

    folder = tmp_path / "dataset"
    shutil.copytree(bert["standard"], folder)
    counts = {p.name: len(list(read_records(p))) for p in folder.glob("*.tfrecord")}
    before = (folder / "MANIFEST.json").read_bytes()
    stats.write_report(folder, folder / "report", name="dataset")
    (folder / "report.tmp-node7-12").mkdir()
    (folder / "report.tmp-node7-12" / "stats.json").write_text("{")  # a report half-written by a duplicate
    assert build_manifest(folder, counts) == json.loads(before)
    assert verify.verify(folder)["manifest"] is True
    st = stats.dataset_stats(folder, name="dataset")
    assert st["manifest"]["ok"] is True and st["manifest"]["files"] == 8
    # A writer at work beside it (a duplicate run's temporary): verify names it; the report, which must say the
    # same whatever runs beside it, passes over it.
    (folder / "wiki_00000.tfrecord.tmp-node7-12").write_bytes(b"half")
    with pytest.raises(PrepError, match="a temporary left by an interrupted run"):
        verify.verify(folder)
    assert stats.dataset_stats(folder, name="dataset")["manifest"] == st["manifest"]
    (folder / "wiki_00000.tfrecord.tmp-node7-12").unlink()
    (folder / "stray.tfrecord.bak").write_bytes(b"x")  # anything else unlisted is still refused
    assert stats.dataset_stats(folder, name="dataset")["manifest"] == {
        "present": True, "verified": True, "ok": False,
        "problem": "dataset/stray.tfrecord.bak: not listed in MANIFEST.json (a file the dataset did not write); "
                   "remove it, or move it elsewhere"}


# ---------------------------------------------------------------------------------------------
# Report.figures: drawn in forked children, the bytes and order of drawing them one by one

def _bar_figure(n: int):
    from shardkit.plots import figure

    fig = figure(4, 2)
    ax = fig.add_subplot(1, 1, 1)
    ax.bar(range(n), [i * i + 1 for i in range(n)])
    ax.set_yscale("log")
    ax.set_title(f"{n} bars")
    return fig


def test_figures_in_children_give_the_bytes_and_order_of_one_by_one():
    from shardkit.report import Report

    def specs():  # new figures each time: drawing one lays it out anew
        return [(f"f{n}.png", _bar_figure(n), f"{n} bars") for n in (3, 9, 1, 30, 5)]

    one_by_one, in_children = Report(), Report()
    serial = [one_by_one.figure(*spec) for spec in specs()]
    built = []
    parallel = in_children.figures((built.append(s[0]) or s for s in specs()), processes=2)  # built as asked
    assert built == list(one_by_one.pngs)
    assert list(parallel) == built and list(parallel.values()) == serial  # the same <figure>s, in the specs' order
    assert list(in_children.pngs) == list(one_by_one.pngs) == built
    assert in_children.pngs == one_by_one.pngs
    assert len(set(in_children.pngs.values())) == 5


def test_figures_stop_every_child_when_building_one_fails():
    """An error while the next figure is built (in this process) ends the call with that error, and no
    child is left running."""
    import multiprocessing

    from shardkit.report import Report

    def specs():
        yield "a.png", _bar_figure(40), "a"
        yield "b.png", _bar_figure(40), "b"
        raise PrepError("the third figure cannot be built")

    with pytest.raises(PrepError, match="third figure"):
        Report().figures(specs(), processes=2)
    assert multiprocessing.active_children() == []
