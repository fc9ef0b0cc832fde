"""imagenet_prep on generated ImageNet-shaped trees: records TensorFlow reads, labels by sorted synset,
quirks found by content, every validation label source giving the same shards, deterministic bytes.

Records are read back with TensorFlow's own reader (tf.data.TFRecordDataset) and parsed with
tf.io.parse_single_example using the schema TF ResNet / Graphcore readers use; images are decoded
with tf.io.decode_jpeg.
"""

from __future__ import annotations

import base64
import io
import os
import random
import shutil
import struct
import subprocess
import sys
import tarfile
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest

from imagenet_prep import convert, images, labels, samples
from imagenet_prep.schema import IMAGENET_IMAGE, RecordEncoder
from shardkit.errors import PrepError
from testkit.archives import tar_bytes

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parents[1]
from fixture_paths import IMAGENET as SHARED  # noqa: E402  (tests/fixtures/imagenet: the lists, from outside the package)

# A devkit-style meta.mat written by scipy.io.savemat (do_compression=True, format 5): struct array
# `synsets` with the devkit's fields. Its 10 leaf synsets (the Imagenette classes) have
# ILSVRC2012_IDs 1..10 in a NON-sorted order (1 = n03888605 parachute, 2 = n01440764 tench, ...),
# as the real meta.mat's IDs are not the sorted-wnid order; IDs 11 and 12 are non-leaf synsets.
DEVKIT_META_MAT = base64.b64decode(
    "TUFUTEFCIDUuMCBNQVQtZmlsZSBQbGF0Zm9ybTogcG9zaXgsIENyZWF0ZWQgb246IFN1biBOb3YgMjIgMTA6MTU6MDIgMjAyNgAA"
    "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAABSU0PAAAA+gIAAHic7Vlfa9swEHdH27Uw"
    "unYbrIw+iDJGGRnIjhs7TwvsDyuMMbax7S1TbNXW5shBklf6DfoB9kH3ESbVbquIglvJsBcLlNMp3O/urF/OPmfL87yzJ563LuWG"
    "nHe8eqw1+j05V5p5V05+SjkWXH6/6u00+2dyHr3//PXTqwD6wfTotQL49qGWl+OkZCnXN7Ki5EsbtJpPk5wUKcP0fGNJucCgWExz"
    "TLJcNCaCIUKnZI4yzL0tuRl7V/msG/msaFONzWa/Hn9fKvuJZr96jf2mZr/d6BQO4zgewcNm/yY42waOmgvEUJJXAg/AuVA471pw"
    "Hhg4Dy4uLiiPgRGY2/Wp7WGLvWfYd+XX2v7jn4mj/4k9L/wwhNEo1PKwOU+BaZIPwBdCEwSE+nTD0/ixFGDPDxv/Gw78GIbhYRRF"
    "Wh42OFlZHIMZKgoNx7Vu6IH1vLDxv+3Ai8CHAQyhlsePFpznBo7S39CsIDwHfMEIzTAbAHNHLhAluLjy48ibpcB73tj4f+RUT4LD"
    "0B9qeeQtOCMDR+kZ4mBRzRcDIFdlQShu1AUWrCwahfAC0RSkhC+wfC5kHdUdLYGePzb+d13qzjga+/FIy6MN576Bo/QEcdknCMma"
    "Ap1KYnRRV/TAel7Y+N9zqit+BMNAy6PtPB8bOErPEJvJRg0IViW/BiCtuEgQE93UDS3Anh82/oELPyCEo/g2fc5DA0fpSS6becDR"
    "iep/5VKubozXxg89wJ4fNv73XfgxHIdjX7+vtJ3njoGj9LdMNcIgLxkdnH/eAq+NH3qAPT9s/D91qh9BDKOxlofN/SXJK6ZelNQS"
    "zCpSpLLN6aZ+aAH2/LDx/8yBH1A2luPhbfhx3XnKZw1yjBIxAHKF1ermeNfVIwTmiL6YoxSDcvYTX8A5nlPd/31vsV8z7A8u7Tcm"
    "tdxt5F4jQSP3O3kf+t946B048Qj60dJ7lbgFZ93AUTqmgohT+zolciTASU5kjSKy08YsweQ3Tjv5/8L19+n6HtSFF/8AftQpEg=="
)
DEVKIT_LEAF_ORDER = ["n03888605", "n01440764", "n03445777", "n02102040", "n03425413",
                     "n02979186", "n03417042", "n03000684", "n03394916", "n03028079"]


# ---------------------------------------------------------------------------------------------
# Helpers

def consumer_schema(tf) -> dict:
    """What TF-official / Graphcore readers parse (written out here, not taken from the code under test)."""
    s, i = tf.io.FixedLenFeature([], tf.string), tf.io.FixedLenFeature([], tf.int64)
    schema = {"image/encoded": s, "image/height": i, "image/width": i, "image/colorspace": s,
              "image/channels": i, "image/format": s, "image/filename": s, "image/class/label": i,
              "image/class/synset": s, "image/class/text": s,
              "image/object/bbox/label": tf.io.VarLenFeature(tf.int64)}
    for k in ("xmin", "xmax", "ymin", "ymax"):
        schema[f"image/object/bbox/{k}"] = tf.io.VarLenFeature(tf.float32)
    return schema


# The 15 keys of build_imagenet_data.py's _convert_to_example and the list type of each.
REFERENCE_KINDS = {
    "image/height": "int64_list", "image/width": "int64_list", "image/colorspace": "bytes_list",
    "image/channels": "int64_list", "image/class/label": "int64_list", "image/class/synset": "bytes_list",
    "image/class/text": "bytes_list", "image/object/bbox/xmin": "float_list", "image/object/bbox/xmax": "float_list",
    "image/object/bbox/ymin": "float_list", "image/object/bbox/ymax": "float_list",
    "image/object/bbox/label": "int64_list", "image/format": "bytes_list", "image/filename": "bytes_list",
    "image/encoded": "bytes_list",
}


def read_examples(tf, folder: Path, split: str) -> list[dict]:
    """Every record of `split` in shard order, read by TensorFlow and parsed with the consumer schema."""
    schema = consumer_schema(tf)
    out = []
    for shard in sorted(folder.glob(f"{split}-*-of-*")):
        for raw in tf.data.TFRecordDataset(str(shard)):
            ex = tf.io.parse_single_example(raw, schema)
            rec = {k: (tf.sparse.to_dense(v).numpy().tolist() if isinstance(v, tf.SparseTensor) else v.numpy())
                   for k, v in ex.items()}
            rec["_raw"] = raw.numpy()
            rec["_shard"] = shard.name
            out.append(rec)
    return out


def jpeg_segments(data: bytes):
    """(marker, offset of the length field) of each header segment up to the first scan."""
    pos = 2
    while True:
        marker = data[pos + 1]
        yield marker, pos + 2
        if marker == 0xDA:
            return
        pos += 2 + struct.unpack(">H", data[pos + 2:pos + 4])[0]


def with_jpeg_size(data: bytes, width: int, height: int) -> bytes:
    """The JPEG with its frame header declaring another size (entropy data unchanged)."""
    for marker, at in jpeg_segments(data):
        if marker in (0xC0, 0xC1, 0xC2):
            return data[:at + 3] + struct.pack(">HH", height, width) + data[at + 7:]
    raise AssertionError("no SOF")


def png_header_only(width: int, height: int) -> bytes:
    """A PNG declaring width x height with no pixel data (what a decompression bomb's header looks like)."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IEND", b""))


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def shard_bytes(folder: Path, split: str) -> dict[str, bytes]:
    return {k: v for k, v in folder_bytes(folder).items()
            if k.startswith(split) or k.startswith(f"idx/{split}")}


@pytest.fixture(scope="module")
def tf():
    import tensorflow as tf

    return tf


# ---------------------------------------------------------------------------------------------
# A tree with every quirk, converted once

@pytest.fixture(scope="module")
def quirks(tmp_path_factory):
    root = tmp_path_factory.mktemp("quirks")
    tree = samples.write_sample_tree(root / "raw", classes=6, per_class=4, val_per_class=2, seed=1)
    train = Path(tree["train_dir"])
    good = (train / "n01440764" / "n01440764_1.JPEG").read_bytes()
    png = samples.encode(samples.draw_image(np.random.default_rng(5), 1, (64, 48)), "png")
    bad = {
        "n01440764/bad_truncated.JPEG": (good[: len(good) * 6 // 10], "truncated JPEG"),
        "n01440764/bad_no_eoi.JPEG": (good[:-2], "no end-of-image marker"),
        "n01440764/bad_empty.JPEG": (b"", "empty file"),
        "n02102040/bad_text.JPEG": (b"this is not an image\n" * 3, "not an image"),
        "n02102040/bad_bomb.JPEG": (with_jpeg_size(good, 60000, 60000), "decompression bomb"),
        "n02979186/bad_png_bomb.JPEG": (png_header_only(100_000, 100_000), "decompression bomb"),
        "n02979186/bad_png_big.JPEG": (png_header_only(10_000, 10_000), "decompression bomb"),
        "n03000684/bad_png_truncated.JPEG": (png[: len(png) // 2], "PNG"),
    }
    for rel, (data, _) in bad.items():
        (train / rel).write_bytes(data)
    (train / "n03000684" / "README.txt").write_text("notes\n")
    out = root / "out"
    manifest = convert.convert_dataset(tree["train_dir"], tree["validation_dir"], tree["val_labels"], out,
                                       train_shards=3, validation_shards=2)
    return {"root": root, "tree": tree, "out": out, "manifest": manifest, "bad": bad}


def test_unreadable_files_are_left_out_with_their_reason(quirks):
    left_out = {d["file"]: d["reason"] for d in quirks["manifest"]["left_out"]}
    assert set(left_out) == {f"train/{rel}" for rel in quirks["bad"]}
    for rel, (_, why) in quirks["bad"].items():
        assert why in left_out[f"train/{rel}"], (rel, left_out[f"train/{rel}"])
    assert quirks["manifest"]["splits"]["train"]["left_out"] == len(quirks["bad"])
    assert quirks["manifest"]["ignored"] == [{"file": "train/n03000684/README.txt", "reason": "not an image file name"}]


def test_cmyk_png_rgba_palette_are_reencoded_by_content(quirks):
    converted = {d["file"]: d["reason"] for d in quirks["manifest"]["converted"]}
    assert converted == {
        "train/n01440764/n01440764_0.JPEG": "CMYK JPEG re-encoded as RGB JPEG",
        "train/n02102040/n02102040_0.JPEG": "PNG image (RGB) re-encoded as RGB JPEG",
        "train/n02979186/n02979186_0.JPEG": "PNG image (RGBA) re-encoded as RGB JPEG",
        "train/n03000684/n03000684_0.JPEG": "PNG image (P) re-encoded as RGB JPEG",
    }


def test_records_parse_decode_and_carry_the_15_keys(quirks, tf):
    from PIL import Image

    synsets = labels.load_synsets()
    names = labels.load_names(synsets)
    train_dir, val_dir = Path(quirks["tree"]["train_dir"]), Path(quirks["tree"]["validation_dir"])
    val_wnids = Path(quirks["tree"]["val_labels"]).read_text().split()
    converted = {d["file"].split("/")[-1] for d in quirks["manifest"]["converted"]}
    for split in ("train", "validation"):
        recs = read_examples(tf, quirks["out"], split)
        assert len(recs) == quirks["manifest"]["splits"][split]["records"] == (24 if split == "train" else 12)
        for r in recs:
            fname = r["image/filename"].decode()
            wnid = r["image/class/synset"].decode()
            if split == "train":
                src = train_dir / wnid / fname
                assert fname.startswith(wnid)
            else:
                src = val_dir / fname
                assert wnid == val_wnids[int(fname[15:23]) - 1]
            assert r["image/class/label"] == synsets.index(wnid) + 1
            assert r["image/class/text"].decode() == names[wnid]
            assert (r["image/colorspace"], r["image/channels"], r["image/format"]) == (b"RGB", 3, b"JPEG")
            assert r["image/object/bbox/xmin"] == r["image/object/bbox/label"] == []
            pixels = tf.io.decode_jpeg(r["image/encoded"], channels=3)
            assert tuple(pixels.shape) == (r["image/height"], r["image/width"], 3)
            with Image.open(src) as im:
                assert im.size == (r["image/width"], r["image/height"])
            if fname in converted:
                assert r["image/encoded"][:3] == b"\xff\xd8\xff" and r["image/encoded"] != src.read_bytes()
            else:  # greyscale and progressive JPEGs included: bytes copied untouched
                assert r["image/encoded"] == src.read_bytes()
            # Byte-for-byte what protobuf's deterministic serialization of the same Example gives.
            example = tf.train.Example.FromString(r["_raw"])
            assert example.SerializeToString(deterministic=True) == r["_raw"]
            kinds = {k: v.WhichOneof("kind") for k, v in example.features.feature.items()}
            assert kinds == REFERENCE_KINDS


def test_cmyk_is_converted_with_the_right_colours(tf):
    import io

    from PIL import Image

    colour = (200, 30, 60)
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), colour).convert("CMYK").save(buf, "JPEG", quality=95)
    assert images.read_jpeg_header(buf.getvalue()).components == 4
    img = images.prepare_image(buf.getvalue())
    assert img.converted == "CMYK JPEG" and (img.width, img.height) == (40, 30)
    mean = tf.reduce_mean(tf.cast(tf.io.decode_jpeg(img.data, channels=3), tf.float32), axis=(0, 1)).numpy()
    assert np.abs(mean - np.array(colour)).max() < 4, mean


@pytest.mark.parametrize("workers", [1, 2])
def test_strict_fails_on_the_first_unreadable_file_and_leaves_nothing(quirks, tmp_path, workers):
    tree = quirks["tree"]
    out = tmp_path / "new" / "out"
    with pytest.raises(PrepError) as e:
        convert.convert_dataset(tree["train_dir"], None, None, out, train_shards=3, strict=True, workers=workers)
    msg = str(e.value)
    assert "/bad_" in msg and "; --strict fails on an unreadable image instead of leaving it out" in msg
    assert "\n" not in msg
    assert not (tmp_path / "new").exists()  # no shard, index, plan or folder of a run that failed


def test_a_failed_run_leaves_a_folder_as_it_found_it(small_tree, tmp_path, monkeypatch):
    """Interrupted (Ctrl-C) or failing in a worker, in a folder of the user's, or in one holding this dataset."""
    tree = small_tree
    mine = tmp_path / "mine"
    (mine / "idx").mkdir(parents=True)
    (mine / "notes.txt").write_text("mine\n")
    real_write_shard = convert.write_shard

    def failing_at(index: int, error: BaseException):
        def write_shard(plan, split, i, output_dir, **kw):
            if (split, i) == ("train", index):
                raise error
            return real_write_shard(plan, split, i, output_dir, **kw)
        return write_shard

    args = (tree["train_dir"], tree["validation_dir"], tree["val_labels"])
    kw = {"train_shards": 2, "validation_shards": 2}
    monkeypatch.setattr(convert, "write_shard", failing_at(1, KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        convert.convert_dataset(*args, mine, **kw)
    assert folder_bytes(mine) == {"notes.txt": b"mine\n"} and (mine / "idx").is_dir()
    monkeypatch.setattr(convert, "write_shard", failing_at(0, PrepError("disk full, say")))
    with pytest.raises(PrepError, match="disk full"):
        convert.convert_dataset(*args, mine, workers=2, **kw)
    assert folder_bytes(mine) == {"notes.txt": b"mine\n"}

    monkeypatch.setattr(convert, "write_shard", real_write_shard)
    good = tmp_path / "good"
    convert.convert_dataset(*args, good, **kw)
    before = folder_bytes(good)
    (good / "train-00001-of-00002").unlink()  # a damaged dataset is made again, and its plan rewritten ...
    (good / ".work" / "plan.json").write_text((good / ".work" / "plan.json").read_text().replace("false", "false "))
    monkeypatch.setattr(convert, "write_shard", failing_at(1, KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        convert.convert_dataset(*args, good, **kw)
    after = folder_bytes(good)  # ... but a failed attempt takes back what it wrote, and puts back the old plan
    assert after == {k: v for k, v in before.items() if k not in ("train-00001-of-00002", ".work/plan.json")} | \
        {".work/plan.json": after[".work/plan.json"]}
    assert after[".work/plan.json"].count(b"false ") == 2


def test_verify_decode_catches_what_the_header_cannot(tf):
    data = samples.encode(samples.draw_image(np.random.default_rng(0), 2, (64, 48)), "jpeg")
    sos = [at for marker, at in jpeg_segments(data) if marker == 0xDA][0]
    broken = data[:sos + 3] + b"\x09" + data[sos + 4:]  # first scan component id -> 9, not in the frame
    assert images.prepare_image(broken).data == broken  # the header is fine: copied by default
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_jpeg(broken, channels=3)
    with pytest.raises(images.ImageRejected, match="undecodable JPEG"):
        images.prepare_image(broken, verify_decode=True)


def test_jpeg_header_gives_the_decoded_size_and_tolerates_stray_bytes(tf):
    data = samples.encode(samples.draw_image(np.random.default_rng(3), 4, (77, 51)), "progressive")
    head = images.read_jpeg_header(data)
    assert (head.width, head.height, head.components, head.sof) == (77, 51, 3, 0xC2)
    # libjpeg skips junk before a marker with a warning; so does the header reader.
    dqt = [at for marker, at in jpeg_segments(data) if marker == 0xDB][0] - 2
    junky = data[:dqt] + b"\x00\x17" + data[dqt:]
    assert tuple(tf.io.decode_jpeg(junky, channels=3).shape) == (51, 77, 3)
    assert (images.read_jpeg_header(junky).width, images.read_jpeg_header(junky).height) == (77, 51)


# ---------------------------------------------------------------------------------------------
# Labels

def test_packaged_synsets_and_names_match_the_shared_fixture():
    synsets = labels.load_synsets()
    assert len(synsets) == 1000 and synsets == sorted(synsets)
    assert synsets.index("n01440764") + 1 == 1 and synsets.index("n01751748") + 1 == 66
    assert labels.load_names(synsets)["n01440764"] == "tench, Tinca tinca"
    pkg = Path(labels.__file__).parent / "data"
    for name in ("ilsvrc2012_synsets.txt", "ilsvrc2012_synset_names.tsv"):
        assert (pkg / name).read_bytes() == (SHARED / name).read_bytes()


def test_labels_come_from_the_sorted_synset_list_not_the_folders(tmp_path, tf):
    wnids = ["n02119789", "n01751748", "n01440764"]
    tree = samples.write_sample_tree(tmp_path / "raw", per_class=2, val_per_class=2, wnids=wnids, quirks=False)
    convert.convert_dataset(tree["train_dir"], tree["validation_dir"], tree["val_labels"], tmp_path / "out",
                            train_shards=2, validation_shards=1)
    for split in ("train", "validation"):
        got = {r["image/class/synset"].decode(): r["image/class/label"]
               for r in read_examples(tf, tmp_path / "out", split)}
        assert got == {"n01440764": 1, "n01751748": 66, "n02119789": 279}


def test_a_synsets_file_overrides_the_shipped_list(tmp_path, tf):
    tree = samples.write_sample_tree(tmp_path / "raw", classes=2, per_class=2, val_per_class=1, quirks=False)
    wnids = sorted(p.name for p in Path(tree["train_dir"]).iterdir())
    (tmp_path / "synsets.txt").write_text("n00000001\n" + "".join(w + "\n" for w in wnids))
    (tmp_path / "names.tsv").write_text("n00000001\tfirst\n" + "".join(f"{w}\tclass {w}\n" for w in wnids))
    convert.convert_dataset(tree["train_dir"], tree["validation_dir"], tree["val_labels"], tmp_path / "out",
                            train_shards=1, validation_shards=1, synsets_file=tmp_path / "synsets.txt",
                            metadata_file=tmp_path / "names.tsv")
    got = {(r["image/class/synset"].decode(), r["image/class/label"], r["image/class/text"].decode())
           for r in read_examples(tf, tmp_path / "out", "train")}
    assert got == {(wnids[0], 2, f"class {wnids[0]}"), (wnids[1], 3, f"class {wnids[1]}")}


def test_read_mat_reads_a_scipy_written_devkit_meta(tmp_path):
    meta = tmp_path / "meta.mat"
    meta.write_bytes(DEVKIT_META_MAT)
    entries = labels.read_mat(meta)["synsets"]
    assert len(entries) == 12 and entries[1]["WNID"] == "n01440764" and entries[1]["words"] == "tench, Tinca tinca"
    assert entries[11]["children"].tolist() == [[11.0]] and entries[0]["children"].shape == (1, 0)
    assert labels.devkit_wnid_by_id(meta) == dict(enumerate(DEVKIT_LEAF_ORDER, 1))
    (tmp_path / "v73.mat").write_bytes(b"MATLAB 7.3 MAT-file" + b"\0" * 200)
    with pytest.raises(PrepError, match="v7.3"):
        labels.read_mat(tmp_path / "v73.mat")


def test_every_validation_label_source_gives_identical_shards(tmp_path, tf):
    tree = samples.write_sample_tree(tmp_path / "raw", classes=10, per_class=1, val_per_class=3, seed=7)
    val_dir = Path(tree["validation_dir"])
    tf_labels = Path(tree["val_labels"]).read_text().split()
    stems = [labels.VAL_STEM.format(i) for i in range(1, len(tf_labels) + 1)]
    rows = [f"{s},{w} 10 20 30 40 {w} 1 2 3 4\n" for s, w in zip(stems, tf_labels)]
    random.Random(3).shuffle(rows)  # Kaggle's CSV is keyed by ImageId, not by row order
    kaggle = tmp_path / "LOC_val_solution.csv"
    kaggle.write_text("ImageId,PredictionString\n" + "".join(rows))
    devkit = tmp_path / "ILSVRC2012_devkit_t12" / "data"
    devkit.mkdir(parents=True)
    (devkit / "meta.mat").write_bytes(DEVKIT_META_MAT)
    gt = devkit / "ILSVRC2012_validation_ground_truth.txt"
    gt.write_text("".join(f"{DEVKIT_LEAF_ORDER.index(w) + 1}\n" for w in tf_labels))
    folders = tmp_path / "val_folders"
    for stem, w in zip(stems, tf_labels):
        (folders / w).mkdir(parents=True, exist_ok=True)
        shutil.copy(val_dir / f"{stem}.JPEG", folders / w / f"{stem}.JPEG")
    val_tar = tmp_path / "ILSVRC2012_img_val.tar"
    with tarfile.open(val_tar, "w") as t:
        for stem in stems:
            t.add(val_dir / f"{stem}.JPEG", arcname=f"{stem}.JPEG")

    sources = {"tf": (val_dir, tree["val_labels"]), "kaggle": (val_dir, kaggle),
               "devkit": (val_dir, gt), "devkit-folder": (val_dir, devkit.parent),
               "folders": (folders, None), "tar": (val_tar, tree["val_labels"])}
    results = {}
    for name, (vdir, vlabels) in sources.items():
        out = tmp_path / f"out-{name}"
        m = convert.convert_dataset(None, vdir, vlabels, out, validation_shards=3)
        assert m["splits"]["validation"]["records"] == 30
        results[name] = shard_bytes(out, "validation")
    assert len(results["tf"]) == 6
    for name, got in results.items():
        assert got == results["tf"], f"{name} differs from the TF labels file"
    recs = read_examples(tf, tmp_path / "out-tf", "validation")
    assert {r["image/filename"].decode(): r["image/class/synset"].decode() for r in recs} == \
        {f"{s}.JPEG": w for s, w in zip(stems, tf_labels)}


def test_shared_tf_validation_labels_fixture_parses(tmp_path):
    path = SHARED / "ilsvrc2012_validation_labels.txt"
    by_stem, kind = labels.read_validation_labels(path, labels.load_synsets())
    assert kind == "tf" and len(by_stem) == 50_000
    assert by_stem["ILSVRC2012_val_00000001"] == "n01751748"
    assert labels.load_synsets().index(by_stem["ILSVRC2012_val_00000001"]) + 1 == 66


# ---------------------------------------------------------------------------------------------
# Shards: sizes, order, determinism, inputs as tar archives

def test_the_record_encoder_gives_the_schemas_bytes_around_the_image():
    """RecordEncoder.around is IMAGENET_IMAGE.encode cut at the image, whatever the sizes (each varint of the
    lengths changes width somewhere in them), labels, boxes and names; its caches change nothing."""
    synsets = labels.load_synsets()
    names_of = labels.load_names(synsets)
    names = [names_of[w] for w in synsets]
    encoder = RecordEncoder(synsets, names)
    rng = random.Random(7)
    sizes = [0, 1, 90, 127, 128, 16250, 16383, 16384, 65535, 65536, 110_000, 2**21 - 9, 2**21 + 1]
    for i in range(300):
        size = sizes[i % len(sizes)] if i < 2 * len(sizes) else rng.randrange(200_000)
        data = bytes(rng.randrange(256) for _ in range(8)) * (size // 8) + b"\xd9" * (size % 8)
        label, height = rng.choice([1, 2, rng.randrange(1, 1001)]), rng.choice([375, 500, rng.randrange(1, 5000)])
        width = rng.choice([1, 127, 128, 500, 70000])  # labels and sizes repeat: the cached runs are used
        boxes = [tuple(round(rng.random(), 4) for _ in range(4)) for _ in range(rng.choice([0, 0, 1, 3]))]
        filename = rng.choice(["n01440764_10026.JPEG", "ILSVRC2012_val_00000001.JPEG", "é" * rng.randrange(150)])
        head, tail = encoder.around(len(data), height, width, label, filename, boxes)
        values = {k: list(v) for k, v in encoder.values(height, width, label, filename, boxes).items()}
        assert head + data + tail == IMAGENET_IMAGE.encode({**values, "image/encoded": [data]}), (size, boxes)


def test_shard_sizes_are_even_like_linspace(tmp_path):
    for n, s in ((1281167, 1024), (50000, 128), (23, 4), (24, 5), (7, 7)):
        sizes = [hi - lo for lo, hi in (convert.shard_bounds(n, s, i) for i in range(s))]
        assert sizes == np.diff(np.linspace(0, n, s + 1).astype(int)).tolist()
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == n
    tree = samples.write_sample_tree(tmp_path / "raw", classes=3, per_class=8, val_per_class=1, quirks=False)
    m = convert.convert_dataset(tree["train_dir"], None, None, tmp_path / "out", train_shards=5)
    counts = [f["records"] for f in m["files"] if f["path"].startswith("train-")]
    assert counts == [4, 5, 5, 5, 5]


@pytest.fixture(scope="module")
def twice(tmp_path_factory):
    """One tree converted with 1 and with 2 worker processes."""
    root = tmp_path_factory.mktemp("det")
    tree = samples.write_sample_tree(root / "raw", classes=6, per_class=3, val_per_class=2, seed=4)
    for workers in (1, 2):
        convert.convert_dataset(tree["train_dir"], tree["validation_dir"], tree["val_labels"],
                                root / f"out{workers}", train_shards=4, validation_shards=2, workers=workers)
    return root, tree


def test_same_inputs_give_identical_bytes_whatever_the_workers(twice):
    root, _ = twice
    one, two = folder_bytes(root / "out1"), folder_bytes(root / "out2")
    assert sorted(one) == sorted(two) and "MANIFEST.json" in one and "idx/train-00003-of-00004.idx" in one
    assert one == two


def test_sample_tree_is_deterministic_and_has_the_quirks(tmp_path):
    a = samples.write_sample_tree(tmp_path / "a")
    samples.write_sample_tree(tmp_path / "b")
    files = folder_bytes(tmp_path / "a")
    assert files == folder_bytes(tmp_path / "b")
    assert len([k for k in files if k.startswith("train/")]) == 200
    val = sorted(k for k in files if k.startswith("validation/"))
    assert val == [f"validation/ILSVRC2012_val_{i:08d}.JPEG" for i in range(1, 51)]
    assert len(Path(a["val_labels"]).read_text().split()) == 50
    kinds = [images.sniff_format(v) for k, v in files.items() if k.startswith("train/")]
    assert kinds.count("PNG") == 3
    cmyk = [k for k, v in files.items() if k.endswith(".JPEG") and images.sniff_format(v) == "JPEG"
            and images.read_jpeg_header(v).components == 4]
    assert cmyk == ["train/n01440764/n01440764_0.JPEG"]


def test_record_order_is_the_reference_shuffle_over_sorted_inputs(twice, tf):
    root, tree = twice
    synsets = labels.load_synsets()
    train = Path(tree["train_dir"])
    listed = sorted(((synsets.index(d.name), f.name) for d in train.iterdir() for f in d.iterdir()))
    order = list(range(len(listed)))
    random.seed(12345)  # exactly what build_imagenet_data.py's _find_image_files does
    random.shuffle(order)
    expected = [listed[i][1] for i in order]
    got = [r["image/filename"].decode() for r in read_examples(tf, root / "out1", "train")]
    assert got == expected
    other = convert.make_plan(tree["train_dir"], None, train_shards=4, seed=1)
    assert [f.split("/")[-1] for f in other["splits"]["train"]["files"]] != expected


def _write_train_tar(train_dir: Path, path: Path, tmp: Path) -> None:
    """ILSVRC2012_img_train.tar's layout: one <wnid>.tar per class inside."""
    with tarfile.open(path, "w") as outer:
        for cls in sorted(train_dir.iterdir()):
            inner = tmp / f"{cls.name}.tar"
            with tarfile.open(inner, "w") as t:
                for f in sorted(cls.iterdir()):
                    t.add(f, arcname=f.name)
            outer.add(inner, arcname=inner.name)


def test_tar_archives_are_read_in_place_and_give_identical_shards(twice, tmp_path):
    root, tree = twice
    _write_train_tar(Path(tree["train_dir"]), tmp_path / "train.tar", tmp_path)
    val_tar = tmp_path / "val.tar"
    with tarfile.open(val_tar, "w") as t:
        for f in sorted(Path(tree["validation_dir"]).iterdir()):
            t.add(f, arcname=f.name)
    m = convert.convert_dataset(tmp_path / "train.tar", val_tar, tree["val_labels"], tmp_path / "out",
                                train_shards=4, validation_shards=2)
    ref = folder_bytes(root / "out1")
    got = folder_bytes(tmp_path / "out")
    for key in ref:
        if key not in (".work/plan.json", "MANIFEST.json"):  # these name the inputs
            assert got[key] == ref[key], key
    assert len(m["converted"]) == 4


@pytest.mark.parametrize("member", ["../evil.JPEG", "/abs/evil.JPEG", "link"])
def test_unsafe_tar_members_are_refused(tmp_path, member):
    import io

    path = tmp_path / "val.tar"
    with tarfile.open(path, "w") as t:
        info = tarfile.TarInfo(member)
        if member == "link":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            t.addfile(info)
        else:
            info.size = 4
            t.addfile(info, io.BytesIO(b"data"))
    with pytest.raises(PrepError, match="unsafe member path|link, device") as e:
        convert.make_plan(path, None)
    assert str(path) in str(e.value)


def _damaged_train_tar(train_dir: Path, path: Path, damage) -> Path:
    """ILSVRC2012_img_train.tar's layout, `damage(name, inner tar bytes)` applied to each per-class tar."""
    inner = {f"{cls.name}.tar": tar_bytes({f.name: f.read_bytes() for f in sorted(cls.iterdir())})
             for cls in sorted(train_dir.iterdir())}
    path.write_bytes(tar_bytes({name: damage(name, data) for name, data in inner.items()}))
    return path


def _second_header(data: bytes) -> int:
    import io

    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        return t.getmembers()[1].offset


def _overwrite(data: bytes, at: int, junk: bytes = b"x" * 100) -> bytes:
    return data[:at] + junk + data[at + len(junk):]


@pytest.mark.parametrize("damage, expected", [
    (lambda d: _overwrite(d, 0), "n01440764.tar: not a readable tar archive (bad checksum)"),
    # tarfile alone takes this for the end of the archive and drops the class's other images without a word
    (lambda d: _overwrite(d, _second_header(d)), "n01440764.tar: corrupt at byte "),
    (lambda d: d[:2048], "n01440764.tar: not a readable tar archive (unexpected end of data)"),
])
def test_a_damaged_per_class_tar_is_named_inside_the_archive(small_tree, tmp_path, damage, expected):
    train = Path(small_tree["train_dir"])
    tar = _damaged_train_tar(train, tmp_path / "ILSVRC2012_img_train.tar",
                             lambda name, data: damage(data) if name == "n01440764.tar" else data)
    with pytest.raises(PrepError) as e:
        convert.make_plan(tar, None)
    assert str(e.value).startswith(f"{tar}: {expected}"), str(e.value)


def test_a_truncated_archive_is_named_with_the_member_it_ends_in(small_tree, tmp_path):
    tar = _damaged_train_tar(Path(small_tree["train_dir"]), tmp_path / "train.tar", lambda name, data: data)
    data = tar.read_bytes()
    tar.write_bytes(data[:len(data) - 10240 - 2048])  # into the second per-class tar
    with pytest.raises(PrepError, match=r"train.tar: truncated \(the data ends inside 'n02102040.tar'\)"):
        convert.make_plan(tar, None)
    good = _damaged_train_tar(Path(small_tree["train_dir"]), tmp_path / "good.tar", lambda name, data: data)
    assert len(convert.make_plan(good, None, train_shards=1)["splits"]["train"]["files"]) == 4


# ---------------------------------------------------------------------------------------------
# Bounding boxes

def _voc(name: str, width, height, boxes) -> str:
    objs = "".join(f"<object><name>{name}</name><bndbox><xmin>{b[0]}</xmin><ymin>{b[1]}</ymin><xmax>{b[2]}</xmax>"
                   f"<ymax>{b[3]}</ymax></bndbox></object>" for b in boxes)
    return (f"<annotation><folder>x</folder><filename>%s</filename><source><database>ImageNet</database></source>"
            f"<size><width>{width}</width><height>{height}</height><depth>3</depth></size>{objs}</annotation>")


def test_bounding_boxes_normalised_clamped_ordered_like_process_bounding_boxes(tmp_path, tf):
    tree = samples.write_sample_tree(tmp_path / "raw", classes=2, per_class=2, val_per_class=1, quirks=False)
    a, b = sorted(p.name for p in Path(tree["train_dir"]).iterdir())
    bbox = tmp_path / "bbox"
    for w in (a, b):
        (bbox / w).mkdir(parents=True)
    (bbox / a / f"{a}_0.xml").write_text(_voc(a, 200, 100, [
        (150, 90, 30, 5),         # reversed -> swapped
        (20, 10, 120.7, 60),      # pixel values truncated by int(float(.))
        (-10, 50, 250, 120),      # clamped to [0, 1]
        (50, 50, 50, 80),         # degenerate: dropped
    ]))
    (bbox / b / f"{b}_0.xml").write_text(_voc(a, 100, 100, [(1, 1, 50, 50)]))  # another challenge wnid: skipped
    (bbox / b / f"{b}_1.xml").write_text(_voc("Scottish_deerhound", 300, 300, [(0, 0, 100, 200)]))  # kept
    (bbox / a / f"{a}_1.xml").write_text("<annotation><size>")  # unreadable: image kept, problem listed
    m = convert.convert_dataset(tree["train_dir"], None, None, tmp_path / "out", train_shards=1, bbox_dir=bbox)
    assert [d["file"] for d in m["annotation_problems"]] == [f"bbox/{a}/{a}_1.xml"]
    recs = {r["image/filename"].decode(): r for r in read_examples(tf, tmp_path / "out", "train")}
    f32 = lambda xs: np.array(xs, np.float32).tolist()  # noqa: E731
    r = recs[f"{a}_0.JPEG"]
    # (xmin, ymin, xmax, ymax) sorted as the `sort`ed CSV: (0.0,0.5,1,1), (0.1,0.1,0.6,0.6), (0.15,0.05,0.75,0.9)
    assert r["image/object/bbox/xmin"] == f32([0.0, 0.1, 0.15])
    assert r["image/object/bbox/ymin"] == f32([0.5, 0.1, 0.05])
    assert r["image/object/bbox/xmax"] == f32([1.0, 0.6, 0.75])
    assert r["image/object/bbox/ymax"] == f32([1.0, 0.6, 0.9])
    assert r["image/object/bbox/label"] == [r["image/class/label"]] * 3
    assert recs[f"{b}_0.JPEG"]["image/object/bbox/xmin"] == []
    assert recs[f"{b}_1.JPEG"]["image/object/bbox/ymax"] == f32([0.6667])
    assert recs[f"{a}_1.JPEG"]["image/object/bbox/label"] == []
    assert m["splits"]["train"]["boxes"] == 4


# ---------------------------------------------------------------------------------------------
# Bad input: one line naming the path

@pytest.fixture(scope="module")
def small_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad")
    return samples.write_sample_tree(root / "raw", classes=2, per_class=2, val_per_class=2, quirks=False)


def _copy_tree(tree: dict, dest: Path) -> dict:
    shutil.copytree(Path(tree["train_dir"]).parent, dest)
    return {k: str(dest / Path(v).relative_to(Path(tree["train_dir"]).parent)) for k, v in tree.items()}


def test_bad_inputs_raise_one_line_naming_the_path(small_tree, tmp_path):
    t = _copy_tree(small_tree, tmp_path / "t")
    train, val, vlab = Path(t["train_dir"]), Path(t["validation_dir"]), Path(t["val_labels"])

    def fails(match: str, *args, **kw):
        with pytest.raises(PrepError) as e:
            convert.make_plan(*args, **kw)
        msg = str(e.value)
        assert match in msg and "\n" not in msg, msg
        return msg

    fails(f"{tmp_path / 'missing'}: train input not found", tmp_path / "missing", None)
    fails("give --train-dir and/or --validation-dir", None, None)
    fails("--train-shards 5 is more than the 4 train images", train, None, train_shards=5)
    fails("--train-shards 0: must be a positive integer", train, None, train_shards=0)
    fails("--validation-shards -1: must be a positive integer", train, None, validation_shards=-1)
    fails("--max-pixels 0: must be a positive integer", train, None, max_pixels=0)
    fails("--seed -1: must be a non-negative integer", train, None, seed=-1)
    fails(f"--val-labels {vlab}: given without --validation-dir", train, None, vlab)
    kept = (val / "ILSVRC2012_val_00000004.JPEG").read_bytes()
    (val / "ILSVRC2012_val_00000004.JPEG").unlink()
    fails(f"{vlab}: labels 4 images but {val} holds 3", None, val, vlab, validation_shards=1)
    (val / "ILSVRC2012_val_00000004.JPEG").write_bytes(kept)
    (tmp_path / "short.txt").write_text("".join(vlab.read_text().splitlines(True)[:3]))
    fails(f"{tmp_path / 'short.txt'}: labels 3 images but {val} holds 4", None, val, tmp_path / "short.txt")
    (tmp_path / "unknown.txt").write_text("n99999999\n" * 4)
    fails("not in the synset list", None, val, tmp_path / "unknown.txt")
    (tmp_path / "junk.txt").write_text("hello\n")
    fails(f"{tmp_path / 'junk.txt'}: not a validation label file", None, val, tmp_path / "junk.txt")
    (tmp_path / "gt" / "ILSVRC2012_validation_ground_truth.txt").parent.mkdir()
    (tmp_path / "gt" / "ILSVRC2012_validation_ground_truth.txt").write_text("1\n2\n1\n2\n")
    fails("meta.mat is needed", None, val, tmp_path / "gt" / "ILSVRC2012_validation_ground_truth.txt")
    (tmp_path / "gt" / "meta.mat").write_bytes(DEVKIT_META_MAT)
    (tmp_path / "gt" / "ILSVRC2012_validation_ground_truth.txt").write_text("1\n2\n11\n2\n")  # 11: not a leaf
    fails("line 3 is '11', not an ILSVRC2012_ID of", None, val, tmp_path / "gt")
    fails(f"{val}: validation images are flat", None, val, None)
    fails(f"{train / sorted(os.listdir(train))[0]}: validation images must be flat", None, train, vlab)
    (train / "foo").mkdir()
    fails(f"{train / 'foo'}: folder is not one of the 1000 synsets", train, None)
    shutil.rmtree(train / "foo")
    (tmp_path / "gz.tar").write_bytes(b"\x1f\x8b" + b"\0" * 600)
    fails(f"{tmp_path / 'gz.tar'}: not an uncompressed tar", tmp_path / "gz.tar", None)
    (tmp_path / "unsorted.txt").write_text("n01443537\nn01440764\n")
    fails("must be sorted", train, None, synsets_file=tmp_path / "unsorted.txt")


def test_write_shard_and_finalize_refuse_what_does_not_match_the_plan(small_tree, tmp_path):
    plan = convert.make_plan(small_tree["train_dir"], None, train_shards=2)
    with pytest.raises(PrepError, match="outside 0..1"):
        convert.write_shard(plan, "train", 2, tmp_path)
    with pytest.raises(PrepError, match="no 'validation' split"):
        convert.write_shard(plan, "validation", 0, tmp_path)
    r0 = convert.write_shard(plan, "train", 0, tmp_path)
    assert r0["records"] == 2 and (tmp_path / "idx" / "train-00000-of-00002.idx").is_file()
    with pytest.raises(PrepError, match="train-00001-of-00002: no result"):
        convert.finalize(plan, tmp_path, [r0])
    r1 = convert.write_shard(plan, "train", 1, tmp_path)
    (tmp_path / "train-00000-of-00003").write_bytes(b"")  # left over from a run with other shard counts
    with pytest.raises(PrepError, match="not a shard of this conversion"):
        convert.finalize(plan, tmp_path, [r0, r1])
    (tmp_path / "train-00000-of-00003").unlink()
    m = convert.finalize(plan, tmp_path, [r1, r0])
    assert [f["path"] for f in m["files"]] == ["idx/train-00000-of-00002.idx", "idx/train-00001-of-00002.idx",
                                               "train-00000-of-00002", "train-00001-of-00002"]


def test_an_image_read_cut_short_by_the_kernel_is_read_to_its_end(tmp_path, monkeypatch):
    """Linux ends one read(2) at ~2 GiB: the reader then reads on to the end of the file, as readall() did,
    instead of keeping the first read's bytes. Here every read is cut at 1,000 bytes."""
    data = bytes(range(256)) * 40
    (tmp_path / "img.JPEG").write_bytes(data)
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: real_read(fd, min(n, 1000)))
    reader = convert._Reader({"source": {"path": str(tmp_path), "kind": "dir"}, "files": ["img.JPEG"]})
    assert reader.read(0) == data


def _whole_image_to_rgb(img):
    """The high-bit-depth greyscale conversion as it was written before it went tile by tile: the reference."""
    from PIL import Image

    arr = np.asarray(img)
    top = 255 if img.mode == "F" else 65535
    arr = np.clip(arr.astype(np.float64 if img.mode == "F" else np.int64), 0, top)
    return Image.fromarray((arr if img.mode == "F" else arr >> 8).astype(np.uint8), "L").convert("RGB")


@pytest.mark.parametrize("mode", ["I;16", "I", "F"])
def test_high_bit_depth_greyscale_is_converted_tile_by_tile_to_the_same_bytes(mode, monkeypatch):
    """Tiles of 1,000 pixels over a 123 x 77 image (rows and columns cut): the JPEG is the one the whole-image
    conversion gives, values past the range (negative, above 65535: 32-bit and float images) clipped alike."""
    from PIL import Image
    from imagenet_prep import images

    rng = np.random.default_rng(7)
    values = rng.integers(-300, 70_000, size=(77, 123))
    img = Image.fromarray(values.astype({"I;16": np.uint16, "I": np.int32, "F": np.float32}[mode]))
    assert img.mode == mode
    expected = io.BytesIO()
    _whole_image_to_rgb(img).save(expected, "JPEG", quality=images.JPEG_QUALITY)
    monkeypatch.setattr(images, "_TILE_PIXELS", 1000)
    got = io.BytesIO()
    images._to_rgb(img.copy()).save(got, "JPEG", quality=images.JPEG_QUALITY)
    assert got.getvalue() == expected.getvalue()


def test_a_16_bit_png_converts_in_bounded_memory(tmp_path):
    """A 6000 x 6000 16-bit greyscale PNG (36 M pixels, under the pixel cap) converted under a 400 MiB address-space
    limit: scaled tile by tile, it fits; converted whole (int64 copies of every pixel) it needed about 800 MiB."""
    script = tmp_path / "convert16.py"
    script.write_text(textwrap.dedent("""
        import io, resource, sys
        import numpy as np
        from PIL import Image
        from imagenet_prep.images import prepare_image
        w = h = 6000
        row = (np.arange(w, dtype=np.uint32) * 65535 // (w - 1)).astype(np.uint16)
        png = io.BytesIO()
        Image.fromarray(np.tile(row, (h, 1))).save(png, "PNG", compress_level=1)
        data = png.getvalue()
        del row, png
        resource.setrlimit(resource.RLIMIT_AS, (400 << 20, 400 << 20))
        out = prepare_image(data)
        print(out.width, out.height, out.converted)
    """), encoding="utf-8")
    r = subprocess.run([sys.executable, str(script)], env=dict(os.environ, OPENBLAS_NUM_THREADS="1",
                                                               PYTHONPATH=str(REPO)),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["6000", "6000", "PNG", "image", "(I;16)"]
