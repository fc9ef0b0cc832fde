"""`imagenet-prep`: convert ImageNet to TFRecord shards, verify a shard folder, report its statistics.

    imagenet-prep convert --train-dir T --validation-dir V [--val-labels L] --output-dir OUT ...
    imagenet-prep verify DIR
    imagenet-prep stats DIR --out REPORT_DIR

`verify` stops at the first problem with one line and a non-zero exit. It checks the shard names
and counts (and that nothing else in DIR matches the `train*`/`validation*` globs readers use),
MANIFEST.json checksums and record counts, every index file against its shard, and parses every
record with TensorFlow using the 15-key schema of build_imagenet_data.py: labels in 1..1000 and
matching the synset, JPEG start/end markers and header size equal to image/height and width, and
the first image of each shard decoded by tf.io.decode_jpeg (every image with --decode-all).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from shardkit.errors import PrepError
from shardkit.tf import import_tensorflow

from . import convert, images, labels

PROG = "imagenet-prep"
BATCH = 256


def feature_spec(tf) -> dict:
    """The schema TF-official/TPU/Graphcore readers parse build_imagenet_data.py records with."""
    fixed_str = tf.io.FixedLenFeature([], tf.string)
    fixed_int = tf.io.FixedLenFeature([], tf.int64)
    spec = {key: fixed_str for key in ("image/encoded", "image/colorspace", "image/format", "image/filename",
                                       "image/class/synset", "image/class/text")}
    spec.update({key: fixed_int for key in ("image/height", "image/width", "image/channels", "image/class/label")})
    spec.update({f"image/object/bbox/{k}": tf.io.VarLenFeature(tf.float32) for k in ("xmin", "xmax", "ymin", "ymax")})
    spec["image/object/bbox/label"] = tf.io.VarLenFeature(tf.int64)
    return spec


def find_shards(folder: Path) -> dict[str, list[Path]]:
    """{split: shard paths in index order}; PrepError for a gap, mixed counts or a stray `train*` file."""
    if not folder.is_dir():
        raise PrepError(f"{folder}: not a folder")
    found: dict[str, dict[int, tuple[int, Path]]] = {}
    for p in sorted(folder.iterdir()):
        if not p.name.startswith(convert.SPLITS):
            continue
        m = convert.SHARD_RE.fullmatch(p.name)
        if m is None:
            raise PrepError(f"{p}: stray file; readers glob '{p.name.split('-')[0]}*' in this folder and Graphcore's "
                            f"demands exactly the shards (move it elsewhere)")
        found.setdefault(m.group(1), {})[int(m.group(2))] = (int(m.group(3)), p)
    if not found:
        raise PrepError(f"{folder}: no train-*-of-* or validation-*-of-* shards")
    out = {}
    for split, by_index in found.items():
        totals = {n for n, _ in by_index.values()}
        if len(totals) != 1:
            raise PrepError(f"{folder}: {split} shards disagree on the shard count ({sorted(totals)})")
        total = totals.pop()
        for i in range(total):
            if i not in by_index:
                raise PrepError(f"{folder / convert.shard_name(split, i, total)}: missing shard")
        extra = sorted(set(by_index) - set(range(total)))
        if extra:
            raise PrepError(f"{by_index[extra[0]][1]}: shard index beyond the shard count")
        out[split] = [by_index[i][1] for i in range(total)]
    return out


def iter_parsed(tf, shard: Path, check_crc: bool = True):
    """(batch of raw payloads, parsed dict of numpy arrays) per BATCH records of `shard`."""
    from shardkit.records import read_records

    spec = feature_spec(tf)
    batch = []

    def parse(payloads):
        try:
            parsed = tf.io.parse_example(tf.constant(payloads), spec)
        except (tf.errors.InvalidArgumentError, ValueError) as e:
            msg = " ".join(str(e).split())[:300]
            raise PrepError(f"{shard}: a record does not parse with the 15-key ImageNet schema ({msg})") from None
        out = {}
        for k, v in parsed.items():
            if isinstance(v, tf.SparseTensor):
                rows = v.indices.numpy()[:, 0]
                vals = v.values.numpy()
                out[k] = [vals[rows == r] for r in range(len(payloads))]
            else:
                out[k] = v.numpy()
        return out

    for data in read_records(shard, check_crc=check_crc):
        batch.append(data)
        if len(batch) == BATCH:
            yield batch, parse(batch)
            batch = []
    if batch:
        yield batch, parse(batch)


def verify(folder: str | Path, synsets_file=None, decode_all: bool = False) -> dict:
    """Check a shard folder (see the module docstring); returns {split: records}. PrepError on a problem."""
    from shardkit.manifest import check_manifest
    from shardkit.records import check_index

    folder = Path(folder)
    shards = find_shards(folder)
    synsets = labels.load_synsets(synsets_file)
    manifest = check_manifest(folder)
    manifest_counts = {f["path"]: f.get("records") for f in manifest.get("files", [])}
    tf = import_tensorflow()
    totals = {}
    for split, paths in shards.items():
        totals[split] = 0
        for shard in paths:
            count = check_index(shard, convert.index_path(folder, shard.name))
            if manifest_counts.get(shard.name) != count:
                raise PrepError(f"{shard}: {count} records, MANIFEST.json says {manifest_counts.get(shard.name)}")
            if count == 0:
                raise PrepError(f"{shard}: no records (DALI refuses empty index files)")
            first = True
            for _, rec in iter_parsed(tf, shard, check_crc=False):  # check_index already checked the CRCs
                for j in range(len(rec["image/class/label"])):
                    _check_record(tf, shard, rec, j, synsets, decode=decode_all or first)
                    first = False
            totals[split] += count
    for split in convert.SPLITS:
        want = manifest.get("splits", {}).get(split, {}).get("records")
        if want is not None and totals.get(split) != want:
            raise PrepError(f"{folder}: {totals.get(split)} {split} records, MANIFEST.json says {want}")
    return totals


def _check_record(tf, shard: Path, rec: dict, j: int, synsets: list[str], decode: bool) -> None:
    fname = rec["image/filename"][j].decode("utf-8", "replace")
    where = f"{shard}: record {fname!r}"
    label = int(rec["image/class/label"][j])
    if not 1 <= label <= len(synsets):
        raise PrepError(f"{where}: image/class/label {label} outside 1..{len(synsets)}")
    synset = rec["image/class/synset"][j].decode("ascii", "replace")
    if synset != synsets[label - 1]:
        raise PrepError(f"{where}: label {label} is {synsets[label - 1]} in the sorted synset list, record says {synset}")
    fixed = (rec["image/colorspace"][j], rec["image/channels"][j], rec["image/format"][j])
    if fixed != (b"RGB", 3, b"JPEG"):
        raise PrepError(f"{where}: colorspace/channels/format are {fixed}, expected (RGB, 3, JPEG)")
    if not fname or not rec["image/class/text"][j]:
        raise PrepError(f"{where}: empty image/filename or image/class/text")
    n = len(rec["image/object/bbox/xmin"][j])
    for k in ("xmax", "ymin", "ymax"):
        if len(rec[f"image/object/bbox/{k}"][j]) != n:
            raise PrepError(f"{where}: bbox lists of different lengths")
    if n and (list(rec["image/object/bbox/label"][j]) != [label] * n):
        raise PrepError(f"{where}: image/object/bbox/label differs from image/class/label")
    for k in ("xmin", "xmax", "ymin", "ymax"):
        v = rec[f"image/object/bbox/{k}"][j]
        if n and (v.min() < 0 or v.max() > 1):
            raise PrepError(f"{where}: bbox {k} outside [0, 1]")
    data = rec["image/encoded"][j]
    if not data.startswith(b"\xff\xd8\xff"):
        raise PrepError(f"{where}: image/encoded does not start with a JPEG start-of-image marker")
    try:
        head = images.read_jpeg_header(data)
    except images.ImageRejected as e:
        raise PrepError(f"{where}: image/encoded: {e}") from None
    h, w = int(rec["image/height"][j]), int(rec["image/width"][j])
    if (head.height, head.width) != (h, w) or head.components not in (1, 3):
        raise PrepError(f"{where}: JPEG header says {head.width}x{head.height}x{head.components}, "
                        f"record says {w}x{h}")
    if decode:
        try:
            shape = tuple(tf.io.decode_jpeg(data, channels=3).shape)
        except tf.errors.InvalidArgumentError as e:
            raise PrepError(f"{where}: tf.io.decode_jpeg fails ({' '.join(str(e).split())[:200]})") from None
        if shape != (h, w, 3):
            raise PrepError(f"{where}: decodes to {shape}, record says {h}x{w}x3")


def stats(folder: str | Path, out_dir: str | Path, synsets_file=None) -> dict:
    """Per-split counts, per-class histogram and image sizes -> out_dir/stats.json and two PNG charts."""
    from shardkit.atomic import write_json, write_text

    folder, out_dir = Path(folder), Path(out_dir)
    if out_dir.resolve() == folder.resolve():
        raise PrepError(f"--out {out_dir}: choose a report folder other than the dataset itself")
    shards = find_shards(folder)
    synsets = labels.load_synsets(synsets_file)
    tf = import_tensorflow()
    report = {"folder": str(folder), "splits": {}}
    per_class: dict[str, Counter] = {}
    dims: dict[str, list[tuple[int, int]]] = {}
    for split, paths in shards.items():
        classes, sizes, shard_counts, nbytes, boxes, boxed = Counter(), [], [], [], 0, 0
        for shard in paths:
            n = 0
            for _, rec in iter_parsed(tf, shard):
                for j, label in enumerate(rec["image/class/label"]):
                    classes[int(label)] += 1
                    sizes.append((int(rec["image/width"][j]), int(rec["image/height"][j])))
                    nbytes.append(len(rec["image/encoded"][j]))
                    k = len(rec["image/object/bbox/xmin"][j])
                    boxes += k
                    boxed += bool(k)
                    n += 1
            shard_counts.append(n)
        per_class[split], dims[split] = classes, sizes
        ws, hs = [w for w, _ in sizes], [h for _, h in sizes]
        report["splits"][split] = {
            "shards": len(paths),
            "records": sum(shard_counts),
            "records_per_shard": {"min": min(shard_counts), "max": max(shard_counts)},
            "classes": len(classes),
            "images_per_class": {"min": min(classes.values()), "max": max(classes.values())},
            "per_class": {f"{label}": {"synset": synsets[label - 1] if label <= len(synsets) else None,
                                       "records": classes[label]} for label in sorted(classes)},
            "width": _summary(ws), "height": _summary(hs),
            "jpeg_bytes": {**_summary(nbytes), "total": sum(nbytes)},
            "boxes": boxes, "images_with_boxes": boxed,
            "shard_bytes": sum(p.stat().st_size for p in paths),
        }
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(out_dir / "stats.json", report)
    write_text(out_dir / "report.txt", stats_report_text(report))
    _plot(out_dir, per_class, dims, len(synsets))
    return report


def stats_report_text(report: dict) -> str:
    lines = [f"ImageNet dataset {report['folder']}"]
    for split, st in report["splits"].items():
        w, h, b = st["width"], st["height"], st["jpeg_bytes"]
        lines += [
            "",
            f"{split}: {st['records']} records in {st['shards']} shards "
            f"({st['records_per_shard']['min']}..{st['records_per_shard']['max']} per shard), "
            f"{st['shard_bytes']} bytes",
            f"  classes          {st['classes']} ({st['images_per_class']['min']}..{st['images_per_class']['max']} "
            f"images per class)",
            f"  width            min {w['min']} max {w['max']} mean {w['mean']}",
            f"  height           min {h['min']} max {h['max']} mean {h['mean']}",
            f"  JPEG bytes       min {b['min']} max {b['max']} mean {b['mean']} total {b['total']}",
            f"  bounding boxes   {st['boxes']} on {st['images_with_boxes']} images",
        ]
    return "\n".join(lines) + "\n"


def _summary(values: list[int]) -> dict:
    return {"min": min(values), "max": max(values), "mean": round(sum(values) / len(values), 2)}


def _plot(out_dir: Path, per_class: dict[str, Counter], dims: dict[str, list], num_classes: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from shardkit.atomic import atomic_write

    fig, axes = plt.subplots(len(per_class), 1, figsize=(10, 3 * len(per_class)), squeeze=False)
    for ax, (split, counts) in zip(axes[:, 0], per_class.items()):
        xs = sorted(counts)
        ax.bar(xs, [counts[x] for x in xs], width=1.0 if len(xs) > 50 else 0.8)
        ax.set_xlim(0, num_classes + 1)
        ax.set_title(f"{split}: records per class ({len(xs)} classes)")
        ax.set_xlabel("image/class/label")
        ax.set_ylabel("records")
    fig.tight_layout()
    with atomic_write(out_dir / "class_histogram.png", "wb") as f:
        fig.savefig(f, format="png", metadata={"Software": None})
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 5))
    for split, sizes in dims.items():
        ax.scatter([w for w, _ in sizes], [h for _, h in sizes], s=4, alpha=0.5, label=split)
    ax.set_xlabel("width")
    ax.set_ylabel("height")
    ax.set_title("image sizes")
    ax.legend()
    fig.tight_layout()
    with atomic_write(out_dir / "image_sizes.png", "wb") as f:
        fig.savefig(f, format="png", metadata={"Software": None})
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="ImageNet to build_imagenet_data.py TFRecord shards.")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("convert", help="plan, write every shard and the manifest in one process (or --workers)")
    c.add_argument("--train-dir", help="train/<wnid>/*.JPEG folder or ILSVRC2012_img_train.tar")
    c.add_argument("--validation-dir", help="flat validation images, <wnid>/ folders, or ILSVRC2012_img_val.tar")
    c.add_argument("--val-labels", help="TF imagenet_2012_validation_synset_labels.txt, Kaggle LOC_val_solution.csv, "
                                        "or devkit ILSVRC2012_validation_ground_truth.txt (meta.mat beside it)")
    c.add_argument("--output-dir", required=True)
    c.add_argument("--synsets-file", help="sorted wnids, one a line (default: the 1000 ILSVRC-2012 synsets)")
    c.add_argument("--metadata-file", help="wnid<TAB>names (default: shipped names; TF's imagenet_metadata.txt works)")
    c.add_argument("--bbox-dir", help="bounding-box XML as <wnid>/<image>.xml (ILSVRC2012_bbox_train_v2)")
    c.add_argument("--train-shards", type=int, default=1024)
    c.add_argument("--validation-shards", type=int, default=128)
    c.add_argument("--seed", type=int, default=12345)
    c.add_argument("--workers", type=int, default=1, help="processes writing shards (bytes do not depend on it)")
    c.add_argument("--strict", action="store_true", help="fail on an unreadable image instead of leaving it out")
    c.add_argument("--verify-decode", action="store_true", help="fully decode every copied JPEG (slow)")
    c.add_argument("--max-pixels", type=int, default=images.MAX_PIXELS,
                   help="refuse images declaring more pixels (decompression bombs)")

    v = sub.add_parser("verify", help="check a shard folder; one line and exit 1 on the first problem")
    v.add_argument("dir")
    v.add_argument("--synsets-file")
    v.add_argument("--decode-all", action="store_true", help="decode every image with TensorFlow (slow)")

    s = sub.add_parser("stats", help="per-split counts, per-class histogram and image sizes")
    s.add_argument("dir")
    s.add_argument("--out", required=True, help="report folder (stats.json, class_histogram.png, image_sizes.png)")
    s.add_argument("--synsets-file")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "convert":
            if args.train_dir is None and args.validation_dir is None:
                raise PrepError("convert: give --train-dir and/or --validation-dir")
            manifest = convert.convert_dataset(
                args.train_dir, args.validation_dir, args.val_labels, args.output_dir, workers=args.workers,
                synsets_file=args.synsets_file, metadata_file=args.metadata_file, bbox_dir=args.bbox_dir,
                train_shards=args.train_shards, validation_shards=args.validation_shards, seed=args.seed,
                strict=args.strict, verify_decode=args.verify_decode, max_pixels=args.max_pixels)
            for split, st in manifest["splits"].items():
                print(f"{split}: {st['records']} records in {st['shards']} shards, {st['left_out']} left out, "
                      f"{st['converted']} re-encoded")
            print(f"wrote {args.output_dir} (MANIFEST.json lists the files left out and why)")
        elif args.command == "verify":
            totals = verify(args.dir, args.synsets_file, args.decode_all)
            print(f"OK {args.dir}: " + ", ".join(f"{k} {v} records" for k, v in totals.items()))
        else:
            report = stats(args.dir, args.out, args.synsets_file)
            sys.stdout.write(stats_report_text(report))
            print(f"wrote {Path(args.out) / 'stats.json'}, report.txt, class_histogram.png and image_sizes.png")
    except PrepError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # e.g. an output folder without write permission, a full disk
        print(f"{PROG}: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
