"""The statistics report of a shard folder: `stats(folder, out_dir)`.

Per split: shard and record counts, records per class (all the synsets, those without an image
included), image width and height, JPEG sizes, bounding boxes, and a few records to look at; from
MANIFEST.json, what was re-encoded and what was left out, with why, and whether every file still
matches it. Written to out_dir as stats.json (every figure), report.txt (`stats_report_text`), one
PNG per plot (class_histogram.png and image_sizes.png among them) and report.html, the page that
shows them with their tables (`shardkit.report`). Nothing written depends on where the folder is
(it is named by `name`) or on when the report was made: the `ImageNet` task keeps the report inside
the dataset it describes.
"""

from __future__ import annotations

import io
import json
import logging
from collections import Counter
from pathlib import Path

from shardkit.atomic import make_parent_folder, write_json, write_text
from shardkit.errors import PrepError
from shardkit.manifest import MANIFEST, manifest_status, status_words
from shardkit.plots import figure
from shardkit.progress import Progress, Stage, throttle
from shardkit.report import Html, Report, details, facts, page, paragraph, section, status, table
from shardkit.tf import import_tensorflow

from . import labels
from .convert import PLAN_NAME, WORK_DIR
from .reader import find_shards, iter_parsed

log = logging.getLogger(__name__)

CONTACT_SHEET = 8       # records shown per split: its first ones, in shard order (the shards are shuffled)
COMMONEST_SIZES = 12    # image sizes listed
MAX_SCATTER = 20_000    # points per split drawn in the size scatter (every k-th image beyond that)
BYTE_BINS = 24          # ranges of the JPEG size histogram
# What an output folder holds from the start of a conversion: a report without MANIFEST.json beside it is of an
# unfinished dataset.
STARTED_BY = (f"{WORK_DIR}/{PLAN_NAME}",)


def stats(folder: str | Path, out_dir: str | Path, synsets_file=None, *, overwrite: bool = False,
          name: str | None = None, progress: Progress | None = None) -> dict:
    """Per-split counts, histograms, sizes and samples -> out_dir/stats.json, report.txt, the plots and report.html.

    `name` is what the report calls the folder (default: the path as given). `overwrite` replaces a
    report already there (the command line); without it an existing one is kept when identical and
    refused when not (`shardkit.atomic`). `progress(done, total)` counts the shards read.
    """
    folder, out_dir = Path(folder), Path(out_dir)
    report, seen = folder_stats(folder, synsets_file, name=name, progress=progress)
    html_text, rep = report_html(report, seen)
    make_parent_folder(out_dir / "stats.json")
    write_json(out_dir / "stats.json", report, overwrite=overwrite)
    write_text(out_dir / "report.txt", stats_report_text(report), overwrite=overwrite)
    rep.write(out_dir, html_text, overwrite=overwrite)
    return report


def folder_stats(folder: Path, synsets_file=None, *, name: str | None = None,
                 progress: Progress | None = None) -> tuple[dict, dict]:
    """(stats.json's content, what the page draws beyond it: {"samples": {split: the contact sheet's records
    with their JPEG bytes}, "sizes": {split: every image's (width, height)}})."""
    shards = find_shards(folder)
    synsets = labels.load_synsets(synsets_file)
    names = _names(synsets)
    tf = import_tensorflow()
    stage = Stage(log, f"stats {folder}")
    progress = throttle(progress)
    shards_read, shards_total = 0, sum(len(paths) for paths in shards.values())
    report = {"folder": name if name is not None else str(folder), "num_classes": len(synsets), "splits": {}}
    per_class: dict[str, Counter] = {}
    samples: dict[str, list] = {}
    all_sizes: dict[str, list] = {}
    all_bytes: dict[str, list] = {}
    shard_records: dict[str, int] = {}
    for split, paths in shards.items():
        classes, sizes, shard_counts, nbytes, boxes, boxed = Counter(), [], [], [], 0, 0
        sheet = []
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
                    if len(sheet) < CONTACT_SHEET:
                        sheet.append(_sample(rec, j, shard.name, n, names))
                    n += 1
            shard_counts.append(n)
            shard_records[shard.name] = n
        if not sizes:  # the report's minimums and means would be of nothing
            raise PrepError(f"{folder}: its {split} shards hold no records")
        per_class[split], samples[split], all_sizes[split], all_bytes[split] = classes, sheet, sizes, nbytes
        ws, hs = [w for w, _ in sizes], [h for _, h in sizes]
        report["splits"][split] = {
            "shards": len(paths),
            "records": sum(shard_counts),
            "records_per_shard": {"min": min(shard_counts), "max": max(shard_counts)},
            "shard_records": [{"shard": p.name, "records": c, "bytes": p.stat().st_size}
                              for p, c in zip(paths, shard_counts)],
            "classes": len(classes),
            "images_per_class": {"min": min(classes.values()), "max": max(classes.values())},
            "per_class": {f"{label}": {"synset": synsets[label - 1] if label <= len(synsets) else None,
                                       "records": classes[label]} for label in sorted(classes)},
            "width": _summary(ws), "height": _summary(hs),
            "commonest_sizes": [{"width": w, "height": h, "images": c}
                                for (w, h), c in sorted(Counter(sizes).items(),
                                                        key=lambda kv: (-kv[1], kv[0]))[:COMMONEST_SIZES]],
            "jpeg_bytes": {**_summary(nbytes), "total": sum(nbytes)},
            "boxes": boxes, "images_with_boxes": boxed,
            "shard_bytes": sum(p.stat().st_size for p in paths),
            "contact_sheet": [{k: v for k, v in s.items() if k != "encoded"} for s in sheet],
            "scatter": _scatter(sizes),
        }
    # One set of ranges for every split, so that their histograms compare.
    lo, hi = min(min(b) for b in all_bytes.values()), max(max(b) for b in all_bytes.values())
    for split, nbytes in all_bytes.items():
        report["splits"][split]["jpeg_bytes_histogram"] = _histogram(nbytes, BYTE_BINS, lo, hi)
    report["class_counts"] = [{"label": i, "synset": w, "name": names[w],
                               **{split: per_class[split][i] for split in per_class}}
                              for i, w in enumerate(synsets, 1)]
    report.update(_manifest_lists(folder))
    report["manifest"] = manifest_status(folder, shard_records, name, started_by=STARTED_BY)
    if progress is not None:
        progress(shards_total, shards_total)
    stage.finish(sum(st["records"] for st in report["splits"].values()), "records",
                 sum(st["shard_bytes"] for st in report["splits"].values()))
    return report, {"samples": samples, "sizes": all_sizes}


def _names(synsets: list[str]) -> dict[str, str]:
    """Human-readable names of the synsets: the shipped ones where there are some, the wnid itself otherwise
    (a --synsets-file of other classes)."""
    try:
        return labels.load_names(synsets)
    except PrepError:
        return {w: w for w in synsets}


def _sample(rec: dict, j: int, shard: str, index: int, names: dict[str, str]) -> dict:
    """One record for the contact sheet: where it is, its label, size and boxes, and its JPEG."""
    synset = rec["image/class/synset"][j].decode("ascii", "replace")
    return {"shard": shard, "record": index, "file": rec["image/filename"][j].decode("utf-8", "replace"),
            "label": int(rec["image/class/label"][j]), "synset": synset,
            "text": rec["image/class/text"][j].decode("utf-8", "replace"),
            "width": int(rec["image/width"][j]), "height": int(rec["image/height"][j]),
            "boxes": [[round(float(rec[f"image/object/bbox/{k}"][j][b]), 6) for k in ("xmin", "ymin", "xmax", "ymax")]
                      for b in range(len(rec["image/object/bbox/xmin"][j]))],
            "encoded": bytes(rec["image/encoded"][j])}


def _summary(values: list[int]) -> dict:
    return {"min": min(values), "max": max(values), "mean": round(sum(values) / len(values), 2)}


def _histogram(values: list[int], bins: int, lo: int, hi: int) -> dict:
    """Counts of `values` in `bins` equal integer ranges [edges[i], edges[i+1]) from `lo` to past `hi`."""
    hi += 1
    step = max(1, -(-(hi - lo) // bins))
    edges = list(range(lo, lo + step * bins + 1, step))
    counts = [0] * bins
    for v in values:
        counts[min((v - lo) // step, bins - 1)] += 1
    return {"edges": edges, "counts": counts}


def _scatter(sizes: list[tuple[int, int]]) -> dict:
    """Which images the size scatter draws: all, or every k-th beyond MAX_SCATTER."""
    every = max(1, -(-len(sizes) // MAX_SCATTER))
    return {"drawn": len(sizes[::every]), "every": every}


def _manifest_lists(folder: Path) -> dict:
    """What MANIFEST.json says was re-encoded, left out (and why), and which annotations could not be read."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        manifest = {}
    if not isinstance(manifest, dict):
        manifest = {}
    out = {}
    for key in ("converted", "left_out", "annotation_problems", "ignored"):
        entries = manifest.get(key) if isinstance(manifest.get(key), list) else []
        entries = [e for e in entries if isinstance(e, dict)]
        out[key] = entries
        out[f"{key}_by_reason"] = dict(sorted(Counter(str(e.get("reason")) for e in entries).items()))
    return out


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
    if "manifest" in report:
        lines += ["", f"re-encoded       {len(report['converted'])}" + _reasons(report["converted_by_reason"]),
                  f"left out         {len(report['left_out'])}" + _reasons(report["left_out_by_reason"]),
                  f"MANIFEST.json    {status_words(report['manifest'])}"]
    return "\n".join(lines) + "\n"


def _reasons(by_reason: dict[str, int]) -> str:
    return (" (" + "; ".join(f"{n} {reason}" for reason, n in by_reason.items()) + ")") if by_reason else ""


# ---------------------------------------------------------------------------------------------
# The HTML report: plots (PNG, matplotlib) and their tables

_COLOURS = {"train": "#4c72b0", "validation": "#dd8452"}


def _colour(split: str) -> str:
    return _COLOURS.get(split, "#55a868")


def _plot_classes(report: dict, rep: Report) -> Html:
    """Records per class, one panel per split, every label 1..num_classes on the axis; classes without an
    image show as gaps. Thin bars get an edge so that a few classes among 1000 still show."""
    splits = list(report["splits"])
    n = report["num_classes"]
    fig = figure(11, 2.9 * len(splits) + 0.3)
    for row, split in enumerate(splits, start=1):
        counts = [c[split] for c in report["class_counts"]]
        present = sum(1 for c in counts if c)
        ax = fig.add_subplot(len(splits), 1, row)
        xs = [i for i, c in enumerate(counts, 1) if c]
        ax.bar(xs, [counts[i - 1] for i in xs], width=1.0, color=_colour(split), edgecolor=_colour(split),
               linewidth=1.2)
        ax.set_xlim(1 - n / 150, n + n / 150)  # room beside labels 1 and n, whose bars the frame would hide
        ax.set_ylim(0, max(counts) * 1.15)
        if n >= 100:
            ax.set_xticks([1] + list(range(100, n + 1, 100)))
        ax.set_title(f"{split}: images per class ({present} of {n} classes have images; "
                     f"{min(c for c in counts if c)}..{max(counts)} each)")
        ax.set_xlabel("image/class/label (1 + position of the synset in the sorted list)")
        ax.set_ylabel("images")
        ax.grid(True, axis="y", alpha=0.3)
    return rep.figure("class_histogram.png", fig, "bar chart of images per class, one panel per split")


def _plot_sizes(report: dict, rep: Report, sizes: dict[str, list]) -> Html:
    fig = figure(7, 5.2)
    ax = fig.add_subplot(1, 1, 1)
    for split, pts in sizes.items():
        every = report["splits"][split]["scatter"]["every"]
        pts = pts[::every]
        ax.scatter([w for w, _ in pts], [h for _, h in pts], s=10, alpha=0.5, color=_colour(split),
                   label=f"{split} ({len(pts):,} images" + (f", every {every}th)" if every > 1 else ")"),
                   edgecolors="none")
    ax.set_xlabel("width (pixels)")
    ax.set_ylabel("height (pixels)")
    ax.set_title("Image sizes (image/width x image/height)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", markerscale=2.5)
    return rep.figure("image_sizes.png", fig, "scatter plot of image width against height")


def _plot_bytes(report: dict, rep: Report) -> Html:
    fig = figure(10, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    for split, st in report["splits"].items():
        h = st["jpeg_bytes_histogram"]
        edges = [e / 1024 for e in h["edges"]]
        ax.stairs(h["counts"], edges, color=_colour(split), linewidth=1.8,
                  label=f"{split}: mean {st['jpeg_bytes']['mean'] / 1024:.1f} KiB")
    ax.set_xlabel("bytes of image/encoded (KiB)")
    ax.set_ylabel("images")
    ax.set_title("Bytes per image")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right")
    return rep.figure("image_bytes.png", fig, "histogram of JPEG bytes per image")


def _plot_shards(report: dict, rep: Report) -> Html:
    from matplotlib.ticker import MaxNLocator

    splits = list(report["splits"])
    fig = figure(10, 2.6 * len(splits) + 0.3)
    for row, split in enumerate(splits, start=1):
        shards = report["splits"][split]["shard_records"]
        ax = fig.add_subplot(len(splits), 1, row)
        ax.bar(range(len(shards)), [s["records"] for s in shards], width=0.8 if len(shards) < 60 else 1.0,
               color=_colour(split))
        ax.set_xlim(-0.6, len(shards) - 0.4)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"{split}: records per shard ({len(shards)} shards)")
        ax.set_xlabel("shard index")
        ax.set_ylabel("records")
        ax.grid(True, axis="y", alpha=0.3)
    return rep.figure("shard_records.png", fig, "bar chart of records per shard")


def _plot_contact_sheet(split: str, sheet: list[dict], rep: Report) -> Html:
    """The sheet's images, decoded, each with its label and name above it and its boxes drawn."""
    import numpy as np
    from matplotlib.patches import Rectangle
    from PIL import Image

    cols = 4
    rows = max(1, -(-len(sheet) // cols))
    fig = figure(11, 3.0 * rows)
    for k, s in enumerate(sheet):
        ax = fig.add_subplot(rows, cols, k + 1)
        with Image.open(io.BytesIO(s["encoded"])) as img:
            pixels = np.asarray(img.convert("RGB"))
        ax.imshow(pixels, interpolation="nearest")
        for xmin, ymin, xmax, ymax in s["boxes"]:
            w, h = s["width"], s["height"]
            ax.add_patch(Rectangle((xmin * w, ymin * h), (xmax - xmin) * w, (ymax - ymin) * h, fill=False,
                                   edgecolor="#ffe000", linewidth=2.2))
            ax.add_patch(Rectangle((xmin * w, ymin * h), (xmax - xmin) * w, (ymax - ymin) * h, fill=False,
                                   edgecolor="#000000", linewidth=0.8))
        short = s["text"].split(",")[0]
        ax.set_title(f"{s['label']}: {short[:24]}\n{s['synset']}, {s['width']}x{s['height']}"
                     + (f", {len(s['boxes'])} box{'es' if len(s['boxes']) > 1 else ''}" if s["boxes"] else ""),
                     fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    return rep.figure(f"contact_sheet_{split}.png", fig, f"the first {len(sheet)} {split} images with their labels")


def report_html(report: dict, seen: dict) -> tuple[str, Report]:
    """The page of a `folder_stats` result and its figures (their PNG bytes in the Report)."""
    rep = Report()
    splits = report["splits"]
    manifest = report["manifest"]
    samples, sizes = seen["samples"], seen["sizes"]
    summary = section("Summary", table(
        ["split", "records", "shards", "records per shard", "classes", "images per class", "bytes",
         "re-encoded", "left out", "boxes"],
        [[split, st["records"], st["shards"], f"{st['records_per_shard']['min']}..{st['records_per_shard']['max']}",
          st["classes"], f"{st['images_per_class']['min']}..{st['images_per_class']['max']}", st["shard_bytes"],
          sum(1 for e in report["converted"] if str(e.get("file", "")).startswith(split + "/")),
          sum(1 for e in report["left_out"] if str(e.get("file", "")).startswith(split + "/")),
          f"{st['boxes']:,} on {st['images_with_boxes']:,} images"] for split, st in splits.items()]),
        facts([("MANIFEST.json", status(manifest.get("ok"), status_words(manifest)))]))
    class_rows = [[c["label"], c["synset"], c["name"], *[c[s] for s in splits]] for c in report["class_counts"]]
    classes = section(
        "Images per class",
        _plot_classes(report, rep),
        paragraph(f"All {report['num_classes']} labels; a label without images is a gap. The table lists every "
                  f"class, those without images included."),
        table(["label", "synset", "name", *splits],
              sorted((r for r in class_rows if any(r[3:])), key=lambda r: (sum(r[3:]), r[0]))[:10],
              "The 10 classes with the fewest images (of those with any)"),
        details(f"Every class ({report['num_classes']} rows)",
                table(["label", "synset", "name", *splits], class_rows, scroll=True)))
    size_rows = []
    for split, st in splits.items():
        for c in st["commonest_sizes"]:
            size_rows.append([split, c["width"], c["height"], c["images"]])
    sizes_section = section(
        "Image sizes",
        _plot_sizes(report, rep, sizes),
        table(["split", "", "min", "max", "mean"],
              [[split, dim, st[dim]["min"], st[dim]["max"], st[dim]["mean"]]
               for split, st in splits.items() for dim in ("width", "height")], "Width and height (pixels)"),
        table(["split", "width", "height", "images"], size_rows, f"The {COMMONEST_SIZES} commonest sizes per split",
              scroll=len(size_rows) > 14))
    byte_rows = []
    for split, st in splits.items():
        h = st["jpeg_bytes_histogram"]
        for lo, hi, c in zip(h["edges"], h["edges"][1:], h["counts"]):
            byte_rows.append([split, f"{lo:,}..{hi - 1:,}", c])
    bytes_section = section(
        "Bytes per image",
        _plot_bytes(report, rep),
        table(["split", "min", "max", "mean", "total"],
              [[split, st["jpeg_bytes"]["min"], st["jpeg_bytes"]["max"], st["jpeg_bytes"]["mean"],
                st["jpeg_bytes"]["total"]] for split, st in splits.items()], "Bytes of image/encoded"),
        details("Every range", table(["split", "bytes", "images"], byte_rows, scroll=True)))
    shard_rows = [[split, s["shard"], s["records"], s["bytes"]] for split, st in splits.items()
                  for s in st["shard_records"]]
    shards_section = section(
        "Records per shard",
        _plot_shards(report, rep),
        table(["split", "shard", "records", "bytes"], shard_rows, "Every shard", scroll=len(shard_rows) > 16))
    changes = section(
        "Re-encoded and left out",
        paragraph("From MANIFEST.json. Re-encoded: images that were not baseline RGB JPEG (CMYK, greyscale, PNG "
                  "under a .JPEG name) and were written as RGB JPEG, as build_imagenet_data.py does. Left out: "
                  "images that could not be read, with why; the records hold every other image."),
        *_reason_tables(report))
    sheets = [section(f"Contact sheet: {split}",
                      _plot_contact_sheet(split, samples[split], rep),
                      table(["shard", "record", "file", "label", "synset", "name", "size", "boxes (xmin, ymin, xmax, "
                                                                                          "ymax)"],
                            [[s["shard"], s["record"], s["file"], s["label"], s["synset"], s["text"],
                              f"{s['width']}x{s['height']}",
                              "; ".join(", ".join(f"{v:.3f}" for v in box) for box in s["boxes"]) or "—"]
                             for s in report["splits"][split]["contact_sheet"]]))
              for split in splits]
    title = f"ImageNet dataset {report['folder']}"
    lead = ", ".join(f"{st['records']:,} {split} records in {st['shards']} shards" for split, st in splits.items()) \
        + ". Figures from reading every record; stats.json holds every number shown."
    return page(title, [summary, classes, sizes_section, bytes_section, shards_section, changes, *sheets], lead), rep


def _reason_tables(report: dict) -> list[Html]:
    out = []
    for key, what in (("converted", "Re-encoded"), ("left_out", "Left out"),
                      ("annotation_problems", "Bounding-box annotations that could not be read (image kept)")):
        entries, by_reason = report[key], report[f"{key}_by_reason"]
        if not entries:
            out.append(paragraph(f"{what}: none."))
            continue
        out.append(table(["reason", "images"], list(by_reason.items()), f"{what}: {len(entries)}, by reason"))
        out.append(details(f"{what}: every file", table(["file", "reason"], [[e.get("file"), e.get("reason")]
                                                                             for e in entries],
                                                          scroll=len(entries) > 14)))
    return out
