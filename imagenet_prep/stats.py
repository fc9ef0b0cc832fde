"""The statistics report of a shard folder: `stats(folder, out_dir)`.

Per split: shard and record counts, records per class, image width and height, JPEG sizes and
bounding boxes. Written to out_dir as stats.json, report.txt (`stats_report_text`) and two charts,
class_histogram.png and image_sizes.png.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path

from shardkit.atomic import write_json, write_text
from shardkit.errors import PrepError
from shardkit.plots import figure, write_png
from shardkit.progress import Progress, Stage, throttle
from shardkit.tf import import_tensorflow

from . import labels
from .reader import find_shards, iter_parsed

log = logging.getLogger(__name__)


def stats(folder: str | Path, out_dir: str | Path, synsets_file=None, *, overwrite: bool = False,
          progress: Progress | None = None) -> dict:
    """Per-split counts, per-class histogram and image sizes -> out_dir/stats.json, report.txt and two PNG charts.

    `overwrite` replaces a report already there (the command line); without it an existing one is
    kept when identical and refused when not (`shardkit.atomic`). `progress(done, total)` counts the shards read.
    """
    folder, out_dir = Path(folder), Path(out_dir)
    if out_dir.resolve() == folder.resolve():
        raise PrepError(f"--out {out_dir}: choose a report folder other than the dataset itself")
    shards = find_shards(folder)
    synsets = labels.load_synsets(synsets_file)
    tf = import_tensorflow()
    stage = Stage(log, f"stats {folder}")
    progress = throttle(progress)
    shards_read, shards_total = 0, sum(len(paths) for paths in shards.values())
    report = {"folder": str(folder), "splits": {}}
    per_class: dict[str, Counter] = {}
    dims: dict[str, list[tuple[int, int]]] = {}
    for split, paths in shards.items():
        classes, sizes, shard_counts, nbytes, boxes, boxed = Counter(), [], [], [], 0, 0
        for shard in paths:
            if progress is not None:
                progress(shards_read, shards_total)
            shards_read += 1
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
        if not sizes:  # the report's minimums and means would be of nothing
            raise PrepError(f"{folder}: its {split} shards hold no records")
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
    write_json(out_dir / "stats.json", report, overwrite=overwrite)
    write_text(out_dir / "report.txt", stats_report_text(report), overwrite=overwrite)
    _plot(out_dir, per_class, dims, len(synsets), overwrite)
    if progress is not None:
        progress(shards_total, shards_total)
    stage.finish(sum(st["records"] for st in report["splits"].values()), "records",
                 sum(st["shard_bytes"] for st in report["splits"].values()))
    return report


def stats_report_text(report: dict) -> str:
    """The report as text: one paragraph per split (what report.txt holds and the command prints)."""
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


def _plot(out_dir: Path, per_class: dict[str, Counter], dims: dict[str, list], num_classes: int,
          overwrite: bool) -> None:
    """class_histogram.png (records per class, one panel per split) and image_sizes.png (width against height)."""
    fig = figure(10, 3 * len(per_class))
    for row, (split, counts) in enumerate(per_class.items(), start=1):
        ax = fig.add_subplot(len(per_class), 1, row)
        xs = sorted(counts)
        ax.bar(xs, [counts[x] for x in xs], width=1.0 if len(xs) > 50 else 0.8)
        ax.set_xlim(0, num_classes + 1)
        ax.set_title(f"{split}: records per class ({len(xs)} classes)")
        ax.set_xlabel("image/class/label")
        ax.set_ylabel("records")
        ax.grid(True, axis="y", alpha=0.3)
    write_png(fig, out_dir / "class_histogram.png", overwrite=overwrite)

    fig = figure(6, 5)
    ax = fig.add_subplot(1, 1, 1)
    for split, sizes in dims.items():
        ax.scatter([w for w, _ in sizes], [h for _, h in sizes], s=4, alpha=0.5, label=split)
    ax.set_xlabel("width")
    ax.set_ylabel("height")
    ax.set_title("image sizes")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    write_png(fig, out_dir / "image_sizes.png", overwrite=overwrite)
