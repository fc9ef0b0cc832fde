"""`wikiprep`: BERT pre-training data from the command line.

    wikiprep create-pretraining-data --input_file=a.txt,b*.txt --output_file=out.tfrecord --vocab_file=vocab.txt ...
    wikiprep inspect FILE [-n N]
    wikiprep verify DIR
    wikiprep stats DIR --out REPORT_DIR

`create-pretraining-data` is a drop-in for google-research/bert's create_pretraining_data.py:
the same flags, spellings and defaults (absl style: `--flag=value`, `--flag value`, bare
`--flag` / `--noflag` for booleans), the same instances in the same order. It adds
`--fixed_mask_count` (Graphcore's mask count) and `--index_file` (an `offset length` index per
output file). `--input_file` is a comma-separated list of globs, each expanded in sorted order;
a glob matching nothing is an error (the original silently skipped it).

`verify` stops at the first problem with one line and exit status 1; `stats` writes
stats.json and report.txt into REPORT_DIR. Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
from dataclasses import fields
from pathlib import Path

from shardkit.atomic import write_json, write_text
from shardkit.example import decode_example
from shardkit.tf import import_tensorflow
from shardkit.errors import PrepError

from .options import GenerationOptions

PROG = "wikiprep"
BATCH = 512


# ---------------------------------------------------------------------------------------------
# create-pretraining-data

_TRUE, _FALSE = {"true", "t", "1", "yes", "y"}, {"false", "f", "0", "no", "n"}


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {text!r}")


def _add_bool(parser: argparse.ArgumentParser, name: str, default: bool, help_text: str) -> None:
    parser.add_argument(f"--{name}", type=_parse_bool, nargs="?", const=True, default=default, metavar="BOOL",
                        help=f"{help_text} (default {default})")
    parser.add_argument(f"--no{name}", dest=name, action="store_false", help=argparse.SUPPRESS)


def expand_input_patterns(spec: str) -> list[str]:
    """The original's `--input_file`: comma-separated globs, in the order given, each sorted."""
    files: list[str] = []
    for pattern in spec.split(","):
        pattern = pattern.strip()
        if not pattern:
            continue
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matches:
            raise PrepError(f"--input_file: {pattern} matches no file")
        for path in matches:
            if not os.path.isfile(path):
                raise PrepError(f"{path}: input file not found" if not os.path.exists(path)
                                else f"{path}: not a regular file")
        files.extend(matches)
    if not files:
        raise PrepError("--input_file: no input file given")
    return files


def _split_list(spec: str | None) -> list[str]:
    return [s.strip() for s in spec.split(",") if s.strip()] if spec else []


def run_create(args: argparse.Namespace) -> int:
    from . import instances

    for flag in ("input_file", "output_file", "vocab_file"):
        if not getattr(args, flag):
            raise PrepError(f"--{flag} is required")
    inputs = expand_input_patterns(args.input_file)
    outputs = _split_list(args.output_file)
    index_files = _split_list(args.index_file)
    if index_files and len(index_files) != len(outputs):
        raise PrepError(f"--index_file lists {len(index_files)} files for {len(outputs)} --output_file files")
    print("*** Reading from input files ***", file=sys.stderr)
    for path in inputs:
        print(f"  {path}", file=sys.stderr)
    stats = instances.write_pretraining_files(inputs, args.vocab_file, outputs, index_files or None,
                                              GenerationOptions.from_object(args))
    print("*** Writing to output files ***", file=sys.stderr)
    for path in outputs:
        print(f"  {path}", file=sys.stderr)
    print(f"Wrote {stats['instances']} total instances ({stats['documents']} documents, {stats['sentences']} "
          f"sentences, {stats['tokens']} tokens; {stats['random_next']} random next, {stats['full_length']} "
          f"full length)", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------
# Reading records back

def run_inspect(args: argparse.Namespace) -> int:
    from shardkit.records import read_records
    from .tokenization import Vocab

    path = Path(args.file)
    if not path.is_file():
        raise PrepError(f"{path}: no such record file")
    vocab_path = path.parent / "vocab.txt"
    vocab = Vocab(vocab_path) if vocab_path.is_file() else None
    shown = 0
    for data in read_records(path):
        if shown >= args.n:
            break
        try:
            ex = decode_example(data)
        except (ValueError, IndexError) as e:
            raise PrepError(f"{path}: record {shown} is not a tf.train.Example ({e})") from None
        print(f"--- record {shown} ({len(data)} bytes)")
        mask = ex.get("input_mask")
        n_real = sum(1 for v in mask if v) if mask else None
        for name in sorted(ex):
            values = ex[name]
            if vocab is not None and name in ("input_ids", "masked_lm_ids"):
                if name == "input_ids" and n_real is not None:
                    values = values[:n_real]
                elif name == "masked_lm_ids" and "masked_lm_weights" in ex:
                    values = values[:sum(1 for w in ex["masked_lm_weights"] if w)]
                print(f"{name}: {' '.join(vocab.tokens(values))}")
            else:
                print(f"{name}: {' '.join(str(v) for v in values)}")
        shown += 1
    if shown == 0:
        print(f"{path}: no records")
    return 0


# ---------------------------------------------------------------------------------------------
# verify and stats

def find_record_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise PrepError(f"{folder}: not a folder")
    files = sorted(folder.glob("wiki_*.tfrecord")) or sorted(folder.glob("*.tfrecord"))
    if not files:
        raise PrepError(f"{folder}: no *.tfrecord files")
    return files


def dataset_shapes(folder: Path, first_file: Path) -> tuple[int, int]:
    """(max_seq_length, max_predictions_per_seq): from dataset.json, else from the first record."""
    desc = folder / "dataset.json"
    if desc.is_file():
        try:
            d = json.loads(desc.read_text(encoding="utf-8"))
            return int(d["max_seq_length"]), int(d["max_predictions_per_seq"])
        except (ValueError, KeyError, TypeError):
            pass
    from shardkit.records import read_records

    for data in read_records(first_file):
        try:
            ex = decode_example(data)
            return len(ex["input_ids"]), len(ex["masked_lm_positions"])
        except (ValueError, KeyError, IndexError):
            raise PrepError(f"{first_file}: first record is not a BERT pre-training example") from None
    raise PrepError(f"{first_file}: no records to infer the feature shapes from")


def _parsed_batches(tf, files: list[Path], seq: int, max_pred: int):
    """(file, numpy feature dict) per batch, parsed by TensorFlow with the contract's FixedLenFeature schema."""
    spec = {name: tf.io.FixedLenFeature([seq], tf.int64) for name in ("input_ids", "input_mask", "segment_ids")}
    spec.update({name: tf.io.FixedLenFeature([max_pred], tf.int64)
                 for name in ("masked_lm_positions", "masked_lm_ids")})
    spec["masked_lm_weights"] = tf.io.FixedLenFeature([max_pred], tf.float32)
    spec["next_sentence_labels"] = tf.io.FixedLenFeature([1], tf.int64)
    for path in files:
        ds = tf.data.TFRecordDataset(str(path)).batch(BATCH).map(lambda b: tf.io.parse_example(b, spec))
        try:
            for batch in ds.as_numpy_iterator():
                yield path, batch
        except tf.errors.OpError as e:
            msg = e.message.splitlines()[0] if e.message else type(e).__name__
            raise PrepError(f"{path}: TensorFlow cannot parse it with the BERT schema "
                            f"(seq {seq}, {max_pred} predictions): {msg}") from None


def check_batch(b: dict, seq: int) -> str | None:
    """The first violation of the BERT record invariants in a parsed batch, or None."""
    import numpy as np

    mask, ids, seg = b["input_mask"], b["input_ids"], b["segment_ids"]
    pos, mids, w = b["masked_lm_positions"], b["masked_lm_ids"], b["masked_lm_weights"]
    labels = b["next_sentence_labels"]
    n_real = mask.sum(axis=1)
    checks = [
        (np.isin(labels, (0, 1)).all(axis=1), "next_sentence_labels not 0 or 1"),
        (np.isin(mask, (0, 1)).all(axis=1) & (np.diff(mask, axis=1) <= 0).all(axis=1),
         "input_mask is not ones then zeros"),
        (n_real >= 5, "fewer than 5 real tokens"),
        ((ids * (1 - mask) == 0).all(axis=1) & (seg * (1 - mask) == 0).all(axis=1), "padding is not zero"),
        (np.isin(seg, (0, 1)).all(axis=1), "segment_ids not 0 or 1"),
        (np.isin(w, (0.0, 1.0)).all(axis=1) & (np.diff(w, axis=1) <= 0).all(axis=1),
         "masked_lm_weights not ones then zeros"),
    ]
    for ok, what in checks:
        if not ok.all():
            return f"record {int(np.argmin(ok))} of the batch: {what}"
    real = w > 0
    bad_pos = (real & ((pos <= 0) | (pos >= n_real[:, None]) | (pos >= seq))).any(axis=1)
    increasing = np.where(real[:, 1:], np.diff(pos, axis=1) > 0, True).all(axis=1)
    pad_zero = ((pos * ~real) == 0).all(axis=1) & ((mids * ~real) == 0).all(axis=1)
    for ok, what in ((~bad_pos, "masked position outside the real tokens"),
                     (increasing, "masked_lm_positions not sorted ascending"),
                     (pad_zero, "masked_lm padding is not zero")):
        if not ok.all():
            return f"record {int(np.argmin(ok))} of the batch: {what}"
    return None


def verify(folder: str | Path) -> dict:
    """Check a BERT dataset folder; PrepError naming the first problem. Returns a summary."""
    from shardkit.manifest import check_manifest
    from shardkit.records import check_index, index_path_for

    folder = Path(folder)
    files = find_record_files(folder)
    manifest = check_manifest(folder)
    listed = {e["path"]: e for e in manifest.get("files", [])}
    counts = {}
    for path in files:
        rel = path.relative_to(folder).as_posix()
        if rel not in listed:
            raise PrepError(f"{path}: not listed in MANIFEST.json")
        counts[path] = check_index(path, index_path_for(path))
        expected = listed[rel].get("records")
        if expected is not None and expected != counts[path]:
            raise PrepError(f"{path}: {counts[path]} records but MANIFEST.json says {expected}")
    total = sum(counts.values())
    stats_path = folder / "stats.json"
    if stats_path.is_file():
        try:
            declared = json.loads(stats_path.read_text(encoding="utf-8")).get("total", {}).get("instances")
        except (ValueError, AttributeError):
            raise PrepError(f"{stats_path}: not valid JSON") from None
        if declared is not None and declared != total:
            raise PrepError(f"{stats_path}: says {declared} instances but the shards hold {total}")
    seq, max_pred = dataset_shapes(folder, files[0])
    tf = import_tensorflow()
    parsed = dict.fromkeys(files, 0)
    for path, batch in _parsed_batches(tf, files, seq, max_pred):
        problem = check_batch(batch, seq)
        if problem:
            raise PrepError(f"{path}: batch from record {parsed[path]}: {problem}")
        parsed[path] += len(batch["input_ids"])
    for path, n in parsed.items():
        if n != counts[path]:
            raise PrepError(f"{path}: TensorFlow read {n} records, the index lists {counts[path]}")
    return {"files": len(files), "records": total, "max_seq_length": seq, "max_predictions_per_seq": max_pred,
            "bytes": sum(p.stat().st_size for p in files)}


def _histogram_text(hist: dict[str, int], total: int, width: int = 40) -> list[str]:
    if not hist:
        return []
    top = max(hist.values())
    return [f"  {k:>5} {v:>9} {100.0 * v / total:6.2f}% {'#' * max(1, round(width * v / top))}"
            for k, v in hist.items()]


def dataset_stats(folder: str | Path) -> dict:
    """Counts and histograms of every record of a folder of BERT TFRecords, parsed by TensorFlow."""
    import numpy as np

    from .tokenization import UNK, Vocab

    folder = Path(folder)
    files = find_record_files(folder)
    seq, max_pred = dataset_shapes(folder, files[0])
    vocab_path = folder / "vocab.txt"
    unk_id = Vocab(vocab_path).unk_id if vocab_path.is_file() else None
    tf = import_tensorflow()
    lengths = np.zeros(seq + 1, np.int64)
    masked = np.zeros(max_pred + 1, np.int64)
    per_file = {p: 0 for p in files}
    random_next = tokens = unk = 0
    for path, b in _parsed_batches(tf, files, seq, max_pred):
        n_real = b["input_mask"].sum(axis=1)
        k = (b["masked_lm_weights"] > 0).sum(axis=1)
        lengths += np.bincount(n_real, minlength=seq + 1)[:seq + 1]
        masked += np.bincount(k, minlength=max_pred + 1)[:max_pred + 1]
        random_next += int(b["next_sentence_labels"].sum())
        per_file[path] += len(n_real)
        tokens += int(n_real.sum())
        if unk_id is not None:
            original = b["input_ids"].copy()  # undo the masking: the labels are the original tokens
            rows, cols = np.nonzero(b["masked_lm_weights"] > 0)
            original[rows, b["masked_lm_positions"][rows, cols]] = b["masked_lm_ids"][rows, cols]
            unk += int(((original == unk_id) & (b["input_mask"] == 1)).sum())
    records = int(lengths.sum())
    if records == 0:
        raise PrepError(f"{folder}: the record files hold no records")
    sizes = [p.stat().st_size for p in files]
    mean = sum(sizes) / len(sizes)
    return {
        "folder": str(folder),
        "max_seq_length": seq,
        "max_predictions_per_seq": max_pred,
        "files": [{"file": p.name, "records": per_file[p], "bytes": p.stat().st_size} for p in files],
        "records": records,
        "tokens": tokens,
        "mean_length": tokens / records,
        "random_next": random_next,
        "random_next_fraction": random_next / records,
        "full_length": int(lengths[seq]),
        "full_length_fraction": float(lengths[seq]) / records,
        "masked_tokens": int((masked * np.arange(max_pred + 1)).sum()),
        "sequence_length_histogram": {str(i): int(v) for i, v in enumerate(lengths) if v},
        "masked_count_histogram": {str(i): int(v) for i, v in enumerate(masked) if v},
        "unk_rate": (unk / (tokens - 3 * records)) if unk_id is not None and tokens > 3 * records else None,
        "unk_tokens": unk if unk_id is not None else None,
        "unk_token": UNK if unk_id is not None else None,
        "bytes_per_file": {"min": min(sizes), "max": max(sizes), "mean": mean,
                           "std": math.sqrt(sum((s - mean) ** 2 for s in sizes) / len(sizes)),
                           "total": sum(sizes)},
    }


def _length_buckets(hist: dict[str, int], seq: int) -> dict[str, int]:
    """Sequence lengths grouped in 16 equal buckets for the text report."""
    width = max(1, math.ceil(seq / 16))
    out: dict[str, int] = {}
    for k, v in hist.items():
        lo = (int(k) - 1) // width * width + 1
        key = f"{lo}-{min(lo + width - 1, seq)}"
        out[key] = out.get(key, 0) + v
    return out


def stats_report_text(st: dict) -> str:
    b = st["bytes_per_file"]
    lines = [
        f"BERT dataset {st['folder']}",
        f"records             {st['records']} in {len(st['files'])} files "
        f"(seq {st['max_seq_length']}, {st['max_predictions_per_seq']} predictions)",
        f"tokens              {st['tokens']} (mean length {st['mean_length']:.1f})",
        f"random next         {st['random_next']} ({100 * st['random_next_fraction']:.2f}%)",
        f"full length         {st['full_length']} ({100 * st['full_length_fraction']:.2f}%)",
        f"masked tokens       {st['masked_tokens']}",
        "[UNK] rate          " + ("no vocab.txt in the folder" if st["unk_rate"] is None
                                  else f"{100 * st['unk_rate']:.4f}% ({st['unk_tokens']} tokens)"),
        f"bytes per file      min {b['min']} max {b['max']} mean {b['mean']:.0f} std {b['std']:.0f} "
        f"total {b['total']}",
        "",
        "sequence length (real tokens incl. [CLS]/[SEP]):",
        *_histogram_text(_length_buckets(st["sequence_length_histogram"], st["max_seq_length"]), st["records"]),
        "",
        "masked tokens per record:",
        *_histogram_text(st["masked_count_histogram"], st["records"]),
        "",
        "records per file:",
        *[f"  {f['file']} {f['records']} records {f['bytes']} bytes" for f in st["files"]],
    ]
    return "\n".join(lines) + "\n"


def run_stats(args: argparse.Namespace) -> int:
    folder, out = Path(args.dir), Path(args.out)
    if out.resolve() == folder.resolve():
        raise PrepError(f"--out {out}: choose a report folder other than the dataset itself")
    st = dataset_stats(folder)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "stats.json", st)
    text = stats_report_text(st)
    write_text(out / "report.txt", text)
    sys.stdout.write(text)
    print(f"wrote {out / 'stats.json'} and {out / 'report.txt'}")
    return 0


# ---------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Wikipedia text to BERT pre-training TFRecords.")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("create-pretraining-data", allow_abbrev=False,
                       help="drop-in for google-research/bert create_pretraining_data.py",
                       description="Same flags, defaults and output as google-research/bert's "
                                   "create_pretraining_data.py.")
    c.add_argument("--input_file", help="Input raw text file (or comma-separated list of files / globs).")
    c.add_argument("--output_file", help="Output TF example file (or comma-separated list of files).")
    c.add_argument("--vocab_file", help="The vocabulary file that the BERT model was trained on.")
    for f in fields(GenerationOptions):  # the original's flags: its spelling, defaults and help
        if f.type is bool:
            _add_bool(c, f.name, f.default, f.metadata["help"])
        else:
            c.add_argument(f"--{f.name}", type=f.type, default=f.default,
                           help=f"{f.metadata['help']} (default {f.default})")
    c.add_argument("--index_file", help="index file(s) to write, comma-separated, one per output file")

    i = sub.add_parser("inspect", help="print the first records of a TFRecord file, decoded")
    i.add_argument("file")
    i.add_argument("-n", type=int, default=3, help="records to show (default 3)")

    v = sub.add_parser("verify", help="check a dataset folder; one line and exit 1 on the first problem")
    v.add_argument("dir")

    s = sub.add_parser("stats", help="counts and histograms of a dataset folder")
    s.add_argument("dir")
    s.add_argument("--out", required=True, help="report folder (stats.json, report.txt)")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "create-pretraining-data":
            return run_create(args)
        if args.command == "inspect":
            return run_inspect(args)
        if args.command == "verify":
            summary = verify(args.dir)
            print(f"OK {args.dir}: {summary['records']} records in {summary['files']} files, "
                  f"{summary['bytes']} bytes, seq {summary['max_seq_length']}, "
                  f"{summary['max_predictions_per_seq']} predictions")
            return 0
        return run_stats(args)
    except PrepError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # e.g. an output folder without write permission
        print(f"{PROG}: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
