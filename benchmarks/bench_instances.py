"""Time wikiprep's BERT instance generator against the original algorithm on one core.

    taskset -c 1 .venv/bin/python benchmarks/bench_instances.py --reference   # ~20 MB built from the fixtures
    .venv/bin/python benchmarks/bench_instances.py --input big.txt --python --phases

Reports input MB/s, instances/s and peak RSS (VmHWM) of `create_pretraining_file` at
seq 128 / 20 predictions / dupe 5 (by default), run in a fresh subprocess so peak memory is
its own, on the compiled paths (`wikiprep._speedups`; the line says when they are not built).
With `--python` it also times the pure-Python paths (WIKIPREP_PURE_PYTHON=1) and checks they
write the same records. With `--reference` it also times `testkit.reference_bert.reference_instances`
(a plain port of google-research/bert's create_pretraining_data.py, standing in for the original,
which needs TensorFlow 1.x) on the same input in another subprocess and checks that both give the
same instances. `--repeat N` runs each timed child N times and reports the fastest (the machine may
be shared). `--phases` times the writer's stages one after another, in CPU seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "google-reference"
sys.path.insert(0, str(REPO))  # this checkout's packages, not an installed copy, in every child


def build_input(path: Path, size_mb: float, seed: int = 0) -> int:
    """Concatenate the fixture inputs' documents, reshuffled each round, until `size_mb` MB."""
    docs = []
    for p in sorted((FIXTURES / "inputs").glob("*.txt")):
        current = []
        for line in p.read_text(encoding="utf-8", errors="ignore").split("\n"):
            if line.strip():
                current.append(line)
            elif current:
                docs.append("\n".join(current))
                current = []
        if current:
            docs.append("\n".join(current))
    if not docs:
        raise SystemExit(f"no fixture documents under {FIXTURES}")
    rng = random.Random(seed)
    target, size, parts = int(size_mb * 1e6), 0, []
    while size < target:
        order = docs[:]
        rng.shuffle(order)
        for d in order:
            parts.append(d)
            size += len(d.encode("utf-8")) + 2
            if size >= target:
                break
    path.write_text("\n\n".join(parts) + "\n", encoding="utf-8")
    return path.stat().st_size


def _child(args) -> None:
    """Run one timed generation in this (fresh) process and print a JSON result line."""
    flags = json.loads(args.child_flags)
    start_cpu, start = time.process_time(), time.perf_counter()
    if args.child == "wikiprep":
        from wikiprep.instances import create_pretraining_file
        from wikiprep.options import GenerationOptions

        out = Path(args.workdir) / "bench.tfrecord"
        stats = create_pretraining_file([args.input], args.vocab, str(out), str(out.with_suffix(".index")),
                                        GenerationOptions(**flags), overwrite=True)
        instances = stats["instances"]
    else:
        from testkit.reference_bert import reference_instances

        feats = reference_instances([args.input], args.vocab, **flags)
        instances = len(feats)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    max_rss = _peak_rss_mb()
    digest = _digest_file(out) if args.child == "wikiprep" else _digest_features(feats)
    try:
        from wikiprep.speedups import python_reason
    except ImportError:  # a checkout from before the compiled paths
        def python_reason():
            return "pure Python: a checkout without wikiprep.speedups"
    print(json.dumps({"wall": wall, "cpu": cpu, "instances": instances, "digest": digest, "max_rss_mb": max_rss,
                      "python": python_reason()}))


def _peak_rss_mb() -> float:
    """This process's peak resident set since it started (VmHWM). Not ru_maxrss: Linux carries that over
    exec from the memory the child had when forked, here the parent's with its 20 MB input in it."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _phases(args) -> None:
    """Where the time goes: the writer's stages one after another, CPU seconds each (in this process)."""
    from shardkit.records import record_writers
    from wikiprep import instances, layouts, speedups
    from wikiprep.layouts import framed
    from wikiprep.options import GenerationOptions
    from wikiprep.tokenization import Vocab

    flags = json.loads(args.child_flags)
    opts = GenerationOptions(**flags)
    clock = time.process_time
    t0 = clock()
    vocab = Vocab(args.vocab)
    corpus = instances.read_corpus([args.input], vocab)
    t1 = clock()
    rng = random.Random(flags["random_seed"])
    stats = instances._Stats(opts.max_seq_length, opts.max_predictions_per_seq)
    offsets = array("q", [0])
    work = Path(args.workdir)
    with open(work / "phases.spill", "w+b", buffering=1 << 20) as spill:
        instances.spill_instances(corpus, vocab, opts, rng, layouts.DEFAULT, spill, offsets, stats)
        spill.flush()
        t2 = clock()
        order = array("q", range(len(offsets) - 1))
        speedups.shuffle(rng, order)
        t3 = clock()
        with record_writers([work / "phases.tfrecord"], [work / "phases.index"], overwrite=True) as writers:
            framed.copy_records(writers, order, offsets, spill.fileno())
        t4 = clock()
    print(json.dumps({"read+tokenize": t1 - t0, "generate+encode+frame (spill)": t2 - t1,
                      "final shuffle": t3 - t2, "copy-out (+fsync)": t4 - t3, "instances": len(order)}))


def _digest_features(feats) -> str:
    import hashlib

    h = hashlib.sha256()
    for f in feats:
        h.update(json.dumps(f, sort_keys=True).encode())
    return h.hexdigest()


def _digest_file(path: Path) -> str:
    """Same digest as `_digest_features`, computed from the TFRecord file (records decoded in Python)."""
    from shardkit.example import decode_example
    from shardkit.records import read_records

    feats = []
    for data in read_records(path):
        ex = decode_example(data)
        feats.append({k: ex[k] for k in sorted(ex)})
    return _digest_features(feats)


def _run_child(kind: str, args, flags: dict, workdir: str, python: bool = False) -> dict:
    """The fastest of `args.repeat` runs of one child (wall time; the machine may be shared)."""
    cmd = [sys.executable, __file__, "--child", kind, "--child-flags", json.dumps(flags), "--input", args.input,
           "--vocab", args.vocab, "--workdir", workdir]
    env = dict(os.environ)
    env.pop("WIKIPREP_PURE_PYTHON", None)
    if python:
        env["WIKIPREP_PURE_PYTHON"] = "1"
    runs = []
    for _ in range(max(1, args.repeat) if kind != "phases" else 1):
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if res.returncode != 0:
            raise SystemExit(f"{kind} run failed:\n{res.stderr}")
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    best = min(runs, key=lambda r: r.get("wall", 0))
    if len(runs) > 1:
        best["walls"] = sorted(r["wall"] for r in runs)
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", help="text file (one sentence a line, blank line between documents)")
    p.add_argument("--size-mb", type=float, default=20.0, help="size of the input built from the fixtures")
    p.add_argument("--vocab", default=str(FIXTURES / "bert-base-uncased-vocab.txt"))
    p.add_argument("--max-seq-length", type=int, default=128)
    p.add_argument("--max-predictions-per-seq", type=int, default=20)
    p.add_argument("--dupe-factor", type=int, default=5)
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--whole-word-mask", action="store_true")
    p.add_argument("--reference", action="store_true", help="also time the ported original (slow) and compare")
    p.add_argument("--python", action="store_true", help="also time the pure-Python paths and compare")
    p.add_argument("--phases", action="store_true", help="also time each stage separately (CPU seconds)")
    p.add_argument("--repeat", type=int, default=1, help="runs of each timed child; the fastest is reported")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--child-flags", help=argparse.SUPPRESS)
    p.add_argument("--workdir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child == "phases":
        _phases(args)
        return 0
    if args.child:
        _child(args)
        return 0
    flags = dict(max_seq_length=args.max_seq_length, max_predictions_per_seq=args.max_predictions_per_seq,
                 dupe_factor=args.dupe_factor, random_seed=args.seed, do_whole_word_mask=args.whole_word_mask)
    with tempfile.TemporaryDirectory(prefix="bench-instances-") as workdir:
        if args.input is None:
            args.input = str(Path(workdir) / "input.txt")
            build_input(Path(args.input), args.size_mb)
        size = os.path.getsize(args.input)
        print(f"input {args.input}: {size / 1e6:.2f} MB; flags {flags}")
        runs = {"wikiprep": _run_child("wikiprep", args, flags, workdir)}
        if args.python:
            runs["python"] = _run_child("wikiprep", args, flags, workdir, python=True)
        if args.reference:
            runs["reference"] = _run_child("reference", args, flags, workdir)
        for kind, r in runs.items():
            walls = f" (runs: {', '.join(f'{w:.2f}' for w in r['walls'])} s)" if "walls" in r else ""
            print(f"{kind:>9}: {r['wall']:7.2f} s wall, {r['cpu']:7.2f} s cpu, {size / 1e6 / r['wall']:6.2f} MB/s, "
                  f"{r['instances'] / r['wall']:8.0f} instances/s, {r['instances']} instances, "
                  f"peak RSS {r['max_rss_mb']:.0f} MB{walls}")
            if r.get("python") and kind == "wikiprep":
                print(f"           ({r['python']})")
        if args.phases:
            ph = _run_child("phases", args, flags, workdir)
            n = ph.pop("instances")
            total = sum(ph.values())
            for stage, sec in ph.items():
                print(f"  {stage:<34} {sec:6.2f} s cpu {100 * sec / total:5.1f}%  {1e6 * sec / n:6.1f} us/instance")
        failed = False
        if args.python:
            same = runs["wikiprep"]["digest"] == runs["python"]["digest"]
            print(f"compiled / pure Python: {runs['python']['wall'] / runs['wikiprep']['wall']:.1f}x wall, "
                  f"{runs['python']['cpu'] / runs['wikiprep']['cpu']:.1f}x cpu; same records: {same}")
            failed |= not same
        if args.reference:
            same = runs["wikiprep"]["digest"] == runs["reference"]["digest"]
            print(f"speed-up {runs['reference']['wall'] / runs['wikiprep']['wall']:.1f}x wall, "
                  f"{runs['reference']['cpu'] / runs['wikiprep']['cpu']:.1f}x cpu; same instances: {same}")
            failed |= not same
        if failed:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
