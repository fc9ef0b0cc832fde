"""Pretrain128 from dump parts on disk to indexed TFRecords: wikiprep's Luigi pipeline against the anchors' chain.

    .venv/bin/python benchmarks/bench_pipeline.py                       # 24 MB of XML, 2 parts, 2 cores
    .venv/bin/python benchmarks/bench_pipeline.py --multistream --parts 1 --slice-mb 1
    .venv/bin/python benchmarks/bench_pipeline.py --xml-mb 1000 --skip-anchors --skip-stages   # memory
    .venv/bin/python benchmarks/bench_pipeline.py --dump-dir DATA/downloads/enwiki/20261101      # a real dump

Both sides read the same bz2 parts of a synthetic dump (`write_synthetic_dump`: real
MediaWiki export XML with the markup real articles carry; no real dump is reachable
offline), or of a downloaded dump given with --dump-dir (a `{wiki}/{date}` folder holding
dumpstatus.json and the parts, as DownloadDump leaves them), use the same vocabulary (the fixtures' bert-base-uncased, else --vocab) and the
same settings (seq 128, 20 predictions, dupe 5, seed 12345), and the same number of cores.

- ours: `luigi --module workflows Pretrain128 --workers W` after the parts are downloaded
  (a file:// copy, not timed). Every task's processing time and its worker's peak RSS are
  recorded through Luigi's PROCESSING_TIME event, so the report says where the time went.
- anchors: `benchmarks/anchors/chain.py`: the wikiextractor CLI with W processes, nltk Punkt
  as NVIDIA's bertPrep splits, Google's original create_pretraining_data.py (W at once, one
  per text shard) and tfrecord2idx.
- stages: each of our stages alone on one core (`taskset -c 0` is applied if available),
  in MB per second of its own input, next to the limits (bz2 alone, XML parsing alone,
  HF WordPiece `encode_batch`).

Prints a JSON report (and writes it with --json). Peak RSS is per process: the largest
Luigi worker process of ours, the largest process of each anchor stage.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks" / "anchors"))
from chain import run_anchor_chain, xml_size  # noqa: E402  (benchmarks/ is not a package)

FIXTURE_VOCAB = REPO / "tests" / "fixtures" / "google-reference" / "bert-base-uncased-vocab.txt"
SYNTHETIC_DATE = "20260101"
SETTINGS = dict(max_seq_length=128, max_predictions_per_seq=20, dupe_factor=5, random_seed=12345)


def mb(n: float) -> float:
    return round(n / 1e6, 2)




# ---------------------------------------------------------------------------------------------
# Ours: the Luigi pipeline, in a child process that records every task's time and memory

def _luigi_child(argv: list[str]) -> None:
    """`bench_pipeline.py _luigi LOG luigi-args...`: run Luigi with a PROCESSING_TIME recorder."""
    import luigi

    import workflows  # noqa: F401  (registers the tasks)

    log = argv[0]
    started_cpu: dict[str, float] = {}

    def cpu_seconds() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    @luigi.Task.event_handler(luigi.Event.START)
    def start(task):  # in the task's own (forked) process, right before run()
        started_cpu[task.task_id] = cpu_seconds()

    @luigi.Task.event_handler(luigi.Event.PROCESSING_TIME)
    def record(task, seconds):  # runs in the worker process that ran the task
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        ended = time.time()
        # CPU seconds of run() alone: on a machine shared with other work, wall seconds say how busy
        # it was, CPU seconds what the task cost.
        cpu = cpu_seconds() - started_cpu.pop(task.task_id, 0.0)
        with open(log, "a") as f:
            f.write(json.dumps({"task": task.task_family, "seconds": seconds, "cpu_seconds": round(cpu, 3),
                                "start": ended - seconds, "end": ended, "pid": os.getpid(),
                                "maxrss_mb": round(rss, 1)}) + "\n")

    ok = luigi.run(argv[1:], detailed_summary=False)
    sys.exit(0 if ok else 1)


def luigi_args(task: str, data: Path, site: Path, args, vocab: Path | None) -> list[str]:
    out = ["--module", "workflows", task, "--data-dir", str(data), "--dump-url", site.as_uri(),
           "--wiki", args.wiki, "--dump-date", args.date, "--local-scheduler", "--workers", str(args.workers)]
    if args.multistream:
        out.append("--multistream")
    if task.startswith("Pretrain"):
        out += ["--num-shards", str(args.num_shards), "--vocab-file", str(vocab),
                "--dupe-factor", str(SETTINGS["dupe_factor"]), "--seed", str(SETTINGS["random_seed"]),
                "--extract-slice-mb", str(args.slice_mb)]
    return out


def run_ours(site: Path, work: Path, args, vocab: Path) -> dict:
    data = work / "ours"
    shutil.rmtree(data, ignore_errors=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("LUIGI_CONFIG_PATH", None)
    luigi_cmd = [str(Path(sys.executable).with_name("luigi"))]
    r = subprocess.run(luigi_cmd + luigi_args("DownloadDump", data, site, args, None), cwd=REPO, env=env,
                       capture_output=True, text=True)
    if r.returncode:
        sys.exit("DownloadDump failed:\n" + r.stderr[-3000:])
    log = work / "ours-tasks.jsonl"
    log.unlink(missing_ok=True)
    started, started_at = time.perf_counter(), time.time()
    r = subprocess.run([sys.executable, __file__, "_luigi", str(log)]
                       + luigi_args("Pretrain128", data, site, args, vocab), cwd=REPO, env=env,
                       capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if r.returncode:
        sys.exit("Pretrain128 failed:\n" + r.stderr[-3000:])
    tasks = [json.loads(line) for line in log.read_text().splitlines()]
    by_family: dict[str, dict] = defaultdict(lambda: {"tasks": 0, "seconds": 0.0, "cpu_seconds": 0.0,
                                                      "peak_rss_mb": 0.0})
    for t in tasks:
        family = by_family[t["task"]]
        family["tasks"] += 1
        family["seconds"] = round(family["seconds"] + t["seconds"], 2)
        family["cpu_seconds"] = round(family["cpu_seconds"] + t["cpu_seconds"], 2)
        family["peak_rss_mb"] = max(family["peak_rss_mb"], t["maxrss_mb"])
    dataset = next((data / f"{args.wiki}-{args.date}").glob("seq128_*"))
    stats = json.loads((dataset / "stats.json").read_text())
    shards = sorted((data / f"{args.wiki}-{args.date}" / "sentences").glob("*/shard_*.txt"))
    return {"seconds": round(seconds, 1), "tasks": dict(sorted(by_family.items())),
            "task_cpu_seconds": round(sum(t["cpu_seconds"] for t in tasks), 2),
            # How the run's wall time was spent: from the process' start to the first task's start
            # (Python, Luigi, scheduling), and the worker time no task was running (the run's wall
            # time times --workers, less every task's wall time).
            "before_first_task_seconds": round(min(t["start"] for t in tasks) - started_at, 2),
            "idle_worker_seconds": round(seconds * args.workers - sum(t["seconds"] for t in tasks), 2),
            "timeline": [[t["task"], round(t["start"] - started_at, 2), round(t["end"] - started_at, 2), t["pid"]]
                         for t in sorted(tasks, key=lambda t: t["start"])],
            "largest_sentence_shard_mb": mb(max(p.stat().st_size for p in shards)),
            "peak_worker_rss_mb": max(t["maxrss_mb"] for t in tasks),
            "instances": stats["total"]["instances"], "documents": stats["total"]["documents"],
            "dataset": str(dataset)}


# ---------------------------------------------------------------------------------------------
# Stages alone, one core

def _time(fn, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def run_stages(parts: list[Path], work: Path, vocab: Path, wiki: str, date: str) -> dict:
    """Each stage alone over its own real input from the Luigi run; MB/s of that input, per core."""
    from tokenizers import BertWordPieceTokenizer

    from wikiprep import instances, sentences
    from wikiprep.wikipedia import extract
    from wikiprep.wikipedia.source import extracted_documents
    from wikiprep.options import GenerationOptions
    from wikiprep.wikipedia.extract import PartReader

    data = work / "ours" / f"{wiki}-{date}"
    tmp = work / "stages"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    part = parts[0]
    xml_bytes = xml_size(part)
    report = {}
    t = _time(lambda: xml_size(part))
    report["bz2_decompress"] = {"in_mb": mb(xml_bytes), "mb_per_s": mb(xml_bytes / t)}
    t = _time(lambda: sum(1 for _ in PartReader(part)))
    report["xml_pages_only"] = {"in_mb": mb(xml_bytes), "mb_per_s": mb(xml_bytes / t)}
    out = tmp / "extracted.jsonl"
    t = _time(lambda: extract.extract_part(part, out, date))
    report["extract_wikiextractor"] = {"in_mb": mb(xml_bytes), "mb_per_s": mb(xml_bytes / t),
                                       "out_mb": mb(out.stat().st_size)}
    punkt = next(data.glob("punkt_min*.json"))
    extracted = out  # the first part, extracted whole just above
    sample = sentences.punkt_sample([extracted_documents(extracted, min_chars=200)])
    t = _time(lambda: sentences.train_punkt(sample, tmp / "punkt.json"))
    chars = sum(map(len, sample))
    report["train_punkt"] = {"in_mb": mb(chars), "mb_per_s": mb(chars / t)}
    t = _time(lambda: sentences.split_piece(extracted_documents(extracted, min_chars=200), punkt, tmp / "split",
                                                     num_shards=16, seed=1))
    report["clean_and_split"] = {"in_mb": mb(extracted.stat().st_size), "mb_per_s": mb(extracted.stat().st_size / t)}
    shards = sorted((data / "sentences").glob("*/shard_*.txt"), key=lambda p: -p.stat().st_size)
    shard = shards[0]
    size = shard.stat().st_size
    t = _time(lambda: instances.create_pretraining_file([str(shard)], str(vocab), str(tmp / "x.tfrecord"),
                                                        str(tmp / "x.index"), GenerationOptions(**SETTINGS)))
    report["instances_to_indexed_tfrecord"] = {"in_mb": mb(size), "mb_per_s": mb(size / t)}
    lines = [line for line in shard.read_text(encoding="utf-8").splitlines() if line]
    hf = BertWordPieceTokenizer(str(vocab), lowercase=True)
    t = _time(lambda: hf.encode_batch(lines, add_special_tokens=False))
    report["hf_wordpiece_encode_batch"] = {"in_mb": mb(size), "mb_per_s": mb(size / t)}
    shutil.rmtree(tmp)
    return report


# ---------------------------------------------------------------------------------------------

def main() -> None:
    # Both sides' processes cache their bytecode, as a user's Python does: with PYTHONDONTWRITEBYTECODE
    # (set in some sandboxes and CI images) every process would compile its modules anew, ~0.1 s each.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if len(sys.argv) > 1 and sys.argv[1] == "_luigi":
        _luigi_child(sys.argv[2:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_stages":  # _stages WIKI DATE WORK VOCAB PART...
        wiki, date = sys.argv[2:4]
        work, vocab, *parts = map(Path, sys.argv[4:])
        print(json.dumps(run_stages(parts, work, vocab, wiki, date)))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--xml-mb", type=float, default=24.0, help="uncompressed XML of the synthetic dump")
    parser.add_argument("--parts", type=int, default=2)
    parser.add_argument("--dump-dir", type=Path, help="a downloaded dump's {wiki}/{date} folder instead of a synthetic one")
    parser.add_argument("--multistream", action="store_true", help="multistream parts (bz2 stream per 100 pages)")
    parser.add_argument("--slice-mb", type=float, default=100.0, help="our --extract-slice-mb (multistream only)")
    parser.add_argument("--workers", type=int, default=2, help="Luigi workers, and the anchors' processes")
    parser.add_argument("--num-shards", type=int, default=16)
    parser.add_argument("--vocab", type=Path, default=FIXTURE_VOCAB)
    parser.add_argument("--work", type=Path, default=REPO / "benchmarks" / "work")
    parser.add_argument("--skip-anchors", action="store_true")
    parser.add_argument("--skip-stages", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not args.vocab.is_file():
        sys.exit(f"no vocabulary at {args.vocab}: pass --vocab (a BERT vocab.txt)")

    from testkit.synthetic_dump import write_synthetic_dump
    from wikiprep.wikipedia import dump as download

    if args.dump_dir:
        folder = args.dump_dir.resolve()
        site, args.wiki, args.date = folder.parents[1], folder.parent.name, folder.name
    else:
        kind = "ms" if args.multistream else "plain"
        site = args.work / f"site-{args.xml_mb:g}mb-{args.parts}p-{kind}"
        args.wiki, args.date = "enwiki", SYNTHETIC_DATE
        folder = site / args.wiki / args.date
        if not (folder / "dumpstatus.json").exists():  # written last: its presence means the dump is whole
            shutil.rmtree(site, ignore_errors=True)
            write_synthetic_dump(site, date=args.date, xml_mb=args.xml_mb, parts=args.parts,
                                 multistream=args.multistream)
    parts = [folder / p.name for p in download.list_parts(folder, args.wiki, args.date, multistream=args.multistream)
             if not p.is_index]
    xml_bytes = sum(xml_size(p) for p in parts)
    report = {"dump": {"parts": [p.name for p in parts], "bz2_mb": mb(sum(p.stat().st_size for p in parts)),
                       "xml_mb": mb(xml_bytes), "multistream": args.multistream},
              "settings": dict(SETTINGS, workers=args.workers, num_shards=args.num_shards, slice_mb=args.slice_mb,
                               vocab=str(args.vocab), cpus=os.cpu_count())}

    report["ours"] = run_ours(site, args.work, args, args.vocab)
    report["ours"]["xml_mb_per_s"] = mb(xml_bytes / report["ours"]["seconds"])
    if not args.skip_anchors:
        anchors = run_anchor_chain(parts, args.vocab, args.work / "anchors", processes=args.workers, **SETTINGS)
        anchors.pop("outputs", None)
        report["anchors"] = anchors
        report["speedup"] = round(anchors["total_seconds"] / report["ours"]["seconds"], 2)
    if not args.skip_stages:  # in a child pinned to one core when taskset exists
        pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
        r = subprocess.run(pin + [sys.executable, __file__, "_stages", args.wiki, args.date, str(args.work), str(args.vocab),
                                  *map(str, parts)], cwd=REPO, capture_output=True, text=True)
        if r.returncode:
            sys.exit("stages failed:\n" + r.stderr[-3000:])
        report["stages_one_core"] = json.loads(r.stdout.strip().splitlines()[-1])
    text = json.dumps(report, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    from shardkit.errors import PrepError

    try:
        main()
    except PrepError as e:  # a wrong --dump-dir, a damaged part: one line, not a traceback
        sys.exit(f"bench_pipeline: error: {e}")
