"""Counts and histograms of a folder of BERT records: `dataset_stats`, its text and HTML reports, `write_report`.

Every record is read as a trainer reads it (through `reader.file_batches`: TensorFlow for TFRecords of
any layout, h5py for NVIDIA's HDF5 files), so the figures describe what a trainer gets. Each file is
read alone (`file_stats`, a small dict) and the files' figures merged in file order: a shard's writer
can read back its own shard, and the task closing the dataset only add them up.
`write_report` writes stats.json (every figure), report.txt, one PNG per plot and report.html,
the page that shows them with their tables (`shardkit.report`). Nothing in them depends on where
the folder is (it is named by `name`) or on when the report was made, so the report of a dataset
is the same bytes wherever and whenever it is made: the Luigi tasks keep it inside the dataset.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from pathlib import Path

from shardkit.plots import figure
from shardkit.report import Html, Report, Section, details, facts, page, paragraph, row, section, status, table, tag
from shardkit.atomic import make_parent_folder, sha256_file, write_json, write_text
from shardkit.errors import PrepError
from shardkit.manifest import manifest_status, status_words
from shardkit.progress import Progress, Stage, throttle

from . import layouts
from .dataset import DESCRIPTION
from .reader import RecordFiles, file_batches, open_records
from .schema import PRED, SEQ
from .tokenization import CLS, PAD, SEP, UNK, Vocab

log = logging.getLogger(__name__)

# What a dataset folder holds from its start: a report without MANIFEST.json beside it is of an unfinished one.
STARTED_BY = (DESCRIPTION,)
TOP_TOKENS = 30       # the commonest tokens and masked tokens listed
SHOWN_INSTANCES = 5   # decoded in the report


def dataset_stats(folder: str | Path, progress: Progress | None = None, *, name: str | None = None,
                  read_back: dict[str, dict] | None = None, known_files: dict[str, dict] | None = None) -> dict:
    """Counts and histograms of every record of a folder of BERT records (or of one record file), in any layout.

    The figures of each file (`file_stats`) merged in file order (`merge_file_stats`). `read_back`
    ({file name: its `file_stats`}) gives the figures of files their writers already read back, which are
    not read again (a file whose size is not the one recorded is); `known_files` ({name: {"sha256",
    "size"}}) the hashes the writers took, which MANIFEST.json is checked against instead of hashing those
    files again (`_manifest_status`). With both, the task that closes a dataset of hundreds of GB makes
    its report without reading a record; the same figures, so the same report, as reading them all.
    `progress(done, total)` counts the record files read. `name` is what the report calls the folder
    (default: the path as given); the task that keeps the report inside the dataset gives the folder's
    own name, so no machine's path is written there.
    """
    folder = Path(folder)
    found = open_records(folder)
    files = found.files
    vocab_path = (folder if folder.is_dir() else folder.parent) / "vocab.txt"
    vocab = Vocab.load(vocab_path) if vocab_path.is_file() else None
    read_back = read_back or {}
    stage = Stage(log, f"stats {folder}")
    progress = throttle(progress)
    parts = []
    for i, path in enumerate(files):
        part = read_back.get(path.name)
        if part is None or part["bytes"] != path.stat().st_size:
            if progress is not None:
                progress(i, len(files))
            part = file_stats(found, path, vocab)
        parts.append(part)
    records = sum(part["records"] for part in parts)
    if records == 0:
        raise PrepError(f"{folder}: the record files hold no records")
    if progress is not None:
        progress(len(files), len(files))
    stage.finish(records, "records", sum(part["bytes"] for part in parts))
    st = merge_file_stats(parts, found, vocab)
    shown = st.pop("instances")  # last, after the folder's own figures
    corpus = _corpus_figures(folder)
    return {"folder": name if name is not None else str(folder), **st,
            "vocab": _vocab_status(vocab_path, found.description),
            "manifest": manifest_status(folder, {part["file"]: part["records"] for part in parts}, name,
                                         known_files, started_by=STARTED_BY),
            **({"corpus": corpus} if corpus else {}),
            "instances": shown}


def _corpus_figures(folder: Path) -> dict | None:
    """The corpus' own figures its dataset's stats.json holds (files skipped, documents per source of a
    mixture: `dataset.finalize`'s `corpus`), or None (a Wikipedia dataset, a bare record file)."""
    try:
        held = json.loads((folder / "stats.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    corpus = held.get("corpus") if isinstance(held, dict) else None
    return corpus if isinstance(corpus, dict) else None


def _corpus_text(corpus: dict | None) -> list[str]:
    """The report.txt lines of a corpus' own figures (none without them)."""
    if not corpus:
        return []
    lines = [""]
    for s in corpus.get("sources", []):
        lines.append(f"source {s['source']} ({s['kind']}, repeat {s['repeat']}): {s['documents']} documents, "
                     f"{s['sentences']} sentences" + (f", {s['instances']} instances" if "instances" in s else ""))
    if "skipped_files" in corpus:
        counts = ", ".join(f"{n} {reason}" for reason, n in corpus["skipped_files"].items())
        lines.append(f"skipped files       {counts}")
        lines += [f"  {f['path']}: {f['detail']}" for f in corpus.get("skipped", [])]
    return lines


def _corpus_section(corpus: dict) -> Section:
    parts = [paragraph("What the corpus' own steps counted (stats.json, \"corpus\").")]
    sources = corpus.get("sources")
    if sources:
        # Instances per source where the shards counted them (a mixture's, merged since they do).
        counted = ["documents", "sentences"] + (["instances"] if all("instances" in s for s in sources) else [])
        parts.append(table(["source", "kind", "repeat", *counted],
                           [[s["source"], s["kind"], s["repeat"], *(s[k] for k in counted)] for s in sources],
                           "Documents, sentences and instances per source (times its repeat; an instance is its "
                           "segment A's source's)" if "instances" in counted else
                           "Documents and sentences per source (times its repeat)"))
    if "skipped_files" in corpus:
        parts.append(table(["reason", "files"], list(corpus["skipped_files"].items()), "Files skipped, by reason"))
        if corpus.get("skipped"):
            parts.append(table(["file", "why"], [[f["path"], f["detail"]] for f in corpus["skipped"]],
                               "The files skipped", scroll=len(corpus["skipped"]) > 16))
    return section("Corpus", *parts)


def file_stats(found: RecordFiles, path: Path, vocab: Vocab | None, *, tensorflow: bool = True) -> dict:
    """The figures of one record file of `found`, as a small JSON-able dict that `merge_file_stats` adds up.

    Histograms ({value: count}, nonzero only), the totals, the token and masked-token counts per vocabulary
    id ({id: count}, nonzero only: exact top tokens after merging need every id's count, and this is
    bounded by the vocabulary, 30,522 ids for BERT's, whatever the file's size), and the file's first
    SHOWN_INSTANCES instances decoded (of every file, so the merge shows the same ones when the first
    files hold fewer). One file alone: a shard's writer reads back its own shard, in parallel with the others,
    with `tensorflow=False` (see `reader.file_batches`: the same batches, without TensorFlow's import in
    every shard's process).
    """
    figures = FileFigures(found.dims, vocab, path)
    for b in file_batches(found, path, tensorflow=tensorflow):
        figures.add(b)
    return figures.result()


class FileFigures:
    """`file_stats`' figures of the file at `path`, counted a standard-layout batch at a time (`add`, in file order),
    returned by `result` once the file is there. A finishing part counts its files' figures so, from the batches of
    the instances it writes (`Layout.write_part`'s `observe`), instead of reading them back."""

    def __init__(self, dims: dict[str, int], vocab: Vocab | None, path: Path):
        import numpy as np

        self.seq, self.max_pred, self.vocab, self.path = dims[SEQ], dims[PRED], vocab, path
        self.unk_id = vocab.unk_id if vocab is not None else None
        self.lengths = np.zeros(self.seq + 1, np.int64)
        self.a_lengths = np.zeros(self.seq + 1, np.int64)
        self.b_lengths = np.zeros(self.seq + 1, np.int64)
        self.masked = np.zeros(self.max_pred + 1, np.int64)
        self.token_counts = np.zeros(0, np.int64)
        self.masked_token_counts = np.zeros(0, np.int64)
        self.random_next = self.tokens = self.unk = 0
        self.shown: list[dict] = []

    def add(self, b: dict) -> None:
        import numpy as np

        seq, max_pred = self.seq, self.max_pred
        real = b["input_mask"] == 1
        n_real = real.sum(axis=1)
        k = (b["masked_lm_weights"] > 0).sum(axis=1)
        self.lengths += np.bincount(n_real, minlength=seq + 1)[:seq + 1]
        self.masked += np.bincount(k, minlength=max_pred + 1)[:max_pred + 1]
        # A: the first segment without [CLS] and its [SEP]; B: the second without its [SEP].
        seg_b = (real & (b["segment_ids"] == 1)).sum(axis=1)
        self.a_lengths += np.bincount(np.clip(n_real - seg_b - 2, 0, seq), minlength=seq + 1)[:seq + 1]
        self.b_lengths += np.bincount(np.clip(seg_b - 1, 0, seq), minlength=seq + 1)[:seq + 1]
        self.random_next += int(b["next_sentence_labels"].reshape(-1).sum())
        self.tokens += int(n_real.sum())
        original = b["input_ids"].copy()  # undo the masking: the labels are the original tokens
        rows, cols = np.nonzero(b["masked_lm_weights"] > 0)
        original[rows, b["masked_lm_positions"][rows, cols]] = b["masked_lm_ids"][rows, cols]
        self.token_counts = _add_counts(self.token_counts, np.bincount(original[real]))
        self.masked_token_counts = _add_counts(self.masked_token_counts, np.bincount(b["masked_lm_ids"][rows, cols]))
        if self.unk_id is not None:
            self.unk += int(((original == self.unk_id) & real).sum())
        for i in range(min(SHOWN_INSTANCES - len(self.shown), len(n_real))):
            self.shown.append(_decoded_instance(b, i, len(self.shown), self.path.name, self.vocab))

    def result(self) -> dict:
        return {"file": self.path.name, "records": int(self.lengths.sum()), "bytes": self.path.stat().st_size,
                "random_next": self.random_next, "tokens": self.tokens,
                "unk_tokens": self.unk if self.unk_id is not None else None,
                "sequence_length_histogram": _sparse(self.lengths),
                "segment_a_length_histogram": _sparse(self.a_lengths),
                "segment_b_length_histogram": _sparse(self.b_lengths), "masked_count_histogram": _sparse(self.masked),
                "token_counts": _sparse(self.token_counts), "masked_token_counts": _sparse(self.masked_token_counts),
                "instances": self.shown}


def _sparse(counts) -> dict[str, int]:
    """{index: count} of the nonzero entries of a count vector (numpy), in index order (JSON keys are strings).
    numpy finds them: a Python loop over a vocabulary's 30,522 counts took a seventh of a shard's read-back."""
    import numpy as np

    nonzero = np.flatnonzero(counts)
    return dict(zip(map(str, nonzero.tolist()), counts[nonzero].tolist()))


def compact(part: dict) -> dict:
    """`part` (a `file_stats`) with its token counts as numpy vectors: 8 bytes an id rather than a Python dict
    entry's ~120, for a task that holds every shard's at once (256 shards x 2 x 30,522 ids: 0.1 GB, not 2 GB)."""
    return {**part, **{key: _dense([part[key]], 0) for key in ("token_counts", "masked_token_counts")}}


def _dense(hists, size: int):
    """The sum of `_sparse` count dicts (or of count vectors, `compact`) as one vector of at least `size` entries."""
    import numpy as np

    total = np.zeros(size, np.int64)
    for hist in hists:
        if isinstance(hist, np.ndarray):
            total = _add_counts(total, hist)
            continue
        if not hist:
            continue
        ids = np.fromiter((int(k) for k in hist), np.int64, len(hist))
        if ids.max() >= len(total):
            total = np.concatenate([total, np.zeros(int(ids.max()) + 1 - len(total), np.int64)])
        np.add.at(total, ids, np.fromiter(hist.values(), np.int64, len(hist)))
    return total


def merge_file_stats(parts: list[dict], found: RecordFiles, vocab: Vocab | None) -> dict:
    """The figures of a dataset from its files' `file_stats`, in file order: what `dataset_stats` returns but
    its folder name, vocabulary and manifest status (which are not figures of the records)."""
    import numpy as np

    seq, max_pred = found.dims[SEQ], found.dims[PRED]
    lengths = _dense((p["sequence_length_histogram"] for p in parts), seq + 1)
    a_lengths = _dense((p["segment_a_length_histogram"] for p in parts), seq + 1)
    b_lengths = _dense((p["segment_b_length_histogram"] for p in parts), seq + 1)
    masked = _dense((p["masked_count_histogram"] for p in parts), max_pred + 1)
    token_counts = _dense((p["token_counts"] for p in parts), 0)
    masked_token_counts = _dense((p["masked_token_counts"] for p in parts), 0)
    records = sum(p["records"] for p in parts)
    tokens = sum(p["tokens"] for p in parts)
    random_next = sum(p["random_next"] for p in parts)
    unk_id = vocab.unk_id if vocab is not None else None
    unk = sum(p["unk_tokens"] or 0 for p in parts)
    shown = [{**inst, "instance": number}
             for number, inst in enumerate(inst for p in parts for inst in p["instances"])][:SHOWN_INSTANCES]
    sizes = [p["bytes"] for p in parts]
    mean = sum(sizes) / len(sizes)
    special = {vocab.ids[t] for t in (CLS, SEP, PAD) if t in vocab.ids} if vocab is not None else set()
    masks_total = int((masked * np.arange(max_pred + 1)).sum())
    return {
        "format": found.layout.name,
        "max_seq_length": seq,
        "max_predictions_per_seq": max_pred,
        "files": [{"file": p["file"], "records": p["records"], "bytes": p["bytes"], "random_next": p["random_next"],
                   "random_next_fraction": p["random_next"] / p["records"] if p["records"] else None}
                  for p in parts],
        "records": records,
        "tokens": tokens,
        "mean_length": tokens / records,
        "random_next": random_next,
        "random_next_fraction": random_next / records,
        "full_length": int(lengths[seq]),
        "full_length_fraction": float(lengths[seq]) / records,
        "masked_tokens": masks_total,
        "mean_masks": masks_total / records,
        "masks_at_max": int(masked[max_pred]),
        "masks_at_max_fraction": float(masked[max_pred]) / records,
        "sequence_length_histogram": _sparse(lengths),
        "segment_a_length_histogram": _sparse(a_lengths),
        "segment_b_length_histogram": _sparse(b_lengths),
        "mean_segment_a_length": float((a_lengths * np.arange(seq + 1)).sum()) / records,
        "mean_segment_b_length": float((b_lengths * np.arange(seq + 1)).sum()) / records,
        "masked_count_histogram": _sparse(masked),
        "top_tokens": _top(token_counts, vocab, skip=special),
        "top_masked_tokens": _top(masked_token_counts, vocab),
        "unk_rate": (unk / (tokens - 3 * records)) if unk_id is not None and tokens > 3 * records else None,
        "unk_tokens": unk if unk_id is not None else None,
        "unk_token": UNK if unk_id is not None else None,
        "bytes_per_file": {"min": min(sizes), "max": max(sizes), "mean": mean,
                           "std": math.sqrt(sum((s - mean) ** 2 for s in sizes) / len(sizes)),
                           "total": sum(sizes)},
        "parameters": found.description,
        "instances": shown,
    }


def _add_counts(total, more):
    """The sum of two bincounts of different lengths."""
    import numpy as np

    if len(more) > len(total):
        total = np.concatenate([total, np.zeros(len(more) - len(total), np.int64)])
    total[:len(more)] += more
    return total


def _top(counts, vocab: Vocab | None, skip: set[int] = frozenset()) -> list[dict]:
    """The TOP_TOKENS commonest ids of a bincount (ties by id), with their token when there is a vocabulary."""
    import numpy as np

    counts = counts.copy()
    for i in skip:
        if i < len(counts):
            counts[i] = 0
    order = np.lexsort((np.arange(len(counts)), -counts))[:TOP_TOKENS]
    total = int(counts.sum())
    return [{"id": int(i), "token": vocab.tokens([int(i)])[0] if vocab is not None else None,
             "count": int(counts[i]), "fraction": int(counts[i]) / total} for i in order if counts[i] > 0]


def _decoded_instance(b: dict, i: int, number: int, file: str, vocab: Vocab | None) -> dict:
    """Instance `i` of a standard-layout batch as the report shows it: the tokens as written, the lengths,
    and at each masked position what is written there and the original token."""
    n = int(b["input_mask"][i].sum())
    ids = [int(v) for v in b["input_ids"][i][:n]]
    segments = [int(v) for v in b["segment_ids"][i][:n]]
    show = vocab.tokens if vocab is not None else (lambda xs: [str(x) for x in xs])
    masks = []
    mask_id = vocab.mask_id if vocab is not None else None
    for position, original, weight in zip(b["masked_lm_positions"][i], b["masked_lm_ids"][i],
                                          b["masked_lm_weights"][i]):
        if weight <= 0:
            continue
        written = ids[int(position)]
        kind = ("[MASK]" if written == mask_id else "kept" if written == int(original) else "random") \
            if vocab is not None else ("kept" if written == int(original) else "replaced")
        masks.append({"position": int(position), "written": show([written])[0], "original": show([int(original)])[0],
                      "kind": kind})
    label = int(b["next_sentence_labels"][i][0])
    return {"instance": number, "file": file, "length": n, "segment_a": segments.count(0) - 2,
            "segment_b": segments.count(1) - 1, "next_sentence_label": label,
            "next_sentence": "random" if label == 1 else "actual next",
            "tokens": show(ids), "segment_ids": segments, "masks": masks}


def _vocab_status(vocab_path: Path, description: dict) -> dict:
    """vocab.txt beside the records: its sha256, and whether it is the one dataset.json names."""
    if not vocab_path.is_file():
        return {"file": None, "sha256": None, "matches_dataset": None}
    digest = sha256_file(vocab_path)
    named = description.get("vocab_sha256")
    return {"file": vocab_path.name, "sha256": digest, "tokens": len(Vocab.load(vocab_path).id_to_token),
            "matches_dataset": None if named is None else digest == named}


def _histogram_text(hist: dict[str, int], total: int, width: int = 40) -> list[str]:
    if not hist:
        return []
    top = max(hist.values())
    return [f"  {k:>5} {v:>9} {100.0 * v / total:6.2f}% {'#' * max(1, round(width * v / top))}"
            for k, v in hist.items()]


def _length_buckets(hist: dict[str, int], seq: int) -> dict[str, int]:
    """Sequence lengths grouped in 16 equal buckets for the text report."""
    width = max(1, math.ceil(seq / 16))
    out: dict[str, int] = {}
    for k, v in hist.items():
        lo = (int(k) - 1) // width * width + 1
        key = f"{lo}-{min(lo + width - 1, seq)}"
        out[key] = out.get(key, 0) + v
    return out


def _percent(fraction: float | None) -> str:
    return "—" if fraction is None else f"{100 * fraction:.2f}%"


def stats_report_text(st: dict) -> str:
    b = st["bytes_per_file"]
    manifest = st.get("manifest", {})
    lines = [
        f"BERT dataset {st['folder']} ({layouts.get(st['format']).title})",
        f"records             {st['records']} in {len(st['files'])} files "
        f"(seq {st['max_seq_length']}, {st['max_predictions_per_seq']} predictions)",
        f"tokens              {st['tokens']} (mean length {st['mean_length']:.1f})",
        f"segment lengths     A mean {st['mean_segment_a_length']:.1f}, B mean {st['mean_segment_b_length']:.1f} "
        f"(tokens, without [CLS]/[SEP])",
        f"random next         {st['random_next']} ({100 * st['random_next_fraction']:.2f}%)",
        f"full length         {st['full_length']} ({100 * st['full_length_fraction']:.2f}%)",
        f"masked tokens       {st['masked_tokens']} (mean {st['mean_masks']:.2f} per record; "
        f"{st['masks_at_max']} records, {_percent(st['masks_at_max_fraction'])}, reach "
        f"{st['max_predictions_per_seq']})",
        "[UNK] rate          " + ("no vocab.txt in the folder" if st["unk_rate"] is None
                                  else f"{100 * st['unk_rate']:.4f}% ({st['unk_tokens']} tokens)"),
        f"bytes per file      min {b['min']} max {b['max']} mean {b['mean']:.0f} std {b['std']:.0f} "
        f"total {b['total']}",
        "vocab.txt           " + (st["vocab"]["sha256"] or "none beside the records"),
        f"MANIFEST.json       {status_words(manifest)}",
        "",
        "sequence length (real tokens incl. [CLS]/[SEP]):",
        *_histogram_text(_length_buckets(st["sequence_length_histogram"], st["max_seq_length"]), st["records"]),
        "",
        "masked tokens per record:",
        *_histogram_text(st["masked_count_histogram"], st["records"]),
        "",
        "records per file:",
        *[f"  {f['file']} {f['records']} records {f['bytes']} bytes, random next {_percent(f['random_next_fraction'])}"
          for f in st["files"]],
        "",
        "commonest tokens:        " + " ".join(_token_name(t) for t in st["top_tokens"][:15]),
        "commonest masked tokens: " + " ".join(_token_name(t) for t in st["top_masked_tokens"][:15]),
        *_corpus_text(st.get("corpus")),
    ]
    return "\n".join(lines) + "\n"


def _token_name(t: dict) -> str:
    return t["token"] if t["token"] is not None else f"<{t['id']}>"


# ---------------------------------------------------------------------------------------------
# The HTML report: plots (PNG, matplotlib) and their tables

def _hist_array(hist: dict[str, int], size: int):
    import numpy as np

    out = np.zeros(size, np.int64)
    for k, v in hist.items():
        out[int(k)] = v
    return out


def _plain(label: str) -> str:
    """A label matplotlib shows as written: `$` would start mathtext."""
    return label.replace("$", r"\$")


def _plots(st: dict, rep: Report) -> dict[str, Html]:
    """Every figure of the report, rendered once (its bytes kept by `rep`), by section (its file's name without
    .png). `Report.figures` draws each in a child of its own as soon as it is built, while the next is built."""
    return {name.removesuffix(".png"): html for name, html in rep.figures(fig(st) for fig in _FIGURES).items()}


def _log_counts(ax, counts) -> None:
    """A log-scale y axis for `counts`, labelled as plain numbers ("1,000", not 10³) and without minor ticks:
    what a reader takes in at a glance, and a third of the drawing time of such a plot (each 10ⁿ label is
    mathtext, each minor tick a line and a label). Counts within two decades get 2 and 5 labelled too: a
    power of ten alone could leave the axis without a label."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    ax.set_yscale("log")
    positive = [c for c in counts if c > 0]
    if positive and max(positive) < 100 * min(positive):
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}" if value >= 1 else f"{value:g}"))
    ax.yaxis.set_minor_locator(NullLocator())


def _lengths_figure(st: dict) -> tuple:
    import numpy as np

    seq = st["max_seq_length"]
    fig = figure(10, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    lengths = _hist_array(st["sequence_length_histogram"], seq + 1)
    # One filled outline for the lengths below full, one bar for full length: as a bar per length looks,
    # drawn as two shapes instead of seq + 1 (a quarter of the report's drawing time at seq 128, more at 512).
    ax.stairs(lengths[:seq], np.arange(seq + 1) - 0.5, fill=True, color="#4c72b0", baseline=0)
    ax.bar([seq], lengths[seq:], width=1.0, color="#dd8452")
    ax.set_xlim(0, seq + 1)
    _log_counts(ax, lengths)  # the full-length bar is most of the data; the short ones would not show beside it
    ax.set_xlabel("real tokens per instance ([CLS] A [SEP] B [SEP])")
    ax.set_ylabel("instances (log scale)")
    ax.set_title(f"Real tokens per instance: mean {st['mean_length']:.1f}; full length ({seq}, orange) "
                 f"{_percent(st['full_length_fraction'])}")
    ax.grid(True, axis="y", alpha=0.3)
    return "lengths.png", fig, "histogram of real tokens per instance"


def _segments_figure(st: dict) -> tuple:
    import numpy as np

    seq = st["max_seq_length"]
    fig = figure(10, 3.6)
    ax = fig.add_subplot(1, 1, 1)
    width = max(1, seq // 128)  # lengths summed in ranges of `width`: a line per token is noise at 512
    edges = np.arange(0, seq + 1 + width, width)
    for key, label, colour in (("segment_a_length_histogram", "A", "#4c72b0"),
                               ("segment_b_length_histogram", "B", "#c44e52")):
        counts = np.add.reduceat(np.append(_hist_array(st[key], seq + 1), np.zeros(len(edges) * width, np.int64)),
                                 edges[:-1])
        ax.stairs(counts, edges, color=colour, linewidth=1.6, label=f"segment {label}")
    ax.set_xlim(0, seq)
    ax.set_xlabel("tokens in the segment (without [CLS] and [SEP])")
    ax.set_ylabel("instances" if width == 1 else f"instances per {width} lengths")
    ax.set_title(f"A/B split: mean A {st['mean_segment_a_length']:.1f}, mean B {st['mean_segment_b_length']:.1f}")
    ax.legend(loc="upper right")
    ax.grid(True, alpha=0.3)
    return "segments.png", fig, "histograms of segment A and segment B lengths"


def _masks_figure(st: dict) -> tuple:
    import numpy as np

    pred = st["max_predictions_per_seq"]
    fig = figure(10, 3.4)
    ax = fig.add_subplot(1, 1, 1)
    masks = _hist_array(st["masked_count_histogram"], pred + 1)
    ax.bar(np.arange(pred + 1), masks, width=0.8, color=["#4c72b0"] * pred + ["#dd8452"])
    ax.set_xlim(-0.6, pred + 0.6)
    if pred <= 40:
        ax.set_xticks(range(0, pred + 1, 1 if pred <= 20 else 2))
    _log_counts(ax, masks)  # the count at the cap (or one below it) dwarfs the short instances' counts
    ax.set_xlabel("masked tokens per instance")
    ax.set_ylabel("instances (log scale)")
    ax.set_title(f"Masks per instance: mean {st['mean_masks']:.2f}; at max_predictions_per_seq ({pred}, orange) "
                 f"{_percent(st['masks_at_max_fraction'])}")
    ax.grid(True, axis="y", alpha=0.3)
    return "masks.png", fig, "histogram of masked tokens per instance"


def _shards_figure(st: dict) -> tuple:
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    fig = figure(10, 5.2)
    files = st["files"]
    xs = np.arange(len(files))
    ax = fig.add_subplot(2, 1, 1)
    ax.bar(xs, [f["records"] for f in files], width=0.8 if len(files) < 60 else 1.0, color="#4c72b0")
    ax.set_ylabel("instances")
    ax.set_title(f"Instances per shard ({len(files)} shards)")
    ax.grid(True, axis="y", alpha=0.3)
    ax = fig.add_subplot(2, 1, 2)
    shares = [100 * (f["random_next_fraction"] or 0) for f in files]
    ax.bar(xs, shares, width=0.8 if len(files) < 60 else 1.0, color="#55a868")
    ax.axhline(100 * st["random_next_fraction"], color="#333", linewidth=1, linestyle="--",
               label=f"all shards: {_percent(st['random_next_fraction'])}")
    ax.set_ylim(0, max(60.0, max(shares) * 1.15))
    ax.set_ylabel("random next (%)")
    ax.set_xlabel("shard (file order)")
    ax.set_title("Share of instances whose B is a random sentence (next_sentence_labels = 1)")
    ax.legend(loc="lower right")
    ax.grid(True, axis="y", alpha=0.3)
    for a in fig.axes:
        a.set_xlim(-0.6, len(files) - 0.4)
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
    return "shards.png", fig, "instances and random-next share per shard"


def _tokens_figure(st: dict) -> tuple:
    import numpy as np

    shown = 20
    fig = figure(10, 0.28 * shown + 1.4)
    for col, (key, title) in enumerate((("top_tokens", "Commonest tokens"),
                                        ("top_masked_tokens", "Commonest masked tokens (the labels)"))):
        ax = fig.add_subplot(1, 2, col + 1)
        top = st[key][:shown][::-1]
        ax.barh(np.arange(len(top)), [100 * t["fraction"] for t in top], color="#8172b2" if col else "#4c72b0")
        ax.set_yticks(np.arange(len(top)), [_plain(_token_name(t)) for t in top])
        ax.set_xlabel("share of the tokens (%)" if col == 0 else "share of the masked tokens (%)")
        ax.set_title(title)
        ax.grid(True, axis="x", alpha=0.3)
    return "tokens.png", fig, "bar charts of the commonest tokens and masked tokens"


# Each figure's (file name, figure, alt text), in the order they are drawn: the slowest to draw first (at seq
# 128, 16 shards: tokens 0.28 s, shards 0.21, masks 0.16, segments 0.15, lengths 0.13), so that the
# report's drawing children finish together. The page places them by name.
_FIGURES = (_tokens_figure, _shards_figure, _masks_figure, _segments_figure, _lengths_figure)


def _bucket_rows(hist: dict[str, int], seq: int, total: int) -> list[list]:
    return [[k, v, _percent(v / total)] for k, v in _length_buckets(hist, seq).items()]


def _tokens_html(instance: dict) -> Html:
    """The tokens of one decoded instance as written, segment B in colour, each masked position marked with
    its original token under it."""
    masks = {m["position"]: m for m in instance["masks"]}
    parts = []
    for position, (token, segment) in enumerate(zip(instance["tokens"], instance["segment_ids"])):
        if position in masks:
            m = masks[position]
            word = tag("mark", [token, tag("sub", m["original"])], title=f"{m['kind']}: original {m['original']}")
        elif token in (CLS, SEP, PAD):
            word = tag("span", token, class_="special")
        else:
            word = tag("span", token, class_="seg-b" if segment == 1 else None)
        parts.append(word)
    return tag("div", Html(" ".join(parts)), class_="tokens")


def report_html(st: dict) -> tuple[str, Report]:
    """The page of a `dataset_stats` result and its figures (their PNG bytes in the Report)."""
    rep = Report()
    plots = _plots(st, rep)
    seq, pred, n = st["max_seq_length"], st["max_predictions_per_seq"], st["records"]
    manifest, vocab = st["manifest"], st["vocab"]
    summary = section("Summary", facts([
        ("format", layouts.get(st["format"]).title),
        ("instances", n), ("files", len(st["files"])),
        ("max_seq_length", seq), ("max_predictions_per_seq", pred),
        ("real tokens", st["tokens"]), ("mean real tokens per instance", round(st["mean_length"], 2)),
        ("full-length instances", f"{st['full_length']:,} ({_percent(st['full_length_fraction'])})"),
        ("random next (label 1)", f"{st['random_next']:,} ({_percent(st['random_next_fraction'])})"),
        ("masked tokens", f"{st['masked_tokens']:,} (mean {st['mean_masks']:.2f} per instance)"),
        (f"instances with {pred} masks", f"{st['masks_at_max']:,} ({_percent(st['masks_at_max_fraction'])})"),
        ("[UNK] rate", "no vocab.txt beside the records" if st["unk_rate"] is None
         else f"{100 * st['unk_rate']:.4f}% ({st['unk_tokens']:,} tokens, of the real tokens but [CLS]/[SEP])"),
        ("bytes", f"{st['bytes_per_file']['total']:,} in {len(st['files'])} files"),
        ("MANIFEST.json", status(manifest.get("ok"), status_words(manifest))),
    ]))
    params = st["parameters"]
    dataset = section(
        "Dataset",
        paragraph("What made these records: the folder's dataset.json (its content parameters), the vocabulary "
                  "beside the records, and MANIFEST.json checked file by file as wikiprep verify checks it."),
        table(["parameter", "value"], [[k, _parameter_value(v)] for k, v in sorted(params.items())], "dataset.json")
        if params else paragraph("No dataset.json beside the records: the dimensions come from the records."),
        facts([("vocab.txt", vocab["file"] or "none beside the records"),
               ("vocab sha256", vocab["sha256"] or "—"),
               ("vocab tokens", vocab.get("tokens")),
               ("vocab is the dataset's", "—" if vocab["matches_dataset"] is None else
                status(vocab["matches_dataset"], "yes: dataset.json names this sha256" if vocab["matches_dataset"]
                       else "NO: dataset.json names another vocab_sha256")),
               ("MANIFEST.json", status(manifest.get("ok"), status_words(manifest)))]))
    lengths = section(
        "Real tokens per instance",
        plots["lengths"],
        paragraph(f"Full length ({seq} tokens): {st['full_length']:,} instances, {_percent(st['full_length_fraction'])}. "
                  "The generator makes a share of short instances on purpose (short_seq_prob)."),
        table(["real tokens", "instances", "share"],
              _bucket_rows(st["sequence_length_histogram"], seq, n), "Real tokens per instance, in 16 ranges"),
        details("Every length", table(["real tokens", "instances", "share"],
                                      [[int(k), v, _percent(v / n)] for k, v in st["sequence_length_histogram"].items()],
                                      scroll=True)))
    segments = section(
        "Segment A and B lengths",
        plots["segments"],
        paragraph("A is the first segment without [CLS] and its [SEP]; B the second without its [SEP]."),
        table(["tokens", "instances with A", "instances with B"],
              [[k, a, b] for k, a, b in _zip_buckets(st["segment_a_length_histogram"],
                                                      st["segment_b_length_histogram"], seq)],
              "Segment lengths, in 16 ranges"))
    masks = section(
        "Masks per instance",
        plots["masks"],
        paragraph(f"{st['masks_at_max']:,} instances ({_percent(st['masks_at_max_fraction'])}) reach "
                  f"max_predictions_per_seq = {pred}: their count was cut there." if st["masks_at_max"] else
                  f"No instance reaches max_predictions_per_seq = {pred}: no count was cut there "
                  f"(the most any instance has is {max(int(k) for k in st['masked_count_histogram'])})."),
        table(["masks", "instances", "share"],
              [[int(k), v, _percent(v / n)] for k, v in st["masked_count_histogram"].items()], "Masks per instance",
              scroll=len(st["masked_count_histogram"]) > 21))
    shards = section(
        "Shards",
        plots["shards"],
        table(["file", "instances", "bytes", "random next", "random next share"],
              [[f["file"], f["records"], f["bytes"], f["random_next"], _percent(f["random_next_fraction"])]
               for f in st["files"]], "Instances and random-next share per shard", scroll=len(st["files"]) > 16))
    tokens = section(
        "Tokens",
        plots["tokens"],
        paragraph("Counted over the real tokens with the masking undone (the original token at each masked "
                  "position); [CLS], [SEP] and [PAD] are left out of the commonest tokens. " +
                  ("[UNK] rate: no vocab.txt beside the records." if st["unk_rate"] is None else
                   f"[UNK] rate: {100 * st['unk_rate']:.4f}% ({st['unk_tokens']:,} tokens).")),
        row(*[table(["rank", "token", "id", "count", "share"],
                    [[i + 1, _token_name(t), t["id"], t["count"], _percent(t["fraction"])]
                     for i, t in enumerate(st[key])], f"The {TOP_TOKENS} {what}", scroll=True)
              for key, what in (("top_tokens", "commonest tokens"), ("top_masked_tokens", "commonest masked tokens"))]))
    shown = []
    for inst in st["instances"]:
        shown += [
            tag("h3", f"Instance {inst['instance']} ({inst['file']}): {inst['length']} real tokens, A {inst['segment_a']}, "
                      f"B {inst['segment_b']}, next sentence: {inst['next_sentence']} "
                      f"(label {inst['next_sentence_label']})"),
            _tokens_html(inst),
            details(f"Its {len(inst['masks'])} masked positions: "
                    + ", ".join(f"{n} {kind}" for kind, n in sorted(Counter(m["kind"] for m in inst["masks"]).items())),
                    table(["position", "written", "original", "kind"],
                          [[m["position"], m["written"], m["original"], m["kind"]] for m in inst["masks"]])),
        ]
    instances = section(
        "Decoded instances",
        paragraph(f"The first {len(st['instances'])} instances of the first file, as a trainer reads them. "
                  "Segment B is in blue; each masked position is marked, with the original token below it: "
                  "[MASK], a random token, or the token kept."
                  + ("" if st["vocab"]["file"] else " No vocab.txt beside the records: token ids are shown.")),
        *shown)
    title = f"BERT dataset {st['folder']}"
    lead = (f"{n:,} instances of {layouts.get(st['format']).title} records, seq {seq}, {pred} predictions. "
            f"Figures from reading every record; stats.json holds every number shown.")
    sections = [summary, dataset, lengths, segments, masks, shards, tokens, instances]
    if st.get("corpus"):
        sections.insert(2, _corpus_section(st["corpus"]))
    return page(title, sections, lead), rep


def _parameter_value(value) -> str:
    """A dataset.json value as the report's table shows it: as it is, but a long table (a text corpus' files,
    a mixture's sources) by its size alone."""
    if isinstance(value, str):
        return value
    text = json.dumps(value)
    if isinstance(value, (dict, list)) and len(text) > 200:
        return f"{len(value)} entries (dataset.json holds them)"
    return text


def _zip_buckets(a: dict[str, int], b: dict[str, int], seq: int):
    """(range, A count, B count) of two length histograms, in the same 16 ranges (empty ranges left out)."""
    width = max(1, math.ceil((seq + 1) / 16))
    rows: dict[int, list[int]] = {}
    for col, hist in enumerate((a, b)):
        for k, v in hist.items():
            rows.setdefault(int(k) // width, [0, 0])[col] += v
    return [(f"{lo * width}-{min(lo * width + width - 1, seq)}", *rows[lo]) for lo in sorted(rows)]


def write_report(folder: str | Path, out: str | Path, *, overwrite: bool = False, name: str | None = None,
                 progress: Progress | None = None, read_back: dict[str, dict] | None = None,
                 known_files: dict[str, dict] | None = None) -> str:
    """Commit the report of the dataset in `folder` to `out`: stats.json, report.txt, every plot as a PNG and
    report.html; returns the report's text. `name`: what the report calls the folder; `read_back` and
    `known_files`: what the writers of its files already know (all three as `dataset_stats`'s);
    `progress(done, total)` counts the record files read.

    `overwrite` replaces a report already there (the command line, which first refuses an `out` in or holding a
    dataset: `shardkit.manifest.check_report_folder`); without it an existing one is kept when identical and
    refused when not (`shardkit.atomic`).
    """
    folder, out = Path(folder), Path(out)
    st = dataset_stats(folder, progress, name=name, read_back=read_back, known_files=known_files)
    html_text, rep = report_html(st)
    make_parent_folder(out / "stats.json")
    write_json(out / "stats.json", st, overwrite=overwrite)
    text = stats_report_text(st)
    write_text(out / "report.txt", text, overwrite=overwrite)
    rep.write(out, html_text, overwrite=overwrite)
    return text
