"""CPU and peak memory of writing LDDL's Parquet layout against TFRecords, for the same instances.

    .venv/bin/python benchmarks/bench_parquet.py                 # 10 and 40 MB of text built from the fixtures
    .venv/bin/python benchmarks/bench_parquet.py --sizes 10 40 --repeat 3
    .venv/bin/python benchmarks/bench_parquet.py --sizes 10 --repeat 3 --tasks   # also the Luigi tasks end to end

Each row runs in a fresh subprocess, so its CPU seconds (user + system) and peak RSS (VmHWM: ru_maxrss would carry
the parent's resident set over the exec) are its own; `--repeat N` keeps each row's fastest run (the machine may be
shared). The libraries every row may use (numpy, pyarrow) are imported before the clock starts: a process pays
that once (~0.15 CPU-s, printed first), not per instance. Seq 128, 20 predictions, dupe 10 (create_pretraining_data's
defaults), the compiled generator and copy-out when built.

- **writer** rows: one `create_pretraining_file` (what `create-pretraining-data` runs): TFRecords with their
  index, then Parquet with static masks and with dynamic masks.
- **dataset** rows: what a dataset's tasks do for the same instances, a shard's work and its share of the
  finishing step: `dataset.write_shard` and its receipt (the file's sha256, and the index's), then for TFRecords
  the shard read back for its report's figures (`PretrainShard`: `stats.file_stats`) in its receipt; for Parquet
  the staged shard and its receipt, the plan (`plan_parts`) and 2 finishing parts (`write_part`, the report's
  figures counted from the rows written: `stats.FileFigures`), each file's receipt with its figures
  (`PretrainPlan`, `PretrainPart`). Static and dynamic masks, unbinned and in bins of 32.
- `--tasks`: the same text as a corpus of sentences (a file, documents between blank lines) through
  `PretrainText128 --num-shards 2 --min-doc-chars 0` (every document kept, as in the rows above) with the local
  scheduler and one worker, each layout's dataset made from the same sentence shards (made once beforehand, not
  counted): the CPU of the whole `luigi` process and its children, Luigi's and the report's fixed costs (imports,
  the plots) included.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
VOCAB = REPO / "tests" / "fixtures" / "google-reference" / "bert-base-uncased-vocab.txt"
ROWS = {"writer: TFRecord + index": ("writer", "tfrecord", {}),
        "writer: Parquet, static": ("writer", "parquet", {}),
        "writer: Parquet, dynamic": ("writer", "parquet", {"masking": "dynamic"}),
        "dataset: TFRecord": ("dataset", "tfrecord", {}),
        "dataset: Parquet, static": ("dataset", "parquet", {}),
        "dataset: Parquet, dynamic": ("dataset", "parquet", {"masking": "dynamic"}),
        "dataset: Parquet, static, bins of 32": ("dataset", "parquet", {"bin_size": 32}),
        "dataset: Parquet, dynamic, bins of 32": ("dataset", "parquet", {"bin_size": 32, "masking": "dynamic"})}
TASKS = {"TFRecord": [], "Parquet, static": ["--output-format", "parquet"],
         "Parquet, dynamic": ["--output-format", "parquet", "--masking", "dynamic"],
         "Parquet, static, bins of 32": ["--output-format", "parquet", "--bin-size", "32"],
         "Parquet, dynamic, bins of 32": ["--output-format", "parquet", "--bin-size", "32", "--masking", "dynamic"]}
PARTS = 2  # the dataset rows' finishing parts (and the tasks' --num-shards)


def _imports() -> None:
    import numpy  # noqa: F401
    import pyarrow.parquet  # noqa: F401


def _writer(layout, text: Path, work: Path) -> dict:
    from wikiprep.instances import create_pretraining_file
    from wikiprep.options import GenerationOptions

    out = work / f"bench{layout.shard_suffix}"
    index = str(out.with_suffix(".index")) if layout.indexed else None
    return create_pretraining_file([str(text)], str(VOCAB), str(out), index, GenerationOptions(), layout=layout,
                                   overwrite=True)


def _dataset(layout, text: Path, work: Path) -> dict:
    """A shard's instances through the library calls of PretrainShard (and PretrainPlan, PretrainPart), receipts
    included."""
    from shardkit.atomic import sha256_file, write_receipt
    from wikiprep import dataset, reader
    from wikiprep import stats as record_stats
    from wikiprep.options import GenerationOptions
    from wikiprep.schema import PRED, SEQ
    from wikiprep.tokenization import Vocab

    options, dims = GenerationOptions(), {SEQ: 128, PRED: 20}
    spec = dataset.DatasetSpec(dataset.describe(options, VOCAB, corpus={}, num_shards=PARTS, min_doc_chars=0,
                                                vocab_size=0, layout=layout), layout, "wiki")
    shards, folder = work / "shards", work / "dataset"
    shard = shards / spec.shard_name(0)
    stats = dataset.write_shard(text, VOCAB, shard, options, spec)
    vocab = Vocab.load(VOCAB)
    if not layout.finishing:
        index = layout.index_path(shard)
        figures = record_stats.file_stats(reader.dataset_file(shard, VOCAB), shard, vocab, tensorflow=False)
        write_receipt(shard, stats=stats, report_stats=figures,
                      index={"file": index.name, "size": index.stat().st_size, "sha256": sha256_file(index)})
        return stats
    write_receipt(shard, stats=stats)
    plan = layout.plan_parts([stats], dims, PARTS)
    dataset.claim_folder(folder, spec)
    for part in range(PARTS):
        paths = [folder / name for name in layout.part_names("wiki", part, dims)]
        figures = [record_stats.FileFigures(dims, vocab, path) for path in paths]
        counts = layout.write_part(plan, part, [shard], paths, dims, vocab,
                                   observe=lambda i, batch: figures[i].add(batch))
        for path, count, file_figures in zip(paths, counts, figures):
            write_receipt(path, records=count, report_stats=file_figures.result())
    return stats


def _child(args) -> None:
    _imports()
    from wikiprep import layouts

    kind, name, params = args.child, args.layout, json.loads(args.params)
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    layout = layouts.get(name).with_parameters(**params)
    start = time.process_time()
    stats = (_writer if kind == "writer" else _dataset)(layout, Path(args.input), work)
    cpu = time.process_time() - start
    print(json.dumps({"cpu_s": cpu, "instances": stats["instances"], "peak_mb": _peak_rss_kb() / 1024}))


def _peak_rss_kb() -> int:
    """This process's peak resident set since its exec (/proc/self/status VmHWM, in kB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise SystemExit("no VmHWM in /proc/self/status (Linux only)")


def run_row(name: str, input_path: Path, workdir: Path, repeat: int) -> dict:
    kind, layout, params = ROWS[name]
    best = None
    for _ in range(repeat):
        r = subprocess.run([sys.executable, __file__, "--child", kind, "--layout", layout, "--params",
                            json.dumps(params), "--input", str(input_path), "--workdir", str(workdir / "row")],
                           capture_output=True, text=True, check=True)
        got = json.loads(r.stdout.strip().splitlines()[-1])
        best = got if best is None or got["cpu_s"] < best["cpu_s"] else best
    return best


def _pretrain(data: Path, corpus: Path, extra: list[str]) -> float:
    """CPU seconds (user + system) of one `luigi ... PretrainText128` run and its children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([str(Path(sys.executable).with_name("luigi")), "--module", "workflows", "PretrainText128",
                        "--data-dir", str(data), "--text-dir", str(corpus), "--text-format", "sentences",
                        "--min-doc-chars", "0", "--vocab-file", str(VOCAB), "--num-shards", str(PARTS),
                        "--dupe-factor", "10", "--local-scheduler", "--workers", "1", *extra],
                       cwd=REPO, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(r.stderr[-3000:])
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def run_tasks(text: Path, work: Path, repeat: int) -> dict[str, float]:
    """Each layout's dataset through the Luigi tasks, from sentence shards made once: the fastest of `repeat`."""
    corpus, data = work / "corpus", work / "data"
    corpus.mkdir(parents=True)
    shutil.copy(text, corpus / "text.txt")
    _pretrain(data, corpus, [])  # the sentence shards (and a TFRecord dataset, removed below)
    best: dict[str, float] = {}
    for _ in range(repeat):
        for name, extra in TASKS.items():
            for made in [*(data / "corpus").glob("seq*"), data / "corpus" / "staged"]:
                shutil.rmtree(made, ignore_errors=True)
            cpu = _pretrain(data, corpus, extra)
            best[name] = min(best.get(name, cpu), cpu)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=float, nargs="+", default=[10, 40], help="MB of input text per run")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--tasks", action="store_true", help="also the Luigi tasks end to end (PretrainText128)")
    p.add_argument("--child")
    p.add_argument("--layout")
    p.add_argument("--params")
    p.add_argument("--input")
    p.add_argument("--workdir")
    args = p.parse_args()
    if args.child:
        _child(args)
        return
    from bench_instances import build_input
    from wikiprep import speedups

    print(f"compiled generator: {speedups.compiled() is not None}")
    start = time.process_time()
    _imports()
    print(f"importing numpy and pyarrow.parquet: {time.process_time() - start:.2f} CPU-s, once per process")
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            text = Path(tmp) / f"input{size}.txt"
            build_input(text, size)
            rows = {name: run_row(name, text, Path(tmp), args.repeat) for name in ROWS}
            print(f"\n{size:g} MB of text, {rows['writer: TFRecord + index']['instances']:,} instances "
                  f"(seq 128, dupe 10)")
            print("| row | CPU s | vs TFRecord | peak RSS MB |\n|---|---|---|---|")
            for name, row in rows.items():
                base = rows["writer: TFRecord + index" if name.startswith("writer") else "dataset: TFRecord"]
                print(f"| {name} | {row['cpu_s']:.2f} | {row['cpu_s'] / base['cpu_s']:.2f}x | {row['peak_mb']:.0f} |")
            if args.tasks:
                tasks = run_tasks(text, Path(tmp) / f"tasks{size}", args.repeat)
                print(f"\nPretrainText128 --num-shards {PARTS}, end to end (CPU of every process)")
                print("| dataset | CPU s | vs TFRecord |\n|---|---|---|")
                for name, cpu in tasks.items():
                    print(f"| {name} | {cpu:.2f} | {cpu / tasks['TFRecord']:.2f}x |")


if __name__ == "__main__":
    main()
