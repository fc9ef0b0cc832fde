"""Scale on paper: wiki-128 for English Wikipedia on 1 to 64 nodes, from per-core stage rates measured here.

    .venv/bin/python benchmarks/bench_scale.py                # a few minutes: 40 MB of XML, TrainVocab at its cap
    .venv/bin/python benchmarks/bench_scale.py --quick        # under a minute, small inputs: checks that it runs
    .venv/bin/python benchmarks/bench_scale.py --json report.json

1. Per-core rates. A synthetic multistream dump (`write_synthetic_dump`; no real dump is reachable
   offline) goes through the library functions behind each Luigi task of `Pretrain128`, one after
   another in one process pinned to one core (`taskset -c 0` when there is one):
   `extract.extract_part` per part (ExtractPart), `sentences.PunktSample` + `train_punkt` (TrainPunkt),
   `sentences.split_piece` per part (SplitPart), `sentences.merge_shard` per shard (the merge, one task
   per sentence shard), `dataset.write_shard` per shard at seq 128 / 20 predictions / dupe 5 (PretrainShard),
   the sha256 of each shard's files (its receipt), `dataset.finalize` (PretrainDataset: stats,
   MANIFEST.json from those hashes: metadata), then the sha256 rate over the records and the rate of
   `wikiprep verify`. Each rate is in MB of the stage's own input per
   core-second, and in MB of XML per core-second through the byte ratios of this dump (bz2 : XML :
   extracted JSON lines : sentence text : TFRecord bytes), which are printed too.
2. TrainVocab at its cap. `vocab.count_words` (max_chars 200 M by default) and `vocab.train_wordpiece`
   (30,522 tokens), in a fresh process, pinned, under an address-space limit (`--vocab-mem-gb`, as
   `ulimit -v`), timed and with its peak RSS (ru_maxrss). The input is 256 sentence shards, as the
   task reads them (an even share of the cap from each), built from this dump's sentences: once with
   their own words (the synthetic grammar has a few thousand distinct words), and once with every word
   drawn again from a Zipf lexicon sized so that the text holds about `--vocab-types` distinct words
   (default 500,000: real Wikipedia text is a long tail of names and rare words, and the trainer's
   time and memory grow with the number of distinct words, not with the text). The projection takes
   the long-tail figure.
3. The projection. English Wikipedia taken as 24 GB of bz2 and 100 GB of XML; every text stage's input
   from the ratios measured here. Per stage, wall time = max(core-seconds of work / min(cores, tasks),
   the largest task) on 1, 4, 16 and 64 nodes of 64 cores, with the task counts of a multistream run
   (MULTISTREAM=1, --extract-slice-mb 100, --num-shards 256) and the merge done per shard (one task per
   sentence shard). Stages are added as if each waited for the whole previous one (Luigi overlaps
   them, so this errs long), plus the serial parts: the download, TrainPunkt, TrainVocab at its cap,
   the finalize (per-shard metadata). `wikiprep verify --jobs 64`, which the Slurm modes run last,
   spreads its files over one node's cores. The shared filesystem's bandwidth is not modelled.
   `--from-json REPORT` projects an earlier report's measurements again (no new measurement).

Prints markdown: the rates, the TrainVocab line, the projection and the serial parts, the rows the
docs/performance.md carries (and writes the whole report as JSON with --json).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import math
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's packages, in this process and in every child
FIXTURE_VOCAB = REPO / "tests" / "fixtures" / "google-reference" / "bert-base-uncased-vocab.txt"
DATE = "20260101"
SEED = 12345
SETTINGS = dict(max_seq_length=128, max_predictions_per_seq=20, dupe_factor=5)
MIN_DOC_CHARS = 200  # TrainPunkt's and SplitPart's default --min-doc-chars

# English Wikipedia, as the issue takes it, and the task counts of a run on it.
ENWIKI_BZ2 = 24e9
ENWIKI_XML = 100e9
# enwiki-20251220 pages-articles-multistream: 66 part files (parts 1-27, the later ones split every
# 1.5 M page ids, e.g. ...multistream27.xml-p63975910p65475909.bz2 ... p80475910p81895635.bz2), as
# listed by public download scripts of that dump. Each part is sliced on its own, so a part adds half
# a slice on average to 24 GB / 100 MB.
ENWIKI_PARTS = 66
SLICE_MB = 100.0  # --extract-slice-mb default
NUM_SHARDS = 256  # --num-shards default
# dumps.wikimedia.org: nginx `limit_rate 5120k` per connection, and the toolkit's wikimedia_http=2.
DOWNLOAD_BYTES_PER_S = 2 * 5120 * 1024
CORES_PER_NODE = 64
NODES = (1, 4, 16, 64)
# English Wikipedia's sentence text, as the issue takes it (MLPerf's enwiki-20200101, a smaller dump,
# gave 500 x 26.9 MB = 13.5 GB): the synthetic dump has more prose per MB of XML than a real one.
ENWIKI_SENTENCE_TEXT = 20e9
VOCAB_CAP = 200_000_000  # vocab.count_words' default max_chars
# NVIDIA LDDL's published preprocessing latency (docs/images/preprocess_perf.gif), in hours.
LDDL = {"workstation": 1.43, "1 DGX-A100 node": 0.27, "32 DGX-A100 nodes": 0.05}


def mb(n: float) -> float:
    return round(n / 1e6, 2)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def pinned(cmd: list[str]) -> list[str]:
    return (["taskset", "-c", "0"] if shutil.which("taskset") else []) + cmd


# ---------------------------------------------------------------------------------------------
# 1. The stages on one core (child process `_stages`)

def run_stages(dump: Path, work: Path, vocab: Path, num_shards: int, hash_mb: float) -> dict:
    """Every stage of the chain in turn over its real input; seconds and bytes of each (one core)."""
    from shardkit.atomic import sha256_file
    from wikiprep import dataset, layouts, sentences
    from wikiprep.wikipedia import extract
    from wikiprep.wikipedia.source import extracted_documents
    from wikiprep.options import GenerationOptions
    from wikiprep.verify import verify

    shutil.rmtree(work, ignore_errors=True)
    (work / "extracted").mkdir(parents=True)
    parts = sorted((p for p in dump.iterdir() if p.name.endswith(".bz2") and "-index" not in p.name),
                   key=lambda p: int(re.search(r"multistream(\d+)\.xml", p.name).group(1)))
    out: dict = {"parts": len(parts), "num_shards": num_shards}

    started, extracted, xml_bytes = time.perf_counter(), [], 0
    for part in parts:
        path = work / "extracted" / (part.name[:-4] + ".jsonl")
        xml_bytes += extract.extract_part(part, path, DATE)["xml_bytes"]
        extracted.append(path)
    out["extract"] = {"seconds": time.perf_counter() - started, "bz2_bytes": sum(p.stat().st_size for p in parts),
                      "xml_bytes": xml_bytes, "out_bytes": sum(p.stat().st_size for p in extracted)}

    started = time.perf_counter()  # what TrainPunkt does: read pieces in order until the sample is full, train
    sample = sentences.PunktSample()
    for path in extracted:
        sample.add(path.stem, extracted_documents(path, min_chars=MIN_DOC_CHARS))
        if sample.full:
            break
    punkt = work / "punkt.json"
    sentences.train_punkt(sample.texts, punkt, source=sample.source)
    out["train_punkt"] = {"seconds": time.perf_counter() - started, "chars": sample.chars}

    started, splits = time.perf_counter(), []
    for path in extracted:
        splits.append(work / "split" / path.stem)
        sentences.split_piece(extracted_documents(path, min_chars=MIN_DOC_CHARS), punkt, splits[-1],
                              num_shards=num_shards, seed=SEED)
    out["split"] = {"seconds": time.perf_counter() - started, "in_bytes": out["extract"]["out_bytes"]}

    (work / "sentences").mkdir()
    started, merged = time.perf_counter(), []
    for i in range(num_shards):
        path = work / "sentences" / sentences.shard_name(i)
        merged.append(sentences.merge_shard([s / sentences.bucket_name(i) for s in splits], path))
    seconds = time.perf_counter() - started
    shard_bytes = [(work / "sentences" / sentences.shard_name(i)).stat().st_size for i in range(num_shards)]
    out["merge"] = {"seconds": seconds, "in_bytes": sum(shard_bytes), "largest_shard_bytes": max(shard_bytes),
                    "documents": sum(m["documents"] for m in merged)}

    folder = work / dataset.folder_name(GenerationOptions(**SETTINGS, random_seed=SEED), num_shards=num_shards)
    description = dataset.describe(GenerationOptions(**SETTINGS, random_seed=SEED), vocab,
                                   corpus={"wiki": "enwiki", "dump_date": DATE, "multistream": True,
                                           "extract_slice_mb": SLICE_MB},
                                   num_shards=num_shards, min_doc_chars=MIN_DOC_CHARS, vocab_size=30522)
    spec = dataset.DatasetSpec(description, layouts.DEFAULT, "wiki", ("extract_slice_mb",))
    started, shard_stats = time.perf_counter(), []
    for i in range(num_shards):
        options = GenerationOptions(**SETTINGS, random_seed=dataset.shard_seed(SEED, i))
        shard_stats.append(dataset.write_shard(work / "sentences" / sentences.shard_name(i), vocab,
                                               folder / spec.shard_name(i), options, spec))
    records = sorted(folder.glob("*.tfrecord"))
    out["instances"] = {"seconds": time.perf_counter() - started, "in_bytes": sum(shard_bytes),
                        "tfrecord_bytes": sum(p.stat().st_size for p in records),
                        "instances": sum(s["instances"] for s in shard_stats)}

    # Each PretrainShard task hashes its record and index files for its receipt (workflows.wiki), and
    # the finalize takes those hashes: it reads no record (`known_files`), it writes stats.json,
    # vocab.txt and MANIFEST.json from per-shard metadata.
    started, known = time.perf_counter(), {}
    for p in records + [p.with_suffix(".index") for p in records]:
        known[p.name] = {"sha256": sha256_file(p), "size": p.stat().st_size}
    out["receipt_hashes"] = {"seconds": time.perf_counter() - started,
                             "bytes": sum(k["size"] for k in known.values())}
    started = time.perf_counter()
    dataset.finalize(folder, spec, vocab, shard_stats, {"shards": merged, "dropped": {}}, known_files=known)
    out["finalize"] = {"seconds": time.perf_counter() - started, "dataset_bytes": out["instances"]["tfrecord_bytes"],
                       "known_files": True}

    # The manifest's sha256 over a whole dataset: hash the records again and again (page cache warm,
    # as right after the shards were written) until `hash_mb` MB are hashed.
    hashed, started = 0, time.perf_counter()
    while hashed < hash_mb * 1e6:
        for p in records:
            sha256_file(p)
            hashed += p.stat().st_size
    out["sha256"] = {"seconds": time.perf_counter() - started, "bytes": hashed}

    verify(folder)  # the first call imports TensorFlow (seconds, once per process): time the second
    started = time.perf_counter()
    verify(folder)
    out["verify"] = {"seconds": time.perf_counter() - started, "bytes": out["instances"]["tfrecord_bytes"]}
    return out


# ---------------------------------------------------------------------------------------------
# 2. TrainVocab at its cap (child process `_vocab`, under an address-space limit)

SYLLABLES = ("ba be bi bo bu ka ke ki ko ku la le li lo lu ma me mi mo mu na ne ni no nu ra re ri ro ru sa se si so "
             "su ta te ti to tu an en in on er ar or el al il st tr ch sh th gr br pl ver ton ing ers ade ism").split()


def pseudo_word(n: int) -> str:
    """The n-th made-up word (n >= 0): two or more English-like syllables, all distinct."""
    n += len(SYLLABLES)  # at least two syllables
    out = []
    while n:
        n, d = divmod(n, len(SYLLABLES))
        out.append(SYLLABLES[d])
    return "".join(reversed(out))


def expected_types(lexicon: int, tokens: float) -> float:
    """Distinct words expected among `tokens` draws from Zipf(1) over `lexicon` words."""
    harmonic = math.log(lexicon) + 0.5772156649 + 1 / (2 * lexicon)
    # sum over ranks of 1 - exp(-tokens / (harmonic * r)), in blocks of ranks with an integral beyond 10^5
    head = min(lexicon, 100_000)
    total = sum(-math.expm1(-tokens / (harmonic * r)) for r in range(1, head + 1))
    if lexicon > head:  # the tail, as an integral over r (smooth there)
        steps = 2000
        a, b = math.log(head + 0.5), math.log(lexicon + 0.5)
        h = (b - a) / steps
        for k in range(steps):
            r = math.exp(a + (k + 0.5) * h)
            total += -math.expm1(-tokens / (harmonic * r)) * r * h
    return total


def lexicon_for(types: int, tokens: float) -> int:
    """The Zipf lexicon size whose `tokens` draws give about `types` distinct words."""
    lo, hi = types, types * 200
    while lo < hi:
        mid = (lo + hi) // 2
        if expected_types(mid, tokens) < types:
            lo = mid + 1
        else:
            hi = mid
    return lo


WORD = re.compile(r"\w+")


def redrawer(lexicon: list[str], size: int, seed: int):
    """line -> the line with every word (a run of letters only) drawn again from the first `size` words of
    `lexicon`, Zipf(1): the r-th word with probability proportional to 1/r. Runs with digits ("1990s") stay."""
    cumulative = list(itertools.accumulate(1.0 / r for r in range(1, size + 1)))
    total, rng, pick = cumulative[-1], random.Random(seed), bisect.bisect_left

    def draw(match) -> str:
        word = match.group()
        return lexicon[pick(cumulative, rng.random() * total)] if word.isalpha() else word

    return lambda line: WORD.sub(draw, line)


def words_per_char(lines: list[str]) -> float:
    return sum(w.isalpha() for line in lines for w in WORD.findall(line)) / sum(len(line.strip()) for line in lines)


def write_vocab_inputs(text_files: list[Path], out_dir: Path, *, files: int, max_chars: int,
                       types: int | None, seed: int = 1) -> dict:
    """`files` sentence-shard files of at least max_chars // files characters each (what count_words takes
    from each), cycled from the lines of `text_files`; with `types`, every word redrawn from a Zipf lexicon
    (the text's own words, most frequent first, then made-up ones) sized for about `types` distinct words."""
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    lines = [line for p in text_files for line in p.read_text(encoding="utf-8").split("\n")]
    if not any(lines):
        raise SystemExit("bench_scale: no sentence text to build the vocabulary input from")
    budget = max_chars // files
    redraw, size = None, None
    if types:
        own = Counter(w.lower() for line in lines for w in WORD.findall(line) if w.isalpha())
        lexicon = [w for w, _ in own.most_common()]
        pilot = [line for line in lines[:20000] if line.strip()]
        size = types
        for _ in range(3):  # the words per character after the redraw depend on the lexicon's size: settle it
            lexicon += [pseudo_word(n) for n in range(len(lexicon) - len(own), size - len(own))]
            redraw = redrawer(lexicon, size, seed)
            size = max(len(own), lexicon_for(types, words_per_char([redraw(line) for line in pilot]) * max_chars))
        lexicon += [pseudo_word(n) for n in range(len(lexicon) - len(own), size - len(own))]
        redraw = redrawer(lexicon, size, seed)
    start = 0
    for k in range(files):
        taken, chunk = 0, []
        i = start
        while taken < budget + 1000:
            line = lines[i % len(lines)]
            if redraw is not None and line:
                line = redraw(line)
            chunk.append(line)
            taken += len(line.strip())
            i += 1
        start = (start + len(lines) // files + 1) % len(lines)
        (out_dir / f"shard_{k:05d}.txt").write_text("\n".join(chunk) + "\n", encoding="utf-8")
    return {"files": files, "chars_per_file": budget, "lexicon": size}


def run_vocab(folder: Path, max_chars: int, vocab_size: int) -> dict:
    """What TrainVocab runs (vocab.build_vocab: count_words, train_wordpiece), each timed; peak RSS."""
    from wikiprep import vocab

    files = sorted(folder.glob("shard_*.txt"))
    started = time.perf_counter()
    counts = vocab.count_words(files, max_chars=max_chars)
    counted = time.perf_counter()
    tokens = vocab.train_wordpiece(counts, vocab_size)
    trained = time.perf_counter()
    return {"count_seconds": counted - started, "train_seconds": trained - counted,
            "seconds": trained - started, "distinct_words": len(counts), "words": sum(counts.values()),
            "vocab_tokens": len(tokens), "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def vocab_child(folder: Path, max_chars: int, vocab_size: int, mem_gb: float) -> dict:
    def limit():  # ulimit -v: a trainer that outgrows it fails with MemoryError, not the machine
        resource.setrlimit(resource.RLIMIT_AS, (int(mem_gb * 2**30), int(mem_gb * 2**30)))

    r = subprocess.run(pinned([sys.executable, __file__, "_vocab", str(folder), str(max_chars), str(vocab_size)]),
                       capture_output=True, text=True, preexec_fn=limit, cwd=REPO)
    if r.returncode:
        if "MemoryError" in r.stderr:
            return {"error": f"over the {mem_gb:g} GB address-space limit (--vocab-mem-gb)"}
        raise SystemExit("bench_scale: TrainVocab child failed:\n" + r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------------
# 3. The projection

def rates_of(s: dict) -> dict:
    """Per-core rates of each stage (MB of its own input per core-second, and of XML through this dump's
    ratios) and the byte ratios of this dump, per byte of XML and per byte of sentence text."""
    xml, text = s["extract"]["xml_bytes"], s["merge"]["in_bytes"]
    sizes = {"bz2": s["extract"]["bz2_bytes"], "xml": xml, "extracted": s["extract"]["out_bytes"],
             "sentences": text, "tfrecord": s["instances"]["tfrecord_bytes"]}

    def stage(name, own_bytes, unit):
        sec = s[name]["seconds"]
        return {"unit": unit, "own_mb_s": own_bytes / sec / 1e6, "xml_mb_s": xml / sec / 1e6}

    return {
        "per_xml": {k: v / xml for k, v in sizes.items()},
        "per_sentence_text": {k: v / text for k, v in sizes.items()},
        "extract": stage("extract", xml, "XML"),
        "split": stage("split", s["split"]["in_bytes"], "extracted JSON lines"),
        "merge": stage("merge", text, "sentence text"),
        "instances": stage("instances", text, "sentence text"),
        "sha256": {"unit": "TFRecord", "own_mb_s": s["sha256"]["bytes"] / s["sha256"]["seconds"] / 1e6},
        "verify": {"unit": "TFRecord", "own_mb_s": s["verify"]["bytes"] / s["verify"]["seconds"] / 1e6},
    }


def finalize_seconds_per_shard(s: dict) -> float:
    """The finalize's time per shard: metadata only (known_files). A report measured before the finalize took the
    receipts' hashes timed it hashing every file: that hashing, at the measured sha256 rate, is taken out."""
    seconds = s["finalize"]["seconds"]
    if not s["finalize"].get("known_files"):
        rate = s["sha256"]["bytes"] / s["sha256"]["seconds"]
        seconds = max(0.0, seconds - s["finalize"]["dataset_bytes"] / rate)
    return seconds / s["num_shards"]


def project(s: dict, vocab_seconds: float, *, vocab_chars: int = VOCAB_CAP, xml: float = ENWIKI_XML,
            bz2: float = ENWIKI_BZ2, sentence_text: float | None = ENWIKI_SENTENCE_TEXT) -> dict:
    """Per-stage wall time (seconds) of wiki-128 over English Wikipedia on each node count.

    Extraction's work is the dump's XML at the rate measured per MB of XML. The later stages' work
    is the dump's sentence text (`sentence_text` bytes; None: from the XML at this dump's ratio),
    with the extracted JSON lines and the records in this dump's proportion to it.
    """
    r = rates_of(s)
    if sentence_text is None:
        sentence_text = xml * r["per_xml"]["sentences"]
    per_text = r["per_sentence_text"]
    extracted = sentence_text * per_text["extracted"]
    tfrecord_bytes = sentence_text * per_text["tfrecord"]
    pieces = math.ceil(bz2 / (SLICE_MB * 1e6)) + ENWIKI_PARTS // 2
    slice_share = SLICE_MB * 1e6 / bz2  # the largest piece: a full slice, this share of the dump
    imbalance = s["merge"]["largest_shard_bytes"] / (s["merge"]["in_bytes"] / s["num_shards"])
    shard_share = imbalance / NUM_SHARDS
    core_s = lambda nbytes, name: nbytes / (r[name]["own_mb_s"] * 1e6)  # noqa: E731
    extract = core_s(xml, "extract")
    split = core_s(extracted, "split")
    merge = core_s(sentence_text, "merge")
    # PretrainShard: the instances, and the sha256 of its files for its receipt (which the manifest takes)
    instances = core_s(sentence_text, "instances") + core_s(tfrecord_bytes, "sha256")
    # `wikiprep verify --jobs` on one node: one file per worker at a time, the largest shard the floor
    verify = core_s(tfrecord_bytes, "verify")
    verify_s = max(verify / min(CORES_PER_NODE, NUM_SHARDS), verify * shard_share)
    stages = [  # name, tasks, core-seconds of work, core-seconds of the largest task (None: serial)
        ("download (2 connections x 5 MiB/s)", 1, bz2 / DOWNLOAD_BYTES_PER_S, None),
        ("ExtractPart", pieces, extract, extract * slice_share),
        ("TrainPunkt", 1, s["train_punkt"]["seconds"], None),
        ("SplitPart", pieces, split, split * slice_share),
        ("merge, one task per sentence shard", NUM_SHARDS, merge, merge * shard_share),
        (f"TrainVocab ({vocab_chars / 1e6:g} M-character cap)", 1, vocab_seconds, None),
        ("PretrainShard", NUM_SHARDS, instances, instances * shard_share),
        ("finalize: MANIFEST.json from the shard receipts", 1, finalize_seconds_per_shard(s) * NUM_SHARDS, None),
    ]
    rows = []
    for name, tasks, work, largest in stages:
        walls = {}
        for n in NODES:
            cores = n * CORES_PER_NODE
            walls[n] = work if largest is None else max(work / min(cores, tasks), largest)
        rows.append({"stage": name, "tasks": tasks, "core_hours": work / 3600, "serial": largest is None,
                     "largest_task_s": largest, "wall_s": walls})
    return {"rows": rows, "pieces": pieces, "sentence_bytes": sentence_text, "extracted_bytes": extracted,
            "tfrecord_bytes": tfrecord_bytes, "shard_imbalance": imbalance,
            "verify_s": verify_s, "verify_core_s": verify, "xml": xml, "bz2": bz2,
            # without MULTISTREAM a whole part is one task: one of the mean size, on one core
            "mean_part_s": {"ExtractPart": extract / ENWIKI_PARTS, "SplitPart": split / ENWIKI_PARTS}}


def fmt_time(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def markdown(report: dict) -> str:
    s, r, p, v = report["stages"], report["rates"], report["projection"], report["vocab"]
    lines = [f"Measured {report['when']} on {report['cpus']} cores, load average {report['load_before']} before, "
             f"{report['load_after']} after; dump {mb(s['extract']['xml_bytes'])} MB of XML in {s['parts']} "
             f"multistream parts; one core per stage (`taskset -c 0`).", ""]
    # each rate also in MB of English Wikipedia's bz2 per core-second: how much of the dump one core gets through
    enwiki_bytes = {"extract": p["xml"], "split": p["extracted_bytes"], "merge": p["sentence_bytes"],
                    "instances": p["sentence_bytes"], "sha256": p["tfrecord_bytes"], "verify": p["tfrecord_bytes"]}
    lines += ["| stage (library function) | MB/s per core, of its own input | MB of English Wikipedia's bz2/s per core |",
              "|---|---|---|"]
    for name, label in (("extract", "ExtractPart (`extract.extract_part`)"),
                        ("split", "SplitPart (`sentences.split_piece`)"),
                        ("merge", "merge (`sentences.merge_shard`)"),
                        ("instances", "PretrainShard (`dataset.write_shard`, seq 128, dupe 5)"),
                        ("sha256", "sha256 (`sha256_file`): each shard's receipt, and verify"),
                        ("verify", "`wikiprep verify` (sha256 again, index files, TensorFlow parse)")):
        own = r[name]["own_mb_s"]
        lines.append(f"| {label} | {own:.2f} of {r[name]['unit']} | {own * p['bz2'] / enwiki_bytes[name]:.2f} |")
    lines.append(f"| TrainPunkt (`PunktSample` + `train_punkt`, {s['train_punkt']['chars'] / 1e6:.1f} M characters) | "
                 f"fixed: {s['train_punkt']['seconds']:.1f} s | |")
    x, t = r["per_xml"], r["per_sentence_text"]
    lines += ["", f"This dump, per byte of XML: bz2 {x['bz2']:.3f} (English Wikipedia: {p['bz2'] / p['xml']:.2f}), "
              f"extracted JSON lines {x['extracted']:.3f}, sentence text {x['sentences']:.3f} (English Wikipedia: "
              f"{p['sentence_bytes'] / p['xml']:.2f}); per byte of sentence text: extracted JSON lines "
              f"{t['extracted']:.3f}, TFRecords (seq 128, dupe 5) {t['tfrecord']:.2f}.", ""]
    for key, label in (("own_words", "its own words"), ("long_tail", "long-tail words")):
        x = v.get(key)
        if not x:
            continue
        if "error" in x:
            lines.append(f"- TrainVocab at {v['max_chars'] / 1e6:.0f} M characters, {label}: {x['error']}")
            continue
        lines.append(f"- TrainVocab at {v['max_chars'] / 1e6:.0f} M characters ({v['files']} shards), {label}: "
                     f"{x['distinct_words']:,} distinct words, count {x['count_seconds']:.1f} s + train "
                     f"{x['train_seconds']:.1f} s = **{x['seconds']:.1f} s**, peak RSS **{x['peak_rss_mb']:.0f} MB** "
                     f"(limit {v['mem_gb']:g} GB)")
    lines += ["", f"English Wikipedia: {p['bz2'] / 1e9:.0f} GB of bz2, {p['xml'] / 1e9:.0f} GB of XML, "
              f"{p['sentence_bytes'] / 1e9:.1f} GB of sentence text, so {p['extracted_bytes'] / 1e9:.1f} GB of "
              f"extracted JSON lines and {p['tfrecord_bytes'] / 1e9:.0f} GB of TFRecords at the ratios above; "
              f"{p['pieces']} pieces (MULTISTREAM=1, 100 MB slices of {ENWIKI_PARTS} parts), {NUM_SHARDS} shards "
              f"(the largest {p['shard_imbalance']:.3f} x the mean, as here); nodes of {CORES_PER_NODE} cores.", ""]
    head = "| stage | tasks | core-hours | " + " | ".join(f"{n} node{'s' if n > 1 else ''}" for n in NODES) + " |"
    lines += [head, "|---|---|---|" + "---|" * len(NODES)]
    for row in p["rows"]:
        kind = "serial" if row["serial"] else str(row["tasks"])
        lines.append(f"| {row['stage']} | {kind} | {row['core_hours']:.2f} | "
                     + " | ".join(fmt_time(row["wall_s"][n]) for n in NODES) + " |")
    no_download = {n: sum(row["wall_s"][n] for row in p["rows"][1:]) for n in NODES}
    lddl_scope = {n: sum(row["wall_s"][n] for row in p["rows"] if row["stage"].split(" ")[0] in
                         ("SplitPart", "merge,", "PretrainShard", "finalize:")) for n in NODES}
    download = p["rows"][0]["wall_s"][1]
    lines.append("| **total, from downloaded parts** | | | " + " | ".join(f"**{fmt_time(no_download[n])}**"
                                                                           for n in NODES) + " |")
    lines.append("| **total, with the download** | | | " + " | ".join(fmt_time(no_download[n] + download)
                                                                     for n in NODES) + " |")
    lines.append("| LDDL's scope (sentences to records, vocab given: SplitPart, merge, PretrainShard, finalize) | | | "
                 + " | ".join(fmt_time(lddl_scope[n]) for n in NODES) + " |")
    lines.append(f"| `wikiprep verify --jobs {CORES_PER_NODE}` after it (Slurm modes), one node | {NUM_SHARDS} files | "
                 f"{p['verify_core_s'] / 3600:.2f} | " + " | ".join(fmt_time(p["verify_s"]) for _ in NODES) + " |")
    serial = [row for row in p["rows"] if row["serial"]]
    floors = [row for row in p["rows"] if not row["serial"]]
    lines += ["", "Serial parts (Amdahl): " + ", ".join(f"{row['stage']} {fmt_time(row['wall_s'][1])}" for row in serial)
              + f"; `wikiprep verify` on one node's {CORES_PER_NODE} cores {fmt_time(p['verify_s'])}. Largest task per parallel stage (the floor however "
              "many nodes): " + ", ".join(f"{row['stage']} {fmt_time(row['largest_task_s'])}" for row in floors) + ".",
              "", f"Without MULTISTREAM each of the {ENWIKI_PARTS} parts is one ExtractPart and one SplitPart: at most "
              f"{ENWIKI_PARTS} cores busy, and a part of the mean size ({p['bz2'] / ENWIKI_PARTS / 1e6:.0f} MB of bz2) "
              f"takes {fmt_time(p['mean_part_s']['ExtractPart'])} to extract and "
              f"{fmt_time(p['mean_part_s']['SplitPart'])} to split on one core (the largest part longer).",
              "", "NVIDIA LDDL, published (preprocessor + load balancer from already extracted text; download and "
              "WikiExtractor not included): " + ", ".join(f"{k} {h} h" for k, h in LDDL.items()) + "."]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------

def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_stages":  # _stages DUMP WORK VOCAB NUM_SHARDS HASH_MB
        dump, work, vocab = map(Path, sys.argv[2:5])
        print(json.dumps(run_stages(dump, work, vocab, int(sys.argv[5]), float(sys.argv[6]))))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_vocab":  # _vocab FOLDER MAX_CHARS VOCAB_SIZE
        print(json.dumps(run_vocab(Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small inputs, under a minute: checks that it all runs")
    parser.add_argument("--xml-mb", type=float, help="XML of the synthetic dump (default 40; --quick 1.5)")
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--num-shards", type=int, help="sentence shards measured here (default 4; --quick 2)")
    parser.add_argument("--vocab-chars", type=int, help=f"TrainVocab's max_chars (default {VOCAB_CAP:,}, its cap)")
    parser.add_argument("--vocab-types", type=int, help="distinct words of the long-tail text (default 500,000)")
    parser.add_argument("--sentence-gb", type=float, default=ENWIKI_SENTENCE_TEXT / 1e9,
                        help="English Wikipedia's sentence text in GB (default 20, the issue's figure; "
                             "0: from its 100 GB of XML at this dump's ratio)")
    parser.add_argument("--vocab-mem-gb", type=float, default=8.0, help="address-space limit of the TrainVocab run")
    parser.add_argument("--vocab", type=Path, default=FIXTURE_VOCAB,
                        help="BERT vocab.txt for the instances (default: the fixtures' bert-base-uncased)")
    parser.add_argument("--work", type=Path, default=REPO / "benchmarks" / "work" / "scale")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--from-json", type=Path, help="project the measurements of an earlier --json report again")
    args = parser.parse_args()
    if args.from_json:
        report = json.loads(args.from_json.read_text())
        vocab_seconds = report["vocab"]["long_tail"].get("seconds", report["vocab"]["own_words"].get("seconds"))
        report["projection"] = project(report["stages"], vocab_seconds, vocab_chars=report["vocab"]["max_chars"],
                                       sentence_text=args.sentence_gb * 1e9 or None)
        report["markdown"] = markdown(report)
        if args.json:
            args.json.write_text(json.dumps(report, indent=1) + "\n")
        print(report["markdown"])
        return
    quick = args.quick
    xml_mb = args.xml_mb or (1.5 if quick else 40.0)
    num_shards = args.num_shards or (2 if quick else 4)
    max_chars = args.vocab_chars or (3_000_000 if quick else VOCAB_CAP)
    types = args.vocab_types or (20_000 if quick else 500_000)
    vocab_files = 16 if quick else NUM_SHARDS

    from testkit.synthetic_dump import write_synthetic_dump

    load_before = load_average()
    site = args.work / f"site-{xml_mb:g}mb-{args.parts}p-ms"
    folder = site / "enwiki" / DATE
    if not (folder / "dumpstatus.json").exists():  # written last: its presence means the dump is whole
        shutil.rmtree(site, ignore_errors=True)
        write_synthetic_dump(site, date=DATE, xml_mb=xml_mb, parts=args.parts, multistream=True)
    stage_work = args.work / "stages"
    vocab = args.vocab
    if not vocab.is_file():
        sys.exit(f"bench_scale: no vocabulary at {vocab}: pass --vocab (a BERT vocab.txt)")
    r = subprocess.run(pinned([sys.executable, __file__, "_stages", str(folder), str(stage_work), str(vocab),
                               str(num_shards), str(64 if quick else 512)]),
                       capture_output=True, text=True, cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if r.returncode:
        sys.exit("bench_scale: the stages failed:\n" + r.stderr[-3000:])
    stages = json.loads(r.stdout.strip().splitlines()[-1])

    shards = sorted((stage_work / "sentences").glob("shard_*.txt"))
    vocab_report = {"max_chars": max_chars, "files": vocab_files, "mem_gb": args.vocab_mem_gb, "types_target": types}
    for key, target in (("own_words", None), ("long_tail", types)):
        inputs = args.work / f"vocab-{key}"
        vocab_report[key + "_input"] = write_vocab_inputs(shards, inputs, files=vocab_files, max_chars=max_chars,
                                                          types=target)
        vocab_report[key] = vocab_child(inputs, max_chars, 30522, args.vocab_mem_gb)
        shutil.rmtree(inputs)
    long_tail = vocab_report["long_tail"]
    fallback = vocab_report["own_words"]
    vocab_seconds = long_tail["seconds"] if "seconds" in long_tail else fallback.get("seconds", float("nan"))

    report = {"when": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(), "quick": quick,
              "load_before": load_before, "stages": stages, "rates": rates_of(stages), "vocab": vocab_report,
              "projection": project(stages, vocab_seconds, vocab_chars=max_chars,
                                    sentence_text=args.sentence_gb * 1e9 or None)}
    report["load_after"] = load_average()
    text = markdown(report)
    report["markdown"] = text
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(text)


if __name__ == "__main__":
    main()
