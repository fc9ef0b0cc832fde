"""The anchors' chain: how NVIDIA DLE / Graphcore users turn dump parts into indexed TFRecords.

Stages, each run in subprocesses of the caller's Python, timed, with its bytes in and out and the
peak RSS of its largest single process (RUSAGE_CHILDREN of a small wrapper that runs the command:
the largest ru_maxrss in the command's process tree, see MEASURE):

  a. extract    `python -m wikiextractor.WikiExtractor PART.bz2 --processes N -o DIR -b 100M`,
                one run per part in part order, default template expansion (as DLE's bertPrep and
                Graphcore's wikipedia_extract.sh run it). WikiExtractor 3.1.0 opens the .bz2 itself
                (bz2.open), and with templates on it reads the part twice (a template pass, then
                extraction), so it decompresses twice; DLE and Graphcore `bunzip2` first instead.
  b. sentences  DLE's WikicorpusTextFormatting.merge (one article per line, title dropped) then
                TextSharding (all articles in a dict, segmented serially with nltk Punkt, written
                one sentence per line, a blank line between articles), in one process as in DLE.
  c. instances  google-research/bert create_pretraining_data.py (vendored unchanged beside this
                file), one process per shard, all at once, same seed for every shard, as bertPrep.
  d. index      `python -m tfrecord.tools.tfrecord2idx X.tfrecord X.index`, one file after the
                other, as Graphcore's shell `for` loop.

Deliberate differences from the anchors, each to keep the comparison deterministic and offline:
files are listed sorted (DLE globs unsorted); articles go to shards round-robin (DLE packs them
greedily by sentence count and holds out a 10% test set); Punkt is untrained (see below).

Run alone: .venv/bin/python benchmarks/anchors/chain.py --vocab V --work W part1.bz2 part2.bz2
"""

from __future__ import annotations

import argparse
import bz2
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from shardkit.errors import PrepError

HERE = Path(__file__).resolve().parent
GOOGLE_SCRIPT = HERE / "google_create_pretraining_data.py"
STAGE_DIRS = ("extract", "text", "shards", "tfrecords", "logs")


def _env() -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    # Graphcore's README: WikiExtractor needs a UTF-8 stdio or it dies with UnicodeEncodeError.
    env.setdefault("PYTHONIOENCODING", "utf-8")
    return env


# A process's ru_maxrss starts from the high-water mark of the process it was forked from, up to
# its exec (Linux keeps it across exec). So each stage command runs under this small exec'd
# Python, which reports the largest ru_maxrss among its own descendants: theirs, not the caller's.
MEASURE = ("import json, resource, subprocess, sys\n"
           "code = subprocess.call(sys.argv[2:])\n"
           "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
           "open(sys.argv[1], 'w').write(json.dumps(peak))\n"
           "sys.exit(code)\n")


def _start(argv: list, log: Path) -> tuple:
    peak_file = log.with_suffix(".maxrss")
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", MEASURE, str(peak_file), *map(str, argv)],
                                stdout=out, stderr=subprocess.STDOUT, env=_env())
    return proc, argv, log


def _finish(started: list) -> int:
    """Wait for the processes; return the largest ru_maxrss (KiB) among them; raise if any failed."""
    peak = 0
    failures = []
    for proc, argv, log in started:
        proc.wait()
        peak_file = log.with_suffix(".maxrss")
        if peak_file.exists():
            peak = max(peak, json.loads(peak_file.read_text()))
        if proc.returncode != 0:
            failures.append(f"{' '.join(map(str, argv[1:4]))}... exited {proc.returncode}, see {log}")
    if failures:
        raise PrepError("; ".join(failures))
    return peak


def _size(paths) -> int:
    return sum(p.stat().st_size for p in paths)


def _stage(seconds: float, in_bytes: int, out_bytes: int, peak_kib: int, **extra) -> dict:
    return {"seconds": round(seconds, 3), "in_bytes": in_bytes, "out_bytes": out_bytes,
            "peak_rss_mb": round(peak_kib / 1024, 1), **extra}


def xml_size(part: Path) -> int:
    """Uncompressed size of one bz2 part (streamed; multistream parts included)."""
    total = 0
    try:
        with bz2.open(part, "rb") as f:
            while chunk := f.read(1 << 20):
                total += len(chunk)
    except (OSError, EOFError) as e:
        raise PrepError(f"{part}: not a readable bz2 dump part ({e})") from e
    return total


def dle_sentences(extract_dir: Path, text_dir: Path, shard_dir: Path, num_shards: int) -> dict:
    """DLE's text_formatting + sharding actions, reproduced (runs inside the stage-b subprocess)."""
    # The pretrained English Punkt model (punkt / punkt_tab) only comes through nltk.download,
    # which cannot reach the network here; an untrained PunktSentenceTokenizer is what works
    # offline (the notes measured it at ~4.5 MB/s, close to sent_tokenize's own cost).
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    # WikicorpusTextFormatting.merge: per article, drop the title line (article_lines[1:]) and
    # join the non-empty lines with spaces into one line, then a blank line.
    merged = text_dir / "wikicorpus_one_article_per_line.txt"
    with open(merged, "w", newline="\n", encoding="utf-8") as ofile:
        for filename in sorted(p for p in extract_dir.rglob("wiki_*") if p.is_file()):
            article_lines, article_open = [], False
            with open(filename, newline="\n", encoding="utf-8") as file:
                for line in file:
                    if "<doc id=" in line:
                        article_open = True
                    elif "</doc>" in line:
                        article_open = False
                        for oline in article_lines[1:]:
                            if oline != "\n":
                                ofile.write(oline.rstrip() + " ")
                        ofile.write("\n\n")
                        article_lines = []
                    elif article_open:
                        article_lines.append(line)

    # TextSharding.Sharding: load_articles (all in a dict), segment_articles_into_sentences
    # (serial: its multiprocessing branches are "TODO: WIP" stubs), then write_shards_to_disk.
    articles = {}
    with open(merged, newline="\n", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                articles[len(articles)] = line.rstrip()
    segmenter = PunktSentenceTokenizer()
    sentences = {i: segmenter.tokenize(article) for i, article in articles.items()}
    shards = [list(range(k, len(articles), num_shards)) for k in range(num_shards)]
    for k, article_ids in enumerate(shards):
        with open(shard_dir / f"shard_{k}.txt", "w", newline="\n", encoding="utf-8") as f:
            for article_id in article_ids:
                for line in sentences[article_id]:
                    f.write(line + "\n")
                f.write("\n")  # Line break between articles
    return {"articles": len(articles), "sentences": sum(map(len, sentences.values())),
            "merged_bytes": merged.stat().st_size}


def run_anchor_chain(parts: list[Path], vocab_file: Path, work_dir: Path, *, processes: int = 2,
                     max_seq_length=128, max_predictions_per_seq=20, dupe_factor=5,
                     random_seed=12345, do_lower_case=True) -> dict:
    """Run the four stages on `parts` (bz2 dump parts) into `work_dir`; return timings and sizes."""
    parts = [Path(p).resolve() for p in parts]
    vocab_file = Path(vocab_file).resolve()
    work_dir = Path(work_dir).resolve()
    if not parts:
        raise PrepError("no dump parts given")
    for path in [*parts, vocab_file]:
        if not path.is_file():
            raise PrepError(f"not a file: {path}")
    for name in STAGE_DIRS:  # a re-run must not count a previous run's files
        shutil.rmtree(work_dir / name, ignore_errors=True)
        (work_dir / name).mkdir(parents=True)
    extract_dir, text_dir, shard_dir, record_dir, logs = (work_dir / n for n in STAGE_DIRS)
    py = sys.executable
    xml_bytes = sum(xml_size(p) for p in parts)  # outside every timed region
    stages = {}
    chain_start = time.perf_counter()

    # a. extract: one WikiExtractor run per part, in part order.
    t = time.perf_counter()
    peak = 0
    for k, part in enumerate(parts):
        argv = [py, "-m", "wikiextractor.WikiExtractor", str(part), "--processes", str(processes),
                "-o", str(extract_dir / f"part_{k:02d}"), "-b", "100M"]
        peak = max(peak, _finish([_start(argv, logs / f"extract_{k:02d}.log")]))
    extracted = sorted(p for p in extract_dir.rglob("wiki_*") if p.is_file())
    stages["extract"] = _stage(time.perf_counter() - t, _size(parts), _size(extracted), peak,
                               xml_bytes=xml_bytes, reads_bz2_directly=True)
    if not _size(extracted):
        raise PrepError(f"WikiExtractor wrote no text for {len(parts)} part(s), see {logs}")

    # b. sentences: one process, as DLE's TextSharding.
    t = time.perf_counter()
    summary = logs / "sentences.json"
    argv = [py, str(Path(__file__).resolve()), "_sentences", str(extract_dir), str(text_dir),
            str(shard_dir), str(processes), str(summary)]
    peak = _finish([_start(argv, logs / "sentences.log")])
    shard_texts = [shard_dir / f"shard_{k}.txt" for k in range(processes)]
    stages["sentences"] = _stage(time.perf_counter() - t, _size(extracted), _size(shard_texts),
                                 peak, **json.loads(summary.read_text()))

    # c. instances: the original script, one process per shard, all started at once.
    t = time.perf_counter()
    records = [record_dir / f"shard_{k}.tfrecord" for k in range(processes)]
    started = []
    for k, (text, record) in enumerate(zip(shard_texts, records)):
        argv = [py, str(GOOGLE_SCRIPT), f"--input_file={text}", f"--output_file={record}",
                f"--vocab_file={vocab_file}", f"--do_lower_case={do_lower_case}",
                f"--max_seq_length={max_seq_length}",
                f"--max_predictions_per_seq={max_predictions_per_seq}", "--masked_lm_prob=0.15",
                f"--random_seed={random_seed}", f"--dupe_factor={dupe_factor}"]
        started.append(_start(argv, logs / f"instances_{k}.log"))
    peak = _finish(started)
    stages["instances"] = _stage(time.perf_counter() - t, _size(shard_texts), _size(records), peak)

    # d. index: tfrecord2idx per file, sequentially.
    t = time.perf_counter()
    indexes = [r.with_suffix(".index") for r in records]
    peak = 0
    for k, (record, index) in enumerate(zip(records, indexes)):
        argv = [py, "-m", "tfrecord.tools.tfrecord2idx", str(record), str(index)]
        peak = max(peak, _finish([_start(argv, logs / f"index_{k}.log")]))
    stages["index"] = _stage(time.perf_counter() - t, _size(records), _size(indexes), peak)
    total = time.perf_counter() - chain_start

    instances = 0
    for index in indexes:
        with open(index, "rb") as f:
            instances += sum(1 for _ in f)
    return {"stages": stages, "total_seconds": round(total, 3), "instances": instances,
            "xml_bytes": xml_bytes, "outputs": [str(r) for r in records],
            "indexes": [str(i) for i in indexes],
            "params": {"processes": processes, "max_seq_length": max_seq_length,
                       "max_predictions_per_seq": max_predictions_per_seq,
                       "dupe_factor": dupe_factor, "random_seed": random_seed,
                       "do_lower_case": do_lower_case}}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "_sentences":  # stage b, run as its own process by run_anchor_chain
        extract_dir, text_dir, shard_dir, shards, summary = argv[1:6]
        info = dle_sentences(Path(extract_dir), Path(text_dir), Path(shard_dir), int(shards))
        Path(summary).write_text(json.dumps(info))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("parts", nargs="+", type=Path, help="bz2 dump parts, in order")
    parser.add_argument("--vocab", required=True, type=Path)
    parser.add_argument("--work", required=True, type=Path)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--max-predictions-per-seq", type=int, default=20)
    parser.add_argument("--dupe-factor", type=int, default=5)
    parser.add_argument("--random-seed", type=int, default=12345)
    parser.add_argument("--cased", action="store_true", help="do_lower_case=False")
    args = parser.parse_args(argv)
    try:
        result = run_anchor_chain(
            args.parts, args.vocab, args.work, processes=args.processes,
            max_seq_length=args.max_seq_length,
            max_predictions_per_seq=args.max_predictions_per_seq, dupe_factor=args.dupe_factor,
            random_seed=args.random_seed, do_lower_case=not args.cased)
    except PrepError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
