"""`imagenet-prep`: convert ImageNet to TFRecord shards, verify a shard folder, show its records, report its statistics.

    imagenet-prep convert --train-dir T --validation-dir V [--val-labels L] --output-dir OUT ...
    imagenet-prep verify DIR [--jobs N]
    imagenet-prep inspect FILE [-n N]
    imagenet-prep stats DIR --out REPORT_DIR

Argument parsing and printing only: each command is one call into `convert`, `verify`, `inspection` or
`stats`, run through `shardkit.cli.run`, so errors are one `imagenet-prep: error: ...` line on
stderr with exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shardkit import progress
from shardkit.cli import add_version, at_least_one, run, warn
from shardkit.manifest import MANIFEST, check_report_folder, unfinished_note

from . import convert, images

PROG = "imagenet-prep"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="ImageNet to build_imagenet_data.py TFRecord shards.")
    add_version(p, PROG)
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("convert", help="plan, write every shard and the manifest in one process (or --workers)")
    c.add_argument("--train-dir", help="train/<wnid>/*.JPEG folder or ILSVRC2012_img_train.tar")
    c.add_argument("--validation-dir", help="flat validation images, <wnid>/ folders, or ILSVRC2012_img_val.tar")
    c.add_argument("--val-labels", help="TF imagenet_2012_validation_synset_labels.txt, Kaggle LOC_val_solution.csv, "
                                        "or devkit ILSVRC2012_validation_ground_truth.txt (meta.mat beside it)")
    c.add_argument("--output-dir", required=True, help="where the shards, idx/ and MANIFEST.json go")
    c.add_argument("--synsets-file", help="sorted wnids, one a line (default: the 1000 ILSVRC-2012 synsets)")
    c.add_argument("--metadata-file", help="wnid<TAB>names (default: shipped names; TF's imagenet_metadata.txt works)")
    c.add_argument("--bbox-dir", help="bounding-box XML as <wnid>/<image>.xml (ILSVRC2012_bbox_train_v2)")
    c.add_argument("--train-shards", type=int, default=1024,
                   help="train-NNNNN-of-NNNNN files (default 1024, as build_imagenet_data.py)")
    c.add_argument("--validation-shards", type=int, default=128,
                   help="validation-NNNNN-of-NNNNN files (default 128, as build_imagenet_data.py)")
    c.add_argument("--seed", type=int, default=12345,
                   help="seed of build_imagenet_data.py's shuffle of the image lists (default 12345, as it)")
    c.add_argument("--workers", type=int, default=1,
                   help="processes writing shards (default 1; the bytes do not depend on it)")
    c.add_argument("--strict", action="store_true", help="fail on an unreadable image instead of leaving it out")
    c.add_argument("--verify-decode", action="store_true", help="fully decode every copied JPEG (slow)")
    c.add_argument("--max-pixels", type=int, default=images.MAX_PIXELS,
                   help=f"refuse images declaring more pixels, as decompression bombs (default {images.MAX_PIXELS})")

    v = sub.add_parser("verify", help="check a shard folder; one line and exit 1 on the first problem")
    v.add_argument("dir", help="a folder imagenet-prep convert or the ImageNet task wrote")
    v.add_argument("--synsets-file", help="sorted wnids, one a line (default: the 1000 ILSVRC-2012 synsets)")
    v.add_argument("--decode-all", action="store_true", help="decode every image with TensorFlow (slow)")
    v.add_argument("--jobs", type=at_least_one, default=1,
                   help="worker processes checking shards in parallel, each with its own TensorFlow (default 1; "
                        "the output and the first error do not depend on it)")

    i = sub.add_parser("inspect", help="print the first records of a shard: label, synset, name, size, format, "
                                       "boxes and byte count")
    i.add_argument("file", help="a train-* or validation-* shard")
    i.add_argument("-n", type=at_least_one, default=3, help="records to show (default 3)")

    s = sub.add_parser("stats", help="per-split counts, per-class histogram and image sizes")
    s.add_argument("dir", help="a folder imagenet-prep convert or the ImageNet task wrote")
    s.add_argument("--out", required=True, help="report folder: report.html (one self-contained page), stats.json, "
                                                "report.txt and the plots as PNG files")
    s.add_argument("--synsets-file", help="sorted wnids, one a line (default: the 1000 ILSVRC-2012 synsets)")
    return p


def _convert(args: argparse.Namespace) -> None:
    manifest_path = Path(args.output_dir) / MANIFEST
    before = _identity(manifest_path)
    with progress.bar("convert", "images") as bar:
        manifest = convert.convert_dataset(
            args.train_dir, args.validation_dir, args.val_labels, args.output_dir, workers=args.workers,
            synsets_file=args.synsets_file, metadata_file=args.metadata_file, bbox_dir=args.bbox_dir,
            train_shards=args.train_shards, validation_shards=args.validation_shards, seed=args.seed,
            strict=args.strict, verify_decode=args.verify_decode, max_pixels=args.max_pixels,
            overwrite=True,  # as build_imagenet_data.py does, into a folder check_output_dir found to hold this dataset
            progress=bar)
    for split, st in manifest["splits"].items():
        print(f"{split}: {st['records']} records in {st['shards']} shards, {st['left_out']} left out, "
              f"{st['converted']} re-encoded")
    if before is not None and _identity(manifest_path) == before:
        print(f"{args.output_dir} already holds this dataset (same parameters and inputs); nothing written")
    else:
        print(f"wrote {args.output_dir} (MANIFEST.json lists the files left out and why)")


def _identity(path: Path) -> tuple | None:
    """Which file is at `path` (inode, mtime, size): a rewritten manifest is a new file, committed by rename."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


# Each command imports the module it calls: the others are not on the start-up path of every command
# (`convert` is timed whole, interpreter start included, against build_imagenet_data.py).

def _verify(args: argparse.Namespace) -> None:
    from . import verify

    with progress.bar("verify", "B") as bar:
        totals = verify.verify(args.dir, args.synsets_file, args.decode_all, jobs=args.jobs, progress=bar)
    print(f"OK {args.dir}: " + ", ".join(f"{k} {v} records" for k, v in totals.items()))


def _inspect(args: argparse.Namespace) -> None:
    from . import inspection

    for line in inspection.inspect_lines(args.file, args.n):
        print(line)


def _stats(args: argparse.Namespace) -> None:
    from . import stats

    check_report_folder(Path(args.out), Path(args.dir), stats.STARTED_BY)  # a report replaces only a report
    with progress.bar("stats", "shards") as bar:
        report = stats.stats(args.dir, args.out, args.synsets_file, overwrite=True,  # a new report replaces the last
                             progress=bar)
    sys.stdout.write(stats.stats_report_text(report))
    warn(PROG, unfinished_note(Path(args.dir), stats.STARTED_BY))
    print(f"wrote {Path(args.out) / 'report.html'} (open it in a browser), stats.json, report.txt and the plots "
          f"as PNG files")


COMMANDS = {"convert": _convert, "verify": _verify, "inspect": _inspect, "stats": _stats}


def main(argv=None) -> int:
    return run(PROG, build_parser(), COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
